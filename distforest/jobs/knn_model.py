"""k-NN models as jobs' steps: check the size, fit and save a model, predict to a CSV.

Shared by ``distforest knn fit|predict`` and k-NN pipelines
(:mod:`distforest.jobs.knn`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.forests.constraints import FOREST_METRICS
from distforest.jobs.inputs import PARTITIONED_BYTES, partitioned_input
from distforest.jobs.model_columns import feature_matrix

if TYPE_CHECKING:
    from distforest.apps.knn import KNNClassifier, KNNRegressor


#: A model whose training rows take more bytes is read by the workers only (as a file of
#: that size would be): ``knn predict`` then runs by partitions whatever DATA's size.
MODEL_BYTES = PARTITIONED_BYTES


def normalize_choice(value: str) -> str | None:
    return None if value == "none" else value


def check_distances(distances: str | None, metric: str) -> None:
    """``--distances`` goes with ``--metric smerf`` (the observed distances it learns from)."""
    if (distances is None) == (metric == "smerf"):
        raise ParameterError(
            "--metric smerf needs --distances D.npy (the observed distances of TRAIN's rows)"
            if distances is None
            else f"--distances is for --metric smerf, not --metric {metric}; remove it"
        )


def check_knn_size(table: Any, select: str | None, n_features: Any, metric: str,
                   trees: int) -> None:  # fmt: skip
    """Before any work: features to select at most the table's; a forest metric's trees
    within the computing and memory limits (:func:`distforest.jobs.plan.check_size`)."""
    from distforest.jobs.estimates import check_size, estimate_forest_metric

    d = table.n_features
    if select and isinstance(n_features, int) and not isinstance(n_features, bool):
        if n_features > d:
            raise ParameterError(
                f"--n-features {n_features} is more than the {d} feature(s) of "
                f"{table.source}; give at most {d}, a fraction, or auto"
            )
    if metric.split(":")[0] in FOREST_METRICS:
        plan = estimate_forest_metric(table.n_samples, d, trees)
        check_size(f"the k-NN forest metric on {table.source} ({table.n_samples:,} rows)",
                   plan, f"--trees ({trees:,})")  # fmt: skip


def fit_and_save_model(
    table: Any,
    task: str,
    params: dict[str, Any],
    out: str,
    overwrite: bool,
    attrs: dict[str, Any] | None = None,
) -> tuple[KNNClassifier | KNNRegressor, str]:
    """Fit a k-NN model on a table's rows and save it with what predicting needs.

    Parameters
    ----------
    table : distforest.io.Table or RowSource
        With its target.  Rows in a store (a table read by partitions) are
        fitted by chunks on dask's current scheduler, their model rows copied
        into ``out`` by tasks.
    task : {"auto", "classification", "regression"}
    params : dict
        :class:`KNNClassifier` / :class:`KNNRegressor` parameters.  A forest
        metric fits its trees on the current default client (the model keeps
        ``client=None``, so that it can be cloned by the feature selection).
    out : str
        Model store to create (nothing is left under it if the fit or the
        writing fails).
    overwrite : bool

    Returns
    -------
    model, task
        The fitted model and the resolved task.
    """
    from distforest import location
    from distforest.apps.knn import KNNClassifier, KNNRegressor, save_model
    from distforest.forests.targets import resolve_task
    from distforest.store.source import open_source

    source = open_source(table)
    labels = source.target_classes()
    values = np.asarray(labels, dtype=object) if labels is not None else source.read_y()
    task = resolve_task(task, values, source.target_name)
    if task not in ("classification", "regression"):
        raise InputError(f"k-NN needs a target column to predict; got task {task!r}")
    cls = KNNClassifier if task == "classification" else KNNRegressor
    model = cls(**params).fit(source)
    categories = {k: [str(v) for v in c] for k, c in source.categories.items()}
    extra = {"target": source.target_name, "source": str(source.source),
             "categories": categories, **(attrs or {})}  # fmt: skip
    kept = location.exists(out) and not overwrite  # refused by save_model: not ours
    try:
        save_model(model, out, overwrite=overwrite, attrs=extra)
    except BaseException:
        if not kept and location.exists(out):
            location.remove_tree(out)  # no half-written model left under OUT
        raise
    return model, task


def predict_to_csv(
    model_path: str,
    data: str,
    out: str,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    *,
    by_parts: bool | None = None,
    connect: dict[str, Any] | None = None,
) -> tuple[int, str]:
    """Predict every row of ``data`` with a saved model; write ``row, <target>`` to a CSV.

    One path for every DATA (:mod:`distforest.jobs.row_pieces`): its chunks (the
    whole table in this process, or one task per partition on dask's current
    scheduler, the model read once per worker) are predicted and written as
    pieces of one CSV.

    Parameters
    ----------
    by_parts : bool, optional
        Read DATA by partitions (None: :func:`predicts_by_partitions`).
    connect : dict, optional
        Where a search in this process runs (:func:`~distforest.parallel.placement.place`
        by the cells); None: the current execution.

    Returns
    -------
    n_rows, path
    """
    import contextlib
    from functools import partial

    from distforest.jobs.row_pieces import row_frames, write_pieces
    from distforest.parallel.placement import place
    from distforest.store.run_store import RunStore

    by_parts = predicts_by_partitions(model_path, data) if by_parts is None else by_parts
    rs = RunStore.open(model_path, require_complete=True)
    names = tuple(str(c) for c in rs.attrs["feature_names"])
    rows = row_frames(data, names, drop, na_values, by_parts=by_parts)
    where: Any = contextlib.nullcontext()
    if rows.in_process and connect is not None:  # the search of the one chunk, by its size
        cells = len(rows.blocks[0]) * len(names) + int(np.prod(rs.array("X_fit").shape))
        where = place(cells, connect)
    with where:
        n, path, _ = write_pieces(rows, partial(_knn_rows, model_path, rs.attrs, names,
                                                rows.in_process), out)  # fmt: skip
    return n, path


def _knn_rows(model_path: str, attrs: dict[str, Any], names: tuple[str, ...], in_process: bool,
              frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """``row, <target>`` of one chunk of new rows, predicted by a saved k-NN model (in a
    task: the model read once per worker, the search in that worker)."""
    import pandas as pd

    from distforest.apps.knn import load_model
    from distforest.jobs.row_pieces import model_once
    from distforest.parallel.execution import execution

    X = feature_matrix(frame, part, attrs, names, start)
    if X.shape[0] == 0:  # an empty part still has its place
        prediction: Any = np.empty(0)
    elif in_process:  # the search placed by the caller
        prediction = load_model(model_path).predict(X)
    else:
        with execution(client="synchronous"):  # in this worker: it is one task of many
            prediction = model_once(model_path, load_model).predict(X)
    rows = np.arange(start, start + X.shape[0])
    return pd.DataFrame({"row": rows, attrs.get("target") or "prediction": prediction})


def predicts_by_partitions(model_path: str, data: str) -> bool:
    """Whether ``knn predict`` runs by partitions on the workers: for a DATA read by
    partitions, or a model whose training rows are larger than such a file (a model
    fitted from a large table is read by the workers, not here)."""
    from distforest.store.run_store import RunStore

    if partitioned_input(data):
        return True
    rows = RunStore.open(model_path, require_complete=True).array("X_fit")
    return int(np.prod(rows.shape)) * rows.dtype.itemsize > MODEL_BYTES
