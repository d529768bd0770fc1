"""The one estimator contract: scikit-learn parameters, execution kept apart.

Every public distforest estimator subclasses :class:`DaskEstimator`, a
:class:`sklearn.base.BaseEstimator` whose ``__init__`` only stores plain
parameters.  Where it runs (client, scheduler, cluster file, progress
callback) is an :class:`~distforest.parallel.execution.Execution`, given by a
``with distforest.execution(...)`` block or by :meth:`DaskEstimator.set_execution`,
never by ``get_params``: so ``clone`` and pickling work with or without a client.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, ClassVar, Self

from sklearn.base import BaseEstimator

from distforest.forests.constraints import Constraint, validate
from distforest.parallel import placement, tasks
from distforest.parallel.execution import (
    Execution,
    Progress,
    Runner,
    current_execution,
)


class DaskEstimator(BaseEstimator):
    """Base of every distforest estimator: parameters plus an optional execution.

    Subclasses declare ``_parameter_constraints`` (one entry per parameter,
    see :mod:`distforest.forests.constraints`) and may add rules between
    parameters in :meth:`_check_combinations`.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}

    def _validated(self) -> dict[str, Any]:
        """The parameters, checked against the constraints and the combination rules."""
        params = validate(self.get_params(deep=False), self._parameter_constraints)
        self._check_combinations(params)
        return params

    def _check_combinations(self, params: dict[str, Any]) -> None:
        """Rules between parameters (none by default)."""

    def set_execution(
        self,
        client: Any = None,
        *,
        scheduler: str | None = None,
        cluster: str | Path | None = None,
        progress: Progress | None = None,
    ) -> Self:
        """Run this estimator's calls on a given cluster (not a parameter: ``clone`` drops it).

        Parameters
        ----------
        client : distributed.Client, "synchronous" or None
            ``"synchronous"`` runs every task in this process.
        scheduler : str, optional
            Address of an existing Dask scheduler.
        cluster : str or Path, optional
            A cluster YAML file (see ``cluster_configs/``).
        progress : callable, optional
            ``progress(stage, done, total)`` after every finished task.

        Returns
        -------
        self
        """
        self._execution = Execution(client, scheduler, cluster, progress)
        return self

    def _current_execution(self) -> Execution:
        own = self.__dict__.get("_execution")
        return own if own is not None else current_execution()

    def _runner(self, cells: int) -> contextlib.AbstractContextManager[Runner]:
        """The executor of one call on ``cells`` input cells, placed by the one rule
        (:func:`distforest.parallel.placement.runs_in_process`): in this process for a
        small input with no cluster named, else on the cluster (started for the block)."""
        return placement.runner(cells, self._current_execution())

    def _fitted_cells(self) -> int:
        """Cells of the training input (rows x features), for calls on a fitted model."""
        return int(self.n_samples_) * int(getattr(self, "n_features_in_", 1))

    def _report(self, stage: str) -> tasks.ProgressCallback | None:
        return self._current_execution().stage(stage)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_execution", None)  # a client cannot travel (and must not)
        return state
