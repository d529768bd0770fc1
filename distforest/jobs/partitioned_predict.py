"""Predictions and scores of new rows read by partitions: the driver never holds DATA.

``distforest knn predict MODEL DATA`` and ``distforest score MODEL DATA``
(with DATA a glob, a folder of parts or a large file,
:func:`distforest.jobs.inputs.partitioned_input`) run as:

1. the model's feature columns are checked against the columns dask's reader
   finds (before any work), and one task per partition counts its rows, so
   each partition knows the global number of its first row (``score`` types
   the columns with a first pass of summaries instead, as ``impute`` does:
   :func:`~distforest.io.ingest.read_partitioned`);
2. one task per partition reads it, turns it into the model's features as the
   in-memory path does (a bad value named with its part file, column and
   row), predicts or scores it in its worker with the model read once per
   worker process, and writes its piece of the CSV;
3. this process writes the header and appends the pieces in partition order
   to a temporary file beside the output, renamed onto it at the end: nothing
   is left under the output's name if a step fails.

A row's prediction or score depends on that row and the model only, so the
file is the in-memory command's, row for row.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from distforest import location
from distforest.errors import InputError
from distforest.io.partitions import PATH_COLUMN

#: What this process's tasks read of one model (the model, its training features), by
#: (path, what): a worker reads each once; another model's entries are dropped.
_models: dict[tuple[str, str], Any] = {}
_models_lock = threading.RLock()  # loading the training features reads the model


def _model(path: str, load: Callable[[str], Any], what: str = "model") -> Any:
    with _models_lock:
        if (path, what) not in _models:
            for key in [k for k in _models if k[0] != path]:
                del _models[key]
            _models[path, what] = load(path)
        return _models[path, what]


def _knn_rows(model_path: str, attrs: dict[str, Any], names: tuple[str, ...],
              frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """``row, <target>`` of one partition, predicted by a saved k-NN model."""
    import pandas as pd

    from distforest.apps.knn import load_model
    from distforest.jobs.model_columns import feature_matrix
    from distforest.parallel.execution import execution

    X = feature_matrix(frame, part, attrs, names, start)
    if X.shape[0] == 0:  # an empty part still has its place
        prediction: Any = np.empty(0)
    else:
        with execution(client="synchronous"):  # in this worker: it is one task of many
            prediction = _model(model_path, load_model).predict(X)
    rows = np.arange(start, start + X.shape[0])
    return pd.DataFrame({"row": rows, attrs.get("target") or "prediction": prediction})


@dataclass(frozen=True)
class NewRows:
    """New rows read by partitions for a saved forest (pass 1 done): what a scoring
    pipeline needs of its table before any work (rows, cells, fingerprint)."""

    data: Any  # distforest.io.ingest.Ingested
    id_column: str | None

    @property
    def n_samples(self) -> int:
        return self.data.encoding.n_samples

    @property
    def cells(self) -> int:
        return self.n_samples * len(self.data.encoding.features)

    def fingerprint(self) -> str:
        return str(self.data.encoding.fingerprint)


def read_new_rows(forest: Any, data: str, id_column: str | None,
                  na_values: tuple[str, ...]) -> NewRows:  # fmt: skip
    """Pass 1 over ``data``'s partitions, for the forest's feature columns (and the IDs).

    Raises
    ------
    InputError
        A feature column of the model (or the ID column) is not there, or a
        value of those columns cannot be read (named with its file and row).
    """
    from distforest.io.ingest import read_partitioned
    from distforest.io.partitions import open_partitions

    names = [str(c) for c in forest.feature_names_in_]
    columns = open_partitions(data, na_values=na_values).columns
    absent = [c for c in [*names, *([id_column] if id_column else [])] if c not in columns]
    if absent:
        raise InputError(f"{data}: the model needs column(s) {absent} that are not there; "
                         f"available: {', '.join(list(columns)[:20])}")  # fmt: skip
    other = tuple(c for c in columns if c not in names and c != id_column)
    ingested = read_partitioned(data, drop=other, na_values=na_values, min_rows=1, id=id_column)
    return NewRows(ingested, id_column)


def _new_table(model_path: str, encoding: Any, id_column: str | None, frame: Any,
               part: str) -> tuple[Any, Any]:  # fmt: skip
    """The saved forest (read once per worker) and one partition as its new rows' table."""
    from distforest.apps.scoring import new_rows_table
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.io.summaries import typed_partition

    typed = typed_partition(frame, encoding)
    forest = _model(model_path, ProximityForest.load)
    if not len(typed):
        return forest, None
    try:
        return forest, new_rows_table(forest, typed, id_column=id_column)
    except InputError as exc:
        raise InputError(f"{part}: {exc}") from None


def _numbered(result: Any, id_column: str | None, start: int) -> Any:
    if id_column is None:  # the rows' numbers in the whole table
        result["row"] += start
    return result


def _score_rows(model_path: str, encoding: Any, id_column: str | None, options: dict[str, Any],
                frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """One partition scored against a saved forest (``distforest score``'s columns)."""
    from distforest.apps.scoring import score_rows
    from distforest.parallel.execution import execution

    forest, table = _new_table(model_path, encoding, id_column, frame, part)
    if table is None:
        return None
    with execution(client="synchronous"):  # in this worker: it is one task of many
        return _numbered(score_rows(forest, table, **options), id_column, start)


def _training(model_path: str, training: str | None, na_values: tuple[str, ...]) -> Any:
    from distforest.apps.scoring import training_features
    from distforest.forests.proximity_forest import ProximityForest

    forest = _model(model_path, ProximityForest.load)
    return training_features(model_path, forest, training, na_values)


def _impute_rows(model_path: str, encoding: Any, id_column: str | None, options: dict[str, Any],
                 frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """One partition's missing cells filled from the model's training rows (a task)."""
    from distforest.apps.scoring import impute_rows
    from distforest.parallel.execution import execution

    forest, table = _new_table(model_path, encoding, id_column, frame, part)
    if table is None:
        return None
    X_train = _model(model_path, partial(_training, training=options["training"],
                                         na_values=options["na_values"]), "training")  # fmt: skip
    with execution(client="synchronous"):  # in this worker: it is one task of many
        imputed, cells = impute_rows(forest, table, X_train, method=options["method"],
                                     vote=options["vote"])  # fmt: skip
    imputed.attrs["cells"] = cells  # counted by the caller
    return _numbered(imputed, id_column, start)


def rows_to_csv(model_path: str, rows: NewRows, out: str, what: str,
                options: dict[str, Any]) -> tuple[int, str, int]:  # fmt: skip
    """Score (``what="score"``, ``options`` of :func:`~distforest.apps.scoring.score_rows`)
    or impute (``"impute"``: method, vote, training, na_values) the new rows by
    partitions into the CSV ``out``: ``(rows, path, cells filled)``."""
    data = rows.data
    blocks = data.partitions.frame.to_delayed()
    starts = np.concatenate([[0], np.cumsum(data.encoding.lengths)]).astype(np.int64)
    labels = [data.partitions.partition_name(k) for k in range(len(blocks))]
    work = _score_rows if what == "score" else _impute_rows
    return _write_pieces(blocks, starts, labels,
                         partial(work, model_path, data.encoding, rows.id_column, options),
                         out)  # fmt: skip


def _piece(work: Callable[..., Any], frame: Any, start: int, piece: str, part: str) -> Any:
    """A task: one partition's rows through ``work``, written as a piece without header;
    returns ``(rows, columns, cells filled)``."""
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


def _write_pieces(blocks: list[Any], starts: np.ndarray, names: list[str],
                  work: Callable[..., Any], out: str) -> tuple[int, str, int]:  # fmt: skip
    """Run ``work`` over the partitions, join the pieces under a header into ``out``:
    ``(rows, path, cells filled)``."""
    import dask
    import pandas as pd

    from distforest.io.writers import pieces_beside, publish_pieces

    remote = location.is_remote(out)
    dest = Path(tempfile.mkdtemp()) / "rows.csv" if remote else Path(out).resolve()
    try:
        with pieces_beside(dest) as folder:
            paths = [str(folder / f"part-{k:06d}.csv") for k in range(len(blocks))]
            task = dask.delayed(_piece, pure=False)
            done = dask.compute(*[task(work, block, int(starts[k]), paths[k], names[k])
                                  for k, block in enumerate(blocks)])  # fmt: skip
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


def predict_partitioned(model_path: str, data: str, out: str, drop: tuple[str, ...],
                        na_values: tuple[str, ...]) -> tuple[int, str]:  # fmt: skip
    """Predict every row of ``data`` with a saved k-NN model by partitions into the CSV
    ``out``: ``(rows, path)``.  Runs on dask's current scheduler (the command's cluster).

    Raises
    ------
    InputError
        DATA lacks a feature column of the model, or holds a value that is not
        a number where the model has one (or a label it was not fitted with).
    """
    import dask

    from distforest.io.partitions import open_partitions
    from distforest.jobs.model_columns import check_columns
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
    labels = [parts.partition_name(k) for k in range(len(blocks))]
    n, path, _ = _write_pieces(blocks, starts, labels,
                               partial(_knn_rows, model_path, attrs, names), out)  # fmt: skip
    return n, path


def score_partitioned(model_path: str, data: str, out: str, id_column: str | None,
                      method: str, na_values: tuple[str, ...]) -> tuple[int, str]:  # fmt: skip
    """``distforest score`` of a DATA read by partitions: ``(rows, path)``.

    A first pass of summaries (:func:`read_new_rows`) types the model's feature
    columns (and the ID column) as the in-memory reader would; then one task per
    partition scores it.
    """
    from distforest.forests.proximity_forest import ProximityForest

    rows = read_new_rows(ProximityForest.load(model_path), data, id_column, na_values)
    n, path, _ = rows_to_csv(model_path, rows, out, "score", {"method": method})
    return n, path
