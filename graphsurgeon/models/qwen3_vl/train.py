"""Train Qwen3-VL's fixture here, on CPU: a small Qwen3-VL (``trained/``: transformers'
``Qwen3VLForConditionalGeneration`` saved by itself, with the family's tokenizer, chat template and image
processor files) that answers the visual questions of ``graphsurgeon.evaluation.vqa``, so a conversion's
storages are judged by answers that can be checked, and by answers that need the image.

Usage (2 torch threads)::

    python -m graphsurgeon.models.qwen3_vl.train OUT_FOLDER

The recipe is Penguin-VL's (``graphsurgeon/models/penguin_vl/train.py``): the answer tokens' cross-entropy
plus the auxiliary losses of ``graphsurgeon.evaluation.vqa_supervision`` (per merged image token, on the
merger's output the LLM reads; per named object, on the LLM's final hidden state), a patch embedding set to
the training patches' whitened principal directions, AdamW with warm-up and cosine. The model is the real
architecture at small widths: the ViT with its learned position table (bilinearly resampled to each
grid), 2-D RoPE, fused qkv, DeepStack taps feeding the first LLM layers, the 2x2 merger, interleaved
MRoPE in the LLM, GQA with q/k norms, tied embeddings. The image processor's pixel budget keeps a VQA
image to 16-25 merged tokens (64-100 patches of 16 px), each of the set's sizes its own grid.

Status (2026-12-07): this recipe does not yet make the fixture, so none is shipped and family.yaml names no
``trained_checkpoint``. On 2 idle cores (0.4 s a step) its greedy held-out accuracy on 140 items was
43.6 % at step 400, 50.7 % at 800, 57.9 % at 1,200 and 64.3 % at 1,600 of 2,000 (colour 100 %, shape 90 %,
count 100 %, left/right 60 %, above/below 55 %, digit 25 %, word 20 %), where Penguin-VL's fixture, same
recipe, was at 92.9 % by step 1,600: relations and text are learnt far more slowly. What differs: the LLM
reads 16-25 merged rows of 32 px here against Penguin-VL's ~64 of 14 px (a 3x3 placement grid on a 5x5
token grid; a digit two tokens tall), and DeepStack adds the taps' features to the first LLM layers. To
try first: 36-64 merged tokens (the ViT's cost grows 4x per merged token), and the per-token targets on
the DeepStack taps too.

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
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from graphsurgeon.evaluation import vqa
from graphsurgeon.evaluation.lm_training import (
    IGNORE,
    TrainingRecord,
    answer_batch,
    training_args,
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
    "steps": 2000,
    "batch": 32,
    "peak_lr": 2e-3,
    "warmup": 100,
    "weight_decay": 0.01,
    "eval_every": 400,
    "auxiliary_weight": 1.0,  # of the per-token and per-named-object losses (vqa_supervision)
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
    "vision_deepstack_visual_indexes": [0, 1],
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


def samples(processor: ImageTextProcessor, items: Sequence[vqa.VqaItem]) -> list[VqaSample]:
    from PIL import Image

    tok = processor.tokenizer
    names = naming_tokens(lambda text: tok.encode(text))
    image_id, block = tok.convert_tokens_to_ids(IMAGE_PAD), VISION_CONFIG["patch_size"]
    out = []
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
        out.append(VqaSample(pixels, (gh, gw), prompt, answer, item, targets, named))
    return out


def forward(
    model: Any, batch: Sequence[VqaSample], ids: torch.Tensor, lengths: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``Qwen3VLModel`` on a batch of one grid, ``ids [B, T]`` right-padded past each row's
    length (masked out) -> the LLM's hidden state after its final norm ``[B, T, C]`` and the merger's
    output (the rows that replace the image pads) ``[B * M, C]``."""
    captured: list[torch.Tensor] = []
    hook = model.model.visual.register_forward_hook(lambda _m, _i, out: captured.append(out.pooler_output))
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
        )
    finally:
        hook.remove()
    model.model.rope_deltas = None  # the MRoPE offsets of this batch, which the next must not reuse
    return out.last_hidden_state, captured[0]


def logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    result: torch.Tensor = model.lm_head(hidden)
    return result


def batch_loss(model: Any, heads: AuxiliaryHeads, batch: Sequence[VqaSample], pad_id: int) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens plus ``auxiliary_weight`` times the auxiliary heads' loss."""
    ids, targets = answer_batch([(s.prompt, s.answer) for s in batch], pad_id=pad_id)
    hidden, features = forward(model, batch, ids, [len(s.prompt) + len(s.answer) for s in batch])
    counted = targets != IGNORE
    answers = nn.functional.cross_entropy(logits(model, hidden[counted]), targets[counted])
    auxiliary = auxiliary_loss(heads, batch, features, hidden)
    return answers + SETTINGS["auxiliary_weight"] * auxiliary


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
    heads = AuxiliaryHeads(SETTINGS["hidden_size"], SETTINGS["seed"])
    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(ENDOFTEXT)
    trainer = Trainer(
        settings=SETTINGS,
        parameters=[*model.parameters(), *heads.parameters()],
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
    out, command = training_args("graphsurgeon.models.qwen3_vl.train", __doc__.split("\n\n")[0], argv)
    record = train(out, command)
    result = record.result
    print(
        f"held-out accuracy {result['eval_accuracy']:.1%}, blank images {result['blank_accuracy']:.1%} "
        f"(chance {result['chance_accuracy']:.1%}) -> {out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
