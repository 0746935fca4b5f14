"""The tiny Qwen3-VL's tokenizer and chat template: the shared byte-level BPE
(``graphsurgeon/models/common/bpe_tokenizer.py``, Qwen2's split regex) with the seven special tokens
Qwen3-VL's processor and model use added after the BPE vocabulary in the real vocabulary's order
(``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<|vision_start|>``, ``<|vision_end|>``,
``<|image_pad|>``, ``<|video_pad|>``), saved by transformers' own ``Qwen2Tokenizer.save_pretrained``
(``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``).

``CHAT_TEMPLATE`` is written here in the format of Qwen3-VL's Instruct template (``docs/qwen3-vl.md`` §5):
no default system turn; an image part renders ``<|vision_start|><|image_pad|><|vision_end|>`` (a video part
the same with ``<|video_pad|>``), ``add_vision_id`` prefixes ``Picture k: `` / ``Video k: ``; each turn is
``<|im_start|>ROLE\\n...<|im_end|>\\n`` and ``add_generation_prompt`` opens ``<|im_start|>assistant\\n``.
Tools are refused (the tiny vocabulary has no tool-call tokens), as is a role other than system (first turn
only), user or assistant.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphsurgeon.models.common.bpe_tokenizer import corpus_lines, train_qwen2_bpe

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"
IMAGE_PAD, VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
"""In id order after the BPE vocabulary, as in Qwen's (151643, 151644, 151645, 151652, 151653, 151655,
151656 there; the tokens between them are not needed here)."""
BPE_VOCAB = 512  # the 256 byte symbols and 256 merges; the special tokens take ids 512..518
MAX_LENGTH = 4096  # model_max_length, the tiny config's max_position_embeddings

CHAT_TEMPLATE = """\
{%- if tools -%}
{{- raise_exception('this chat template does not support tools') -}}
{%- endif -%}
{%- set count = namespace(images=0, videos=0) -%}
{%- macro render(content, where) -%}
{%- if content is string -%}
{{- content -}}
{%- else -%}
{%- for part in content -%}
{%- if part.type == 'image' or 'image' in part or 'image_url' in part -%}
{%- if where == 'system' -%}
{{- raise_exception('an image in the system turn is not supported') -}}
{%- endif -%}
{%- set count.images = count.images + 1 -%}
{%- if add_vision_id -%}
{{- 'Picture ' ~ count.images ~ ': ' -}}
{%- endif -%}
{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
{%- elif part.type == 'video' or 'video' in part -%}
{%- if where == 'system' -%}
{{- raise_exception('a video in the system turn is not supported') -}}
{%- endif -%}
{%- set count.videos = count.videos + 1 -%}
{%- if add_vision_id -%}
{{- 'Video ' ~ count.videos ~ ': ' -}}
{%- endif -%}
{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
{%- elif 'text' in part -%}
{{- part.text -}}
{%- else -%}
{{- raise_exception('a content part must be text, image or video') -}}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- for message in messages -%}
{%- if message.role == 'system' and not loop.first -%}
{{- raise_exception('only the first message may be the system turn') -}}
{%- elif message.role not in ('system', 'user', 'assistant') -%}
{{- raise_exception('unsupported role ' ~ message.role) -}}
{%- endif -%}
{{- '<|im_start|>' ~ message.role ~ '\\n' ~ render(message.content, message.role) ~ '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}
"""


def build_tokenizer(bpe_vocab: int = BPE_VOCAB, lines: Sequence[str] | None = None) -> Any:
    """A ``transformers.Qwen2Tokenizer`` over the shared BPE trained on ``lines`` (``corpus_lines()`` when
    None) to ``bpe_vocab`` entries, the special
    tokens added in ``SPECIAL_TOKENS`` order, EOS ``<|im_end|>``, pad ``<|endoftext|>``, no BOS or UNK (as
    Qwen's), and ``CHAT_TEMPLATE``."""
    import json

    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    trained = train_qwen2_bpe(corpus_lines() if lines is None else lines, bpe_vocab)
    model = json.loads(trained.to_str())["model"]
    # the merges as pairs (tokenizers' BPE takes tuples, not the lists tokenizer.json holds); None for every
    # named token at first (the annotations say str), so that the special tokens take their ids in
    # SPECIAL_TOKENS order, not in the order the constructor would add eos and pad
    settings: dict[str, Any] = {
        "merges": [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]],
        "unk_token": None,
        "bos_token": None,
        "eos_token": None,
        "pad_token": None,
    }
    tok = Qwen2Tokenizer(vocab=model["vocab"], model_max_length=MAX_LENGTH, **settings)
    added = [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    tok.add_tokens(added, special_tokens=True)
    tok.eos_token, tok.pad_token = IM_END, ENDOFTEXT
    tok.chat_template = CHAT_TEMPLATE
    ids = tok.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    if ids != list(range(bpe_vocab, bpe_vocab + len(SPECIAL_TOKENS))):
        raise RuntimeError(f"the special tokens got ids {ids}, not the ones after the BPE vocabulary")
    return tok


def write_tokenizer(
    folder: Path, bpe_vocab: int = BPE_VOCAB, lines: Sequence[str] | None = None
) -> dict[str, int]:
    """Save ``build_tokenizer``'s tokenizer into ``folder``; the special tokens' ids."""
    tok = build_tokenizer(bpe_vocab, lines)
    tok.save_pretrained(str(folder))
    return dict(zip(SPECIAL_TOKENS, tok.convert_tokens_to_ids(list(SPECIAL_TOKENS)), strict=True))
