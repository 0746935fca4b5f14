"""Evaluation sets with checkable answers, the training pieces of the trained fixtures, and ``gsurg eval``."""
