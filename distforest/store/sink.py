"""Where per-row results go: the :class:`RowSink`, in memory or in a run store.

Leaves, in-bag counts, scores, neighbours, imputed values, coordinates: an
``(n, ...)`` array per result, written by tasks.  A sink keeps them

- in memory (NumPy arrays on the driver: a task returns its block and the
  driver places it), or
- in a run store (Zarr arrays: a task writes its block, whole chunks, and
  returns nothing), read on use.

:func:`open_sink` chooses: the store the rows came from, else memory when the
result fits the in-memory rule of every matrix
(:func:`distforest.io.in_memory.fits_in_memory`, the ``distforest.in-memory-cells``
setting), else a temporary store living as long as its owner.

Tasks take the sink's :meth:`RowSink.handle` (picklable) and call its
``put_*`` methods; the driver passes what they returned to the sink's
``place_*`` methods.  The same code then serves both homes.

Per-tree results (a batch of trees' columns ``(n, w)``) cannot be written into
one ``(n, T)`` Zarr array by several tasks (two writers of one chunk lose
data): each batch writes its own part (``fit/<name>_<k>``), joined afterwards by
row-block tasks (:func:`gather_batches`).  The trees' nodes go the same way
(``fit/nodes_<k>``, joined into ``forest/``).

A task scoring a chunk of rows may hand its values to a :class:`ScoreSink`
instead of returning them: a scratch array of the run store
(:class:`ScratchScores`, through :meth:`SinkHandle.put_rows`, read again by a
later step, as the mislabel ranking reads the outlier scores), or a piece of a
CSV (:class:`CsvPieces`: ID or row number, label, the values), which
:func:`csv_by_pieces` joins into the output file a megabyte at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import zarr

from distforest.io.in_memory import fits_in_memory
from distforest.kernels.trees import NODE_FIELDS
from distforest.store.inputs import per_fit, write_row_ids
from distforest.store.run_store import (
    RunStore,
    create_arrays,
    read_rows,
    task_array,
    write_block,
    write_group,
)
from distforest.store.temporary import new_folder, tie

__all__ = [
    "FIT_GROUP",
    "ROUTE_ROWS",
    "CsvPieces",
    "ForestRef",
    "RowSink",
    "ScoreSink",
    "ScratchScores",
    "SinkHandle",
    "StoredNodes",
    "csv_by_pieces",
    "gather_batches",
    "open_sink",
    "stored_location",
]

#: Group of the per-batch parts while fitting (removed afterwards).
FIT_GROUP = "fit"
#: Rows per row-block task: about this many, in whole chunks.
ROUTE_ROWS = 65_536
#: Nodes per chunk of a batch's node arrays (as the joined forest's chunks).
NODE_ROWS = 1 << 20


@dataclass(frozen=True)
class SinkHandle:
    """What tasks take of a :class:`RowSink` (picklable: a path, or nothing).

    ``put_*`` return what the driver must place (memory), or None (written
    into the store already).
    """

    path: str | None
    chunk_rows: int

    def put_rows(self, name: str, rows: slice, values: np.ndarray) -> np.ndarray | None:
        """Rows ``rows`` of result ``name`` (whole chunks of it in a store)."""
        if self.path is None:
            return values
        write_block(self.path, name, (rows, *(slice(None),) * (values.ndim - 1)), values)
        return None

    def put_batch(
        self, k: int, arrays: Mapping[str, np.ndarray]
    ) -> Mapping[str, np.ndarray] | None:
        """Per-row arrays ``(n, w, ...)`` of batch ``k`` of trees."""
        if self.path is None:
            return arrays
        create_arrays(self.path, {f"{FIT_GROUP}/{name}_{k}": {
            "shape": values.shape, "dtype": values.dtype,
            "chunks": (_block_rows(values.shape[0], self.chunk_rows), *values.shape[1:]),
        } for name, values in arrays.items()})  # fmt: skip
        for name, values in arrays.items():
            write_block(self.path, f"{FIT_GROUP}/{name}_{k}", (slice(None),) * values.ndim, values)
        return None

    def put_nodes(self, k: int, nodes: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray] | None:
        """The node arrays of batch ``k`` of trees (concatenated over its trees)."""
        if self.path is None:
            return nodes
        # in chunks: the driver joins them a chunk at a time, never a whole batch's nodes
        write_group(self.path, f"{FIT_GROUP}/nodes_{k}", nodes, NODE_ROWS)
        return None


def _block_rows(n: int, chunk_rows: int) -> int:
    """Rows of a row-block task over ``n`` rows in chunks of ``chunk_rows``: about
    :data:`ROUTE_ROWS`, whole chunks (a batch's parts are chunked so, one read per part
    and block when :func:`gather_batches` joins them)."""
    chunk = max(1, min(n, chunk_rows))
    return max(1, min(n, max(chunk, ROUTE_ROWS // chunk * chunk)))


@dataclass
class RowSink:
    """Per-row (and per-tree) results of one call, in memory or in a run store.

    Parameters
    ----------
    n : int
        Rows of every result.
    path : str or None
        The run store to write into; None: in memory.
    chunk_rows : int
        Rows per chunk of the stored arrays (and of a batch's parts).
    """

    n: int
    path: str | None = None
    chunk_rows: int = 2048
    _arrays: dict[str, Any] = field(default_factory=dict, repr=False)
    _expected: dict[str, tuple[Any, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    _parts: dict[str, dict[int, np.ndarray]] = field(default_factory=dict, repr=False)
    _batches: dict[int, slice] = field(default_factory=dict, repr=False)
    _nodes: dict[int, Mapping[str, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def in_memory(self) -> bool:
        """Whether results are NumPy arrays here (else Zarr arrays of :attr:`path`)."""
        return self.path is None

    def handle(self) -> SinkHandle:
        """What the tasks take (see :class:`SinkHandle`)."""
        return SinkHandle(self.path, self.chunk_rows)

    # -- results by rows ------------------------------------------------------

    def create(self, name: str, shape: tuple[int, ...], dtype: Any, dims: tuple[str, ...]) -> Any:
        """Make result ``name`` (``shape[0] == n``): an empty array, or a Zarr array
        chunked by :attr:`chunk_rows` whole rows."""
        if self.path is None:
            self._arrays[name] = np.empty(shape, dtype=dtype)
        else:
            rs = RunStore.open(self.path, mode="r+")
            chunks = (max(1, min(self.n, self.chunk_rows)), *shape[1:])
            self._arrays[name] = rs.group.create_array(
                name, shape=shape, chunks=chunks, dtype=dtype, dimension_names=dims,
                overwrite=True,
            )  # fmt: skip
        return self._arrays[name]

    def place_rows(self, name: str, rows: slice, returned: np.ndarray | None) -> None:
        """Put what a task's :meth:`SinkHandle.put_rows` returned (memory only)."""
        if returned is not None:
            self._arrays[name][rows] = returned

    def array(self, name: str) -> Any:
        """Result ``name``: a NumPy array, or the store's Zarr array (read on use)."""
        if name in self._arrays:
            return self._arrays[name]
        if self.path is None:
            raise KeyError(name)
        return RunStore.open(self.path).array(name)

    # -- results by batches of trees ------------------------------------------------

    def expect_batches(
        self, n_trees: int, names: Mapping[str, tuple[Any, tuple[str, ...]]]
    ) -> None:
        """Get ready for per-tree results ``names`` (name -> ``(dtype, dims)``) of
        ``n_trees`` trees, sent by batches.

        In memory, 2-D results are made ``(n, n_trees)`` now and filled column by
        column (never a second copy); in a store, the group of the batches' parts is
        made and the store marked running.
        """
        self._expected = dict(names)
        if self.path is None:
            for name, (dtype, _dims) in names.items():
                if len(_dims) == 2:
                    self._arrays[name] = np.empty((self.n, n_trees), dtype=dtype)
            return
        rs = RunStore.open(self.path, mode="r+")
        rs.mark_running()
        rs.group.require_group(FIT_GROUP)

    def place_batch(self, k: int, trees: slice, returned: Mapping[str, np.ndarray] | None) -> None:
        """Put what batch ``k`` (trees ``trees``) returned from :meth:`SinkHandle.put_batch`.

        In memory, into the columns ``trees`` of the result when it was
        :meth:`create`\\ d (no second copy), else kept until :meth:`join_batches`.
        """
        self._batches[k] = trees
        if returned is None:
            return
        for name, values in returned.items():
            if name in self._arrays:
                self._arrays[name][:, trees] = values
            else:
                self._parts.setdefault(name, {})[k] = values

    def join_batches(self, runner: Any, *, progress: Any = None) -> dict[str, Any]:
        """The per-tree results (those of :meth:`expect_batches`), batches joined in tree order.

        Parameters
        ----------
        runner : Runner
            Runs the row-block tasks that join a store's parts.
        progress : callable, optional
            ``(done, total)`` of the joining tasks.

        Returns
        -------
        dict
            Name -> ``(n, T, ...)`` array (NumPy, or the store's Zarr array).
        """
        order = sorted(self._batches)
        out: dict[str, Any] = {}
        for name, (dtype, dims) in self._expected.items():
            if self.path is None:
                if name not in self._arrays:
                    parts = self._parts.pop(name)
                    self._arrays[name] = _join_padded([parts.pop(k) for k in order], dtype)
                out[name] = self._arrays[name]
            else:
                parts_names = [f"{FIT_GROUP}/{name}_{k}" for k in order]
                out[name] = self._arrays[name] = gather_batches(
                    runner, self.path, parts_names, name, np.dtype(dtype).str, self.chunk_rows,
                    dims=dims, progress=progress,
                )  # fmt: skip
        return out

    def place_nodes(self, k: int, returned: Mapping[str, np.ndarray] | None) -> None:
        """Put what batch ``k`` returned from :meth:`SinkHandle.put_nodes`."""
        if returned is not None:
            self._nodes[k] = returned

    def join_nodes(
        self, node_counts: np.ndarray, seeds: np.ndarray, fit_id: str,
        dims: Mapping[str, tuple[str, ...]] | None = None,
    ) -> Mapping[str, np.ndarray]:  # fmt: skip
        """The forest's node arrays, batches joined in tree order: a dict here, or written
        into the store's ``forest/`` a chunk at a time and read on use
        (:class:`StoredNodes`); ``dims`` of the arrays that are not one value per node."""
        order = sorted(self._batches)
        if self.path is None:
            parts = [dict(self._nodes.pop(k)) for k in order]
            # field by field, freeing each part as it goes: never the whole forest twice
            return {f: np.concatenate([p.pop(f) for p in parts]) for f in list(parts[0])}
        rs = RunStore.open(self.path, mode="r+")
        rs.join_forest([f"{FIT_GROUP}/nodes_{k}" for k in order], node_counts, seeds, dims=dims)
        return StoredNodes(self.path, fit_id)

    def coordinates(self, n_trees: int, source: Any) -> Any:
        """The rows' IDs for the results of a fit on ``source`` (a RowSource).

        In a store, the row and tree numbers are written as its coordinates, and the
        rows' IDs, if any, as the row coordinates: copied by tasks from the store's
        ``input/id`` when the rows live in the same store (then the store's ``sample``
        array is returned, read on use), else from this process.
        """
        ids = source.row_ids()
        if self.path is None:
            return ids
        rs = RunStore.open(self.path, mode="r+")
        rs.write_coordinates(self.n, n_trees)
        if ids is None:
            return None
        if source.store_path == self.path:
            return write_row_ids(rs, source)
        rs.write_coordinates(self.n, n_trees, ids=np.asarray(ids), id_name=source.id_name)
        return ids

    def close(self) -> None:
        """Remove the per-batch parts from the store (nothing in memory)."""
        self._parts.clear()
        self._nodes.clear()
        if self.path is not None:
            rs = RunStore.open(self.path, mode="r+")
            if FIT_GROUP in rs.group:
                del rs.group[FIT_GROUP]


def _join_padded(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """``(n, w_k, ...)`` parts joined along the second dim; narrower later dims padded
    with zeros (as :func:`gather_batches`)."""
    rest = tuple(max(p.shape[k] for p in parts) for k in range(2, parts[0].ndim))
    out = np.zeros((parts[0].shape[0], sum(p.shape[1] for p in parts), *rest), dtype=dtype)
    col = 0
    for p in parts:
        out[(slice(None), slice(col, col + p.shape[1]),
             *(slice(0, s) for s in p.shape[2:]))] = p  # fmt: skip
        col += p.shape[1]
    return out


def open_sink(
    n: int,
    width: int,
    *,
    store: str | None = None,
    chunk_rows: int = 2048,
    max_in_memory: int | None = None,
    owner: Any = None,
) -> RowSink:
    """The sink of ``(n, width)`` per-row results.

    Parameters
    ----------
    n, width : int
        Rows and columns of the largest result (the size rule's cells).
    store : str or None
        The run store of the rows (a source's ``store_path``): results go there.
    chunk_rows : int
        Rows per chunk of stored results.
    max_in_memory : int, optional
        As the estimators' argument (rows of the largest square matrix kept).
    owner : object, optional
        Without ``store`` and too large for memory: the results go to a
        temporary run store removed when ``owner`` is garbage-collected.
    """
    if store is not None:
        return RowSink(n, str(store), chunk_rows)
    if fits_in_memory(n, width, max_in_memory) or owner is None:
        return RowSink(n, None, chunk_rows)
    work = new_folder("distforest-results-")
    rs = RunStore.create(work / "run.zarr", attrs={})
    tie(owner, work)
    return RowSink(n, rs.path, chunk_rows)


@dataclass(frozen=True)
class StoredNodes(Mapping[str, np.ndarray]):
    """The node arrays of a forest fitted into a store, read from it on use.

    The driver of a stored fit never holds the forest (hundreds of megabytes of
    nodes at a million rows); routing new rows or saving elsewhere reads it.
    A later fit into the same store replaced it: reading then raises
    :class:`~distforest.errors.StoreError`.
    """

    path: str
    fit_id: str

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in NODE_FIELDS:
            raise KeyError(name)
        rs = RunStore.open(self.path)
        rs.check_fit(self.fit_id, f"the forest in {self.path!r} belongs",
                     "a store holds one forest, and a later fit on the same stored table "
                     "replaced this one's; fit this forest again")  # fmt: skip
        return np.asarray(rs.array(f"forest/{name}")[...])

    def __iter__(self) -> Iterator[str]:
        return iter(NODE_FIELDS)

    def __len__(self) -> int:
        return len(NODE_FIELDS)


@dataclass(frozen=True)
class ForestRef:
    """Where tasks read a forest joined into a store (``forest/``): each worker process
    reads it once per fit (``token``) and keeps it for that fit's tasks."""

    path: str
    token: str

    def nodes(self) -> dict[str, np.ndarray]:
        """The forest's node arrays with ``node_offset`` (:func:`per_fit`), read-only."""

        def read() -> dict[str, np.ndarray]:
            nodes = RunStore.open(self.path).read_forest()
            nodes.pop("seed", None)
            return nodes

        return cast(dict[str, np.ndarray], per_fit("forest", self.path, self.token, read))


def _gather_task(path: str, parts: tuple[str, ...], name: str, rows: slice) -> int:
    target = task_array(path, name, "r+")
    block = np.zeros((rows.stop - rows.start, *target.shape[1:]), dtype=target.dtype)
    col = 0
    for part in parts:
        values = read_rows(path, part, rows)
        block[(slice(None), slice(col, col + values.shape[1]),
               *(slice(0, s) for s in values.shape[2:]))] = values  # fmt: skip
        col += values.shape[1]
    write_block(path, name, (rows, *(slice(None),) * (block.ndim - 1)), block)
    return int(rows.stop - rows.start)


def gather_batches(
    runner: Any,
    path: str,
    parts: list[str],
    name: str,
    dtype: str,
    chunk_rows: int,
    *,
    dims: tuple[str, ...] = ("sample", "tree"),
    progress: Any = None,
) -> Any:
    """Join per-batch ``(n, w_k, ...)`` arrays of a store into one ``(n, sum w_k, ...)`` array.

    Array ``name`` (dims ``dims``, chunks of ``chunk_rows`` whole rows) is
    created in the store at ``path`` and written by row-block tasks of whole chunks
    (about :data:`ROUTE_ROWS` rows each), each reading its rows of every part: one
    writer per Zarr chunk, and no process holds the whole array.  Parts of more
    than two dims are joined along the second; a part narrower in a later dim
    is padded with zeros (the path-code words of a batch of shallower trees).

    Returns
    -------
    zarr.Array
        The joined array (read on use).
    """
    rs = RunStore.open(path, mode="r+")
    shapes = [tuple(int(s) for s in rs.array(part).shape) for part in parts]
    n = shapes[0][0]
    width = sum(shape[1] for shape in shapes)
    rest = tuple(max(shape[k] for shape in shapes) for k in range(2, len(shapes[0])))
    chunk = max(1, min(n, chunk_rows))
    rs.group.create_array(name, shape=(n, width, *rest), chunks=(chunk, width, *rest),
                          dtype=dtype, dimension_names=dims, overwrite=True)  # fmt: skip
    step = _block_rows(n, chunk_rows)
    items = [(path, tuple(parts), name, slice(s, min(s + step, n))) for s in range(0, n, step)]
    for _ in runner.run(_gather_task, items, name=f"gather-{name}", progress=progress):
        pass
    return rs.array(name)


# -- per-row answers written by tasks: a scratch array, or pieces of a CSV ------------


def stored_location(arr: Any) -> tuple[str, str] | None:
    """``(store path, array name)`` of a Zarr array kept in a local directory, else None."""
    if not isinstance(arr, zarr.Array):
        return None
    root = getattr(arr.store, "root", None)
    return None if root is None else (str(root), str(arr.path))


class ScoreSink(Protocol):
    """Where a task leaves its chunk's per-row values (instead of returning them)."""

    def write(self, k: int, rows: slice, codes: np.ndarray,
              scores: np.ndarray | Mapping[str, np.ndarray]) -> None:  # fmt: skip
        """Keep chunk ``k``: rows ``rows``, their class codes and values (one column, or
        each column by its name)."""


@dataclass(frozen=True)
class ScratchScores:
    """Values written into rows of array ``name`` of the store at ``path`` (made beforehand,
    chunked as :func:`~distforest.store.scratch.row_chunks`)."""

    path: str
    name: str

    def write(self, k: int, rows: slice, codes: np.ndarray,
              scores: np.ndarray | Mapping[str, np.ndarray]) -> None:  # fmt: skip
        if not isinstance(scores, np.ndarray):
            raise TypeError(f"{self.name} holds one column; got columns {sorted(scores)}")
        SinkHandle(self.path, 0).put_rows(self.name, rows, scores)


@dataclass(frozen=True)
class CsvPieces:
    """Where tasks write their CSV pieces (ID or ``row``, ``label``, then ``columns``)."""

    folder: str
    id_location: tuple[str, str] | None
    id_name: str
    class_names: tuple[str, ...] | None
    columns: tuple[str, ...] = ("outlier",)

    def write(self, k: int, rows: slice, codes: np.ndarray,
              values: np.ndarray | Mapping[str, np.ndarray]) -> None:  # fmt: skip
        """Piece ``k`` (the header in piece 0 only): ``values`` one column or one a name, or
        each column by its name."""
        import pandas as pd

        if self.id_location is None:
            ids = np.arange(rows.start, rows.stop)
        else:
            ids = read_rows(*self.id_location, rows)
        frame = pd.DataFrame({self.id_name: ids})
        if self.class_names is not None:
            frame["label"] = np.asarray(self.class_names, dtype=object)[codes]
        if not isinstance(values, Mapping):
            values = dict(zip(self.columns, np.reshape(values, (len(frame), -1)).T, strict=True))
        for name in self.columns:
            frame[name] = values[name]
        frame.to_csv(Path(self.folder) / f"part-{k:06d}.csv", index=False, header=k == 0)


def csv_by_pieces(forest: Any, out: str, columns: tuple[str, ...],
                  fill: Callable[[CsvPieces], Any]) -> str:  # fmt: skip
    """A CSV of the training rows (ID or ``row``, ``label``, ``columns``) whose pieces
    ``fill(pieces)`` has tasks write, joined into ``out`` through a temporary file and a
    rename; returns ``out`` resolved."""
    from distforest.io.writers import pieces_beside, publish_pieces

    dest = Path(out).resolve()
    ids = getattr(forest, "sample_ids_", None)
    names = (tuple(str(c) for c in forest.classes_)
             if forest.task_ == "classification" else None)  # fmt: skip
    with pieces_beside(dest) as folder:
        where = None if ids is None else stored_location(ids)
        fill(CsvPieces(str(folder), where, forest.id_name_ if where else "row", names, columns))
        publish_pieces(sorted(str(p) for p in folder.glob("part-*.csv")), dest)
    return str(dest)
