"""The Qwen3 LLM family: a Qwen3-style decoder-only LLM converted by ``rules/llm-kv-cache.yaml``.

Its reference, export source and config reader are the shared Qwen3 LLM in ``graphsurgeon.models.common``
(both VLM families embed the same LLM, and a family never imports a sibling):

* ``common.qwen3_llm_config``: ``config.json`` (as transformers writes it) -> ``Qwen3Config`` and the EOS
  ids; ``facts`` is the rule file's ``source.config``;
* ``common.qwen3_llm_model``: the reference (ids -> logits with a KV cache, greedy generation) on the shared
  Qwen3 layers, ``load_model(folder)``, and the exportable ``EmbedPart`` / ``DecoderPart`` / ``LMHeadPart``;
* ``common.llm_export``: ``build(variables, checkpoint)``, the rule file's ``source.export``.

This folder holds what is the family's own: ``verify`` (its verifier), ``make_tiny`` (deterministic
checkpoint folders: tiny ones for tests, the Qwen3-0.6B config with random bf16 weights for benchmarks:
``python -m graphsurgeon.models.qwen3_llm.make_tiny OUT [--qwen3-0.6b]``), the embedded ``tiny``
checkpoint, the ``model.json`` template and schema, and ``family.yaml``.

Needs the ``export`` extra (torch, pnnx); ``tests/test_qwen3_reference.py`` checks the reference against
transformers (``dev`` extra).
"""
