"""Results of new rows by chunks, joined into one CSV: the one path of ``knn predict``,
``simforest predict`` and ``score`` (:mod:`distforest.jobs.score`).

The new rows are chunks of a table (:func:`row_frames`): the whole table read
in this process (one chunk), or one chunk per partition when it is read by
partitions (a glob, a folder of parts, a large file).  Each chunk goes through
a ``work(frame, start, part)`` function (its rows' results, its first row's
number in the whole table, the name of its part file for messages) and is
written as a piece without header (:func:`write_pieces`): in this process for
the one chunk in memory, else one task per partition with the model read once
per worker process (:func:`model_once`).  The pieces are joined in order under
one header into a temporary file beside the output, renamed onto it at the
end: nothing is left under the output's name if a step fails.

A row's result depends on that row and the model only, so the file is the
same whatever the chunks.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distforest import location
from distforest.errors import InputError
from distforest.io.partitions import PATH_COLUMN

__all__ = ["RowFrames", "model_once", "row_frames", "run_rows_job", "write_pieces"]

#: What this process's tasks read of one model (the model, its training features), by
#: (path, what): a worker reads each once; another model's entries are dropped.
_models: dict[tuple[str, str], Any] = {}
_models_lock = threading.RLock()  # loading the training features reads the model


def model_once(path: str, load: Callable[[str], Any], what: str = "model") -> Any:
    """``load(path)`` once per process (per ``what``), shared by this process's tasks."""
    with _models_lock:
        if (path, what) not in _models:
            for key in [k for k in _models if k[0] != path]:
                del _models[key]
            _models[path, what] = load(path)
        return _models[path, what]


@dataclass(frozen=True)
class RowFrames:
    """The chunks of a table of new rows.

    Attributes
    ----------
    source : str
        The table, as the user gave it.
    blocks : list
        pandas DataFrames (in memory: one) or dask's delayed partitions.
    starts : ndarray of int64
        Each chunk's first row in the whole table.
    names : list of str
        How messages name each chunk (its part file, or the table).
    in_process : bool
        Whether the chunks are worked on in this process (the table in memory).
    """

    source: str
    blocks: list[Any]
    starts: np.ndarray
    names: list[str]
    in_process: bool


def row_frames(data: str, names: tuple[str, ...], drop: tuple[str, ...] = (),
               na_values: tuple[str, ...] = (), *, by_parts: bool) -> RowFrames:  # fmt: skip
    """The chunks of DATA holding (at least) the model's feature columns ``names``.

    ``by_parts``: one chunk per partition (dask's reader; each partition's rows
    counted by a task, so each chunk knows its first row), else the whole table
    read here as one chunk.

    Raises
    ------
    InputError
        DATA lacks a feature column of the model, or is an array without names.
    """
    from distforest.jobs.model_columns import check_columns

    if not by_parts:
        from distforest.io import read_frame

        frame = read_frame(data, na_values=na_values)
        frame.columns = [str(c) for c in frame.columns]
        frame = frame.drop(columns=[c for c in drop if c in frame.columns])
        check_columns(data, list(frame.columns), names)
        return RowFrames(str(data), [frame], np.zeros(1, dtype=np.int64), [str(data)], True)
    import dask

    from distforest.io.partitions import open_partitions

    parts = open_partitions(data, na_values=na_values)
    if parts.frame is None:
        raise InputError(f"{parts.source}: a numeric array has no column names; give a table")
    check_columns(parts.source, [c for c in parts.columns if c not in drop], names)
    keep = [*names, PATH_COLUMN] if PATH_COLUMN in parts.frame.columns else list(names)
    blocks = parts.frame[keep].to_delayed()
    lengths = dask.compute(*[dask.delayed(len)(b) for b in blocks])
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    labels = [parts.partition_name(k) for k in range(len(blocks))]
    return RowFrames(parts.source, list(blocks), starts, labels, False)


def _piece(work: Callable[..., Any], frame: Any, start: int, piece: str, part: str) -> Any:
    """One chunk's rows through ``work``, written as a piece without header (a task, or
    in this process); returns ``(rows, columns, cells filled)``."""
    frame.columns = [str(c) for c in frame.columns]
    if PATH_COLUMN in frame.columns:  # a CSV partition: its file is in each row
        if len(frame):
            part = str(frame[PATH_COLUMN].iloc[0])
        frame = frame.drop(columns=PATH_COLUMN)
    out = work(frame, start, part)
    if out is None:
        return 0, None, 0
    out.to_csv(piece, index=False, header=False)
    return len(out), list(out.columns), int(out.attrs.get("cells", 0))


def write_pieces(rows: RowFrames, work: Callable[..., Any], out: str) -> tuple[int, str, int]:
    """Run ``work`` over the chunks, join the pieces under a header into ``out``:
    ``(rows, path, cells filled)``.  Chunks read by partitions run as tasks on dask's
    current scheduler (the command's cluster)."""
    import dask
    import pandas as pd

    from distforest.io.writers import pieces_beside, publish_pieces

    remote = location.is_remote(out)
    dest = Path(tempfile.mkdtemp()) / "rows.csv" if remote else Path(out).resolve()
    try:
        with pieces_beside(dest) as folder:
            paths = [str(folder / f"part-{k:06d}.csv") for k in range(len(rows.blocks))]
            items = [(work, block, int(rows.starts[k]), paths[k], rows.names[k])
                     for k, block in enumerate(rows.blocks)]  # fmt: skip
            if rows.in_process:
                done = [_piece(*item) for item in items]
            else:
                task = dask.delayed(_piece, pure=False)
                done = list(dask.compute(*[task(*item) for item in items]))
            columns = next((c for _, c, _ in done if c is not None), None)
            if columns is None:
                raise InputError("the input has no rows; give a table with at least one row")
            header = str(folder / "header.csv")
            pd.DataFrame(columns=columns).to_csv(header, index=False)
            publish_pieces([header] + [p for p, (n, _, _) in zip(paths, done, strict=True) if n],
                           dest)  # fmt: skip
        if remote:  # one upload of the joined file
            fs, where = location.filesystem(out)
            fs.put_file(str(dest), where)
    finally:
        if remote:
            shutil.rmtree(dest.parent, ignore_errors=True)
    total, cells = int(sum(d[0] for d in done)), int(sum(d[2] for d in done))
    return total, (out if remote else str(dest)), cells


def run_rows_job(job: Any, pipeline: Any, spec: dict[str, Any], task: str, *, progress: Any,
                 restart: bool, run_id: str, store_first: bool = True) -> Any:  # fmt: skip
    """Run a job whose stage ``predict`` writes the rows' results to ``job.files["out"]``
    under the run protocol (:func:`~distforest.jobs.runs.execute`): the file checked
    first (replaced only by a resumed run or with ``--overwrite``), the job's store
    ``job.out`` beside it created first (``store_first``: a stopped run leaves it
    half-written, resumed by the next), else once the file is written (a failed run
    leaves nothing); its result counts the rows the stage wrote."""
    import time

    from distforest.jobs.outputs import check_new_file
    from distforest.jobs.result import JobResult
    from distforest.jobs.runs import execute
    from distforest.store.run_store import RunStore

    start = time.perf_counter()

    def check(run: Any) -> None:
        if run.stages is None or not run.stages.done("predict"):
            check_new_file(job.files["out"], run.replace)

    def create(run: Any) -> RunStore:
        return RunStore.create(job.out, attrs=run.record, overwrite=True)

    if not store_first:
        for stage in pipeline.stages:

            def written(ctx: Any, work: Any = stage.run) -> None:
                work(ctx)
                ctx.rs = create(ctx.run)

            stage.run = written

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        rows = int(((rs.attrs.get("stages") or {}).get("predict") or {}).get("rows", 0))
        return JobResult(store=rs.path, name="predictions", shape=(rows, 0), n_trees=0,
                         task=task, seconds=time.perf_counter() - start,
                         outputs=dict(outputs), mode=mode)  # fmt: skip

    return execute(job, pipeline, spec, result, progress=progress, restart=restart,
                   run_id=run_id, check=check,
                   create=create if store_first else None)  # fmt: skip
