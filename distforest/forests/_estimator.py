"""What every distforest estimator shares: scikit-learn parameters and the client to run on.

Subclasses list their parameters in ``_PARAM_NAMES`` and store ``client``,
``scheduler``, ``cluster`` and ``progress`` in ``__init__``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from distforest.errors import ParameterError
from distforest.parallel import tasks
from distforest.parallel.cluster import use_client


class DaskEstimator:
    """Mixin: ``get_params``/``set_params`` and the Dask client of a call."""

    _PARAM_NAMES: tuple[str, ...] = ()
    client: Any
    scheduler: Any
    cluster: Any
    progress: Any

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Parameters of the estimator (scikit-learn convention)."""
        names = (*self._PARAM_NAMES, "client", "scheduler", "cluster", "progress")
        return {name: getattr(self, name) for name in names}

    def set_params(self, **params: Any) -> DaskEstimator:
        """Set parameters (scikit-learn convention)."""
        for name, value in params.items():
            if name not in self.get_params():
                raise ParameterError(f"unknown parameter {name!r} for {type(self).__name__}")
            setattr(self, name, value)
        return self

    def _client(self) -> contextlib.AbstractContextManager[Any]:
        return use_client(self.client, scheduler=self.scheduler, cluster=self.cluster)

    def _report(self, stage: str) -> tasks.ProgressCallback | None:
        if self.progress is None:
            return None
        return lambda done, total: self.progress(stage, done, total)
