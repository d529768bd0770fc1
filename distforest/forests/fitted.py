"""What the helpers of a fitted :class:`~distforest.forests.ProximityForest` read of it.

Prediction (:mod:`~distforest.forests.forest_predict`) and the answers on new
rows (:mod:`~distforest.forests.new_rows`) take the fitted forest by this
protocol, not by its class: the estimator imports them, and they need not
import it back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from distforest.parallel.execution import Runner
from distforest.parallel.tasks import ProgressCallback


class FittedForest(Protocol):
    """A fitted ProximityForest as its helpers see it (attributes and checks)."""

    n_samples_: int
    n_features_in_: int
    feature_names_in_: tuple[str, ...]
    categories_: dict[str, tuple[Any, ...]]
    sample_ids_: Any
    task_: str
    classes_: list[Any]
    y_: np.ndarray | None
    leaves_: Any
    inbag_: Any
    nodes_: Mapping[str, np.ndarray] | None
    node_counts_: np.ndarray
    params_: dict[str, Any]
    fit_id_: str

    def _check_fitted(self) -> None: ...

    def apply(self, X: Any) -> np.ndarray: ...

    def _check_nodes(self, what: str) -> None: ...

    def _check_method(self, method: str) -> None: ...

    def _runner(self, cells: int) -> contextlib.AbstractContextManager[Runner]: ...

    def _fitted_cells(self) -> int: ...

    def _report(self, stage: str) -> ProgressCallback | None: ...
