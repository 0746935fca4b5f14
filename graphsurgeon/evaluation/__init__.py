"""Evaluation sets with checkable answers (text tasks, VQA scenes), the training pieces of the trained
fixtures, and ``gsurg eval``'s scoring of a conversion against its fp32 reference."""
