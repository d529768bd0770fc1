"""The tile service: every n x n or n x m matrix is written through here.

A *tile function* ``func(*args, rows, cols) -> ndarray`` computes one block
of a matrix.  :func:`write_matrix` runs it once per pending tile of a
:class:`~distforest.parallel.tiling.TilePlan` (a task computes one tile or a
few neighbouring ones, on the given
:class:`~distforest.parallel.execution.Runner`), writes the tile and,
for symmetric plans, its mirror, and marks the tile done in the store; a
run killed half-way resumes where it stopped and gives the same bytes.
:func:`matrix_in_memory` builds a small matrix from the same tile function,
so both paths give identical values.

Big inputs reach the tasks as ``args``: store paths (tasks read the rows
they need) or handles from :meth:`Runner.share`, never as copies per task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from distforest.errors import DISK_FULL_ERRNOS, DiskFullError, InputError
from distforest.kernels import transpose
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import ProgressCallback
from distforest.parallel.tiling import Tile, TilePlan
from distforest.store.run_store import RunStore, write_tile
from distforest.store.schema import MatrixEncoding

logger = logging.getLogger("distforest")

#: ``func(*args, rows, cols)``: one block of a matrix.
TileFunction = Callable[..., np.ndarray]


#: Most tiles one task computes.  A tile task costs the driver and the
#: scheduler some 10 ms of CPU on top of the worker's; grouping a row's
#: neighbouring tiles cuts that per-task cost without starving any worker.
TILES_PER_TASK = 8

#: Groups are sized so that there are at least this many tasks to share out.
MIN_TASKS = 64


def tile_groups(tiles: Sequence[Tile]) -> list[list[Tile]]:
    """Consecutive tiles of a plan cut into the groups of one task each.

    The grouping depends only on the number of tiles (never on the cluster):
    it changes how work is shared out, not what is written.
    """
    size = max(1, min(TILES_PER_TASK, len(tiles) // MIN_TASKS))
    return [list(tiles[k : k + size]) for k in range(0, len(tiles), size)]


def tile_task(
    path: str, name: str, tiles: Sequence[Tile], func: TileFunction, *args: Any
) -> int | DiskFullError:
    """Compute tiles, write each (and its mirror) and mark it done; returns bytes written.

    A tile with an infinite or NaN value is refused, not written: no store is
    ever marked complete with non-numbers where numbers are due.  A full disk
    is *returned* as a :class:`~distforest.errors.DiskFullError` naming the
    tile and store, which :func:`write_matrix` raises: a raised one would be
    retried in vain and logged with a traceback by every worker.  The tile is
    then not marked done, so a rerun writes it again (tiles before it in the
    group stay done).
    """
    written = 0
    for tile in tiles:
        values = np.asarray(func(*args, tile.rows, tile.cols))
        finite = np.isfinite(values) if values.dtype.kind == "f" else np.ones(1, dtype=bool)
        if not finite.all():
            i, j = (int(k) for k in np.argwhere(~finite)[0])
            raise InputError(
                f"{name}[{tile.rows.start + i}, {tile.cols.start + j}] is "
                f"{float(values[i, j])!r}: the inputs overflow the matrix's float32 (values "
                "near 1e38 or beyond?); rescale the features (e.g. normalize='zscore' or "
                "'range') and run again"
            )
        try:
            written += write_tile(path, name, tile.index, (tile.rows, tile.cols), values,
                                  mirror=tile.mirror)  # fmt: skip
        except OSError as exc:
            if exc.errno not in DISK_FULL_ERRNOS:
                raise
            return DiskFullError.from_os_error(exc, f"tile {tile.index} of {name!r} to {path!r}")
    return written


def write_matrix(
    runner: Runner,
    store: RunStore,
    name: str,
    plan: TilePlan,
    func: TileFunction,
    args: Sequence[Any],
    *,
    identity: Mapping[str, Any],
    dtype: str | None = None,
    encoding: MatrixEncoding | None = None,
    attrs: Mapping[str, Any] | None = None,
    progress: ProgressCallback | None = None,
) -> dict[str, int]:
    """Write matrix ``name`` of ``store`` tile by tile, resuming a half-written one.

    Parameters
    ----------
    runner : Runner
        Where the tile tasks run.
    store : RunStore
        Opened for writing (only this driver writes its attributes).
    name : str
        A matrix named in :data:`distforest.store.schema.MATRICES`.
    plan : TilePlan
    func : callable
        ``func(*args, rows, cols) -> ndarray`` (picklable: a module-level function).
    args : sequence
        Arguments passed before the tile's rows and columns.
    identity : mapping
        What determines the values (forest id, method, parameters): an
        existing matrix with the same identity and plan is resumed, any
        other is replaced.
    dtype : str, optional
        Stored type (default: the schema's).
    encoding : MatrixEncoding, optional
        How the values are stored, when not as ``dtype`` floats: with
        integer counts (``encoding.is_counts``) ``func`` returns the counts.
    attrs : mapping, optional
        Attributes of the matrix.
    progress : callable, optional
        ``progress(done, total)`` per finished tile.

    Returns
    -------
    dict
        ``tiles`` (in the plan), ``skipped`` (already done), ``bytes`` (written now).
    """
    identity = {**dict(identity), **plan.describe()}
    done = store.prepare_matrix(
        name, (plan.n_rows, plan.n_cols), plan.tile_size, dtype=dtype, encoding=encoding,
        identity=identity, attrs=attrs,
    )  # fmt: skip
    pending = plan.pending(done)
    skipped = plan.n_tasks - len(pending)
    if skipped:
        logger.info(
            "resuming %s: %d of %d tiles already written, %d to go",
            name, skipped, plan.n_tasks, len(pending),
        )  # fmt: skip
    size = plan.tile_size
    logger.info("writing %d %s tiles of %d x %d to %s", len(pending), name, size, size, store.path)
    if plan.symmetric:
        transpose.warm_up()  # compile the mirror's copy once here, not in every worker
    groups = tile_groups(pending)
    items = [(store.path, name, group, func, *args) for group in groups]
    stats = {"tiles": plan.n_tasks, "skipped": skipped, "bytes": 0}
    finished = 0
    if progress is not None:
        progress(0, len(pending))
    for k, written in runner.run(tile_task, items, name=f"{name}-tiles"):
        if isinstance(written, DiskFullError):
            raise written
        stats["bytes"] += written
        finished += len(groups[k])
        if progress is not None:
            progress(finished, len(pending))
    store.update_array_attrs(name, complete=True)
    return stats


def matrix_in_memory(
    plan: TilePlan, func: TileFunction, args: Sequence[Any], dtype: str = "float32"
) -> np.ndarray:
    """A whole (small) matrix from the same tile function, tile by tile, in this process."""
    out = np.empty((plan.n_rows, plan.n_cols), dtype=dtype)
    for tile in plan.tiles():
        values = func(*args, tile.rows, tile.cols)
        out[tile.rows, tile.cols] = values
        if tile.mirror:
            out[tile.cols, tile.rows] = values.T
    return out
