"""A k-NN model fitted from a table read by partitions: the driver never holds the rows.

``distforest knn fit TRAIN`` (and a k-NN pipeline's model) with TRAIN a
glob, a folder of parts or a large file
(:func:`distforest.jobs.inputs.partitioned_input`) runs as:

1. pass 1 of :func:`~distforest.io.ingest.read_partitioned` on the workers
   (every check of the in-memory reader, named with its part file, column
   and row), the encoding decided here from the summaries;
2. the task and the classes from each partition's distinct target values
   (a few per partition; all of them only for a classification of many
   classes), and the ``range`` scaler from each partition's column minima
   and maxima;
3. one task per partition encodes its rows as float64 (the numbers
   :func:`~distforest.io.load_table` gives), scales them, checks them for
   the measure and codes its targets; the rows are written, rechunked to
   whole Zarr chunks, as the model store's ``X_fit`` and ``y_fit``.

A k-NN model is its training rows: the saved arrays hold the values the
one-file fit saves (``range`` min/max are exact by parts), so predictions
are the same.  ``zscore``'s mean and variance and ``mahalanobis``'s
covariance are merged from the partitions' moments: equal to the one-file
fit's to rounding, not bit for bit.  The forest metrics (``rf-proximity``,
``rfgap``, ``beta``, ``simforest``, ``smerf``) grow their forest from a
temporary run store written from ``X_fit`` (:data:`STORED_FORESTS`,
:func:`_grown_forest`); ``smerf``'s distances stay the user's file, read by
the tree tasks and copied into the model by blocks, as from one file.
``--select``, which needs every row at once in memory, is refused
(:func:`whole_table_reason`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from distforest import location
from distforest.errors import InputError, ParameterError
from distforest.forests.targets import MAX_AUTO_CLASSES, resolve_task

#: Rows per chunk of the saved ``X_fit`` and ``y_fit`` of a model fitted by partitions.
MODEL_ROWS = 20_000
#: Every forest metric (its forest grown from rows in a run store), with the type of those
#: rows: the one the forest's fit converts an array to (a ProximityForest's trees read
#: float32; the beta, simforest and smerf similarities give their forest float64 rows).
STORED_FORESTS: dict[str, type[np.floating[Any]]] = {
    "rf-proximity": np.float32,
    "rfgap": np.float32,
    "beta": np.float64,
    "simforest": np.float64,
    "smerf": np.float64,
}


def whole_table_reason(params: dict[str, Any]) -> str | None:
    """Why these k-NN parameters need the whole training table in memory (None: they don't)."""
    if params.get("select") is not None:
        return ("--select cross-validates k-NN models on subsets of the rows (scikit-learn's "
                "SequentialFeatureSelector takes one array)")  # fmt: skip
    return None


def check_partitioned_fit(source: str, params: dict[str, Any]) -> None:
    """Refuse, before any work, parameters a fit by partitions cannot honour."""
    reason = whole_table_reason(params)
    if reason is not None:
        raise ParameterError(
            f"{source} is read by partitions (a glob, a folder of parts or a file over 32 MB), "
            f"but {reason}; fit from one file that fits in memory, or use a measure such as "
            "'euclidean' without --select"
        )


def _distinct(y: np.ndarray) -> np.ndarray | None:
    """A task: the partition's distinct targets, or None if more than a classifier's auto cap."""
    values = np.unique(y)
    return values if values.size <= MAX_AUTO_CLASSES else None


def _min_max(X: np.ndarray) -> np.ndarray:
    """A task: a partition's column minima and maxima (NaN ignored), shape (2, d)."""
    if not len(X):
        return np.full((2, X.shape[1]), np.nan)
    with warnings.catch_warnings():  # an all-missing column: NaN, as scikit-learn's
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.vstack([np.nanmin(X, axis=0), np.nanmax(X, axis=0)])


def _moments(X: np.ndarray) -> np.ndarray:
    """A task: a partition's per-column count, mean and sum of squared deviations (NaN
    ignored), shape (3, d)."""
    count = np.sum(~np.isnan(X), axis=0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, np.nansum(X, axis=0) / np.maximum(count, 1), 0.0)
    m2 = np.nansum((X - mean) ** 2, axis=0)
    return np.vstack([count, mean, m2])


def _scatter(X: np.ndarray, scaler: Any) -> tuple[int, np.ndarray, np.ndarray]:
    """A task: a partition's rows (scaled), their mean and their scatter matrix."""
    if scaler is not None and len(X):
        X = scaler.transform(X)
    if not len(X):
        return 0, np.zeros(X.shape[1]), np.zeros((X.shape[1], X.shape[1]))
    mean = X.mean(axis=0)
    centred = X - mean
    return len(X), mean, centred.T @ centred


def fitted_measure(metric: str, params: dict[str, Any] | None, X: Any, scaler: Any) -> Any:
    """The measure fitted on the model's rows: ``mahalanobis``'s inverse covariance from the
    partitions' scatter matrices (Chan et al.'s merge; equal to one-file fit's to rounding)."""
    import dask

    from distforest.forests.measures import parse_metric

    d = int(X.shape[1])
    measure = parse_metric(metric, params)
    if measure.name != "mahalanobis" or measure.VI is not None:
        return measure.fitted(np.empty((0, d)))  # rbf's gamma; the values checked by tasks
    parts = dask.compute(*[dask.delayed(_scatter)(b, scaler) for b in X.to_delayed()[:, 0]])
    n, mean, m2 = 0, np.zeros(d), np.zeros((d, d))
    for count, m, s in parts:
        if count:
            delta = m - mean
            m2 = m2 + s + np.outer(delta, delta) * n * count / (n + count)
            mean = mean + delta * count / (n + count)
            n += count
    if n < 2:
        raise InputError("mahalanobis needs at least 2 reference rows for a covariance")
    cov = m2 / (n - 1)
    # missing values make it NaN: the rows' tasks then say where they are
    VI = np.linalg.pinv(cov) if np.isfinite(cov).all() else np.full((d, d), np.nan)
    return replace(measure, VI=VI)


def fitted_scaler(normalize: str | None, feature_range: Any, X: Any) -> Any:
    """The scikit-learn scaler of ``normalize``, fitted from per-partition summaries."""
    import dask

    from distforest.forests.measures import make_scaler

    scaler = make_scaler(normalize, feature_range)
    if scaler is None:
        return None
    blocks = X.to_delayed()[:, 0]
    if normalize == "range":  # min and max by parts are exact: fitted on the two rows
        parts = dask.compute(*[dask.delayed(_min_max)(b) for b in blocks])
        found = np.vstack(parts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            bounds = np.vstack([np.nanmin(found[0::2], axis=0), np.nanmax(found[1::2], axis=0)])
        scaler.fit(bounds)
        scaler.n_samples_seen_ = int(X.shape[0])
        return scaler
    moments = dask.compute(*[dask.delayed(_moments)(b) for b in blocks])
    count, mean, m2 = np.zeros(X.shape[1]), np.zeros(X.shape[1]), np.zeros(X.shape[1])
    for c, m, s in moments:  # Chan et al.'s merge of partial moments
        total = count + c
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = np.where(total > 0, m - mean, 0.0)
            share = np.where(total > 0, c / np.maximum(total, 1), 0.0)
        mean = mean + delta * share
        m2 = m2 + s + delta**2 * count * share
        count = total
    scaler.mean_ = mean
    scaler.var_ = var = m2 / np.maximum(count, 1)
    # a constant column is left as it is, by scikit-learn's rule: a variance within the
    # rounding of its sums, or a scale too small to divide by
    eps = np.finfo(np.float64).eps
    scale = np.sqrt(var)
    constant = (var <= count * eps * var + (count * mean * eps) ** 2) | (scale < 10 * eps)
    scale[constant] = 1.0
    scaler.scale_ = scale
    scaler.n_samples_seen_ = int(X.shape[0])
    scaler.n_features_in_ = int(X.shape[1])
    return scaler


def _task_and_classes(data: Any, task: str) -> tuple[str, np.ndarray | None]:
    """The resolved task and, for classification, the sorted classes."""
    import dask
    from sklearn.utils.multiclass import type_of_target

    enc = data.encoding
    if enc.target_kind == "labels":
        values: np.ndarray | None = np.asarray(enc.target_labels, dtype=object)
    else:
        found = dask.compute(*[dask.delayed(_distinct)(b) for b in data.y.to_delayed()])
        many = any(f is None for f in found)
        values = None if many else np.unique(np.concatenate([np.empty(0, data.y.dtype), *found]))
        if values is None and task == "classification":  # every class, as asked
            values = np.unique(data.y.map_blocks(np.unique, dtype=data.y.dtype).compute())
    if values is None:  # more distinct values than a classifier's auto cap
        return resolve_task(task, np.arange(MAX_AUTO_CLASSES + 2) + 0.5, enc.target), None
    task = resolve_task(task, values, enc.target)
    if task not in ("classification", "regression"):
        raise InputError(f"k-NN needs a target column to predict; got task {task!r}")
    if task == "regression":
        return task, None
    kind = type_of_target(values)
    if kind in ("continuous", "continuous-multioutput"):
        raise InputError(
            f"Unknown label type: {kind} target (e.g. {values.flat[0]!r}); KNNClassifier "
            "needs class labels: use KNNRegressor for numeric targets"
        )
    return task, values


def _rows_block(X: np.ndarray, scaler: Any, measure: Any, names: tuple[str, ...],
                part_names: tuple[str, ...], starts: np.ndarray,
                block_info: Any = None) -> np.ndarray:  # fmt: skip
    """A task: one partition's rows scaled as the model sees them, checked for the measure."""
    from distforest.forests.measures import check_values

    k = block_info[0]["chunk-location"][0]
    if scaler is not None and len(X):
        X = np.ascontiguousarray(scaler.transform(X), dtype=np.float64)
    if measure is not None:  # (a forest metric takes any values its trees take)
        check_values(measure, X, part_names[k], names, int(starts[k]))
    return X


def _checked(block: np.ndarray) -> None:
    """A task: nothing (its input block's checks have run)."""
    return None


def check_blocks(*arrays: Any) -> None:
    """Compute every block of these lazy arrays, keeping nothing: their checks run
    (on the current dask scheduler) before anything is written."""
    import dask

    blocks = [b for a in arrays for b in a.to_delayed().ravel()]
    dask.compute(*[dask.delayed(_checked)(b) for b in blocks])


def _parts(data: Any) -> tuple[tuple[str, ...], np.ndarray]:
    """The names of a table's partitions (part files) and their first global rows."""
    lengths = data.encoding.lengths
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    names = data.part_names or tuple(data.partitions.partition_name(k)
                                     for k in range(len(lengths)))  # fmt: skip
    return names, starts


def scaled_rows(data: Any, scaler: Any, measure: Any) -> Any:
    """A table's rows as a model sees them, lazy (one task per partition): float64,
    scaled by ``scaler``, checked for ``measure`` (a bad value named with its part
    file, column and global row)."""
    part_names, starts = _parts(data)
    names = tuple(str(c) for c in data.encoding.features)
    return data.X.map_blocks(_rows_block, scaler, measure, names, part_names, starts,
                             dtype=np.float64)  # fmt: skip


def _targets_block(y: np.ndarray, classes: np.ndarray | None, labels: bool,
                   part_names: tuple[str, ...], starts: np.ndarray, target: str,
                   block_info: Any = None) -> np.ndarray:  # fmt: skip
    """A task: one partition's targets as the model keeps them (class codes, or float64)."""
    if classes is not None:
        return y.astype(np.int64) if labels else np.searchsorted(classes, y).astype(np.int64)
    values = y.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        k = block_info[0]["chunk-location"][0]
        raise InputError(
            f"{part_names[k]}: the target {target!r} holds {values[bad[0]]!r} at row "
            f"{int(starts[k]) + int(bad[0])}; KNNRegressor needs finite targets: drop those rows"
        )
    return values


def read_training(source: str, target: str | None, drop: tuple[str, ...] = (),
                  na_values: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """Pass 1 over the training table's partitions (on the current dask scheduler): its
    :class:`~distforest.io.ingest.Ingested`, the features as float64 rows."""
    from distforest.io.ingest import read_partitioned

    return read_partitioned(source, target=target, drop=drop, na_values=na_values,
                            dtype=np.float64)  # fmt: skip


def fit_partitioned(
    source: str,
    target: str,
    task: str,
    params: dict[str, Any],
    out: str,
    overwrite: bool,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    attrs: dict[str, Any] | None = None,
    client: Any = None,
) -> tuple[Any, str, int]:
    """Fit a k-NN model on ``source`` read by partitions and save it; on the current
    dask scheduler (the command's cluster).

    Parameters
    ----------
    source : str
        A glob, a folder of parts or a large file.
    target, task, params, out, overwrite, attrs
        As :func:`distforest.jobs.knn_model.fit_and_save_model`.
    drop, na_values
        As :func:`distforest.io.load_table`.
    client : distributed.Client, optional
        Where a forest metric (:data:`STORED_FORESTS`) grows its trees.

    Returns
    -------
    model, task, n_rows
        The fitted model without its rows (they are in the store), the resolved
        task and the rows fitted on.

    Raises
    ------
    ParameterError
        Parameters that need the whole table (:func:`whole_table_reason`).
    InputError
        A bad value, named with its part file, column and row of the table.
    """
    check_partitioned_fit(source, params)
    return fit_ingested(read_training(source, target, drop, na_values), task, params, out,
                        overwrite, attrs, client)  # fmt: skip


def fit_ingested(data: Any, task: str, params: dict[str, Any], out: str, overwrite: bool,
                 attrs: dict[str, Any] | None = None,
                 client: Any = None) -> tuple[Any, str, int]:  # fmt: skip
    """:func:`fit_partitioned` of a table whose pass 1 is done (:func:`read_training`)."""
    import dask.array as da

    from distforest.apps.knn import KNNClassifier, KNNRegressor, model_attrs
    from distforest.apps.knn import write_fitted_parameters as write_parameters
    from distforest.forests.forest_similarity import make_similarity
    from distforest.jobs.knn_model import check_knn_size
    from distforest.store.inputs import PendingInput
    from distforest.store.run_store import RunStore

    enc = data.encoding
    n, d = enc.n_samples, len(enc.features)
    # a forest metric's trees within the computing and memory limits, as from one file
    check_knn_size(PendingInput(data), None, "auto", str(params.get("metric")),
                   int(params.get("n_estimators", 100)))  # fmt: skip
    task, classes = _task_and_classes(data, task)
    model: Any = (KNNClassifier if task == "classification" else KNNRegressor)(**params)
    model._validated()
    if model.n_neighbors > n:
        raise ParameterError(
            f"n_neighbors={model.n_neighbors} but only {n} training rows "
            f"(n_samples = {n}); use a smaller n_neighbors"
        )
    names = tuple(str(c) for c in enc.features)
    model.n_features_in_, model.feature_names_in_ = d, names
    model.support_ = np.ones(d, dtype=bool)
    forest = model.metric in STORED_FORESTS
    model.similarity_ = make_similarity(model.metric, model.n_estimators, model.random_state,
                                        model.metric_params)  # fmt: skip
    model._check_similarity(model.similarity_)  # simforest needs classes
    model.scaler_ = fitted_scaler(model.normalize, model.feature_range, data.X)
    model.measure_ = None if forest else fitted_measure(model.metric, model.metric_params,
                                                         data.X, model.scaler_)  # fmt: skip
    if classes is not None:
        model.classes_ = classes
    part_names, starts = _parts(data)
    X = scaled_rows(data, model.scaler_, model.measure_)
    y = data.y.map_blocks(_targets_block, classes, enc.target_kind == "labels", part_names,
                          starts, str(enc.target),
                          dtype=np.int64 if classes is not None else np.float64)  # fmt: skip
    # every check runs before anything is written: a task failing while others write
    # would leave their chunks behind the removal of the half-written model
    check_blocks(X, y)
    categories = {k: [str(v) for v in c] for k, c in enc.categories.items()}
    extra = {"target": enc.target, "source": str(data.source), "categories": categories,
             **(attrs or {})}  # fmt: skip
    rs = RunStore.create(out, attrs=model_attrs(model, extra), overwrite=overwrite)
    try:
        rows = max(1, min(MODEL_ROWS, n))
        X_fit: Any = rs.group.create_array("X_fit", shape=(n, d), chunks=(rows, d), dtype="float64",
                                      dimension_names=("sample", "feature"))  # fmt: skip
        y_fit: Any = rs.group.create_array("y_fit", shape=(n,), chunks=(rows,), dtype=y.dtype,
                                      dimension_names=("sample",))  # fmt: skip
        # rechunked to the Zarr chunks: each task writes whole chunks no other task touches
        sources: list[Any] = [X.rechunk((rows, d)), y.rechunk((rows,))]
        da.store(sources, [X_fit, y_fit], lock=False)
        # a forest grown from X_fit, as the one-file fit grows it from its rows
        with _grown_forest(data, X_fit, model, client) if forest else contextlib.nullcontext():
            write_parameters(model, rs)
    except BaseException:
        location.remove_tree(rs.path)  # no half-written model left under OUT
        raise
    rs.mark_complete()
    return model, task, n


@contextlib.contextmanager
def _grown_forest(data: Any, X_fit: Any, model: Any, client: Any) -> Iterator[None]:
    """Grow the metric's forest (the similarity's ``fit_table``) from the model's rows
    (``X_fit``, as the type :data:`STORED_FORESTS` gives) and the targets (labels as
    codes of the sorted labels) in a temporary run store; inside the block the model's
    similarity holds it (its per-row arrays the store's, copied by tasks a chunk at a
    time when the model is saved); the store is removed after.

    The store names the features ``0 .. d-1`` with no categories and no target name,
    as the one-file fit's forest sees its array.
    """
    import dask.array as da

    from distforest.jobs.inputs import temporary_store
    from distforest.parallel.execution import execution
    from distforest.store.inputs import write_ingested

    d = int(X_fit.shape[1])
    encoding = replace(data.encoding, features=tuple(str(j) for j in range(d)), categories={},
                       target=None)  # fmt: skip
    rows = replace(data, encoding=encoding,
                   X=da.from_zarr(X_fit).astype(STORED_FORESTS[model.metric]))  # fmt: skip
    with temporary_store() as path, execution(client):
        stored = write_ingested(rows, path)
        model.similarity_.fit_table(stored)
        yield
