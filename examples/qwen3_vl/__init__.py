"""Qwen3-VL-2B (HF transformers 5.24) to ncnn: the export parts and their tables."""
