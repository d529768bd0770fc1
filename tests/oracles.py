"""Slow, obviously correct reference implementations the kernels must match."""

from __future__ import annotations

import numpy as np


def dense_original_proximity(leaves_i: np.ndarray, leaves_j: np.ndarray) -> np.ndarray:
    """Fraction of trees in which two rows share a leaf, by brute force.

    ``leaves_*`` are (rows, trees); every pair and tree is compared.
    """
    same = leaves_i[:, None, :] == leaves_j[None, :, :]
    return same.mean(axis=2)


def dense_weighted_matches(leaves_i, leaves_j, weights_i, weights_j) -> np.ndarray:
    """sum_t w_i[t, a] w_j[t, b] [leaf_t(a) == leaf_t(b)], trees first layout."""
    out = np.zeros((leaves_i.shape[1], leaves_j.shape[1]))
    for t in range(leaves_i.shape[0]):
        same = leaves_i[t][:, None] == leaves_j[t][None, :]
        out += same * np.outer(weights_i[t], weights_j[t])
    return out
