"""Train Qwen3-VL's fixture here, on CPU: a small Qwen3-VL (``trained/``: transformers'
``Qwen3VLForConditionalGeneration`` saved by itself, with the family's tokenizer, chat template and image
processor files) that answers the visual questions of ``graphsurgeon.evaluation.vqa``, so a conversion's
storages are judged by answers that can be checked, and by answers that need the image.

Usage (2 torch threads)::

    python -m graphsurgeon.models.qwen3_vl.train OUT_FOLDER

The recipe is Penguin-VL's (``graphsurgeon/models/penguin_vl/train.py``): the answer tokens' cross-entropy
plus the auxiliary losses of ``graphsurgeon.evaluation.vqa_supervision`` (per merged image token, on the
merger's output the LLM reads; per named object, on the output of LLM layer ``grounding_layer``), and here
also per patch on the ViT's last block (``patch_weight``: the same targets at 16 px, in the processor's
merge-block order), a patch embedding set to the training patches' whitened principal directions, AdamW
with warm-up and cosine. The model is the real architecture at small widths: the ViT with its learned
position table (bilinearly resampled to each grid), 2-D RoPE, fused qkv, DeepStack taps feeding the first
LLM layers, the 2x2 merger, interleaved MRoPE in the LLM, GQA with q/k norms, tied embeddings. The image
processor's pixel budget keeps a VQA image to 16-25 merged tokens (64-100 patches of 16 px), each of the
set's sizes its own grid.

The fixture (``trained/``, family.yaml's ``trained_checkpoint``; 2026-12-07): this file's settings, 1,750
steps, 14 min 21 s on 2 idle cores (AMD EPYC) for the whole command: **91.2 %** on the 500 held-out
questions (colour 100 %, shape 100 %, count 94.4 %, left/right 90.1 %, above/below 93.0 %,
digit 73.2 %, word 87.3 %), **19.4 %** with the images blanked against 28.6 % chance; ``training.json``
has the curve. With two DeepStack taps (the rule file converts three, so that folder could not be
converted) the same settings reached 90.2 % at 1,750 steps and 89.2 % at 1,500. How the recipe got there,
greedy held-out accuracy on 140 items (two taps, steps of a 2,000-step schedule, 1 thread):

| recipe | 400 | 800 | 1,200 | 1,600 |
|---|---|---|---|---|
| merged-token and named-object targets only | 43.6 % | 50.7 % | 59.3 % | 64.3 % |
| + 36-64 merged tokens | 51.4 % | 55.7 % | | |
| + 4 LLM layers | 44.3 % | 55.0 % | 60.7 % | |
| + per-patch targets on the ViT | 35.7 % | 57.9 % | | |
| + per-patch targets, grounding on layer 2's output (this file) | 42.1 % | 63.6 % | 75.7 % | 87.9 % |

Per-column probes of the auxiliary heads on the training batches (first recipe) said why it stalled: by
step 500 the merged tokens knew their object's colour, row and column (>= 98 %) and the named-object head
read colour, row and column off the question's colour and shape words (96-100 %), but the merged tokens
never learnt the text (3-43 % over 1,275 steps), and the relations stayed at chance although the named
words' final hidden states held both objects' rows and columns. The per-patch targets on the ViT taught
the text (digit and word 15 % -> 45-50 % at step 800); moving the grounding targets from the final norm to
the output of the layer before the last taught the relations (left/right 90 %, above/below 100 % by step
1,600): the answer's position reads the named words at the last layer's input, so that is where their
positions must be. MRoPE was not the cause (the image rows' 3-D positions are as the paper gives them, and
MiniCPM-V-2's trainer, with 1-D positions, stalled on the relations the same way). Not kept: 36-64 merged
tokens, a 4-layer LLM, a ViT position table started as 2-D sin/cos ramps (42.9 % at 400, no change), a
learning rate of 4e-3 (47.9 % at 800).

Deterministic: the seed, the step count and the data stream are fixed, so the same command on the same
machine and thread count writes the same bytes. ``training.json`` holds the command, the settings, the
curve (loss, learning rate, greedy accuracy on held-out items) and the final greedy accuracy of the
transformers model on the 500 held-out items with their images and with the images blanked, beside the
chance level.

A question is asked as the family's processor asks it: one user turn, the image (``<|vision_start|>``, one
``<|image_pad|>`` per merged token, ``<|vision_end|>``) then the question, and the generation prompt
(``processor.chat_inputs``); the answer is the answer words' tokens then ``<|im_end|>``, the EOS the
conversion stops on. The tokenizer is the family's (``tiny_tokenizer.build_tokenizer``) trained on the
set's questions and answers (``vqa_supervision.tokenizer_lines``), every vocabulary word one token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from graphsurgeon.evaluation import vqa
from graphsurgeon.evaluation.lm_training import (
    IGNORE,
    TrainingRecord,
    answer_batch,
)
from graphsurgeon.evaluation.patch_whitening import whitened_filters
from graphsurgeon.evaluation.vqa_supervision import (
    AuxiliaryHeads,
    grounding_targets,
    naming_tokens,
    patch_targets,
    tokenizer_lines,
)
from graphsurgeon.evaluation.vqa_training import (
    Trainer,
    VqaSample,
    auxiliary_loss,
    final_result,
    greedy_answers,
    init_weights,
    trainer_main,
)

from .evaluate import reference_answers
from .make_tiny import TEXT_CONFIG, VISION_CONFIG
from .make_tiny import image_processor as tiny_image_processor
from .processor import ImageTextProcessor, user_turn
from .tiny_tokenizer import (
    ENDOFTEXT,
    IM_END,
    IMAGE_PAD,
    SPECIAL_TOKENS,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    build_tokenizer,
)

BPE_VOCAB = 436  # what the BPE learns from tokenizer_lines: every vocabulary word one token
SETTINGS: dict[str, Any] = {
    "seed": 0,
    "data_seed": 1000,  # chunk k of the training stream is vqa.make_items(data_seed + k, chunk)
    "chunk": 1120,  # items per chunk: 32 of every (kind, size) pair
    "steps": 1750,
    "batch": 32,
    "peak_lr": 2e-3,
    "warmup": 100,
    "weight_decay": 0.01,
    "eval_every": 875,
    "auxiliary_weight": 1.0,  # of the per-token and per-named-object losses (vqa_supervision)
    "patch_weight": 1.0,  # of the per-patch targets on the ViT's last block (before the merger)
    "grounding_layer": 2,  # the per-named-object targets on this LLM layer's output (hidden_states[k])
    "eval_items": 140,  # the held-out items the curve's accuracy is measured on (the first ones)
    "whiten_items": 700,  # training items whose patches set the patch embedding (whitened_filters)
    "whiten_floor": 0.01,
    "min_merged_tokens": 16,  # preprocessor_config.json size: 16 to 25 merged tokens of 32x32 px
    "max_merged_tokens": 25,
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vision_depth": 3,
    "vision_hidden_size": 96,
    "vision_intermediate_size": 256,
    "vision_num_heads": 4,
    "vision_num_position_embeddings": 36,  # a 6x6 learned table, resampled to every grid
    "vision_deepstack_visual_indexes": [0, 1, 2],  # three taps, as the 2B and the rule file have
}
MAX_ANSWER = 4  # answer tokens generated at most: two words and EOS fit


def hf_config(ids: dict[str, int]) -> Any:
    """The ``transformers.Qwen3VLConfig`` at the fixture's widths (``make_tiny``'s keys otherwise)."""
    import transformers

    text = dict(TEXT_CONFIG, vocab_size=max(ids.values()) + 1)
    text.update({k: SETTINGS[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers")})
    text.update({k: SETTINGS[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim")})
    vision = dict(VISION_CONFIG, out_hidden_size=SETTINGS["hidden_size"])
    keys = ("depth", "hidden_size", "intermediate_size", "num_heads", "num_position_embeddings")
    vision.update({k: SETTINGS[f"vision_{k}"] for k in (*keys, "deepstack_visual_indexes")})
    return transformers.Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids[IMAGE_PAD],
        video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=True,
    )


def image_processor() -> Any:
    """``make_tiny``'s image processor with the fixture's pixel budget (``min/max_merged_tokens``)."""
    unit = (VISION_CONFIG["patch_size"] * VISION_CONFIG["spatial_merge_size"]) ** 2
    return tiny_image_processor(SETTINGS["min_merged_tokens"] * unit, SETTINGS["max_merged_tokens"] * unit)


@dataclass
class Qwen3VLSample(VqaSample):
    """A sample with per-patch targets too (``[N, 5]``, the ViT's patches in the processor's merge-block
    order: each 2x2 block of patches consecutive, blocks row-major)."""

    vit_targets: np.ndarray


def merge_block_order(targets: np.ndarray, gh: int, gw: int) -> np.ndarray:
    """Row-major per-patch rows ``[gh * gw, K]`` in the processor's order (2x2 merge blocks consecutive)."""
    m = VISION_CONFIG["spatial_merge_size"]
    blocks = targets.reshape(gh // m, m, gw // m, m, -1).transpose(0, 2, 1, 3, 4)
    return blocks.reshape(gh * gw, -1)


def samples(processor: ImageTextProcessor, items: Sequence[vqa.VqaItem]) -> list[VqaSample]:
    from PIL import Image

    tok = processor.tokenizer
    names = naming_tokens(lambda text: tok.encode(text))
    image_id, block = tok.convert_tokens_to_ids(IMAGE_PAD), VISION_CONFIG["patch_size"]
    out: list[VqaSample] = []
    for item in items:
        text = processor.apply_chat_template(user_turn(1, item.question), add_generation_prompt=True)
        got = processor(text=[text], images=[item.image], return_tensors="np")
        prompt = [int(t) for t in got["input_ids"][0]]
        _t, gh, gw = (int(v) for v in got["image_grid_thw"][0])
        resized = np.asarray(item.image.resize((gw * block, gh * block), resample=Image.Resampling.BICUBIC))
        merged = block * VISION_CONFIG["spatial_merge_size"]
        after_image = len(prompt) - prompt[::-1].index(image_id)
        answer = [*tok.encode(item.answer), tok.convert_tokens_to_ids(IM_END)]
        pixels = got["pixel_values"].astype(np.float32)
        targets = patch_targets(item, resized, merged)
        named = grounding_targets(item, prompt, names, after_image)
        fine = merge_block_order(patch_targets(item, resized, block), gh, gw)
        out.append(Qwen3VLSample(pixels, (gh, gw), prompt, answer, item, targets, named, fine))
    return out


def forward(
    model: Any, batch: Sequence[VqaSample], ids: torch.Tensor, lengths: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """transformers' ``Qwen3VLModel`` on a batch of one grid, ``ids [B, T]`` right-padded past each row's
    length (masked out) -> the LLM's hidden state after its final norm ``[B, T, C]``, the merger's
    output (the rows that replace the image pads) ``[B * M, C]`` and the ViT's last block's output
    ``[B * N, Cv]`` (patches in the processor's order), and the LLM's hidden states after each layer
    (``hidden_states``: the embeddings first)."""
    captured: list[torch.Tensor] = []
    patches: list[torch.Tensor] = []
    visual = model.model.visual
    hook = visual.register_forward_hook(lambda _m, _i, out: captured.append(out.pooler_output))
    last = visual.blocks[-1].register_forward_hook(lambda _m, _i, out: patches.append(out))
    try:
        pixels = torch.from_numpy(np.concatenate([s.pixels for s in batch]))
        grid = torch.tensor([[1, *s.grid] for s in batch], dtype=torch.int64)
        mask = (torch.arange(ids.shape[1])[None] < torch.tensor(list(lengths))[:, None]).to(torch.int64)
        kinds = (ids == model.config.image_token_id).to(torch.int64)  # text 0, image 1 (mm_token_type_ids)
        out = model.model(
            input_ids=ids,
            attention_mask=mask,
            pixel_values=pixels,
            image_grid_thw=grid,
            mm_token_type_ids=kinds,
            output_hidden_states=True,
        )
    finally:
        hook.remove()
        last.remove()
    model.model.rope_deltas = None  # the MRoPE offsets of this batch, which the next must not reuse
    return out.last_hidden_state, captured[0], patches[0], out.hidden_states


def logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    result: torch.Tensor = model.lm_head(hidden)
    return result


def batch_loss(
    model: Any, heads: tuple[AuxiliaryHeads, AuxiliaryHeads], batch: Sequence[VqaSample], pad_id: int
) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens plus ``auxiliary_weight`` times the auxiliary heads' loss
    (per merged token on the merger's rows; per named object on the output of LLM layer
    ``grounding_layer``) plus ``patch_weight`` times the per-patch heads' loss on the ViT's last block."""
    ids, targets = answer_batch([(s.prompt, s.answer) for s in batch], pad_id=pad_id)
    lengths = [len(s.prompt) + len(s.answer) for s in batch]
    hidden, features, patches, layers = forward(model, batch, ids, lengths)
    counted = targets != IGNORE
    answers = nn.functional.cross_entropy(logits(model, hidden[counted]), targets[counted])
    grounded = layers[SETTINGS["grounding_layer"]]
    loss = answers + SETTINGS["auxiliary_weight"] * auxiliary_loss(heads[0], batch, features, grounded)
    if SETTINGS["patch_weight"]:
        fine = [replace(s, patch_targets=cast(Qwen3VLSample, s).vit_targets, named=[]) for s in batch]
        loss = loss + SETTINGS["patch_weight"] * auxiliary_loss(heads[1], fine, patches, hidden)
    return loss


def next_tokens(model: Any, group: Sequence[VqaSample], seqs: list[list[int]], pad: int) -> list[int]:
    """Each sequence's greedy next token (``vqa_training.greedy_answers``'s step), padded with ``pad``."""
    width = max(len(q) for q in seqs)
    ids = torch.tensor([q + [pad] * (width - len(q)) for q in seqs], dtype=torch.int64)
    lengths = [len(q) for q in seqs]
    hidden = forward(model, group, ids, lengths)[0][torch.arange(len(group)), torch.tensor(lengths) - 1]
    tokens: list[int] = logits(model, hidden).argmax(-1).tolist()
    return tokens


def whiten_patch_embedding(model: Any, data: Sequence[VqaSample], floor: float) -> None:
    """The patch Conv3d's filters and bias from the training patches (``patch_whitening``)."""
    embed = model.model.visual.patch_embed.proj
    filters, bias = whitened_filters(np.concatenate([s.pixels for s in data]), embed.weight.shape[0], floor)
    with torch.no_grad():
        embed.weight.copy_(torch.from_numpy(filters).reshape(embed.weight.shape))
        embed.bias.copy_(torch.from_numpy(bias))


def new_model(tok: Any) -> Any:
    import transformers

    ids = dict(zip(SPECIAL_TOKENS, tok.convert_tokens_to_ids(list(SPECIAL_TOKENS)), strict=True))
    model = transformers.Qwen3VLForConditionalGeneration(hf_config(ids))
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=ids[ENDOFTEXT], eos_token_id=[ids[IM_END], ids[ENDOFTEXT]], pad_token_id=ids[ENDOFTEXT]
    )
    return model


def train(out: Path, command: str) -> TrainingRecord:
    torch.manual_seed(SETTINGS["seed"])
    tok = build_tokenizer(BPE_VOCAB, tokenizer_lines())
    processor = ImageTextProcessor(image_processor(), tok, chat_template=tok.chat_template)
    model = new_model(tok)
    unit, small = ("norm.weight", "norm1.weight", "norm2.weight"), ("embed_tokens.weight", "pos_embed.weight")
    init_weights(sorted(model.named_parameters()), SETTINGS["seed"], unit, small)
    whitening = samples(processor, vqa.make_items(SETTINGS["data_seed"] - 1, SETTINGS["whiten_items"]))
    whiten_patch_embedding(model, whitening, SETTINGS["whiten_floor"])
    heads = (
        AuxiliaryHeads(SETTINGS["hidden_size"], SETTINGS["seed"]),
        AuxiliaryHeads(SETTINGS["vision_hidden_size"], SETTINGS["seed"] + 1),
    )
    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(ENDOFTEXT)
    trainer = Trainer(
        settings=SETTINGS,
        parameters=[*model.parameters(), *heads[0].parameters(), *heads[1].parameters()],
        clipped=list(model.parameters()),
        loss=lambda batch: batch_loss(model, heads, batch, pad),
        answers=lambda data: greedy_answers(
            lambda group, seqs: next_tokens(model, group, seqs, pad), tok.decode, data, eos, MAX_ANSWER
        ),
        make_samples=lambda items: samples(processor, items),
        set_mode=model.train,
    )
    record = TrainingRecord(command=command, settings=dict(SETTINGS, bpe_vocab=BPE_VOCAB))
    trainer.run(record)
    write_folder(out, model, processor)
    record.result = final_result(
        lambda items: [text for text, _ in reference_answers(out, items, MAX_ANSWER)]
    )
    record.write(out / "training.json")
    return record


def write_folder(out: Path, model: Any, processor: ImageTextProcessor) -> None:
    """The checkpoint folder as ``make_tiny`` writes one: transformers' own ``save_pretrained`` of the
    model (fp32, tied), the tokenizer and chat template, the image processor."""
    out.mkdir(parents=True, exist_ok=True)
    processor.tokenizer.save_pretrained(str(out))
    processor.image_processor.save_pretrained(str(out))
    model.save_pretrained(str(out))
    (out / "model.safetensors").chmod(0o644)  # safetensors creates its files 0600


def main(argv: list[str] | None = None) -> int:
    return trainer_main("graphsurgeon.models.qwen3_vl.train", __doc__, train, argv)


if __name__ == "__main__":
    raise SystemExit(main())
