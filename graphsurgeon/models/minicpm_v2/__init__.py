"""MiniCPM-V-2 (openbmb/MiniCPM-V-2): a SigLIP-400M ViT, a one-layer cross-attention resampler (64 queries)
and the MiniCPM-2.4B LLM. So far this package holds the image processor (``slicing``, ``processor``) and
the image placeholder text of the prompt (``prompt``), bit-exact with the official remote code; the config
and checkpoint readers (``config``, ``checkpoint``); the fp32 reference (``llm``, ``vision``, ``resampler``,
``model``), checked against the official code; and the embedded tiny checkpoint (``make_tiny``, ``tiny/``).
See docs/minicpm-v-2.md for the facts and their sources, and README.md here for the checks."""
