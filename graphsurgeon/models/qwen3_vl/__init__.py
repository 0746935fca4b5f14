"""Qwen3-VL (Qwen/Qwen3-VL-2B-Instruct and its family): the embedded tiny checkpoint (``make_tiny``,
``tiny_tokenizer``), the checkpoint's config reader (``config``), an image processor assembled from
transformers' own parts without torchvision (``processor``), and the export parts, each equal to the HF
module it re-expresses (``parts``, with the grid tables of ``vision_tables``)."""
