"""Proximity tile functions for the tile service (:mod:`distforest.forests.tiled`).

These small functions are where a store path, a kernel and a tile meet; they
run inside Dask workers, so they take paths and slices, never big arrays.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from distforest import settings
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
ARRAY_NAMES = {"original": "proximity", "oob": "proximity_oob", "rfgap": "proximity_rfgap",
               # a weight per row and tree (ProximityForest's, see forests/outside.py)
               "kerf": "proximity_kerf", "boosted": "proximity_boosted"}  # fmt: skip

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


def _sorted(block: dict) -> tuple[np.ndarray, ...]:
    if "sorted" not in block:
        block["sorted"] = sort_block(block["leaves"])
    return block["sorted"]


def _read_block(path: str, method: str, rows: slice) -> dict:
    return {name: read_rows(path, name, rows) for name in ("leaves", *NEEDS[method])}


class _BlockCache:
    """The row blocks of one matrix write, shared by a process's task threads.

    Up to ``distforest.block-cache-bytes`` (:mod:`distforest.settings`, 256 MiB;
    read by each worker process, so each block is read and prepared once per
    process, not once per tile): the 2,048-row
    blocks of 100 trees take 1.6 MB each, so a matrix of up to about 300,000
    rows keeps all of its blocks.

    Keyed by the write (a token unique to it), so a store rewritten at the same
    path is never served stale rows; a new write drops the old one's blocks.
    When the budget is spent, blocks are no longer added (tiles visit blocks in
    cycles, which an evicting cache would miss every time), and each thread
    keeps the last block it read: a task's tiles share their row block.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.write: str | None = None
        self.blocks: dict[tuple[str, str, int, int], dict] = {}
        self.nbytes = 0
        self.last = threading.local()

    def get(
        self, path: str, method: str, write: str, rows: slice, counts: str | None, *, row: bool
    ) -> dict:
        """Row block ``rows`` of the store at ``path``, read (and sorted) once.

        ``row``: the block is the tile's row block (the one a task's tiles share).
        """
        key = (path, method, rows.start, rows.stop)
        with self.lock:
            if self.write != write:
                self.forget()
                self.write = write
            block = self.blocks.get(key)
        if block is not None:
            return block
        kept = getattr(self.last, "block", None) if row else None
        if kept is not None and kept[0] == (write, key):
            return kept[1]
        block = _read_block(path, method, rows)
        if method == "original" and counts is not None:
            block = {"sorted": sort_block(block["leaves"])}  # all the count kernel needs
        size = sum(sum(a.nbytes for a in v) if isinstance(v, tuple) else v.nbytes
                   for v in block.values())  # fmt: skip
        budget = settings.get("block-cache-bytes")
        with self.lock:
            fits = self.nbytes + size <= budget
            # (another thread may have added the same block meanwhile)
            if self.write == write and key not in self.blocks and fits:
                self.blocks[key] = block
                self.nbytes += size
        if row:
            self.last.block = ((write, key), block)
        return block

    def forget(self, write: str | None = None) -> None:
        """Drop the blocks kept (only if they belong to ``write``, when given)."""
        if write is None or self.write == write:
            self.blocks = {}
            self.nbytes = 0
            self.write = None


_blocks = _BlockCache()


def forget_blocks(write: str) -> None:
    """Free this process's row blocks of a finished matrix write (run on every worker)."""
    with _blocks.lock:
        _blocks.forget(write)
    _blocks.last = threading.local()


def stored_leaves(path: str, write: str, rows: slice, *, row: bool) -> np.ndarray:
    """Rows ``rows`` of the ``leaves`` of the store at ``path``, read once per process for
    the matrix write ``write`` (the block cache of :func:`store_tile`; ``row``: the tile's
    row block).  For tile functions of weightings other than this module's."""
    return _blocks.get(path, "original", write, rows, None, row=row)["leaves"]


def store_tile(
    path: str, method: str, counts: str | None, write: str, rows: slice, cols: slice
) -> np.ndarray:
    """A tile function of the tile service: reads the two row blocks from the store.

    Runs inside a Dask worker, so it takes the store's path, not big arrays.
    ``counts``: see :func:`compute_tile`.  ``write`` names this write of the
    matrix (any string unique to it): the tiles a process computes share one
    read (and sort) of each row block, see :class:`_BlockCache`.
    """
    block_i = _blocks.get(path, method, write, rows, counts, row=True)
    block_j = block_i if rows == cols else _blocks.get(path, method, write, cols, counts, row=False)
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
    proximity_kernels.warm_up(() if counts is None else (counts,))  # here, not in each worker
    write = uuid.uuid4().hex
    try:
        return write_matrix(
            runner, rs, ARRAY_NAMES[method], plan, store_tile, (rs.path, method, counts, write),
            identity={**dict(identity), "method": method}, encoding=encoding,
            attrs={"method": method, **dict(attrs)}, progress=progress,
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):  # only memory is at stake: never mask an error
            runner.everywhere(forget_blocks, write)
