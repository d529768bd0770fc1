"""Similarity and distance measures: names, parameters, and one tile of values.

A measure is named by a string such as ``"euclidean"``, ``"minkowski:3"`` or
``"rbf:0.5"`` and is either a **distance** (0 for identical rows, larger is
farther) or a **similarity** (larger is closer, 1 for identical rows):

==================  ==========  =====================================================
name                kind        value for rows x, y
==================  ==========  =====================================================
euclidean           distance    sqrt(sum (x - y)^2)
manhattan           distance    sum |x - y|  (alias ``cityblock``)
chebyshev           distance    max |x - y|
minkowski:p         distance    (sum |x - y|^p)^(1/p), p >= 1 (default 2)
mahalanobis         distance    sqrt((x - y)' VI (x - y)), VI the inverse covariance
cosine              similarity  x.y / (|x| |y|)  (NaN for an all-zero row)
rbf:gamma           similarity  exp(-gamma |x - y|^2), gamma default 1 / n_features
dot                 similarity  x.y  (unbounded; standardise the features first)
russell-rao         similarity  CP / m                 (binary 0/1 data only)
sokal-michener      similarity  (CP + CA) / m          (binary 0/1 data only)
jaccard             similarity  CP / (CP + PA + AP)    (binary 0/1 data only)
==================  ==========  =====================================================

(CP co-presence, CA co-absence, PA/AP mismatches, m features.)  When a
distance is needed (nearest neighbours), a similarity s becomes ``1 - s``
(cosine distance, Jaccard distance, ...), which keeps the order of neighbours.

Values come from :func:`scipy.spatial.distance.cdist` (exact, pair by pair, so
the same pair gets the same value whatever tile it is in) and from
:mod:`distforest.kernels.metrics` for the binary measures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from distforest.errors import InputError, ParameterError
from distforest.forests.constraints import BINARY_MEASURES, DISTANCES, METRICS
from distforest.kernels.metrics import binary_similarity

ALIASES = {
    "cityblock": "manhattan",
    "l1": "manhattan",
    "l2": "euclidean",
    "linear": "dot",
    "russellrao": "russell-rao",
    "sokalmichener": "sokal-michener",
    "russell_rao": "russell-rao",
    "sokal_michener": "sokal-michener",
}
_SCIPY = {"euclidean": "euclidean", "manhattan": "cityblock", "chebyshev": "chebyshev"}


@dataclass(frozen=True)
class Measure:
    """A parsed measure with its parameters.

    Attributes
    ----------
    name : str
        Canonical name (see the module table).
    p : float or None
        Minkowski exponent (``minkowski`` only).
    gamma : float or None
        RBF width; ``None`` until :meth:`fitted` sets ``1 / n_features``.
    VI : ndarray or None
        Inverse covariance for ``mahalanobis``; ``None`` until :meth:`fitted`
        estimates it on the reference data.
    """

    name: str
    p: float | None = None
    gamma: float | None = None
    VI: np.ndarray | None = None

    @property
    def kind(self) -> str:
        """``"distance"`` or ``"similarity"``."""
        return "distance" if self.name in DISTANCES else "similarity"

    @property
    def binary(self) -> bool:
        """Whether the measure needs 0/1 data."""
        return self.name in BINARY_MEASURES

    @property
    def minkowski_p(self) -> float | None:
        """The Minkowski exponent if this is a Minkowski distance (tree-searchable), else None."""
        if self.name == "minkowski":
            return self.p
        return {"euclidean": 2.0, "manhattan": 1.0, "chebyshev": math.inf}.get(self.name)

    @property
    def spec(self) -> str:
        """The measure as a string :func:`parse_metric` reads back."""
        if self.name == "minkowski":
            return f"minkowski:{self.p:g}"
        if self.name == "rbf" and self.gamma is not None:
            return f"rbf:{self.gamma:.17g}"
        return self.name

    def fitted(self, reference: np.ndarray) -> Measure:
        """Parameters estimated on the reference data, where not given.

        ``mahalanobis``: VI is the (pseudo-)inverse of the covariance of the
        reference rows; ``rbf``: gamma = 1 / n_features.  Binary measures
        check that the data are 0/1.
        """
        X = np.asarray(reference, dtype=np.float64)
        check_values(self, X, "the reference data")
        if self.name == "mahalanobis" and self.VI is None:
            if X.shape[0] < 2:
                raise InputError("mahalanobis needs at least 2 reference rows for a covariance")
            cov = np.atleast_2d(np.cov(X, rowvar=False))
            return replace(self, VI=np.linalg.pinv(cov))
        if self.name == "rbf" and self.gamma is None:
            return replace(self, gamma=1.0 / X.shape[1])
        return self

    def values(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """The measure between every row of ``A`` and every row of ``B`` (its own kind).

        Parameters
        ----------
        A, B : ndarray, shape (na, d) and (nb, d)

        Returns
        -------
        ndarray of float64, shape (na, nb)
        """
        A = np.ascontiguousarray(A, dtype=np.float64)
        B = np.ascontiguousarray(B, dtype=np.float64)
        if self.binary:
            return binary_similarity(self.name, A, B)
        if self.name in _SCIPY:
            return cdist(A, B, _SCIPY[self.name])
        if self.name == "minkowski":
            return cdist(A, B, "minkowski", p=self.p)
        if self.name == "mahalanobis":
            if self.VI is None:
                raise ParameterError("mahalanobis needs VI: call Measure.fitted(reference) first")
            return cdist(A, B, "mahalanobis", VI=self.VI)
        if self.name == "cosine":
            return 1.0 - cdist(A, B, "cosine")
        if self.name == "dot":  # einsum's own loop: the same pair, the same bits, in any tile
            return np.einsum("ik,jk->ij", A, B, optimize=False)
        if self.gamma is None:
            raise ParameterError("rbf needs gamma: call Measure.fitted(reference) first")
        return np.exp(-self.gamma * cdist(A, B, "sqeuclidean"))

    def distances(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """Distances between rows: the measure itself, or ``1 - s`` for a similarity."""
        if self.name == "cosine":
            return cdist(
                np.ascontiguousarray(A, dtype=np.float64),
                np.ascontiguousarray(B, dtype=np.float64),
                "cosine",
            )
        values = self.values(A, B)
        return values if self.kind == "distance" else 1.0 - values


def parse_metric(metric: str | Measure, params: dict[str, Any] | None = None) -> Measure:
    """Read a measure name such as ``"minkowski:3"``, ``"rbf:0.1"`` or ``"cosine"``.

    Parameters
    ----------
    metric : str or Measure
        A name from :data:`METRICS` (or an alias), optionally ``:value`` for
        the Minkowski ``p`` or the RBF ``gamma``.
    params : dict, optional
        ``{"p": ...}``, ``{"gamma": ...}`` or ``{"VI": ...}`` (a given
        inverse covariance for Mahalanobis).

    Returns
    -------
    Measure

    Raises
    ------
    ParameterError
        Unknown name or bad parameter; the message lists the valid names.
    """
    if isinstance(metric, Measure):
        return metric
    if not isinstance(metric, str):
        raise ParameterError(f"metric must be a string such as 'euclidean', got {metric!r}")
    params = dict(params or {})
    name, _, arg = metric.strip().lower().partition(":")
    name = ALIASES.get(name, name)
    if name not in METRICS:
        raise ParameterError(
            f"unknown metric {metric!r}; use one of {', '.join(METRICS)} "
            "(minkowski:P and rbf:GAMMA take a number)"
        )
    unknown = set(params) - {"p", "gamma", "VI"}
    if unknown:
        raise ParameterError(f"unknown metric parameter(s) {sorted(unknown)}; use p, gamma or VI")
    if arg:
        if name not in ("minkowski", "rbf"):
            raise ParameterError(f"metric {name!r} takes no ':' argument, got {metric!r}")
        try:
            value = float(arg)
        except ValueError:
            raise ParameterError(f"{metric!r}: {arg!r} after ':' is not a number") from None
        params["p" if name == "minkowski" else "gamma"] = value
    p = params.get("p")
    if name == "minkowski":
        p = 2.0 if p is None else float(p)
        if not p >= 1.0:
            raise ParameterError(f"minkowski needs p >= 1 (a metric), got p={p!r}")
    gamma = params.get("gamma")
    if gamma is not None and not (name == "rbf" and float(gamma) > 0):
        raise ParameterError(f"gamma must be > 0 and only goes with rbf, got {gamma!r}")
    VI = params.get("VI")
    if VI is not None:
        if name != "mahalanobis":
            raise ParameterError("VI (an inverse covariance) only goes with mahalanobis")
        VI = np.atleast_2d(np.asarray(VI, dtype=np.float64))
    return Measure(name, p=p if name == "minkowski" else None,
                   gamma=None if gamma is None else float(gamma), VI=VI)  # fmt: skip


def check_values(
    measure: Measure,
    X: np.ndarray,
    what: str,
    names: Sequence[str] | None = None,
    first_row: int = 0,
) -> None:
    """Raise :class:`InputError` for values the measure cannot use (NaN, inf, non-binary).

    ``what`` names the input (its file, or ``"X"``); ``names`` its columns;
    ``first_row`` is the number of ``X``'s first row in the whole table.
    """
    if X.size and not np.isfinite(X).all():
        rows, cols = np.nonzero(~np.isfinite(X))
        column = repr(names[cols[0]]) if names is not None else str(cols[0])
        raise InputError(
            f"{what} has {rows.size} missing or infinite value(s) (first at row "
            f"{first_row + rows[0]}, "
            f"column {column}); {measure.name} needs complete rows: impute them first "
            "(distforest impute) or drop those rows"
        )
    if measure.binary and X.size:
        bad = ~np.isin(X, (0.0, 1.0))
        if bad.any():
            rows, cols = np.nonzero(bad)
            raise InputError(
                f"{measure.name} needs binary 0/1 data but {what} has {X[rows[0], cols[0]]!r} "
                f"at row {first_row + rows[0]}, column "
                f"{repr(names[cols[0]]) if names is not None else cols[0]}; recode the "
                "features as 0/1"
            )
    if measure.VI is not None and measure.VI.shape != (X.shape[1], X.shape[1]):
        raise ParameterError(
            f"VI has shape {measure.VI.shape} but the data have {X.shape[1]} features; "
            f"give a {X.shape[1]} x {X.shape[1]} inverse covariance"
        )


def make_scaler(normalize: str | None, feature_range: tuple[float, float] = (0.0, 1.0)) -> Any:
    """A scikit-learn scaler for ``normalize``, unfitted, or None.

    Parameters
    ----------
    normalize : {None, "range", "zscore"}
        ``range``: ``low + (x - min) / (max - min) * (high - low)`` with min and
        max of the training data (:class:`~sklearn.preprocessing.MinMaxScaler`);
        ``zscore``: ``(x - mean) / std`` (:class:`~sklearn.preprocessing.StandardScaler`).
    feature_range : (low, high)
        Target interval of ``range``.
    """
    if normalize is None or normalize == "none":
        return None
    if normalize == "range":
        from sklearn.preprocessing import MinMaxScaler

        low, high = (float(v) for v in feature_range)
        if not low < high:
            raise ParameterError(f"feature_range must be (low, high) with low < high, got "
                                 f"{feature_range!r}")  # fmt: skip
        return MinMaxScaler(feature_range=(low, high))
    if normalize == "zscore":
        from sklearn.preprocessing import StandardScaler

        return StandardScaler()
    raise ParameterError(f"normalize must be None, 'range' or 'zscore', got {normalize!r}")
