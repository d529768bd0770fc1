"""Proximity tile functions for the tile service (:mod:`distforest.forests.tiled`).

These small functions are where a store path, a kernel and a tile meet; they
run inside Dask workers, so they take paths and slices, never big arrays.
"""

from __future__ import annotations

import numpy as np

from distforest.kernels.proximity import (
    oob_proximity_tile,
    original_proximity_tile,
    rfgap_proximity_tile,
)
from distforest.store.run_store import read_rows
from distforest.store.schema import matrix_spec

#: Name of each method's matrix in the store (layouts in :mod:`distforest.store.schema`).
ARRAY_NAMES = {"original": "proximity", "oob": "proximity_oob", "rfgap": "proximity_rfgap"}

#: Methods whose matrix is symmetric: only the upper triangle is computed.
SYMMETRIC = {method: bool(matrix_spec(name).symmetric) for method, name in ARRAY_NAMES.items()}

#: Arrays a method's tiles need, besides ``leaves``.
NEEDS = {"original": (), "oob": ("inbag",), "rfgap": ("inbag", "leaf_mass")}


def compute_tile(method: str, block_i: dict, block_j: dict) -> np.ndarray:
    """One tile of a proximity from the per-row arrays of two row blocks.

    ``block_*`` map ``"leaves"``, ``"inbag"`` and ``"leaf_mass"`` to (rows, T)
    arrays (only those the method needs).
    """
    if method == "original":
        return original_proximity_tile(block_i["leaves"], block_j["leaves"])
    if method == "oob":
        return oob_proximity_tile(
            block_i["leaves"], block_j["leaves"], block_i["inbag"], block_j["inbag"]
        )
    return rfgap_proximity_tile(
        block_i["leaves"],
        block_j["leaves"],
        block_i["inbag"],
        block_j["inbag"],
        block_i["leaf_mass"],
    )


def _read_block(path: str, method: str, rows: slice) -> dict:
    return {name: read_rows(path, name, rows) for name in ("leaves", *NEEDS[method])}


def store_tile(path: str, method: str, rows: slice, cols: slice) -> np.ndarray:
    """A tile function of the tile service: reads the two row blocks from the store.

    Runs inside a Dask worker, so it takes the store's path, not big arrays.
    """
    block_i = _read_block(path, method, rows)
    block_j = block_i if rows == cols else _read_block(path, method, cols)
    return compute_tile(method, block_i, block_j)


def arrays_tile(arrays: dict, method: str, rows: slice, cols: slice) -> np.ndarray:
    """A tile function from in-memory per-row arrays (small matrices)."""
    block_i = {name: a[rows] for name, a in arrays.items()}
    block_j = {name: a[cols] for name, a in arrays.items()}
    return compute_tile(method, block_i, block_j)
