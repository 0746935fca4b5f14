"""The rewrite engine: YAML rule files (``rulefile``), matching, actions and the driver behind
``gsurg apply``. It knows nothing about any particular model; model facts live in ``rules/``."""
