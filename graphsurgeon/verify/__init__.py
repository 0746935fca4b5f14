"""Run converted models in the ``ncnn`` wheel with exact fp32 options and compare them with a reference:
a loader (``ncnn_fp32``), and a step-by-step KV-cache decoder runner (``kv_signature``, ``rope``,
``kv_session``)."""
