"""A trained fixture's patch embedding started from its training patches: the leading principal
directions of the patch vectors, each scaled to unit variance, and a bias that centres them, so the
vision encoder starts from decorrelated, normalised patch features.

Measured on the first VLM fixture (the digit questions alone, a linear probe on the encoder's mean feature,
fresh items, batch 32): 83 % held-out after 48k items against 52 % from a random patch embedding.
"""

from __future__ import annotations

import numpy as np


def whitened_filters(patches: np.ndarray, width: int, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """``patches [N, D]`` (as the patch embedding reads them, flattened) -> ``filters [width, D]`` and
    ``bias [width]``, float32: the ``width`` leading eigenvectors of the patches' covariance, each divided
    by ``sqrt(eigenvalue + floor)``, and ``-filters @ mean``. ``width`` above ``D`` is a ValueError."""
    if patches.ndim != 2 or width > patches.shape[1]:
        raise ValueError(f"patches [N, D] with D >= {width}: got {patches.shape}")
    data = patches.astype(np.float64)
    mean = data.mean(axis=0)
    centred = data - mean
    values, vectors = np.linalg.eigh(centred.T @ centred / len(centred))
    top = np.argsort(values)[::-1][:width]
    filters = vectors[:, top].T / np.sqrt(values[top] + floor)[:, None]
    return filters.astype(np.float32), (-(filters @ mean)).astype(np.float32)
