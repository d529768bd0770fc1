"""The plan of a tiled matrix: which tiles exist, which are left, what they cost.

A :class:`TilePlan` is pure arithmetic (no store, no cluster): the run and
``--dry-run`` read the same plan, so the numbers printed before a run are the
numbers of the run.  A symmetric ``n x n`` matrix lists only the tiles of the
upper triangle (``i <= j``); each of those tasks also writes the mirrored tile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.errors import ParameterError


@dataclass(frozen=True)
class Tile:
    """One task of a plan: a block of rows by a block of columns.

    Attributes
    ----------
    index : (int, int)
        Block numbers (row block, column block): the tile's entry in the
        store's done record.
    rows, cols : slice
        The cells it covers.
    mirror : bool
        Also write the transpose at ``(cols, rows)`` (symmetric matrices,
        off-diagonal tiles).
    """

    index: tuple[int, int]
    rows: slice
    cols: slice
    mirror: bool


@dataclass(frozen=True)
class TilePlan:
    """The tiles of an ``n_rows x n_cols`` matrix in ``tile_size`` squares.

    Parameters
    ----------
    n_rows, n_cols : int
    tile_size : int
        Rows and columns of one tile (one task, one Zarr chunk).
    symmetric : bool
        Compute the upper triangle only and mirror it (needs a square matrix).
    """

    n_rows: int
    n_cols: int
    tile_size: int
    symmetric: bool = False

    def __post_init__(self) -> None:
        if self.tile_size < 1:
            raise ParameterError(f"tile_size must be at least 1, got {self.tile_size}")
        if self.symmetric and self.n_rows != self.n_cols:
            raise ParameterError(
                f"a symmetric plan needs a square matrix, got {self.n_rows} x {self.n_cols}"
            )

    @property
    def blocks(self) -> tuple[int, int]:
        """Row and column blocks: the shape of the done record."""
        return -(-self.n_rows // self.tile_size), -(-self.n_cols // self.tile_size)

    @property
    def chunks(self) -> tuple[int, int]:
        """Chunk shape of the stored matrix."""
        return max(1, min(self.tile_size, self.n_rows)), max(1, min(self.tile_size, self.n_cols))

    def tiles(self) -> list[Tile]:
        """Every task of the plan, row block by row block."""
        size = self.tile_size
        rows_b, cols_b = self.blocks
        out = []
        for a in range(rows_b):
            rows = slice(a * size, min((a + 1) * size, self.n_rows))
            for b in range(a if self.symmetric else 0, cols_b):
                cols = slice(b * size, min((b + 1) * size, self.n_cols))
                out.append(Tile((a, b), rows, cols, self.symmetric and a != b))
        return out

    def pending(self, done: np.ndarray | None) -> list[Tile]:
        """The tiles not yet marked in ``done`` (all of them when it is None)."""
        tiles = self.tiles()
        if done is None:
            return tiles
        return [t for t in tiles if not done[t.index]]

    @property
    def n_tasks(self) -> int:
        """Number of tile tasks."""
        rows_b, cols_b = self.blocks
        return rows_b * (rows_b + 1) // 2 if self.symmetric else rows_b * cols_b

    def nbytes(self, itemsize: int = 4) -> int:
        """Bytes of the whole matrix, uncompressed."""
        return self.n_rows * self.n_cols * itemsize

    def describe(self) -> dict[str, Any]:
        """The numbers ``--dry-run`` prints and the store records."""
        return {
            "shape": [self.n_rows, self.n_cols],
            "tile_size": self.tile_size,
            "symmetric": self.symmetric,
            "tiles": self.n_tasks,
        }
