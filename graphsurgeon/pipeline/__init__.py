"""The ``gsurg apply`` pipeline, as phases run in order: prepare (open the rule file, add the command line's
model, export with pnnx in a worker) → the rules of each graph (``rewrite``'s engine) → storage policy and
calibration → side files → one atomic write. It is the only package that calls ``export/``, ``verify/`` and
``check/`` together; the rule engine below it imports none of them."""
