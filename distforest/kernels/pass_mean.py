"""The mean of the imputation passes after the first (column-aware imputation).

Each pass of column-aware imputation refits every column's forest from new
seeds.  After the first pass (which starts from medians and most frequent
levels, and moves the cells far) the passes settle around one imputation and
differ mostly by the forests' Monte Carlo noise: missForest's rule stops them
when the change between two passes no longer shrinks.  The mean of the kept
passes after the first is then a forest of ``passes x n_estimators`` trees
for the price of the passes already run.  Numeric cells take the mean of
their values over those passes, categorical cells the level most of them
gave (a tie goes to the latest pass's level).

Pure numpy: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np


class PassMean:
    """Running mean (numeric) and vote (categorical) of the imputed cells over passes.

    Parameters
    ----------
    cells : ndarray of bool, shape (n, d)
        The imputed cells: the only ones that differ between passes.
    categorical : ndarray of bool, shape (d,)
        Columns whose cells are level codes (0, 1, ...) to vote on.

    Examples
    --------
    >>> cells = np.array([[True, False], [True, True]])
    >>> mean = PassMean(cells, np.array([False, True]))
    >>> for a, b in ((1.0, 0.0), (2.0, 1.0), (6.0, 1.0)):
    ...     mean.add(np.array([[a, 7.0], [a, b]]))
    >>> mean.result(np.zeros((2, 2))).tolist()
    [[3.0, 0.0], [3.0, 1.0]]
    """

    def __init__(self, cells: np.ndarray, categorical: np.ndarray) -> None:
        self.cells = cells
        self.numeric = cells & ~categorical[None, :]
        self.columns = [int(j) for j in np.flatnonzero(categorical & cells.any(axis=0))]
        self.passes = 0
        self._sum = np.zeros(int(self.numeric.sum()))
        self._votes: dict[int, np.ndarray] = {}
        self._last: dict[int, np.ndarray] = {}

    def add(self, X: np.ndarray) -> None:
        """Count one pass's imputation ``X`` (n, d) in the mean."""
        self._sum += X[self.numeric]
        for j in self.columns:
            codes = X[self.cells[:, j], j].astype(np.int64)
            votes = self._votes.get(j, np.zeros((codes.size, 0), dtype=np.int32))
            if codes.size and codes.max() >= votes.shape[1]:  # a level not seen so far
                votes = np.pad(votes, ((0, 0), (0, int(codes.max()) + 1 - votes.shape[1])))
            votes[np.arange(codes.size), codes] += 1
            self._votes[j], self._last[j] = votes, codes
        self.passes += 1

    def result(self, X: np.ndarray) -> np.ndarray:
        """``X`` with its imputed cells replaced by their mean or vote over the passes.

        ``X`` itself when no pass was added (a copy in both cases).
        """
        out = X.copy()
        if self.passes == 0:
            return out
        out[self.numeric] = self._sum / self.passes
        for j, votes in self._votes.items():
            score = 2 * votes  # the latest pass's level breaks a tie, and only a tie
            score[np.arange(votes.shape[0]), self._last[j]] += 1
            out[self.cells[:, j], j] = np.argmax(score, axis=1).astype(out.dtype)
        return out
