"""Anything a user passes as rows, turned into a :class:`~distforest.io.source.RowSource`.

This is the one place that asks what kind of input it was given.  As xarray
picks a backend, each kind of input is an :class:`Opener` with a
``guess_can_open`` test and an ``open``; :func:`open_source` asks them in
order and the first that can open the input does:

============================  ===============================================
``source``                    already a source: a ``StoredTable``, ``MemoryRows`` or
                              ``PendingInput``
``run-store``                 a path to a run store holding an ingested ``input/``
                              (not for a job's input: :func:`open_input`)
``dask-frame``                a ``dask.dataframe.DataFrame``: read by partitions
                              on the workers into a temporary run store
``parts``                     a glob, a folder of parts (not a Zarr store), a large
                              file or such a URL (:func:`by_partitions`, unless
                              ``partitions=False``): read by partitions into a
                              temporary store; for a job (:func:`open_input`), its
                              summaries only (pass 1), the rows written into the
                              job's store by
                              :meth:`~distforest.io.source.RowSummary.placed`
``file``                      any other path or URL: read whole by
                              :func:`distforest.io.load_table`
``memory``                    rows given in memory, read by
                              :func:`distforest.io.load_table` (a NumPy array,
                              a DataFrame, a dask array, xarray, zarr, a ``Table``)
============================  ===============================================

:func:`opened_unless_held` opens an input unless it is of the last kind: the
rows themselves, which an estimator takes as they are (scikit-learn's checks,
the array's own dtype) rather than as a source.  :func:`read_as` lets a job that
reads a path before any source exists (new rows to predict, a table whose
summaries a fit needs first) give its reading of each kind: the kind is asked
here, and nowhere else.

:func:`input_plan` gives a dry run the size of an input and the tasks that read
it, read as a job reads it (rows read by partitions: from their metadata,
nothing loaded); :func:`input_shape` its size only.

A temporary store lives as long as its ``owner`` (the fitted estimator whose
arrays are in it, or the source itself), or the ``with`` block of
:func:`opened`; it is made under dask's ``temporary-directory`` (else the
system's).
"""

from __future__ import annotations

import contextlib
import glob
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

import numpy as np

from distforest import location
from distforest.errors import InputError
from distforest.io.source import MemoryRows, RowSource, RowSummary
from distforest.io.tables import Table
from distforest.store.schema import INPUT_GROUP, INPUT_ROWS
from distforest.store.temporary import new_folder, release, tie

if TYPE_CHECKING:
    from distforest.store.inputs import StoredTable

__all__ = [
    "OPENERS",
    "PARTITIONED_BYTES",
    "InputPlan",
    "Opener",
    "ReadOptions",
    "by_partitions",
    "guess_opener",
    "input_plan",
    "input_shape",
    "is_dask_frame",
    "open_input",
    "open_source",
    "opened",
    "opened_unless_held",
    "read_as",
    "release",
]

#: Files larger than this are read by partitions when the caller leaves it to the size
#: (about 2 million cells of CSV text, the default ``distforest.in-process-cells``).
PARTITIONED_BYTES = 32 * 2**20

_ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")

T = TypeVar("T")


@dataclass(frozen=True)
class ReadOptions:
    """How to read a table (the options of :func:`distforest.io.load_table`).

    Attributes
    ----------
    target : str or None
        The target column (of a file or a DataFrame).
    drop, na_values : tuple of str
    id : str or None
        Column of row IDs.
    allow_missing : bool
    partitions : bool or None
        Read a path by partitions into a store (True), whole into memory
        (False), or by the rule of :func:`by_partitions` (None: a glob, a folder
        of parts, a large file).  A dask DataFrame is always read by partitions.
    rows : int
        Rows per chunk of an ingested ``input/X``.
    dtype : numpy dtype or None
        Of an ingested ``input/X`` (float32 as the trees read it, or float64);
        None: as given (:func:`_dtype_as_given`).
    defer : bool
        For a job's input: a path read by partitions gives its summaries only
        (a ``PendingInput``, the rows written into the job's store later), and a
        run store is read as a Zarr table (its rows go into the job's store).
    min_rows : int
        Fewest rows a table read whole may have (1 for new rows to predict).
    """

    target: str | None = None
    drop: tuple[str, ...] = ()
    na_values: tuple[str, ...] = ()
    id: str | None = None
    allow_missing: bool = True
    partitions: bool | None = None
    rows: int = INPUT_ROWS
    dtype: Any = np.float32  # None: as given
    defer: bool = False
    min_rows: int = 2


class Opener:
    """One kind of input: :meth:`guess_can_open` says whether it is, :meth:`open` opens it."""

    #: The kind's name (in messages and :func:`guess_opener`).
    name: ClassVar[str] = ""

    def guess_can_open(self, X: Any, options: ReadOptions) -> bool:
        """Whether ``X`` is of this kind (cheap: no rows read)."""
        raise NotImplementedError

    def open(self, X: Any, y: Any, options: ReadOptions, owner: Any) -> Any:
        """The source of ``X`` (``y``: a separate target, where the kind allows one): a
        :class:`~distforest.io.source.RowSource`, or with ``defer`` a
        :class:`~distforest.io.source.RowSummary`."""
        raise NotImplementedError

    def plan(self, X: Any, options: ReadOptions) -> InputPlan:
        """The :class:`InputPlan` of ``X``, read as :meth:`open` reads it."""
        source = self.open(X, None, options, None)
        return InputPlan(str(source.source), source.n_samples, source.n_features, 0)


class InputPlan(NamedTuple):
    """What a dry run knows of a job's input.

    Attributes
    ----------
    source : str
    n_samples, n_features : int
    parts : int
        The partitions that tasks read into the job's store (0: the rows are read
        whole by this process).
    """

    source: str
    n_samples: int
    n_features: int
    parts: int


class _Source(Opener):
    name = "source"

    def guess_can_open(self, X: Any, options: ReadOptions) -> bool:
        # A StoredTable exists only once its module is loaded (Zarr: not for small tables).
        inputs = sys.modules.get("distforest.store.inputs")
        return isinstance(X, MemoryRows) or (
            inputs is not None and isinstance(X, inputs.StoredTable | inputs.PendingInput)
        )

    def open(self, X: Any, y: Any, options: ReadOptions, owner: Any) -> Any:
        if y is not None:
            raise InputError(
                f"{X.source} is a table already read with its target ({X.target_name!r}); "
                "do not pass y as well"
            )
        return X


class _RunStore(Opener):
    name = "run-store"

    def guess_can_open(self, X: Any, options: ReadOptions) -> bool:
        if options.defer or not isinstance(X, str | Path) or location.is_remote(X):
            return False
        p = Path(location.local(str(X)))
        return (p / INPUT_GROUP / "X").is_dir() and (p / "zarr.json").exists()

    def open(self, X: Any, y: Any, options: ReadOptions, owner: Any) -> RowSource:
        from distforest.store.inputs import StoredTable

        return _Source().open(StoredTable.open(X), y, options, owner)


def is_dask_frame(X: Any) -> bool:
    """Whether ``X`` is a ``dask.dataframe.DataFrame`` (without importing dask)."""
    return type(X).__module__.split(".")[0] == "dask" and hasattr(X, "columns")


class _DaskFrame(Opener):
    name = "dask-frame"

    def guess_can_open(self, X: Any, options: ReadOptions) -> bool:
        return is_dask_frame(X)

    def open(self, X: Any, y: Any, options: ReadOptions, owner: Any) -> RowSource:
        if y is not None and not isinstance(y, str):
            raise InputError(
                f"the target of a dask DataFrame must be one of its columns: pass y='<column>' "
                f"(got a {type(y).__name__}); or X.assign(target=...) first"
            )
        target = y if y is not None else options.target
        return _ingest_temporary(X, target, _dtype_as_given(X, target, options), owner)


def _dtype_as_given(X: Any, target: str | None, options: ReadOptions) -> ReadOptions:
    """``options`` with ``dtype=None`` made the dtype scikit-learn's checks keep for these
    rows: float32 when every feature column of a frame is float32, else float64 (a file's
    values, as :func:`~distforest.io.load_table` reads them)."""
    if options.dtype is not None:
        return options
    dtype: Any = np.float64
    if is_dask_frame(X):
        skip = {*options.drop, target, options.id}
        kinds = {str(t) for c, t in X.dtypes.items() if str(c) not in skip}
        dtype = np.float32 if kinds == {"float32"} else np.float64
    return replace(options, dtype=dtype)


def by_partitions(source: str, limit: int | None = None) -> bool:
    """Whether a path (or URL, or glob) is large or split enough to read by partitions.

    A glob of files, a folder that is not a Zarr store (a Parquet dataset of
    any name), or a file of more than ``limit`` bytes (default
    :data:`PARTITIONED_BYTES`); a URL (``s3://...``) follows the rule of a local
    path, its sizes from fsspec (a ``.npy`` file at a URL is read whole: it
    cannot be mapped).
    """
    limit = PARTITIONED_BYTES if limit is None else limit
    if location.is_remote(source):
        return _by_partitions_url(source, limit)
    source = location.local(source)
    p = Path(source)
    if not p.exists():
        return glob.has_magic(source) and bool(glob.glob(source))
    if p.is_dir():
        if p.suffix.lower() == ".zarr" or any((p / m).exists() for m in _ZARR_MARKERS):
            return False  # a Zarr store: the in-memory reader opens it lazily already
        return True
    return p.stat().st_size > limit


def _by_partitions_url(url: str, limit: int) -> bool:
    try:
        fs, where = location.filesystem(url)
        fs.invalidate_cache()
        if not fs.exists(where):
            return glob.has_magic(where) and bool(fs.glob(where))
        if fs.isdir(where):
            base = where.rstrip("/")
            return not (base.lower().endswith(".zarr")
                        or any(fs.exists(f"{base}/{m}") for m in _ZARR_MARKERS))  # fmt: skip
        return not where.lower().endswith(".npy") and int(fs.size(where)) > limit
    except Exception as exc:  # refused...: the whole-table reader says it in one line
        if location.is_deadline(exc):  # but a store that does not answer is not asked again
            reached = location.access_error(exc, url)
            if reached is not None:
                raise reached from None
        return False


class _Parts(Opener):
    name = "parts"

    def guess_can_open(self, X: Any, options: ReadOptions) -> bool:
        if options.partitions is False or not isinstance(X, str | Path):
            return False
        return bool(options.partitions) or by_partitions(str(X))

    def open(self, X: Any, y: Any, options: ReadOptions, owner: Any) -> RowSummary:
        if y is not None and not isinstance(y, str):
            raise InputError(
                f"{X} is read by partitions: its target must be one of its columns: pass "
                f"y='<column>' (got a {type(y).__name__})"
            )
        target = y if y is not None else options.target
        options = _dtype_as_given(X, target, options)
        if options.defer:  # pass 1: the summaries; the rows go into the job's store
            from distforest.io.ingest import read_partitioned
            from distforest.store.inputs import PendingInput

            data = read_partitioned(str(X), target=target, drop=options.drop,
                                    na_values=options.na_values, id=options.id,
                                    allow_missing=options.allow_missing,
                                    dtype=options.dtype)  # fmt: skip
            return PendingInput(data)
        return _ingest_temporary(str(X), target, options, owner)

    def plan(self, X: Any, options: ReadOptions) -> InputPlan:
        # From the metadata (a Parquet dataset) or a count of lines (a CSV): nothing kept.
        import dask

        from distforest.io.partitions import open_partitions

        parts = open_partitions(str(X), na_values=options.na_values)
        if parts.array is not None:
            n, d = (int(s) for s in parts.array.shape[:2])
            return InputPlan(parts.source, n, d, int(parts.npartitions))
        not_features = {str(c) for c in (*options.drop, options.target, options.id)
                        if c is not None}  # fmt: skip
        columns = [c for c in parts.columns if c not in not_features]
        with dask.config.set(scheduler="threads"):
            n = len(parts.frame)
        return InputPlan(parts.source, int(n), len(columns), int(parts.npartitions))


class _Memory(Opener):
    name = "memory"

    def guess_can_open(self, X: Any, options: ReadOptions) -> bool:
        return True

    def open(self, X: Any, y: Any, options: ReadOptions, owner: Any) -> RowSource:
        from distforest.io import load_table

        if isinstance(X, Table) and y is None:
            return MemoryRows(X)
        table = load_table(X, y=y, target=options.target, drop=options.drop,
                           na_values=options.na_values, id=options.id,
                           allow_missing=options.allow_missing,
                           min_rows=options.min_rows)  # fmt: skip
        return MemoryRows(table)


class _File(_Memory):
    name = "file"

    def guess_can_open(self, X: Any, options: ReadOptions) -> bool:
        return isinstance(X, str | Path)

    def open(self, X: Any, y: Any, options: ReadOptions, owner: Any) -> RowSource:
        if isinstance(y, str):  # a file's column, as for parts
            y, options = None, replace(options, target=y)
        return super().open(X, y, options, owner)


#: The kinds of input, asked in this order (the last opens anything load_table reads).
OPENERS: tuple[Opener, ...] = (
    _Source(), _RunStore(), _DaskFrame(), _Parts(), _File(), _Memory(),
)  # fmt: skip


def guess_opener(X: Any, options: ReadOptions | None = None) -> Opener:
    """The first :data:`OPENERS` entry that can open ``X``."""
    options = options or ReadOptions()
    return next(o for o in OPENERS if o.guess_can_open(X, options))


def open_source(
    X: Any,
    y: Any = None,
    *,
    owner: Any = None,
    target: str | None = None,
    drop: tuple[str, ...] | list[str] = (),
    na_values: tuple[str, ...] | list[str] = (),
    id: str | None = None,
    allow_missing: bool = True,
    partitions: bool | None = None,
    rows: int = INPUT_ROWS,
    dtype: Any = np.float32,
    min_rows: int = 2,
) -> RowSource:
    """The :class:`~distforest.io.source.RowSource` of anything a user can pass as rows.

    Parameters
    ----------
    X
        A source already, a run store path, a dask DataFrame, a path / glob /
        folder of parts / URL, a DataFrame, a NumPy or dask array, xarray or
        zarr object, or a :class:`~distforest.io.Table`.
    y : array-like, str or None
        A separate target (in memory), or the target column of an input read by
        partitions (a dask DataFrame, a folder of parts).
    owner : object, optional
        What a temporary store (an input read by partitions) lives as long as:
        the fitted estimator whose arrays are in it.  None: the returned source.
        A new temporary store of the same owner replaces its previous one.
    target, drop, na_values, id, allow_missing
        As :func:`distforest.io.load_table`.
    partitions : bool or None, default None
        Read a path by partitions (True), whole (False), or by the rule of
        :func:`by_partitions` (None: a glob, a folder of parts or a large file
        by partitions, another file whole).
    rows : int
        Rows per chunk of an ingested store.
    dtype : numpy dtype or None, default float32
        Of an ingested store's ``input/X``; None: as given (float32 when every
        feature column of a dask DataFrame is float32, else float64).
    min_rows : int, default 2
        Fewest rows of a table read whole (1 for rows to predict).

    Returns
    -------
    RowSource
        :class:`~distforest.io.source.MemoryRows` or
        :class:`~distforest.store.inputs.StoredTable`.
    """
    options = _options(target=target, drop=drop, na_values=na_values, id=id, rows=rows,
                       allow_missing=allow_missing, partitions=partitions, dtype=dtype,
                       min_rows=min_rows)  # fmt: skip
    source: RowSource = guess_opener(X, options).open(X, y, options, owner)
    return source


def open_input(X: Any, **read: Any) -> RowSummary:
    """A job's input, before its store exists (:attr:`ReadOptions.defer`).

    As :func:`open_source` (``read``: its keywords but ``rows``), but rows read by
    partitions are summarised only (pass 1, a
    :class:`~distforest.store.inputs.PendingInput`): their
    :meth:`~distforest.io.source.RowSummary.placed` writes them into the job's store
    once the run has decided to write it.  A run store is read as the Zarr table it is.
    """
    options = _options(defer=True, **read)
    summary: RowSummary = guess_opener(X, options).open(X, None, options, None)
    return summary


def input_plan(source: Any, target: str | None = None, **read: Any) -> InputPlan:
    """The rows, feature columns and reading tasks of a job's input, for a dry run
    (``read``: :func:`open_input`'s keywords).

    A table read by partitions is not loaded: a Parquet dataset's rows come from
    its metadata, a CSV's by counting its lines in this process (a pass over the
    text, nothing kept), and the features are its columns less the target, the
    ID and the dropped ones.  Anything else is read as the run reads it.
    """
    options = _options(target=target, defer=True, **read)
    return guess_opener(source, options).plan(source, options)


def input_shape(source: Any, target: str | None = None, **read: Any) -> tuple[str, int, int]:
    """``(source, n, d)`` of :func:`input_plan`."""
    plan = input_plan(source, target, **read)
    return plan.source, plan.n_samples, plan.n_features


def _options(*, target: Any = None, drop: Any = (), na_values: Any = (), **more: Any
             ) -> ReadOptions:  # fmt: skip
    """:class:`ReadOptions` of keywords, the names of the columns as text."""
    return ReadOptions(target=None if target is None else str(target),
                       drop=tuple(map(str, drop)), na_values=tuple(map(str, na_values)),
                       **more)  # fmt: skip


@contextlib.contextmanager
def opened(X: Any, y: Any = None, *, owner: Any = None, **options: Any) -> Iterator[RowSource]:
    """:func:`open_source` for a block: a temporary store is removed if the block fails,
    and at its end unless ``owner`` is given (it then lives as long as ``owner``)."""
    source = open_source(X, y, owner=owner, **options)
    try:
        yield source
    except BaseException:
        release(owner if owner is not None else source)
        raise
    if owner is None:
        release(source)


@contextlib.contextmanager
def opened_unless_held(X: Any, y: Any = None, *, owner: Any = None,
                       **options: Any) -> Iterator[RowSource | None]:  # fmt: skip
    """:func:`opened`, unless ``X`` holds its rows in this process (an array, a
    DataFrame...: the ``memory`` kind): then None, and the caller takes ``X`` as it is
    (scikit-learn's checks, the array's own dtype) rather than as a source.  A path, a
    URL, a glob, a dask DataFrame, a run store or a source is opened."""
    if guess_opener(X).name == _Memory.name:
        yield None
        return
    with opened(X, y, owner=owner, **options) as source:
        yield source


def read_as(X: Any, *, whole: Callable[[Any], T], parts: Callable[[Any], T],
            partitions: bool | None = None, also: tuple[Any, ...] = ()) -> T:  # fmt: skip
    """How a job reads ``X`` before it reads any row: ``parts(X)`` when ``X`` is a path
    read by partitions (:func:`by_partitions`: a glob, a folder of parts, a large file,
    or ``partitions=True``), ``whole(X)`` otherwise.

    The caller gives its reading of each kind (new rows to predict: one task per
    partition, or the table read here; a fit that needs the partitions' summaries
    first); which one runs is decided here, the one place that asks.  ``also``: inputs
    read with ``X`` (a reference table; None: not given), all by partitions when any is.
    """
    options = _options(partitions=partitions)
    reads = any(_Parts().guess_can_open(x, options) for x in (X, *also) if x is not None)
    return parts(X) if reads else whole(X)


def _ingest_temporary(X: Any, target: str | None, options: ReadOptions, owner: Any) -> StoredTable:
    """Ingest ``X`` by partitions (on the workers) into a new temporary run store."""
    from distforest.store.inputs import ingest

    work = new_folder()
    try:
        table = ingest(X, work / "run.zarr", target=target, drop=options.drop,
                       na_values=options.na_values, allow_missing=options.allow_missing,
                       rows=options.rows, id=options.id, dtype=options.dtype)  # fmt: skip
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    tie(table if owner is None else owner, work)
    return table
