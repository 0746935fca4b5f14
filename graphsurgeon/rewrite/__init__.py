"""The rule language and the rewrite engine. The language: YAML rule files (``rulefile``, ``sections``,
``loader``, ``rule_tree``, ``scope``, ``yaml_source``). The engine: patterns, selectors, actions and the
driver that applies a graph's rules. It knows nothing about any particular model (model facts live in
``rules/``) and runs no pnnx and no ncnn: ``pipeline/`` calls it."""
