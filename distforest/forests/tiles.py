"""Tile tasks: read leaves from the store, run a kernel, write the tile back.

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
from distforest.store.run_store import mark_done, read_rows, write_block

#: Methods whose matrix is symmetric: only the upper triangle is computed.
SYMMETRIC = {"original": True, "oob": True, "rfgap": False}

#: Name of each method's matrix in the store.
ARRAY_NAMES = {"original": "proximity", "oob": "proximity_oob", "rfgap": "proximity_rfgap"}

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


def tile_task(
    path: str, method: str, rows_i: slice, rows_j: slice, index: tuple[int, int] | None = None
) -> int:
    """Compute one tile (and its mirror for symmetric methods) and write it.

    Parameters
    ----------
    path : str
        The run store holding ``leaves`` (and ``inbag``, ``leaf_mass``).
    method : {"original", "oob", "rfgap"}
    rows_i, rows_j : slice
        Row blocks of the tile.
    index : (int, int), optional
        Block indices of the tile: marked in the store's done record once
        the tile (and its mirror) are written, so a resumed run skips it.

    Returns
    -------
    int
        Bytes written.
    """
    block_i = _read_block(path, method, rows_i)
    block_j = block_i if rows_i == rows_j else _read_block(path, method, rows_j)
    tile = compute_tile(method, block_i, block_j)
    name = ARRAY_NAMES[method]
    write_block(path, name, (rows_i, rows_j), tile)
    written = tile.nbytes
    if SYMMETRIC[method] and rows_i != rows_j:
        write_block(path, name, (rows_j, rows_i), np.ascontiguousarray(tile.T))
        written *= 2
    if index is not None:
        mark_done(path, name, index)
    return written


def proximity_in_memory(method: str, arrays: dict, tile: int) -> np.ndarray:
    """A whole proximity matrix in memory (small n only).

    Computed block by block with the same kernels as the store, so both
    paths give identical values.
    """
    n = arrays["leaves"].shape[0]
    out = np.empty((n, n), dtype=np.float32)
    for start in range(0, n, tile):
        rows = slice(start, min(start + tile, n))
        block = {name: a[rows] for name, a in arrays.items()}
        out[rows] = compute_tile(method, block, arrays)
    return out
