"""Greedy generation with the fp32 reference from the command line:

    python -m graphsurgeon.models.penguin_vl.generate [--checkpoint DIR] [--image PATH]... [--max-new-tokens
        N] [--format text|json] PROMPT

The checkpoint defaults to the embedded tiny one (``graphsurgeon/models/penguin_vl/tiny``). Prints the prompt
length, each image's grid, the new token ids (an EOS included when reached) and their text. A bad checkpoint,
image or prompt is one ``gsurg: error: ...`` line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphsurgeon.errors import GsurgError

from .make_tiny import SHIPPED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m graphsurgeon.models.penguin_vl.generate", description=__doc__
    )
    parser.add_argument("prompt")
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED)
    parser.add_argument("--image", type=Path, action="append", default=[])
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    try:
        import torch

        from .config import load_files
        from .model import load_model
        from .processor import PenguinTokenizer, load_and_preprocess, prompt_ids

        files = load_files(args.checkpoint)
        model = load_model(args.checkpoint, files)
        tokenizer = PenguinTokenizer(files)
        images = [load_and_preprocess(path, files.processor) for path in args.image]
        ids = prompt_ids(tokenizer, args.prompt, images)
        inputs = [(torch.from_numpy(img.pixel_values), img.grid) for img in images]
        trace = model.generate(ids, inputs, max_new_tokens=args.max_new_tokens)
    except GsurgError as err:
        print(f"gsurg: error: {err}", file=sys.stderr)
        return err.exit_code
    result = {
        "prompt_tokens": len(ids),
        "grids": [list(img.grid) for img in images],
        "tokens": trace.tokens,
        "text": tokenizer.decode(trace.tokens),
    }
    if args.format == "json":
        print(json.dumps(result))
    else:
        print(f"prompt: {len(ids)} tokens; image grids: {result['grids']}")
        print(f"tokens: {trace.tokens}")
        print(f"text: {result['text']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
