"""Imputation as a job: a table read in row chunks, imputed, written.

One algorithm (:func:`impute_rows`) for ``distforest impute`` and the impute stage
of a proximity pipeline, whatever the input.  A table read whole
(:func:`~distforest.io.read_frame`) is one chunk; a glob, a folder, a large file or
a folder output is read by partitions (:func:`~distforest.io.ingest.read_partitioned`:
pass 1 keeps summaries and makes every check of the whole reader, naming part file,
column and row, before anything is written), one chunk per partition, typed by its
task as the whole reader types it (:func:`~distforest.io.summaries.typed_partition`).
Then, on either:

1. **Sample.**  The imputer is fitted on at most ``sample_rows`` rows
   (:data:`SAMPLE_ROWS` by partitions, every row of a table read whole), drawn from
   ``random_state`` and taken by one task per chunk holding some.  With
   ``sample_rows >= n`` the sample is the table in order: the bytes of the table read
   whole.
2. **Fill and write by chunks.**  Each chunk's feature columns are filled from the
   fitted result when the sample is every row, else as new rows in the chunk's task
   (:meth:`ProximityImputer.for_new_rows`, no refit; ``column``'s stopping rule then
   runs per chunk).  One chunk read whole is written as one file (any format, with
   the provenance); partitions are written by their tasks: one Parquet part each
   into a folder, or numbered pieces joined here in order into one CSV (a byte copy)
   or Parquet file (a row group each), one piece at a time.

``impute: {from: proximity}`` runs the same steps with the stored matrix in place of
the imputer, on every row (:func:`impute_from_matrix_rows`).  Inputs and outputs are
checked by :func:`plan_imputation` before any cluster starts; nothing is left under
the output's name if a step fails.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from distforest._version import __version__
from distforest.errors import InputError, ParameterError, StoreError
from distforest.forests.constraints import IMPUTE_KINDS, IMPUTE_PROXIMITIES, TASKS, VOTES
from distforest.jobs.base import TableJob
from distforest.jobs.result import JobResult
from distforest.jobs.stages import Pipeline

if TYPE_CHECKING:
    import pandas as pd

    from distforest.jobs.runs import Context, Run

__all__ = [
    "IMPUTE_KINDS",
    "IMPUTE_PROXIMITIES",
    "TASKS",
    "VOTES",
    "ImputeJob",
    "impute_job",
    "impute_rows",
    "plan_imputation",
    "run_imputation",
]

logger = logging.getLogger("distforest")

#: ``attrs() -> dict``: the provenance of a table written whole.
Provenance = Callable[[], dict[str, Any]]
#: ``fit(features, y, whole) -> filled``: a sample's feature columns filled (:func:`impute_rows`).
Fit = Callable[["pd.DataFrame", Any, bool], "pd.DataFrame"]

#: Rows the imputer is fitted on, at most, when the table is read by partitions
#: (the column forests' own ``max_samples`` for large tables); below it every row.
SAMPLE_ROWS = 200_000


def check_columns(columns: list[str], wanted: list[str], source: str) -> None:
    from distforest.io.tables import check_column

    for col in wanted:
        check_column(col, columns, source)


def is_folder(out: str | Path) -> bool:
    """Whether ``out`` names a Parquet dataset folder (ends in ``/`` or is a folder)."""
    text = str(out)
    return text.endswith(("/", "\\")) or (Path(text).is_dir() and not text.endswith(".zarr"))


def check_output(out: str | Path, overwrite: bool = False) -> Path:
    """The output of a table read by partitions, resolved and checked before any work
    (a folder, or one .csv / .parquet file)."""
    from distforest import location
    from distforest.io.writers import check_can_write, output_format

    if location.is_remote(out):
        raise ParameterError(f"cannot write {str(out)!r}: a table imputed by partitions is "
                             "written to a local file or folder; copy it afterwards")  # fmt: skip
    if not is_folder(out):
        if output_format(out) == "zarr":
            raise ParameterError(
                f"cannot write {str(out)!r} from a table read by partitions: write a Parquet "
                "dataset folder (--out imputed/), one .parquet or one .csv file"
            )
        return check_can_write(out, overwrite)
    dest = Path(str(out).rstrip("/\\")).resolve()
    if not dest.parent.is_dir():
        raise StoreError(f"cannot write {str(out)!r}: the folder {str(dest.parent)!r} does "
                         "not exist; create it first")  # fmt: skip
    if dest.exists():
        entries = list(dest.iterdir())
        ours = all(e.is_file() and e.name.startswith("part-") and e.suffix == ".parquet"
                   for e in entries)  # fmt: skip
        if entries and not overwrite:
            raise location.existing_output(out)
        if entries and not ours:
            raise StoreError(f"{str(out)!r} holds files other than part-*.parquet; refusing "
                             "to replace it: choose another name")  # fmt: skip
    return dest


@dataclass(frozen=True)
class Chunks:
    """A table's row chunks, as :func:`impute_rows` reads them.

    Attributes
    ----------
    blocks : list
        DataFrames in this process, or partitions read by their tasks (dask ``Delayed``).
    lengths : list of int
    encoding : object or None
        How a partition is typed as the whole reader types it (None: typed already).
    features : list of str
    missing : dict of str to int
        Missing cells per feature column of the whole table.
    """

    blocks: list[Any]
    lengths: list[int]
    encoding: Any
    features: list[str]
    missing: dict[str, int]


@dataclass(frozen=True)
class WholeTable:
    """Rows read whole into this process (a file under 32 MB): one chunk, the imputer
    fitted on every row, written as one file of any format with its provenance."""

    frame: Any
    features: Any
    #: Rows the imputer is fitted on, at most (None: every row).
    sample_rows: ClassVar[int | None] = None
    #: How the summary says the table was read.
    described: ClassVar[str] = ""
    #: A dry run's note on the plan (None: none).
    note: ClassVar[str | None] = None

    def chunks(self, plan: ImputationPlan) -> Chunks:
        """The one chunk: the frame."""
        missing = {str(c): int(v) for c, v in self.features.isna().sum().items()}
        return Chunks([self.frame], [len(self.frame)], None,
                      [str(c) for c in self.features.columns], missing)  # fmt: skip

    def size(self, source: str, job: Any) -> tuple[str, int, int, int, Any]:
        """``(source, rows, features, columns with missing values, cells)``."""
        n, d = self.features.shape
        return source, n, d, int(self.features.isna().any().sum()), int(self.features.size)

    def check_size(self, job: Any) -> None:
        """Refuse a fit larger than the machine allows (rows x trees x iterations)."""
        from distforest.apps.impute import ProximityImputer
        from distforest.jobs.estimates import check_size, estimate_impute

        checked = ProximityImputer(**job.params)._settings()
        n, d = self.features.shape
        holes = int(self.features.isna().any().sum())
        check_size(f"imputing {job.input} ({n:,} rows)", estimate_impute(n, d, checked, holes),
                   f"--iterations ({checked['iterations']}) and --trees "
                   f"({checked['n_estimators']:,})")  # fmt: skip

    def check_output(self, out: str | Path, replace: bool) -> Path:
        """The output file, checked (any format :func:`~distforest.io.writers.write_table`
        writes, local or a URL)."""
        from distforest.io.writers import check_can_write

        return check_can_write(out, replace)

    def write(self, chunks: list[Any], plan: ImputationPlan,
              attrs: Provenance | None) -> tuple[tuple[int, int], Path]:  # fmt: skip
        """The one filled chunk written as one file, with the provenance ``attrs()``."""
        from distforest.io.writers import write_table

        (output,) = chunks
        written = write_table(output, plan.dest, overwrite=plan.overwrite,
                              attrs=attrs() if attrs is not None else None)  # fmt: skip
        return output.shape, Path(written)


@dataclass(frozen=True)
class TableParts:
    """Rows read by partitions (a glob, a folder, a large file, or a folder output): one
    chunk per partition, read and written by its task; the imputer fitted on a sample
    of at most :data:`SAMPLE_ROWS` rows."""

    sample_rows: ClassVar[int | None] = SAMPLE_ROWS
    described: ClassVar[str] = ", by partitions"
    note: ClassVar[str | None] = ("  note:         read by partitions: every feature column "
                                  "counted as having missing values (an upper bound)")  # fmt: skip

    def chunks(self, plan: ImputationPlan) -> Chunks:
        """Pass 1 of the partitions (their summaries; every check of the whole reader,
        before anything is written), the partitions as lazy frames."""
        from distforest.io.ingest import read_partitioned

        data = read_partitioned(plan.source, target=plan.target, drop=plan.drop,
                                na_values=plan.na_values)  # fmt: skip
        if data.partitions.frame is None:
            raise InputError(f"{data.source}: a numeric array is imputed in memory; give a table")
        enc = data.encoding
        features = list(enc.features)
        if not features:
            raise InputError(f"{plan.source}: no feature columns left after removing "
                             "--target/--drop")  # fmt: skip
        if plan.categorical:
            check_columns(features, list(plan.categorical), data.source)
        blocks = list(data.partitions.frame.to_delayed())
        return Chunks(blocks, list(enc.lengths), enc, features, dict(enc.missing))

    def size(self, source: str, job: Any) -> tuple[str, int, int, int, Any]:
        """From the partitions' metadata (nothing loaded): every feature column counted as
        having missing values; the cells on a cluster."""
        from distforest.jobs.inputs import input_shape
        from distforest.jobs.stages import ON_A_CLUSTER

        shown, n, d = input_shape(source, job.target, drop=_columns_kept(job),
                                  na_values=job.na_values)  # fmt: skip
        return shown, n, d, d, ON_A_CLUSTER

    def check_size(self, job: Any) -> None:
        """Nothing to refuse: the fit is on a bounded sample, the rest by chunks."""

    def check_output(self, out: str | Path, replace: bool) -> Path:
        """A local folder, or one .csv / .parquet file (:func:`check_output`)."""
        return check_output(out, replace)

    def write(self, chunks: list[Any], plan: ImputationPlan,
              attrs: Provenance | None) -> tuple[tuple[int, int], Path]:  # fmt: skip
        """Written by the partitions' tasks (:func:`_write_parts`)."""
        return _write_parts(chunks, plan)


@dataclass
class ImputationPlan:
    """A checked imputation: the table's rows (read whole, or to be read by partitions
    when the plan runs, on the cluster), the columns split, the output allowed."""

    source: str
    rows: WholeTable | TableParts
    target: str | None
    categorical: tuple[str, ...]
    dest: Path
    overwrite: bool
    drop: tuple[str, ...] = ()
    na_values: tuple[str, ...] = ()
    folder: bool = False

    @property
    def by_partitions(self) -> bool:
        """Whether the rows are read (and written) by partitions (asked by no code here)."""
        return isinstance(self.rows, TableParts)


@dataclass(frozen=True)
class Imputed:
    """What :func:`impute_rows` did.

    Attributes
    ----------
    shape : tuple of int
        Rows and columns written.
    written : Path
    sample_rows : int
        Rows the imputer was fitted on.
    missing : dict of str to int
        Missing (now filled) cells per feature column of the whole table.
    described : str
        How the table was read, for the summary (``", by partitions"`` or empty).
    imputer : ProximityImputer or None
        Fitted on the sample (None: filled from a stored matrix).
    """

    shape: tuple[int, int]
    written: Path
    sample_rows: int
    missing: dict[str, int]
    described: str
    imputer: Any = None


def not_features(job: Any) -> tuple[str, ...]:
    """The columns a pipeline's imputation copies unchanged: ``input.drop`` and ``input.id``."""
    return (*job.drop, *([job.id] if getattr(job, "id", None) else []))


def plan_imputation(
    input: str,
    out: str,
    *,
    target: str | None = None,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    categorical: tuple[str, ...] = (),
    overwrite: bool = False,
    check_out: bool = True,
) -> ImputationPlan:
    """Check INPUT and the output path, before any cluster starts.

    A table read whole is read here and its columns checked; a glob, a folder,
    a large file or a folder output is read by partitions when the plan runs
    (its columns are checked then, before anything is written).  ``check_out=False``:
    the output is checked later (a job's run protocol: its ``dest`` set then).
    """
    from distforest.io import read_frame
    from distforest.store.source import read_as

    def planned(rows: WholeTable | TableParts) -> ImputationPlan:
        dest = rows.check_output(out, overwrite) if check_out else Path()
        return ImputationPlan(str(input), rows, target, tuple(categorical), dest, overwrite,
                              tuple(drop), tuple(na_values), is_folder(out))  # fmt: skip

    def whole(_: str) -> ImputationPlan:
        frame = read_frame(input, na_values=na_values)
        columns = [str(c) for c in frame.columns]
        frame.columns = columns
        check_columns(columns, [*drop, *([target] if target else []), *categorical], input)
        skip = {*drop, *([target] if target else [])}
        features = frame[[c for c in columns if c not in skip]]
        if features.shape[1] == 0:
            raise InputError(f"{input}: no feature columns left after removing --target/--drop")
        return planned(WholeTable(frame, features))

    # a folder output is written by the partitions' tasks: the input read by partitions
    return read_as(input, whole=whole, parts=lambda _: planned(TableParts()),
                   partitions=True if is_folder(out) else None)  # fmt: skip


def impute_rows(
    plan: ImputationPlan,
    fit: Fit | None,
    *,
    new_rows: Callable[[], Any] | None = None,
    sample_rows: int | None = None,
    random_state: Any = None,
    attrs: Callable[[], dict[str, Any]] | None = None,
) -> Imputed:
    """Impute the table of ``plan`` by row chunks and write it (see the module docstring).

    Parameters
    ----------
    plan : ImputationPlan
    fit : callable or None
        ``fit(features, y, whole) -> filled``: the sample's feature columns (a
        DataFrame), its target (or None) and whether the sample is every row in,
        the same columns filled out.  None: no sample, every chunk is filled by
        ``new_rows()``.
    new_rows : callable, optional
        ``new_rows() -> imputer`` (after ``fit``): what fills a chunk outside the
        sample, by its ``transform`` in the chunk's task.  Needed when the sample
        is not every row.
    sample_rows : int or None
        Rows ``fit`` sees, at most (None: every row).
    random_state : int or None
        Seed of the sample.
    attrs : callable, optional
        ``attrs() -> dict`` (after ``fit``): provenance of a table written whole.

    Returns
    -------
    Imputed
    """
    if sample_rows is not None and sample_rows < 1:
        raise ParameterError(f"sample_rows must be at least 1, got {sample_rows}")
    table = plan.rows.chunks(plan)
    blocks, encoding, features = table.blocks, table.encoding, table.features
    n = int(sum(table.lengths))
    starts = np.concatenate([[0], np.cumsum(table.lengths)]).astype(np.int64)
    whole = fit is not None and (sample_rows is None or sample_rows >= n)
    rows = np.arange(n) if whole else _sample(n, int(sample_rows or n), random_state)
    if fit is None:
        rows = rows[:0]
    logger.info("imputing %s in %d chunk(s), %s", plan.source, len(blocks),
                "no sample" if fit is None else f"fitted on {rows.size} of {n} rows")  # fmt: skip
    wanted = []
    for k, block in enumerate(blocks):
        local = rows[(rows >= starts[k]) & (rows < starts[k + 1])] - starts[k]
        if local.size:
            wanted.append(_task(_take, block, encoding, local))
    pieces = _compute(wanted)
    import pandas as pd

    filled: Any = None
    if fit is not None:
        sample = pd.concat(pieces, ignore_index=True)
        y = sample[plan.target] if plan.target is not None else None
        filled = fit(sample[features], y, whole)
        del sample
    del pieces
    shipped: Any = None
    if whole:
        slices: list[Any] = [filled.iloc[starts[k] : starts[k + 1]] for k in range(len(blocks))]
    else:
        assert new_rows is not None, "a sample of the rows needs new_rows"
        slices, shipped = [None] * len(blocks), _ship(new_rows(), blocks)
    del filled
    chunks = [_task(_fill, b, encoding, features, s, shipped)
              for b, s in zip(blocks, slices, strict=True)]  # fmt: skip
    shape, written = plan.rows.write(chunks, plan, attrs)
    return Imputed((int(shape[0]), int(shape[1])), Path(written), int(rows.size), table.missing,
                   plan.rows.described)  # fmt: skip


def _sample(n: int, size: int, random_state: Any) -> np.ndarray:
    """``size`` distinct rows of ``n``, sorted, from ``random_state`` (int or None)."""
    rng = np.random.default_rng(np.random.SeedSequence(random_state).spawn(1)[0])
    return np.sort(rng.choice(n, size=size, replace=False))


def _task(function: Callable[..., Any], block: Any, *args: Any) -> Any:
    """``function(block, *args)``: now for a chunk in memory, a task for a partition."""
    from dask.delayed import Delayed

    if isinstance(block, Delayed):
        import dask

        return dask.delayed(function, pure=True)(block, *args)
    return function(block, *args)


def _compute(values: list[Any]) -> list[Any]:
    """The values of :func:`_task`, computed together when they are tasks."""
    import dask
    from dask.delayed import Delayed

    return list(dask.compute(*values)) if values and isinstance(values[0], Delayed) else values


def _ship(obj: Any, blocks: list[Any]) -> Any:
    """``obj`` sent to every worker once (a distributed client), else one graph key; as it
    is for chunks worked on here (a table read whole)."""
    import dask
    from dask.delayed import Delayed

    if not any(isinstance(b, Delayed) for b in blocks):
        return obj
    try:
        from distributed import get_client

        return get_client().scatter(obj, broadcast=True, hash=False)
    except (ImportError, ValueError):  # no distributed client: the local scheduler
        return dask.delayed(obj, traverse=False)


def _typed(part: pd.DataFrame, encoding: Any) -> pd.DataFrame:
    """A chunk typed as the whole reader types it (a frame read whole already is)."""
    if encoding is None:
        return part
    from distforest.io.partitions import PATH_COLUMN
    from distforest.io.summaries import typed_partition

    return typed_partition(part, encoding, PATH_COLUMN)


def _take(part: pd.DataFrame, encoding: Any, local: np.ndarray) -> pd.DataFrame:
    """The typed rows ``local`` of one chunk (a task by partitions)."""
    typed = _typed(part, encoding)
    return typed if local.size == len(typed) else typed.iloc[local]


def _fill(
    part: pd.DataFrame,
    encoding: Any,
    features: list[str],
    filled: pd.DataFrame | None,
    imputer: Any,
) -> pd.DataFrame:
    """One chunk typed, its feature columns filled (a task by partitions)."""
    out = _typed(part, encoding)
    out = out.copy() if out is part else out
    if filled is None:  # products of the one-forest modes run here, never as tasks of tasks
        import copy

        here = copy.copy(imputer).set_execution("synchronous")
        filled = here.transform(out[features])
    filled = filled.reset_index(drop=True)
    for position, col in enumerate(out.columns):
        if col in filled.columns:
            out.isetitem(position, filled[col])
    return out


def _write_parts(chunks: list[Any], plan: ImputationPlan) -> tuple[tuple[int, int], Path]:
    """The filled partitions written by their tasks: one Parquet part each into a folder,
    or numbered pieces joined here into one CSV or Parquet file."""
    import dask

    from distforest.io.writers import join_pieces

    dest, folder = plan.dest, plan.folder
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        suffix = ".parquet" if folder else dest.suffix.lower()
        pieces_dir = tmp if folder else tmp.with_name(tmp.name + "-pieces")
        pieces_dir.mkdir()
        try:
            write = dask.delayed(_write_part, pure=False)
            paths = [str(pieces_dir / f"part-{k:05d}{suffix}") for k in range(len(chunks))]
            counts = dask.compute(*[write(t, path, k == 0) for k, (t, path)
                                    in enumerate(zip(chunks, paths, strict=True))])  # fmt: skip
            if not folder:
                join_pieces(paths, tmp, suffix)
        finally:
            if not folder:
                shutil.rmtree(pieces_dir, ignore_errors=True)
        shape = (int(sum(c[0] for c in counts)), int(counts[0][1]))
        if dest.exists():
            shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
        tmp.replace(dest)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
    return shape, dest


def _write_part(frame: pd.DataFrame, path: str, first: bool) -> tuple[int, int]:
    """One filled partition written by its task: Parquet, or CSV (the header in the first only)."""
    if path.endswith(".csv"):
        frame.to_csv(path, index=False, header=first)
    else:
        frame.to_parquet(path, index=False)
    return frame.shape


def run_imputation(
    plan: ImputationPlan,
    params: dict[str, Any],
    client: Any,
    progress: Any = None,
    *,
    sample_rows: int | None = None,
) -> Imputed:
    """Impute on ``client`` and write the whole table (target and dropped columns kept).

    The imputer is fitted on at most ``sample_rows`` rows (None: the bound of the
    plan's rows, :data:`SAMPLE_ROWS` by partitions, every row of a table read whole).
    ``client`` None (and no ``progress``): the current execution (this process for small
    tables, see ProximityImputer).  ``progress(stage, done, total)`` hears the stage
    ``"impute"`` alone: the tree batches of every pass as one count
    (:class:`~distforest.apps.impute.FitTasks`; the forests' own ``"fit"`` not).
    """
    from dataclasses import replace

    from distforest.apps.impute import ProximityImputer

    imputer = ProximityImputer(**params, categorical_features=list(plan.categorical) or None)
    imputer._settings()  # bad values refused before the rows are read
    if client is not None or progress is not None:
        imputer.set_execution(
            client,
            progress=None
            if progress is None
            else lambda stage, done, total: (
                progress(stage, done, total) if stage == "impute" else None
            ),
        )

    def provenance() -> dict[str, Any]:
        settings = json.loads(json.dumps(imputer.get_params(), default=str))
        for key in ("client", "progress"):
            settings.pop(key, None)
        return {"imputation": {"distforest_version": __version__, "source": plan.source,
                               "params": settings, "target": plan.target,
                               "task": imputer.task_, "n_imputed": imputer.n_missing_}}  # fmt: skip

    def fit(features: pd.DataFrame, y: Any, whole: bool) -> pd.DataFrame:
        # rows beyond the sample are filled by the chunks' tasks: the forest that routes
        # them goes to a temporary store, never through this process (nor its pickle)
        return imputer.fit_transform(features, y, keep_nodes=whole)

    bound = plan.rows.sample_rows if sample_rows is None else sample_rows
    result = impute_rows(plan, fit, new_rows=imputer.for_new_rows, sample_rows=bound,
                         random_state=imputer.random_state, attrs=provenance)  # fmt: skip
    return replace(result, imputer=imputer)


def impute_from_matrix_rows(plan: ImputationPlan, matrix: Any, vote: str = "sum") -> Imputed:
    """``impute: {from: proximity}``: every row's missing cells filled from ``matrix`` (a
    stored n x n proximity matrix of the table's rows), the table read and written in
    chunks as :func:`impute_rows` reads and writes it."""
    from distforest.apps.matrix_impute import fill_from_matrix

    counts: dict[str, int] = {}

    def fit(features: pd.DataFrame, y: Any, whole: bool) -> pd.DataFrame:
        filled, found = fill_from_matrix(matrix, features, vote)
        counts.update(found)
        return filled

    def provenance() -> dict[str, Any]:
        return {"imputation": {"distforest_version": __version__, "source": plan.source,
                               "from": "proximity",
                               "matrix": str(getattr(matrix, "name", "proximity")),
                               "categorical_vote": vote, "n_imputed": counts}}  # fmt: skip

    return impute_rows(plan, fit, attrs=provenance)


def summary(result: Imputed, source: str, seconds: float) -> str:
    """What ``distforest impute`` prints once the table is written."""
    imp = result.imputer
    counts = {name: n for name, n in result.missing.items() if n}
    total = sum(counts.values())
    rows, columns = result.shape
    fitted = f", fitted on {result.sample_rows} row(s)" if result.described else ""
    lines = [
        f"imputed {total} cell(s) in {len(counts)} column(s) of {source} ({rows} rows x "
        f"{columns} columns) in {seconds:.1f} s{result.described}",
        f"  forest:  {imp.task_}, {imp._settings()['n_estimators']} trees"
        f"{' per column' if imp.proximity == 'column' else ''}{fitted}, {imp.n_iter_} "
        f"iteration(s), {imp.proximity} proximity",
    ]
    if counts:
        width = max(len(n) for n in counts)
        lines.append("  cells imputed per column:")
        lines += [f"    {name:<{width}}  {n}" for name, n in counts.items()]
    else:
        lines.append("  no missing values: the output is a copy of the input")
    fallbacks = sum(h.get("fallbacks", 0) for h in imp.history_[-1:])
    if fallbacks:
        lines.append(
            f"  {fallbacks} cell(s) had no weighted neighbour and kept the median / most "
            "frequent level"
        )
    lines.append(f"  output:  {result.written}")
    return "\n".join(lines)


@dataclass(kw_only=True)
class ImputeJob(TableJob):
    """``distforest impute``: the table ``files["out"]`` with INPUT's missing values filled.

    ``out`` is the job's store beside it (:func:`~distforest.jobs.outputs.record_path`:
    its spec and stages); ``params`` are :class:`~distforest.apps.impute.ProximityImputer`'s;
    ``id`` names a column copied unchanged (as ``drop``); ``model`` a model file whose
    trees weigh the rows instead of forests fitted here (:func:`_impute_with_model`).
    """

    job_kind: ClassVar[str] = "impute"

    out: str
    files: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    categorical: tuple[str, ...] = ()
    id: str | None = None
    model: str | None = None
    name: str = "impute"

    def describe(self) -> str:
        """What the job computes."""
        return "proximity imputation"

    def summary(self, result: JobResult) -> str:
        """What the command printed before it was a job, the mode and the reports."""
        from distforest.jobs.result import mode_text

        assert isinstance(result, ImputeResult)
        lines = result.text.splitlines() or [f"imputed {self.input}"]
        lines[0] += mode_text(result.mode, self.out)
        reports = {k: v for k, v in result.outputs.items() if k.startswith("report")}
        return "\n".join([*lines, *(f"  {k + ':':<18} {v}" for k, v in reports.items())])


@dataclass
class ImputeResult(JobResult):
    """What an impute job wrote, and the lines its command prints."""

    text: str = ""


def impute_job(input: str, out: str, params: dict[str, Any], connect: dict[str, Any], *,
               target: str | None = None, drop: tuple[str, ...] = (),
               na_values: tuple[str, ...] = (), categorical: tuple[str, ...] = (),
               overwrite: bool = False, id: str | None = None,
               model: str | None = None) -> ImputeJob:  # fmt: skip
    """The job of ``distforest impute`` (its store beside the output: ``imputed.run.zarr``
    for ``imputed.csv`` or the folder ``imputed/``)."""
    from distforest.jobs.outputs import record_path

    return ImputeJob(input=input, out=record_path(str(out).rstrip("/\\")), files={"out": out},
                     params=dict(params), connect=dict(connect), target=target,
                     drop=tuple(drop), na_values=tuple(na_values),
                     categorical=tuple(categorical), overwrite=overwrite, id=id,
                     model=model)  # fmt: skip


def _columns_kept(job: ImputeJob) -> tuple[str, ...]:
    """``--drop`` and the ID column: copied unchanged."""
    return (*job.drop, *([job.id] if job.id else []))


def _plan_of(job: ImputeJob, checked: bool) -> ImputationPlan:
    """The job's :class:`ImputationPlan`; ``checked``: its output checked now (may be
    replaced), else by the run's ``check`` (which sets its ``dest``)."""
    return plan_imputation(job.input, job.files["out"], target=job.target,
                           drop=_columns_kept(job), na_values=job.na_values,
                           categorical=job.categorical, overwrite=True,
                           check_out=checked)  # fmt: skip


@ImputeJob.plans
def plan_impute_job(job: ImputeJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the input (its shape only when read by
    partitions), runs nothing; the output may exist (a run decides)."""
    if job.model is not None:
        from distforest.io.model_files import check_model_file

        check_model_file(job.model)
    return impute_pipeline(job, _plan_of(job, False))


def impute_pipeline(job: ImputeJob, plan: ImputationPlan, start: float = 0.0) -> Pipeline:
    """The one stage of ``impute``: its tasks are the fit batches of every pass (one
    forest per column with missing values for ``proximity: column``, at most
    ``iterations`` passes; one forest on all columns for the others; their products
    noted, not counted).  ``plan``: the table read whole, or to be read by partitions
    (not loaded: every feature column counted as having missing values)."""
    from distforest.apps.impute import ProximityImputer
    from distforest.jobs.estimates import estimate_impute
    from distforest.jobs.stages import PRODUCTS_NOTE, Cost, Stage, placement_of
    from distforest.parallel.tasks import plan_tree_batches

    out = str(job.files["out"])
    source, n, d, holes, cells = plan.rows.size(job.input, job)
    if job.model is not None:
        stage = Stage("impute", f"the rows routed through the trees of {job.model}, one pass "
                                f"-> {out}", reads=(job.input, job.model), writes=(out,),
                      cost=Cost(0.0, 3 * 8 * n * d, {"imputed table": 12 * n * (d + 2)}),
                      run=lambda ctx: _impute_with_model(job, plan, ctx, start))  # fmt: skip
        return Pipeline(title=f"impute: {n:,} rows x {d} features", stages=[stage],
                        steps=[("input", source), ("model", job.model), ("writes", out),
                               ("store", f"{job.out} (this run's stages)")],
                        cells=cells, connect=job.connect, out=str(job.out))  # fmt: skip
    checked = ProximityImputer(**job.params)._settings()  # bad values refused first
    threads = placement_of(cells, job.connect)[1]
    trees, passes, how = checked["n_estimators"], checked["iterations"], checked["proximity"]
    if how == "column":
        batches = holes * len(ProximityImputer._column_settings(checked, n).batches())
        forests = f"{trees} trees for each of {holes} column(s) with missing values"
    else:
        batches = len(plan_tree_batches(trees, threads, checked["batch_size"]))
        forests, passes = f"{trees} trees on all columns", passes if holes else 1
    need = estimate_impute(n, d, checked, holes)
    how_many = f"at most {passes} pass(es)" if how == "column" else f"{passes} pass(es)"
    stage = Stage("impute", f"{how} proximity, {how_many} -> {out}", reads=(job.input,),
                  writes=(out,), tasks=passes * batches,
                  cost=Cost(need["cpu_seconds"], need["memory_bytes"],
                            {"imputed table": need["disk_bytes"]}),
                  run=lambda ctx: _impute(job, plan, ctx, start))  # fmt: skip
    notes = [PRODUCTS_NOTE] if how != "column" else []
    if plan.rows.note is not None:
        notes.append(plan.rows.note)
    return Pipeline(
        title=f"impute: {n:,} rows x {d} features",
        steps=[("input", source), ("forests", f"{how} proximity: {forests}, {how_many}"),
               ("writes", out), ("store", f"{job.out} (this run's stages)")],
        stages=[stage], cells=cells, connect=job.connect, out=str(job.out), notes=notes,
    )  # fmt: skip


@ImputeJob.runs
def run_impute_job(job: ImputeJob, progress: Any = None, *, restart: bool = False,
                   run_id: str | None = None) -> ImputeResult:  # fmt: skip
    """Impute under the run protocol: the input, the output and the size checked first
    (the output may be replaced by a resumed run or with ``--overwrite``)."""
    from distforest.jobs.base import new_run_id
    from distforest.jobs.inputs import listing_stamp
    from distforest.jobs.runs import execute
    from distforest.store.run_store import RunStore

    start = time.perf_counter()
    if job.model is not None:
        from distforest.io.model_files import load_model

        load_model(job.model)  # a pickle or an untrusted type refused before any work
    plan = _plan_of(job, False)
    if job.model is None:
        plan.rows.check_size(job)
    pipeline = impute_pipeline(job, plan, start)

    def check(run: Run) -> dict[str, Any]:
        from distforest import location

        out = str(job.files["out"]).rstrip("/\\")
        if not location.is_remote(out):  # (as every job: its folder made for it)
            Path(out).parent.mkdir(parents=True, exist_ok=True)
        if run.stages is None or not run.stages.done("impute"):
            plan.dest = plan.rows.check_output(job.files["out"], run.replace)
        return {}

    def create(run: Run) -> RunStore:
        # The store first, as the other answers': a run killed while it writes the table
        # leaves the store of this job, so the next run resumes (and may replace what it
        # wrote) instead of refusing its own half-written output.
        return RunStore.create(job.out, attrs=run.record, overwrite=True)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> ImputeResult:
        info = (rs.attrs.get("stages") or {}).get("impute", {})
        return ImputeResult(
            store=rs.path,
            name="imputed table",
            shape=(0, 0),
            n_trees=0,
            task="imputation",
            seconds=time.perf_counter() - start,
            outputs=dict(outputs),
            mode=mode,
            text=str(info.get("text", "")),
        )

    spec = job.spec_of(
        ("target", "drop", "na_values", "files", "params", "categorical", "id"),
        input={"source": job.input, "stamp": listing_stamp(job.input)},
        **({} if job.model is None else {"model": listing_stamp(job.model)}),
    )
    return execute(job, pipeline, spec, result, progress=progress, restart=restart,
                   run_id=run_id or new_run_id(), check=check, create=create)  # fmt: skip


def _impute(job: ImputeJob, plan: ImputationPlan, ctx: Context, start: float) -> None:
    """The impute stage: where the run placed it (a table read by partitions: its tasks on
    the run's cluster), its tasks (every pass's tree batches) reported to the run's
    progress as the stage's."""
    import contextlib

    from distforest import location
    from distforest.parallel.execution import current_execution

    client, progress = ctx.where.client, current_execution().progress
    try:
        with client.as_current() if client is not None else contextlib.nullcontext():
            imputed = run_imputation(plan, job.params, client, progress)
    except InputError:
        # A bad value found in a part: nothing written, so the run's store goes too (the
        # table is refused, there is nothing to resume).
        if ctx.rs is not None:
            location.remove_tree(ctx.rs.path)
        raise
    ctx.done.outputs = {"imputed table": str(imputed.written)}
    ctx.done.info["cells_imputed"] = int(sum(imputed.missing.values()))
    ctx.done.info["text"] = summary(imputed, job.input, time.perf_counter() - start)


def _impute_with_model(job: ImputeJob, plan: ImputationPlan, ctx: Context,
                       start: float) -> None:  # fmt: skip
    """``distforest impute --model FILE``: one pass, no forest fitted.

    The rows of INPUT (the model's training rows, its numeric features) are routed
    through the model's trees, missing cells following each library's missing-value
    branches; each missing cell becomes the proximity-weighted mean of the column's
    observed values (:func:`distforest.apps.scoring.impute_rows`, ``--proximity``
    original by default; oob and rfgap where the model's bagging is known).  Target,
    ``--drop`` and ID columns are copied unchanged.  The rows are read and written as
    :func:`impute_rows` reads and writes them, whatever the input (one file, a folder of
    parts), each chunk filled against every row's leaves by
    :class:`~distforest.apps.impute_model.ModelFiller` (in its task when read by
    partitions: no row gathered here).
    """
    from distforest.apps.impute_model import model_filler
    from distforest.io.model_files import load_model

    assert job.model is not None
    method = {"column": "original"}.get(job.params["proximity"], job.params["proximity"])
    if method == "rfimpute":
        raise InputError(
            "--proximity rfimpute refits forests; with --model the model's own trees weigh "
            "the rows: use --proximity original (the default), oob or rfgap"
        )
    vote = job.params["categorical_vote"].replace("auto", "sum")
    drop = (*plan.drop, *([plan.target] if plan.target else []))
    with model_filler(load_model(job.model), plan.source, drop=drop, na_values=plan.na_values,
                      method=method, vote=vote) as fill:  # fmt: skip

        def provenance() -> dict[str, Any]:
            return {"imputation": {"distforest_version": __version__, "source": plan.source,
                                   "model": job.model, "proximity": method,
                                   "n_imputed": fill.cells}}  # fmt: skip

        imputed = impute_rows(plan, None, new_rows=lambda: fill, attrs=provenance)
    cells, trees = fill.cells, int(fill.forest.leaves_.shape[1])
    ctx.done.outputs = {"imputed table": str(imputed.written)}
    ctx.done.info["cells_imputed"] = int(cells)
    ctx.done.info["text"] = (
        f"imputed {cells} cell(s) of {job.input} ({imputed.shape[0]} rows x "
        f"{imputed.shape[1]} columns) in {time.perf_counter() - start:.1f} s\n  model:  "
        f"{job.model}, {trees} trees, {method} proximity, one pass\n  output: "
        f"{imputed.written}"
    )
