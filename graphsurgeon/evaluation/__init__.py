"""Model-agnostic evaluation sets for measuring what quantization does to task accuracy."""
