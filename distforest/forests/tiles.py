"""Tile tasks: read leaves from the store, run a kernel, write the tile back.

These small functions are where a store path, a kernel and a tile meet; they
run inside Dask workers, so they take paths and slices, never big arrays.
"""

from __future__ import annotations

import numpy as np

from distforest.kernels.proximity import original_proximity_tile
from distforest.store.run_store import read_rows, write_block


def original_tile_task(path: str, rows_i: slice, rows_j: slice) -> int:
    """Compute one tile of Breiman's proximity and write it (and its mirror).

    Parameters
    ----------
    path : str
        The run store holding ``leaves``.
    rows_i, rows_j : slice
        Row blocks of the tile; ``rows_i.start <= rows_j.start``.

    Returns
    -------
    int
        Bytes written.
    """
    leaves_i = read_rows(path, "leaves", rows_i)
    leaves_j = leaves_i if rows_i == rows_j else read_rows(path, "leaves", rows_j)
    tile = original_proximity_tile(leaves_i, leaves_j)
    write_block(path, "proximity", (rows_i, rows_j), tile)
    if rows_i != rows_j:
        write_block(path, "proximity", (rows_j, rows_i), np.ascontiguousarray(tile.T))
        return 2 * tile.nbytes
    return tile.nbytes


def proximity_in_memory(leaves: np.ndarray, tile: int) -> np.ndarray:
    """Breiman's proximity of all rows as one in-memory array (small n only).

    Computed block by block with the same kernel as the store, so both paths
    give identical values.
    """
    n = leaves.shape[0]
    out = np.empty((n, n), dtype=np.float32)
    for start in range(0, n, tile):
        rows = slice(start, min(start + tile, n))
        out[rows] = original_proximity_tile(leaves[rows], leaves)
    return out
