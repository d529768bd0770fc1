"""The arithmetic of one rfImpute iteration: the columns of V, and the update from P @ V.

Arrays in, arrays out (no data frames, no cluster): the estimator
(:class:`distforest.apps.impute.ProximityImputer`) computes ``P @ V`` with a
product session and hands the result here.

- :func:`plan_columns` lays out V: two columns per numeric feature
  (``m (x - center)`` and ``m``), one per observed level of a categorical one;
- :func:`build_v` fills V from the observed values;
- :func:`update_cells` turns ``P @ V`` into weighted means and votes, in place;
- :func:`start_values` and :func:`change_statistics` are the start (R's
  ``na.roughfix``) and missForest's stopping statistics;
- :func:`rfimpute_mtry` is R ``randomForest``'s default ``mtry``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import isqrt

import numpy as np


@dataclass
class ColumnLayout:
    """Columns of V: which feature, where its block starts, how wide."""

    columns: list[int]
    starts: list[int]
    level_codes: list[np.ndarray]  # observed level codes per categorical column (else empty)
    counts: list[np.ndarray]  # observed count per level (categorical)
    width: int


def plan_columns(
    X_obs: np.ndarray, categorical: np.ndarray, columns: Sequence[int]
) -> ColumnLayout:
    """Lay out V for ``columns``: two columns per numeric one, one per observed level."""
    starts, level_codes, counts, width = [], [], [], 0
    for j in columns:
        starts.append(width)
        if categorical[j]:
            col = X_obs[:, j]
            codes, count = np.unique(col[~np.isnan(col)].astype(np.int64), return_counts=True)
            level_codes.append(codes)
            counts.append(count.astype(np.float64))
            width += codes.size
        else:
            level_codes.append(np.empty(0, dtype=np.int64))
            counts.append(np.empty(0))
            width += 2
    return ColumnLayout(list(columns), starts, level_codes, counts, width)


def build_v(X_obs: np.ndarray, layout: ColumnLayout, centers: np.ndarray) -> np.ndarray:
    n = X_obs.shape[0]
    V = np.zeros((n, layout.width), dtype=np.float64)
    for j, start, codes in zip(layout.columns, layout.starts, layout.level_codes, strict=True):
        col = X_obs[:, j]
        observed = ~np.isnan(col)
        if codes.size:
            for k, code in enumerate(codes):
                V[:, start + k] = observed & (col == code)
        else:
            V[observed, start] = col[observed] - centers[j]
            V[:, start + 1] = observed
    return V


def update_cells(
    X_cur: np.ndarray,
    rows: np.ndarray,
    missing_rows: np.ndarray,
    R: np.ndarray,
    layout: ColumnLayout,
    centers: np.ndarray,
    start_values: np.ndarray,
    vote: str,
) -> int:
    """Write the weighted means / votes into the missing cells; return the fallback count."""
    fallbacks = 0
    for j, start, codes, counts in zip(
        layout.columns, layout.starts, layout.level_codes, layout.counts, strict=True
    ):
        cells = missing_rows[:, j]
        if not cells.any():
            continue
        if codes.size:
            S = R[cells, start : start + codes.size]
            if vote == "mean":
                S = S / counts
            best = S.argmax(axis=1)
            ok = S[np.arange(S.shape[0]), best] > 0
            value = np.where(ok, codes[best].astype(np.float64), start_values[j])
        else:
            num, den = R[cells, start], R[cells, start + 1]
            ok = den > 0
            value = np.where(ok, centers[j] + num / np.where(ok, den, 1.0), start_values[j])
        fallbacks += int((~ok).sum())
        X_cur[rows[cells], j] = value
    return fallbacks


def rfimpute_mtry(task: str, n_features: int) -> int:
    """R ``randomForest``'s default ``mtry``: features tried at each split.

    ``floor(sqrt(p))`` for classification (and R's unsupervised forests, which
    are classifiers of the data against a synthetic class), ``floor(p / 3)``
    for regression; at least 1.
    """
    if task == "regression":
        return max(n_features // 3, 1)
    return max(isqrt(n_features), 1)


def start_values(X: np.ndarray, categorical: np.ndarray) -> np.ndarray:
    """R's ``na.roughfix``: each column's median, or its most frequent level (code).

    Ties between levels go to the lowest code (the first level, as R's
    ``which.max(table(x))``).
    """
    values = np.empty(X.shape[1])
    for j in range(X.shape[1]):
        col = X[:, j]
        col = col[~np.isnan(col)]
        if categorical[j]:
            codes, counts = np.unique(col, return_counts=True)
            values[j] = codes[np.argmax(counts)]
        else:
            values[j] = np.median(col)
    return values


def change_statistics(
    before: np.ndarray, after: np.ndarray, categorical: np.ndarray
) -> dict[str, float]:
    """missForest's stopping statistics for one iteration (missing cells only)."""
    out: dict[str, float] = {}
    num = ~categorical
    if num.any():
        a, b = after[:, num], before[:, num]
        denom = float(np.sum(a * a))
        out["numeric"] = float(np.sum((a - b) ** 2)) / denom if denom > 0 else 0.0
    if categorical.any():
        out["categorical"] = float(np.mean(after[:, categorical] != before[:, categorical]))
    return out
