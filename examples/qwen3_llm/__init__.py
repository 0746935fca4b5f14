"""A Qwen3-style decoder-only LLM in plain PyTorch, as the source of ``rules/llm-kv-cache.yaml``.

* ``config``: ``config.json`` (as transformers writes it) -> ``Qwen3Config`` (the numbers as every Qwen3
  example reads them, ``examples.qwen3_config``, and the EOS ids);
* ``model``: the reference (ids -> logits with a KV cache, greedy generation) on the shared Qwen3 layers
  (``examples.qwen3_layers``), ``load_model(folder)``, and the exportable ``EmbedPart`` / ``DecoderPart`` /
  ``LMHeadPart`` (what pnnx makes of them is in its docstring);
* ``export``: ``build(variables, checkpoint)``, the export source a rule file names as
  ``.../examples/qwen3_llm/export.py:build``;
* ``make_tiny``: deterministic checkpoint folders (tiny ones for tests, the Qwen3-0.6B config with random
  bf16 weights for benchmarks): ``python -m examples.qwen3_llm.make_tiny OUT [--qwen3-0.6b]``.

Needs the ``export`` extra (torch, pnnx); ``tests/test_qwen3_reference.py`` checks the reference against
transformers (``dev`` extra).
"""
