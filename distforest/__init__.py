"""distforest: tree ensembles as Dask tasks, pairwise matrices as chunked Zarr.

The main entry points::

    from distforest import ProximityForest, open_store
    pf = ProximityForest(n_estimators=500, random_state=0).fit(X, y)
    P = pf.proximity(method="original", store="prox.zarr")   # lazy xarray.DataArray

Where work runs is given apart from the estimators' parameters::

    with distforest.execution(client=client):   # or scheduler=..., cluster=...
        ProximityForest(random_state=0).fit(X, y)

The names below are imported on first use (``import distforest`` itself loads
neither Dask nor scikit-learn), so that the command line starts quickly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from distforest._version import __version__

if TYPE_CHECKING:
    from distforest.apps.impute import ProximityImputer
    from distforest.apps.knn import KNNClassifier, KNNRegressor
    from distforest.errors import DistforestError
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.forests.smerf import SMERF
    from distforest.forests.xforest import XForest
    from distforest.io import Table, load_table
    from distforest.parallel.execution import Execution, execution
    from distforest.store import open_store

#: Public name -> the module that defines it (imported by :func:`__getattr__`).
_LAZY = {
    "SMERF": "distforest.forests.smerf",
    "DistforestError": "distforest.errors",
    "Execution": "distforest.parallel.execution",
    "KNNClassifier": "distforest.apps.knn",
    "KNNRegressor": "distforest.apps.knn",
    "ProximityForest": "distforest.forests.proximity_forest",
    "ProximityImputer": "distforest.apps.impute",
    "SimilarityForestClassifier": "distforest.forests.simforest",
    "Table": "distforest.io",
    "XForest": "distforest.forests.xforest",
    "execution": "distforest.parallel.execution",
    "load_table": "distforest.io",
    "open_store": "distforest.store",
}

__all__ = [
    "SMERF",
    "DistforestError",
    "Execution",
    "KNNClassifier",
    "KNNRegressor",
    "ProximityForest",
    "ProximityImputer",
    "SimilarityForestClassifier",
    "Table",
    "XForest",
    "__version__",
    "execution",
    "load_table",
    "open_store",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562) and keep it in the module."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'distforest' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
