"""Exact order statistics of values spread over many chunks, by radix selection.

The k-th smallest of a class's values, when the values live in row chunks
that tasks read, is found without gathering them: each float64 is mapped to
an unsigned 64-bit key that sorts as the float does (:func:`sortable_keys`),
and rounds narrow the key 16 bits at a time.  In a round every chunk counts
its candidate values (those whose key starts with the prefix found so far)
by their next 16 bits (:func:`bucket_counts`); the counts add up over the
chunks, and the bucket holding rank k extends the prefix.  Once few enough
candidates are left they are gathered (:func:`prefix_members`) and sorted.
Every number is a count or one of the values: the answer is exact, the same
whatever the chunks.
"""

from __future__ import annotations

import numpy as np

#: Bits of the key a round decides (``2**BITS`` buckets a class and round).
BITS = 16
BUCKETS = 1 << BITS
KEY_BITS = 64
_SIGN = np.uint64(1 << 63)


def sortable_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys ordered as the float64 ``values`` (negative zero before zero; no NaN)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    negative = (bits & _SIGN) != 0
    return np.where(negative, ~bits, bits | _SIGN)


def key_values(keys: np.ndarray) -> np.ndarray:
    """The float64 values of keys from :func:`sortable_keys`."""
    keys = np.asarray(keys, dtype=np.uint64)
    positive = (keys & _SIGN) != 0
    return np.where(positive, keys & ~_SIGN, ~keys).view(np.float64)


def _with_prefix(keys: np.ndarray, known: int, prefix: int) -> np.ndarray:
    """The keys whose first ``known`` bits are ``prefix``."""
    if known == 0:
        return keys
    return keys[(keys >> np.uint64(KEY_BITS - known)) == np.uint64(prefix)]


def bucket_counts(keys: np.ndarray, known: int, prefix: int) -> np.ndarray:
    """Counts (int64, :data:`BUCKETS`) of the next :data:`BITS` bits of the keys whose
    first ``known`` bits are ``prefix``."""
    kept = _with_prefix(keys, known, prefix)
    shift = np.uint64(KEY_BITS - known - BITS)
    digits = ((kept >> shift) & np.uint64(BUCKETS - 1)).astype(np.intp)
    return np.bincount(digits, minlength=BUCKETS).astype(np.int64)


def prefix_members(keys: np.ndarray, known: int, prefix: int) -> np.ndarray:
    """The keys whose first ``known`` bits are ``prefix``, sorted."""
    return np.sort(_with_prefix(keys, known, prefix))


def narrow(counts: np.ndarray, rank: int) -> tuple[int, int, int]:
    """The bucket holding the ``rank``-th (0-based) candidate: ``(bucket, rank in it, size)``."""
    below = np.cumsum(counts)
    bucket = int(np.searchsorted(below, rank, side="right"))
    before = int(below[bucket - 1]) if bucket else 0
    return bucket, rank - before, int(counts[bucket])


def tie_counts(sorted_values: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How many of ``sorted_values`` (ascending) are less than, and equal to, each of
    ``values`` (float comparison: ``-0.0`` equals ``0.0``)."""
    less = np.searchsorted(sorted_values, values, side="left")
    return less, np.searchsorted(sorted_values, values, side="right") - less


def average_ranks(less: np.ndarray, equal: np.ndarray) -> np.ndarray:
    """1-based ranks, a tie's values all getting its mean rank, from the counts of values
    less than and equal to each (itself included): as ``pandas`` ``rank(method="average")``
    computes them, the tied ranks' integer sum divided by their count."""
    less = np.asarray(less, dtype=np.int64)
    equal = np.asarray(equal, dtype=np.int64)
    total = equal * less + equal * (equal + 1) // 2
    return total / equal
