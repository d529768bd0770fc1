"""Former home of the stored fit: names kept for the modules not yet on the one data path.

A :class:`~distforest.forests.ProximityForest` fits rows in memory and rows in a
store with one driver (:mod:`distforest.forests.fit_driver`).  What other
forests' stored fits still import from here now lives in
:mod:`distforest.store.sink` (parts joined by rows, stored nodes) and
:mod:`distforest.store.source` (what an input is).  Remove this module when
nothing imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distforest.store.inputs import StoredTable
from distforest.store.sink import FIT_GROUP, ROUTE_ROWS, StoredNodes, gather_batches
from distforest.store.source import is_dask_frame, opened

__all__ = [
    "FIT_GROUP",
    "ROUTE_ROWS",
    "StoredNodes",
    "fit_in_temporary_store",
    "gather_batches",
    "is_dask_frame",
]


def _label_codes(table: StoredTable, n_classes: int) -> np.ndarray:
    """``input/y`` as label codes (:meth:`StoredTable.read_codes`)."""
    return table.read_codes()


def fit_in_temporary_store(
    owner: Any, frame: Any, fit: Callable[[Any], Any], **options: Any
) -> Any:
    """``fit(source)`` on ``frame`` read by partitions into a temporary store that lives
    as long as ``owner`` (:func:`distforest.store.source.opened`); returns ``owner``."""
    with opened(frame, owner=owner, **options) as source:
        fit(source)
    return owner
