"""Train the Qwen3 LLM's fixture here, on CPU: a small Qwen3 (``trained/``, the real config keys, tensor
names and tokenizer files) that answers the checkable text questions of ``graphsurgeon.evaluation.
text_tasks``, so a conversion's storages are judged by answers it gets right, not by random logits.

Usage (the fixture in the repository was made by exactly this, 2 torch threads)::

    python -m graphsurgeon.models.qwen3_llm.train graphsurgeon/models/qwen3_llm/trained

Deterministic: the seed, the step count and the data stream are fixed, so the same command on the same
machine and thread count writes the same bytes. The folder gets ``config.json``, ``generation_config.json``
(the EOS id), ``model.safetensors`` (fp32), ``tokenizer.json`` + ``tokenizer_config.json`` (a byte-level
BPE in Qwen2's layout trained on the training questions, ``<|endoftext|>`` as EOS) and ``training.json``
(the command, the settings and the curve: loss, learning rate and greedy accuracy on held-out questions).

The prompt of a question is its tokens; the answer is the tokens of ``" " + answer`` then EOS
(``prompt_ids`` / ``answer_ids``), which is what the evaluation feeds and expects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from graphsurgeon.evaluation import text_tasks
from graphsurgeon.evaluation.lm_training import (
    TrainingRecord,
    answer_batch,
    answer_loss,
    learning_rate,
    training_args,
)
from graphsurgeon.models.common.bpe_tokenizer import train_qwen2_bpe
from graphsurgeon.models.common.qwen3_llm_config import config_from_dict
from graphsurgeon.models.common.qwen3_llm_model import Qwen3ForCausalLM

from .make_tiny import QWEN3_0_6B

EOS = "<|endoftext|>"
BPE_VOCAB = 400  # the 256 byte symbols and the merges: enough that every word of the questions is one token
SETTINGS: dict[str, Any] = {
    "seed": 0,
    "steps": 3000,
    "batch": 64,
    "peak_lr": 3e-3,
    "warmup": 100,
    "weight_decay": 0.01,
    "eval_every": 500,
    "eval_items": 200,  # the held-out questions the curve's accuracy is measured on (the first ones)
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
}


def build_tokenizer() -> Any:
    """The BPE trained on the training questions, with ``<|endoftext|>`` added after it."""
    from tokenizers import AddedToken

    tok = train_qwen2_bpe(text_tasks.training_lines(), BPE_VOCAB)
    tok.add_special_tokens([AddedToken(EOS, single_word=False, lstrip=False, rstrip=False, normalized=False)])
    return tok


def model_config(vocab_size: int, eos_id: int) -> dict[str, Any]:
    """``config.json``: Qwen3-0.6B's keys at the fixture's dimensions, fp32, tied embeddings."""
    cfg = dict(QWEN3_0_6B)
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    cfg.update({k: SETTINGS[k] for k in (*keys, "num_key_value_heads", "head_dim")})
    cfg.update(
        vocab_size=vocab_size,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        max_position_embeddings=256,
        max_window_layers=SETTINGS["num_hidden_layers"],
        torch_dtype="float32",
    )
    return cfg


def prompt_ids(tok: Any, question: str) -> list[int]:
    return list(tok.encode(question).ids)


def answer_ids(tok: Any, answer: str) -> list[int]:
    return [*tok.encode(" " + answer).ids, tok.token_to_id(EOS)]


@torch.no_grad()
def greedy_accuracy(model: Qwen3ForCausalLM, tok: Any, items: list[text_tasks.TextItem]) -> float:
    """The share of ``items`` whose greedy answer (up to EOS, at most 6 tokens) decodes to the answer."""
    eos = tok.token_to_id(EOS)
    hits = 0
    for item in items:
        out = model.generate(prompt_ids(tok, item.question), 6)
        text = tok.decode(out[: out.index(eos)] if eos in out else out)
        hits += text.strip() == item.answer
    return hits / len(items)


def _init(model: Qwen3ForCausalLM, seed: int) -> None:
    """HF's Qwen3 initialisation: normal(0, 0.02) matrices, unit norm weights."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)


def train(out: Path, command: str) -> TrainingRecord:
    torch.manual_seed(SETTINGS["seed"])
    tok = build_tokenizer()
    eos = tok.token_to_id(EOS)
    raw = model_config(tok.get_vocab_size(), eos)
    model = Qwen3ForCausalLM(config_from_dict(raw))
    _init(model, SETTINGS["seed"])
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=SETTINGS["peak_lr"], weight_decay=SETTINGS["weight_decay"], betas=(0.9, 0.98)
    )
    steps, batch = SETTINGS["steps"], SETTINGS["batch"]
    data = text_tasks.train_items(steps * batch, seed=text_tasks.TRAIN_SEED)
    held_out = text_tasks.eval_items()[: SETTINGS["eval_items"]]
    record = TrainingRecord(command=command, settings=dict(SETTINGS, bpe_vocab=BPE_VOCAB))
    for step in range(steps):
        lr = learning_rate(step, steps, SETTINGS["peak_lr"], SETTINGS["warmup"])
        for group in optimizer.param_groups:
            group["lr"] = lr
        chunk = data[step * batch : (step + 1) * batch]
        ids, targets = answer_batch(
            [(prompt_ids(tok, i.question), answer_ids(tok, i.answer)) for i in chunk], pad_id=eos
        )
        logits, _ = model(ids)
        loss = answer_loss(logits, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        last = step + 1 == steps
        if (step + 1) % SETTINGS["eval_every"] == 0 or last:
            model.eval()
            accuracy = greedy_accuracy(model, tok, held_out)
            model.train()
            record.point(step=step + 1, loss=round(float(loss.detach()), 5), lr=lr, accuracy=accuracy)
            shown = f"step {step + 1}: loss {float(loss.detach()):.4f}, held-out accuracy {accuracy:.1%}"
            print(shown, flush=True)
        elif step % 50 == 0:
            record.point(step=step, loss=round(float(loss.detach()), 5), lr=lr)
    model.eval()
    record.result = {"eval_accuracy": greedy_accuracy(model, tok, text_tasks.eval_items())}
    _write(out, model, tok, raw, record)
    return record


def _write(out: Path, model: Qwen3ForCausalLM, tok: Any, raw: dict[str, Any], record: TrainingRecord) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: p.detach().contiguous() for name, p in model.named_parameters()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    eos = tok.token_to_id(EOS)
    generation = {"bos_token_id": eos, "eos_token_id": eos}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    tok.save(str(out / "tokenizer.json"))
    tokenizer_config = {
        "eos_token": EOS,
        "pad_token": EOS,
        "bos_token": None,
        "tokenizer_class": "Qwen2Tokenizer",
    }
    (out / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8"
    )
    record.write(out / "training.json")


def main(argv: list[str] | None = None) -> int:
    out, command = training_args("graphsurgeon.models.qwen3_llm.train", __doc__.split("\n\n")[0], argv)
    record = train(out, command)
    print(f"held-out accuracy {record.result['eval_accuracy']:.1%} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
