"""distforest: tree ensembles as Dask tasks, pairwise matrices as chunked Zarr.

The main entry points::

    from distforest import ProximityForest, open_store
    pf = ProximityForest(n_estimators=500, random_state=0).fit(X, y)
    P = pf.proximity(method="original", store="prox.zarr")   # lazy xarray.DataArray

Where work runs is given apart from the estimators' parameters::

    with distforest.execution(client=client):   # or scheduler=..., cluster=...
        ProximityForest(random_state=0).fit(X, y)
"""

from distforest._version import __version__
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
