"""Transposed copies of matrix tiles (the mirror of a symmetric tile).

A strided copy of a 2048 x 2048 tile misses the cache on every element;
numpy's copy in small square blocks keeps both sides in cache but still moves
one byte at a time.  For one-byte values (count matrices), eight rows of
eight bytes are read as eight 64-bit words and transposed in registers (three
rounds of masked swaps), so a tile is copied word by word.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Side of the square blocks numpy copies at a time (values wider than a byte).
TRANSPOSE_BLOCK = 64

_LOW32 = np.uint64(0x00000000FFFFFFFF)
_HIGH32 = np.uint64(0xFFFFFFFF00000000)
_LOW16 = np.uint64(0x0000FFFF0000FFFF)
_HIGH16 = np.uint64(0xFFFF0000FFFF0000)
_LOW8 = np.uint64(0x00FF00FF00FF00FF)
_HIGH8 = np.uint64(0xFF00FF00FF00FF00)


@njit(nogil=True, cache=True)
def _transpose_words(words, out):  # pragma: no cover - numba
    """``out`` = the byte transpose of ``words``, both uint64 views of byte matrices.

    ``words`` is an (n, m / 8) view of an n x m uint8 matrix (n, m multiples
    of 8); ``out`` an (m, n / 8) view of the m x n result.
    """
    rows, cols = words.shape
    r = np.empty(8, dtype=np.uint64)
    s32 = np.uint64(32)
    s16 = np.uint64(16)
    s8 = np.uint64(8)
    for bi in range(rows // 8):
        for bj in range(cols):
            for k in range(8):
                r[k] = words[8 * bi + k, bj]
            for i in range(4):  # swap the off-diagonal 4 x 4 blocks
                a, b = r[i], r[i + 4]
                r[i] = (a & _LOW32) | (b << s32)
                r[i + 4] = (a >> s32) | (b & _HIGH32)
            for i in (0, 1, 4, 5):  # then the 2 x 2 blocks of each
                a, b = r[i], r[i + 2]
                r[i] = (a & _LOW16) | ((b & _LOW16) << s16)
                r[i + 2] = ((a >> s16) & _LOW16) | (b & _HIGH16)
            for i in (0, 2, 4, 6):  # then single bytes
                a, b = r[i], r[i + 1]
                r[i] = (a & _LOW8) | ((b & _LOW8) << s8)
                r[i + 1] = ((a >> s8) & _LOW8) | (b & _HIGH8)
            for k in range(8):
                out[8 * bj + k, bi] = r[k]


def _blocked_copy(values: np.ndarray, out: np.ndarray) -> None:
    b = TRANSPOSE_BLOCK
    n, m = values.shape
    for i in range(0, n, b):
        for j in range(0, m, b):
            out[j : j + b, i : i + b] = values[i : i + b, j : j + b].T


def transposed(values: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``values.T``.

    Parameters
    ----------
    values : ndarray, shape (n, m)

    Returns
    -------
    ndarray, shape (m, n)
        Same dtype; one-byte values are copied eight by eight in 64-bit words
        (about 6x faster than numpy's blocked copy on a 2048 x 2048 tile).
    """
    n, m = values.shape
    out = np.empty((m, n), dtype=values.dtype)
    if values.dtype.itemsize != 1 or n < 8 or m < 8:
        _blocked_copy(values, out)
        return out
    n8, m8 = n - n % 8, m - m % 8
    if (n8, m8) == (n, m) and values.flags.c_contiguous:
        _transpose_words(values.view(np.uint64), out.view(np.uint64))
        return out
    core_t = np.empty((m8, n8), dtype=values.dtype)
    _transpose_words(np.ascontiguousarray(values[:n8, :m8]).view(np.uint64), core_t.view(np.uint64))
    out[:m8, :n8] = core_t
    if n8 < n:
        _blocked_copy(values[n8:, :], out[:, n8:])
    if m8 < m:
        _blocked_copy(values[:n8, m8:], out[m8:, :n8])
    return out


def warm_up() -> None:
    """Compile (or load from cache) the word kernel once, before tasks fan out."""
    transposed(np.zeros((8, 8), dtype=np.uint8))
