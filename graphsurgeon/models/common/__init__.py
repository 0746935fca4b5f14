"""What several model families share: the Qwen3 text layers and decoder-only LLM (config reader,
reference, export parts, calibration), HF ``config.json`` reading, the byte-level BPE helpers of the tiny
tokenizers, the layer-count check, and the stages the verifiers report. Imports no family."""
