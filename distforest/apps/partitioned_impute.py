"""Imputation of a table read by partitions: the driver never holds the table.

The engine of ``distforest impute`` for a glob, a folder or a large file
(:func:`distforest.jobs.inputs.partitioned_input`) and for an output
folder.  The steps, each a set of tasks over the source's partitions:

1. **Pass 1** (:func:`~distforest.io.ingest.read_partitioned`): summaries
   only; every check of the in-memory reader, naming part file, column and
   row.  A bad value stops here, before anything is written.
2. **Sample.**  The imputer (any ``proximity``) is fitted on at most ``sample_rows``
   rows (:data:`SAMPLE_ROWS` by default), drawn without replacement from
   ``random_state`` and read by one task per partition that holds some of
   them.  With ``sample_rows >= n`` the sample is the whole table in order
   and the result is that of the in-memory path, bit for bit.
3. **Fill and write by partitions.**  Each task types its partition as the
   in-memory reader would (:func:`~distforest.io.summaries.typed_partition`)
   and fills its missing cells: from the fitted result when the sample is the
   whole table, else as new rows by the fitted forests
   (:meth:`ProximityImputer.transform`, no refit: ``column`` routes them through
   its column forests, the one-forest modes such as ``rfimpute`` weight the
   sample's observed values by the rows' proximities to it, the products run in
   the task; ``column``'s stopping rule then runs per partition, so a row's value may depend on
   the partition it is in, never on the cluster).
   Every task writes its own filled partition: a folder output gets one
   Parquet part per partition; for one CSV or Parquet file the tasks write
   numbered pieces next to it, and this process joins them in partition order
   (a byte copy for CSV, one Parquet row group per piece), holding at most one
   piece at a time.  The pieces need as much disk again as the output while
   they are joined; each is removed once appended.

Column names, order, dtypes and category labels are those of the in-memory
path; from a CSV source, numeric columns are float64 and ``--drop`` columns
stay text.  Above the sample bound, a category level absent from the sample
cannot be predicted from; rows are then refused by ``transform``'s checks.
Nothing is left under the output's name if any step fails.
"""

from __future__ import annotations

import copy
import logging
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distforest.errors import InputError, ParameterError, StoreError
from distforest.io.ingest import read_partitioned
from distforest.io.partitions import PATH_COLUMN
from distforest.io.summaries import Encoding, typed_partition
from distforest.io.writers import join_pieces

__all__ = [
    "SAMPLE_ROWS",
    "PartitionedImputation",
    "check_output",
    "impute_partitioned",
    "is_folder",
]

logger = logging.getLogger("distforest")

#: Rows the column forests are fitted on, at most (the forests' own default
#: ``max_samples`` for large tables); below it every row, as in memory.
SAMPLE_ROWS = 200_000


def is_folder(out: str | Path) -> bool:
    """Whether ``out`` names a Parquet dataset folder (ends in ``/`` or is a folder)."""
    text = str(out)
    return text.endswith(("/", "\\")) or (Path(text).is_dir() and not text.endswith(".zarr"))


@dataclass(frozen=True)
class PartitionedImputation:
    """What :func:`impute_partitioned` did.

    Attributes
    ----------
    imputer : ProximityImputer
        Fitted on the sample.
    shape : tuple of int
        Rows and columns written.
    written : Path
    sample_rows : int
        Rows the forests were fitted on.
    missing : dict of str to int
        Missing (now imputed) cells per feature column of the whole table.
    """

    imputer: Any
    shape: tuple[int, int]
    written: Path
    sample_rows: int
    missing: dict[str, int]


def impute_partitioned(
    source: Any,
    out: str | Path,
    imputer: Any,
    *,
    target: str | None = None,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    sample_rows: int = SAMPLE_ROWS,
    overwrite: bool = False,
) -> PartitionedImputation:
    """Impute ``source`` by partitions into ``out`` (see the module docstring).

    Parameters
    ----------
    source
        Anything :func:`~distforest.io.partitions.open_partitions` opens as a table.
    out : str or Path
        A folder (ends in ``/`` or exists): one Parquet part per partition;
        else one ``.csv`` or ``.parquet`` file.
    imputer : ProximityImputer
        Unfitted, any ``proximity``; its execution runs the forests.
    target, drop, na_values
        As ``distforest impute``.
    sample_rows : int
        Rows the forests are fitted on, at most.
    overwrite : bool

    Returns
    -------
    PartitionedImputation
    """
    import dask

    if sample_rows < 1:
        raise ParameterError(f"sample_rows must be at least 1, got {sample_rows}")
    folder = is_folder(out)
    dest = check_output(out, overwrite)
    data = read_partitioned(source, target=target, drop=drop, na_values=na_values)
    if data.partitions.frame is None:
        raise InputError(f"{data.source}: a numeric array is imputed in memory; give a table")
    enc = data.encoding
    features = list(enc.features)
    if not features:
        raise InputError(f"{source}: no feature columns left after removing --target/--drop")
    n = enc.n_samples
    blocks = data.partitions.frame.to_delayed()
    starts = np.concatenate([[0], np.cumsum(enc.lengths)]).astype(np.int64)
    whole = sample_rows >= n
    rows = np.arange(n) if whole else _sample(n, sample_rows, imputer.random_state)
    logger.info("imputing %s by %d partitions, forests fitted on %d of %d rows",
                data.source, len(blocks), rows.size, n)  # fmt: skip
    take = dask.delayed(_take, pure=True)
    wanted = []
    for k, block in enumerate(blocks):
        local = rows[(rows >= starts[k]) & (rows < starts[k + 1])] - starts[k]
        if local.size:
            wanted.append(take(block, enc, local))
    pieces = dask.compute(*wanted)
    sample = pd.concat(pieces, ignore_index=True)
    del pieces
    y = sample[target] if target is not None else None
    filled = imputer.fit_transform(sample[features], y)
    if whole:
        slices = [filled.iloc[starts[k] : starts[k + 1]] for k in range(len(blocks))]
        shipped: Any = None
    else:  # new rows for the fitted forests, which are grown again here, once, if fit kept none
        params = imputer._settings()
        if imputer.forest_ is None:
            imputer._routing_columns(params)
        else:
            imputer._routing_forest(params)
        slices = [None] * len(blocks)
        shipped = _ship(_light(imputer))
    del filled, sample
    fill = dask.delayed(_fill, pure=True)
    tasks = [fill(b, enc, features, s, shipped) for b, s in zip(blocks, slices, strict=True)]
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        suffix = ".parquet" if folder else dest.suffix.lower()
        pieces_dir = tmp if folder else tmp.with_name(tmp.name + "-pieces")
        pieces_dir.mkdir()
        try:
            write = dask.delayed(_write_part, pure=False)
            paths = [str(pieces_dir / f"part-{k:05d}{suffix}") for k in range(len(tasks))]
            counts = dask.compute(*[write(t, path, k == 0) for k, (t, path)
                                    in enumerate(zip(tasks, paths, strict=True))])  # fmt: skip
            if not folder:
                join_pieces(paths, tmp, suffix)
        finally:
            if not folder:
                shutil.rmtree(pieces_dir, ignore_errors=True)
        n_out, width = int(sum(c[0] for c in counts)), counts[0][1]
        if dest.exists():
            shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
        tmp.replace(dest)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
    return PartitionedImputation(imputer, (n_out, width), dest, int(rows.size), dict(enc.missing))


def check_output(out: str | Path, overwrite: bool = False) -> Path:
    """The output resolved, checked before any work (a folder, or one .csv / .parquet file)."""
    from distforest import location
    from distforest.io.writers import check_can_write, output_format

    if location.is_remote(out):
        raise ParameterError(f"cannot write {str(out)!r}: a table imputed by partitions is "
                             "written to a local file or folder; copy it afterwards")  # fmt: skip
    folder = is_folder(out)

    if not folder:
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


def _sample(n: int, size: int, random_state: Any) -> np.ndarray:
    """``size`` distinct rows of ``n``, sorted, from ``random_state`` (int or None)."""
    rng = np.random.default_rng(np.random.SeedSequence(random_state).spawn(1)[0])
    return np.sort(rng.choice(n, size=size, replace=False))


def _light(imputer: Any) -> Any:
    """The fitted imputer as ``transform`` of new rows needs it.

    ``column`` routes new rows through its column forests alone, so the training
    rows are dropped; the one-forest modes weight the training rows' observed
    values, so they keep them (the sample, not the table).  A partition is never
    "the training data".
    """
    from dataclasses import replace

    light = copy.copy(imputer)
    if imputer.forest_ is None:
        light._train = replace(imputer._train, X=imputer._train.X[:0])
    light._imputed = imputer._imputed[:0]
    light._fingerprint = None
    return light


def _ship(obj: Any) -> Any:
    """``obj`` sent to every worker once (a distributed client), else one graph key."""
    import dask

    try:
        from distributed import get_client

        return get_client().scatter(obj, broadcast=True, hash=False)
    except (ImportError, ValueError):  # no distributed client: the local scheduler
        return dask.delayed(obj, traverse=False)


def _take(part: pd.DataFrame, encoding: Encoding, local: np.ndarray) -> pd.DataFrame:
    """The typed rows ``local`` of one partition (a task)."""
    typed = typed_partition(part, encoding, PATH_COLUMN)
    return typed.iloc[local]


def _fill(
    part: pd.DataFrame,
    encoding: Encoding,
    features: list[str],
    filled: pd.DataFrame | None,
    imputer: Any,
) -> pd.DataFrame:
    """One partition typed, its feature columns filled (a task)."""
    out = typed_partition(part, encoding, PATH_COLUMN)
    if filled is None:  # products of the one-forest modes run here, never as tasks of tasks
        here = copy.copy(imputer).set_execution("synchronous")
        filled = here.transform(out[features])
    filled = filled.reset_index(drop=True)
    for position, col in enumerate(out.columns):
        if col in filled.columns:
            out.isetitem(position, filled[col])
    return out


def _write_part(frame: pd.DataFrame, path: str, first: bool) -> tuple[int, int]:
    """One filled partition written by its task: Parquet, or CSV (the header in the first only)."""
    if path.endswith(".csv"):
        frame.to_csv(path, index=False, header=first)
    else:
        frame.to_parquet(path, index=False)
    return frame.shape
