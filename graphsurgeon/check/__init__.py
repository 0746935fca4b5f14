"""Checks that prove a model is what ncnn will read: ``lint`` (every check ncnn skips) and ``diff-bin``
(weight-by-weight comparison that understands the .param)."""
