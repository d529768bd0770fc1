"""Proximity tile functions for the tile service (:mod:`distforest.forests.tiled`).

These small functions are where a store path, a kernel and a tile meet; they
run inside Dask workers, so they take paths and slices, never big arrays.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from distforest.forests.tiled import matrix_in_memory, write_matrix
from distforest.kernels import leafsums
from distforest.kernels import proximity as proximity_kernels
from distforest.kernels.proximity import (
    oob_proximity_tile,
    original_proximity_tile,
    rfgap_proximity_tile,
    sort_block,
    sorted_block_counts,
)
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import ProgressCallback
from distforest.parallel.tiling import TilePlan
from distforest.store.run_store import RunStore, read_rows
from distforest.store.schema import matrix_encoding, matrix_spec

#: Name of each method's matrix in the store (layouts in :mod:`distforest.store.schema`).
ARRAY_NAMES = {"original": "proximity", "oob": "proximity_oob", "rfgap": "proximity_rfgap"}

#: Methods whose matrix is symmetric: only the upper triangle is computed.
SYMMETRIC = {method: bool(matrix_spec(name).symmetric) for method, name in ARRAY_NAMES.items()}

#: Arrays a method's tiles need, besides ``leaves``.
NEEDS = {"original": (), "oob": ("inbag",), "rfgap": ("inbag", "leaf_mass")}


def compute_tile(
    method: str, block_i: dict, block_j: dict, counts: str | None = None
) -> np.ndarray:
    """One tile of a proximity from the per-row arrays of two row blocks.

    ``block_*`` map ``"leaves"``, ``"inbag"`` and ``"leaf_mass"`` to (rows, T)
    arrays (only those the method needs), and optionally ``"sorted"`` to the
    leaves already sorted by :func:`sort_block`.  ``counts`` (an integer type,
    for ``"original"`` only) asks for the numbers of trees sharing a leaf
    instead of their fraction: what the store keeps.
    """
    if method == "original":
        if counts is not None:
            sorted_i, sorted_j = _sorted(block_i), _sorted(block_j)
            return sorted_block_counts(sorted_i, sorted_j, counts)
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


def _sorted(block: dict) -> tuple[np.ndarray, np.ndarray]:
    if "sorted" not in block:
        block["sorted"] = sort_block(block["leaves"])
    return block["sorted"]


def _read_block(path: str, method: str, rows: slice) -> dict:
    return {name: read_rows(path, name, rows) for name in ("leaves", *NEEDS[method])}


#: The last row block each thread read (and sorted): a tile task computes up
#: to eight tiles of one row block (:func:`distforest.forests.tiled.tile_groups`),
#: which then share one read and one sort of it.  Keyed by the matrix write it
#: belongs to, so a store rewritten at the same path is never served stale rows.
_last_rows = threading.local()


def _row_block(path: str, method: str, write: str, rows: slice) -> dict:
    key = (write, path, method, rows.start, rows.stop)
    kept = getattr(_last_rows, "block", None)
    if kept is not None and kept[0] == key:
        return kept[1]
    block = _read_block(path, method, rows)
    _last_rows.block = (key, block)
    return block


def store_tile(
    path: str, method: str, counts: str | None, write: str, rows: slice, cols: slice
) -> np.ndarray:
    """A tile function of the tile service: reads the two row blocks from the store.

    Runs inside a Dask worker, so it takes the store's path, not big arrays.
    ``counts``: see :func:`compute_tile`.  ``write`` names this write of the
    matrix (any string unique to it): the tiles of one row block that a
    thread computes in a row reuse its first read of the block.
    """
    block_i = _row_block(path, method, write, rows)
    block_j = block_i if rows == cols else _read_block(path, method, cols)
    return compute_tile(method, block_i, block_j, counts)


def arrays_tile(arrays: dict, method: str, rows: slice, cols: slice) -> np.ndarray:
    """A tile function from in-memory per-row arrays (small matrices)."""
    block_i = {name: a[rows] for name, a in arrays.items()}
    block_j = {name: a[cols] for name, a in arrays.items()}
    return compute_tile(method, block_i, block_j)


def leaf_mass(leaves: np.ndarray, inbag: np.ndarray) -> np.ndarray:
    """Total in-bag count of each row's leaf in each tree (RF-GAP's M_i(t)).

    Parameters
    ----------
    leaves, inbag : ndarray, shape (n_samples, n_trees)

    Returns
    -------
    ndarray of float32, shape (n_samples, n_trees)
    """
    mass = leafsums.leaf_inbag_total(np.ascontiguousarray(leaves.T), np.ascontiguousarray(inbag.T))
    return np.ascontiguousarray(mass.T, dtype=np.float32)


def proximity_in_memory(
    leaves: np.ndarray, inbag: np.ndarray, method: str, tile_size: int
) -> np.ndarray:
    """A small proximity matrix from any forest's leaves, through the same tile function."""
    n = leaves.shape[0]
    arrays = {"leaves": leaves, "inbag": inbag, "leaf_mass": leaf_mass(leaves, inbag)}
    plan = TilePlan(n, n, tile_size, symmetric=SYMMETRIC[method])
    return matrix_in_memory(plan, arrays_tile, (arrays, method))


def write_proximity(
    runner: Runner,
    rs: RunStore,
    method: str,
    tile_size: int,
    *,
    identity: Mapping[str, Any],
    attrs: Mapping[str, Any],
    progress: ProgressCallback | None = None,
) -> dict[str, int]:
    """Write the proximity of a store holding ``leaves`` and ``inbag``, tile by tile.

    Any forest that records each training row's final node per tree
    (proximity forests, SimForests) gets its proximities here; RF-GAP's
    ``leaf_mass`` is added to the store first when missing.  Breiman's
    proximity is stored as integer counts of trees (see
    :func:`distforest.store.schema.matrix_encoding`).
    """
    n, n_trees = rs.array("leaves").shape
    if method == "rfgap" and "leaf_mass" not in rs.group:
        rs.write_named("leaf_mass", leaf_mass(rs.read("leaves"), rs.read("inbag")), rows=tile_size)
    plan = TilePlan(n, n, tile_size, symmetric=SYMMETRIC[method])
    encoding = matrix_encoding(ARRAY_NAMES[method], n_trees=n_trees)
    counts = encoding.dtype if encoding.is_counts else None
    proximity_kernels.warm_up()  # compile once here, not in every worker at once
    return write_matrix(
        runner, rs, ARRAY_NAMES[method], plan, store_tile,
        (rs.path, method, counts, uuid.uuid4().hex),
        identity={**dict(identity), "method": method}, encoding=encoding,
        attrs={"method": method, **dict(attrs)}, progress=progress,
    )  # fmt: skip
