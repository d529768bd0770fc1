"""The mean of imputation passes (:mod:`distforest.kernels.pass_mean`) against a plain oracle."""

from __future__ import annotations

import numpy as np

from distforest.kernels.pass_mean import PassMean


def oracle(passes: list[np.ndarray], cells: np.ndarray, categorical: np.ndarray) -> np.ndarray:
    """Cell by cell: the mean of the numeric values, the most frequent level (tie: latest)."""
    out = passes[-1].copy()
    for i, j in zip(*np.nonzero(cells), strict=True):
        values = [p[i, j] for p in passes]
        if not categorical[j]:
            out[i, j] = np.mean(values)
            continue
        counts = {v: values.count(v) for v in values}
        top = max(counts.values())
        out[i, j] = next(v for v in reversed(values) if counts[v] == top)
    return out


def test_mean_and_vote_equal_the_oracle():
    rng = np.random.default_rng(0)
    n, d = 40, 5
    categorical = np.array([False, True, False, True, False])
    cells = rng.random((n, d)) < 0.3
    cells[:, 4] = False  # a column without imputed cells
    base = rng.normal(size=(n, d))
    base[:, categorical] = rng.integers(0, 3, size=(n, 2))
    passes = []
    for k in range(5):
        X = base.copy()
        noise = rng.normal(size=(n, d))
        X[:, ~categorical] += np.where(cells[:, ~categorical], noise[:, ~categorical], 0.0)
        # the levels drift between passes; level 4 shows up only in pass 3 (grows the counts)
        flips = rng.integers(0, 5 if k == 3 else 4, size=(n, 2))
        X[:, categorical] = np.where(cells[:, categorical], flips, X[:, categorical])
        passes.append(X)
    mean = PassMean(cells, categorical)
    for X in passes:
        mean.add(X)
    got = mean.result(passes[-1])
    np.testing.assert_allclose(got, oracle(passes, cells, categorical), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got[~cells], passes[-1][~cells])  # observed cells untouched
    two = PassMean(cells, categorical)  # two passes that disagree: the latest level wins
    for X in passes[:2]:
        two.add(X)
    out = two.result(passes[1])
    cat = cells & categorical[None, :]
    np.testing.assert_array_equal(out[cat], passes[1][cat])


def test_no_pass_returns_a_copy_of_the_fallback():
    cells = np.array([[True, False]])
    fallback = np.array([[1.5, 2.0]])
    out = PassMean(cells, np.array([False, False])).result(fallback)
    np.testing.assert_array_equal(out, fallback)
    assert out is not fallback
