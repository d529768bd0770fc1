"""k-NN predictions for a table read by partitions: the driver never holds DATA.

``distforest knn predict MODEL DATA`` (and a k-NN pipeline's predict step)
with DATA a glob, a folder of parts or a large file
(:func:`distforest.jobs.inputs.partitioned_input`):

1. the model's feature columns are checked against the columns dask's reader
   finds (before any work), and one task per partition counts its rows, so
   each partition knows the global number of its first row;
2. one task per partition reads it, turns the model's columns into numbers
   as the in-memory path does (:func:`~distforest.jobs.knn_model.feature_matrix`,
   a bad value named with its part file), predicts in its worker with the
   model read once per worker process, and writes its piece of the CSV
   (``row, <target>``; the header in the first piece only);
3. the pieces are joined in partition order into a temporary file beside the
   output, renamed onto it at the end: nothing is left under the output's name
   if a step fails.

A row's prediction depends on that row and the model only, so the file is
the in-memory command's, row for row.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from distforest import location
from distforest.errors import InputError
from distforest.io.partitions import PATH_COLUMN

#: Models read by this process's tasks, by path (a worker reads a model once).
_models: dict[str, Any] = {}
_models_lock = threading.Lock()


def _model(path: str) -> Any:
    from distforest.apps.knn import load_model

    with _models_lock:
        if path not in _models:
            _models.clear()
            _models[path] = load_model(path)
        return _models[path]


def _predict_part(frame: Any, model_path: str, attrs: dict[str, Any], names: tuple[str, ...],
                  start: int, piece: str, first: bool, part: str) -> int:  # fmt: skip
    """Predict one partition and write its piece of the CSV (a task); returns its rows."""
    import pandas as pd

    from distforest.jobs.knn_model import feature_matrix
    from distforest.parallel.execution import execution

    frame.columns = [str(c) for c in frame.columns]
    if PATH_COLUMN in frame.columns:  # a CSV partition: its file is in each row
        if len(frame):
            part = str(frame[PATH_COLUMN].iloc[0])
        frame = frame.drop(columns=PATH_COLUMN)
    X = feature_matrix(frame, part, attrs, names, start)
    if X.shape[0] == 0:  # an empty part still has its place (and the first, the header)
        prediction: Any = np.empty(0)
    else:
        with execution(client="synchronous"):  # in this worker: it is one task of many
            prediction = _model(model_path).predict(X)
    rows = np.arange(start, start + X.shape[0])
    out = pd.DataFrame({"row": rows, attrs.get("target") or "prediction": prediction})
    out.to_csv(piece, index=False, header=first)
    return int(X.shape[0])


def predict_partitioned(model_path: str, data: str, out: str, drop: tuple[str, ...],
                        na_values: tuple[str, ...]) -> tuple[int, str]:  # fmt: skip
    """Predict every row of ``data`` by partitions into the CSV ``out``: ``(rows, path)``.

    Runs on dask's current scheduler (the command's cluster).

    Raises
    ------
    InputError
        DATA lacks a feature column of the model, or holds a value that is not
        a number where the model has one (or a label it was not fitted with).
    """
    import dask

    from distforest.io.partitions import open_partitions
    from distforest.io.writers import join_pieces
    from distforest.jobs.knn_model import check_columns
    from distforest.store.run_store import RunStore

    attrs = RunStore.open(model_path, require_complete=True).attrs
    names = tuple(str(c) for c in attrs["feature_names"])
    parts = open_partitions(data, na_values=na_values)
    if parts.frame is None:
        raise InputError(f"{parts.source}: a numeric array has no column names; give a table")
    check_columns(parts.source, [c for c in parts.columns if c not in drop], names)
    keep = [*names, PATH_COLUMN] if PATH_COLUMN in parts.frame.columns else list(names)
    blocks = parts.frame[keep].to_delayed()
    lengths = dask.compute(*[dask.delayed(len)(b) for b in blocks])
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    remote = location.is_remote(out)
    dest = Path(tempfile.mkdtemp()) / "predictions.csv" if remote else Path(out).resolve()
    folder = dest.with_name(f".{dest.name}.{secrets.token_hex(6)}.pieces")
    partial = dest.with_name(f".{dest.name}.{secrets.token_hex(6)}.partial")
    folder.mkdir(parents=True)
    try:
        paths = [str(folder / f"part-{k:06d}.csv") for k in range(len(blocks))]
        predict = dask.delayed(_predict_part, pure=False)
        counts = dask.compute(*[
            predict(block, model_path, attrs, names, int(starts[k]), paths[k], k == 0,
                    parts.partition_name(k))
            for k, block in enumerate(blocks)
        ])  # fmt: skip
        join_pieces(paths, partial, ".csv")
        if remote:  # one upload of the joined file
            fs, where = location.filesystem(out)
            fs.put_file(str(partial), where)
        else:
            os.replace(partial, dest)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        if remote:
            shutil.rmtree(dest.parent, ignore_errors=True)
    return int(sum(counts)), out if remote else str(dest)
