"""Commands ``distforest knn fit`` and ``distforest knn predict``: k-NN models as Zarr stores."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from distforest.cli.options import cluster_options, input_options, seed_option
from distforest.cli.outputs import check_new_file, write_csv
from distforest.cli.similarity_cmd import (
    cluster_kw,
    k_option,
    measure_options,
    normalize_choice,
)
from distforest.errors import InputError, ParameterError
from distforest.forests.constraints import ALGORITHMS, FOREST_METRICS

if TYPE_CHECKING:
    from distforest.apps.knn import KNNClassifier, KNNRegressor


@click.group("knn")
def knn() -> None:
    """k-nearest-neighbour classification and regression (fit a model, predict with it)."""


@knn.command("fit")
@click.argument("train", metavar="TRAIN")
@click.option("--target", required=True, metavar="COLUMN", help="Column to predict.")
@click.option("--out", required=True, metavar="MODEL.zarr", help="Model store to write.")
@k_option(5, "Neighbours that vote.")
@click.option(
    "--weights",
    type=click.Choice(["uniform", "distance"]),
    default="uniform",
    show_default=True,
    help="distance: weights 1/d^2 (exact matches take the vote).",
)
@click.option(
    "--task",
    type=click.Choice(["auto", "classification", "regression"]),
    default="auto",
    show_default=True,
    help="auto: classification for labels and integers with few values.",
)
@measure_options
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="auto", show_default=True)
@click.option(
    "--select",
    type=click.Choice(["forward", "backward"]),
    default=None,
    help="Sequential feature selection (5-fold cross-validated k-NN).",
)
@click.option(
    "--n-features",
    default="auto",
    show_default=True,
    metavar="N",
    help="Features the selection keeps: auto (half), an integer or a fraction.",
)
@click.option("--trees", "n_estimators", type=click.IntRange(min=1), default=100,
              show_default=True, help="Trees of a forest metric (" + ", ".join(FOREST_METRICS)
              + ").")  # fmt: skip
@click.option("--distances", metavar="D.npy|D.zarr",
              help="With --metric smerf: the observed n x n distances of TRAIN's rows, in its "
                   "row order (NaN = not observed); the model keeps a copy.")  # fmt: skip
@seed_option("random_state of a forest metric.")
@input_options
@click.option("--overwrite", is_flag=True, help="Replace an existing model store.")
@cluster_options
def knn_fit(train: str, target: str, out: str, k: int, weights: str, task: str, metric: str,
            normalize: str, feature_range: tuple[float, float], algorithm: str,
            select: str | None, n_features: str, n_estimators: int, distances: str | None,
            random_state: int, drop: tuple[str, ...], na_values: tuple[str, ...],
            overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Fit a k-NN model on TRAIN and save it (Zarr, no pickle).

    METRIC may also be a forest similarity (rf-proximity, rfgap, beta,
    simforest) or smerf, the distance a SMERF learns from the features and
    --distances: its trees are fitted with the model (in this process for a
    small TRAIN, else on the named cluster or a LocalCluster) and saved in the
    model store, which `knn predict` reads.

    \b
    Example:
      distforest knn fit train.csv --target price --k 3 --weights distance \\
          --normalize range --out model.zarr
    """
    from distforest.io import load_table
    from distforest.parallel.placement import place
    from distforest.store.run_store import check_can_create

    start = time.perf_counter()
    if (distances is None) == (metric == "smerf"):
        raise ParameterError(
            "--metric smerf needs --distances D.npy (the observed distances of TRAIN's rows)"
            if distances is None
            else f"--distances is for --metric smerf, not --metric {metric}; remove it"
        )
    table = load_table(train, target=target, drop=drop, na_values=na_values)
    check_can_create(out, overwrite)
    check_knn_size(table, select, _n_features(n_features), metric, n_estimators)
    params = {"n_neighbors": k, "weights": weights, "metric": metric,
              "normalize": normalize_choice(normalize), "feature_range": feature_range,
              "algorithm": algorithm, "select": select,
              "n_features_to_select": _n_features(n_features), "n_estimators": n_estimators,
              "random_state": random_state}  # fmt: skip
    if distances is not None:
        params["metric_params"] = {"distances": distances}
    tasks = metric in FOREST_METRICS or select is not None  # else the fit only keeps the rows
    with place(table.X.size if tasks else 0, cluster_kw(options)):
        model, task = fit_and_save_model(table, task, params, out, overwrite)
    kept = [n for n, s in zip(table.feature_names, model.support_, strict=True) if s]
    click.echo(
        f"k-NN {task} model (k={k}, {weights}, {metric}, normalize {normalize}) on "
        f"{table.n_samples} rows in {time.perf_counter() - start:.1f} s\n"
        f"  features: {', '.join(kept)}\n  model:    {out}"
    )


def check_knn_size(table: Any, select: str | None, n_features: Any, metric: str,
                   trees: int) -> None:  # fmt: skip
    """Before any work: features to select at most the table's; a forest metric's trees
    within the computing and memory limits (:func:`distforest.cli.plan.check_size`)."""
    from distforest.cli.plan import check_size, estimate_forest_metric

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
    """Fit a k-NN model on a loaded table and save it with what predicting needs.

    Parameters
    ----------
    table : distforest.io.Table
        With the target in ``table.y``.
    task : {"auto", "classification", "regression"}
    params : dict
        :class:`KNNClassifier` / :class:`KNNRegressor` parameters.  A forest
        metric fits its trees on the current default client (the model keeps
        ``client=None``, so that it can be cloned by the feature selection).
    out : str
        Model store to create.
    overwrite : bool

    Returns
    -------
    model, task
        The fitted model and the resolved task.
    """
    from distforest.apps.knn import KNNClassifier, KNNRegressor, save_model
    from distforest.forests.targets import resolve_task

    task = resolve_task(task, table.y, table.target_name)
    if task not in ("classification", "regression"):
        raise InputError(f"k-NN needs a target column to predict; got task {task!r}")
    cls = KNNClassifier if task == "classification" else KNNRegressor
    model = cls(**params).fit(table, table.y)
    categories = {k: [str(v) for v in c] for k, c in table.categories.items()}
    extra = {"target": table.target_name, "source": str(table.source), "categories": categories,
             **(attrs or {})}  # fmt: skip
    save_model(model, out, overwrite=overwrite, attrs=extra)
    return model, task


def _n_features(value: str) -> str | int | float:
    if value == "auto":
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    raise click.BadParameter(f"expected auto, an integer or a fraction, got {value!r}")


@knn.command("predict")
@click.argument("model_path", metavar="MODEL.zarr")
@click.argument("data", metavar="DATA")
@click.option("--out", required=True, metavar="FILE.csv", help="Predictions, one row per row.")
@input_options
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@cluster_options
def knn_predict(model_path: str, data: str, out: str, drop: tuple[str, ...],
                na_values: tuple[str, ...], overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Predict the target of every row of DATA with a saved k-NN model.

    DATA needs the model's feature columns (in any order); the target column
    and other columns are ignored.  The neighbour search runs in this process
    for small inputs and no cluster option, else on the (named) cluster.
    """
    from distforest.parallel.placement import cells_of, place

    start = time.perf_counter()
    check_new_file(out, overwrite)
    model, X, attrs = read_for_prediction(model_path, data, drop, na_values)
    with place(cells_of(X, model.X_fit_), cluster_kw(options)):
        n, written = write_predictions(model, X, attrs, out)
    click.echo(f"predicted {n} rows in {time.perf_counter() - start:.1f} s\n"
               f"  predictions: {written}")  # fmt: skip


def predict_to_csv(
    model_path: str,
    data: str,
    out: str,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
) -> tuple[int, str]:
    """Predict every row of ``data`` with a saved model; write ``row, <target>`` to a CSV.

    Returns
    -------
    n_rows, path
    """
    return write_predictions(*read_for_prediction(model_path, data, drop, na_values), out)


def read_for_prediction(
    model_path: str, data: str, drop: tuple[str, ...] = (), na_values: tuple[str, ...] = ()
) -> tuple[KNNClassifier | KNNRegressor, np.ndarray, dict[str, Any]]:
    """The saved model, the model's feature columns of ``data`` and the model's attributes."""
    from distforest.apps.knn import load_model
    from distforest.store.run_store import RunStore

    attrs = RunStore.open(model_path).attrs
    model = load_model(model_path)
    return model, _features(data, attrs, model.feature_names_in_, drop, na_values), attrs


def write_predictions(
    model: KNNClassifier | KNNRegressor, X: np.ndarray, attrs: dict[str, Any], out: str
) -> tuple[int, str]:
    """Predict the rows of ``X``; write ``row, <target>`` to a CSV: ``(n_rows, path)``."""
    import pandas as pd

    prediction = model.predict(X)
    frame = pd.DataFrame({"row": np.arange(X.shape[0]), attrs.get("target") or "prediction":
                          prediction})  # fmt: skip
    return X.shape[0], write_csv(frame, out)


def _features(
    data: str,
    attrs: dict[str, Any],
    names: tuple[str, ...],
    drop: tuple[str, ...],
    na_values: tuple[str, ...],
) -> np.ndarray:
    """The model's feature columns of DATA as numbers; text labels coded as when fitted."""
    import pandas as pd

    from distforest.io import read_frame

    frame = read_frame(data, na_values=na_values)
    frame.columns = [str(c) for c in frame.columns]
    frame = frame.drop(columns=[c for c in drop if c in frame.columns])
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise InputError(
            f"{data}: the model needs column(s) {missing} that are not there; "
            f"available: {', '.join(list(frame.columns)[:20])}"
        )
    fitted = attrs.get("categories", {})
    X = np.empty((len(frame), len(names)))
    for j, name in enumerate(names):
        col = frame[name]
        if name in fitted:
            code = {label: float(i) for i, label in enumerate(fitted[name])}
            labels = col.astype(str).where(col.notna())
            unseen = sorted(set(labels.dropna()) - set(code))
            if unseen:
                raise InputError(f"{data}: column {name!r} has label(s) {unseen[:5]} "
                                 "not seen when the model was fitted")  # fmt: skip
            X[:, j] = labels.map(code).astype(float).to_numpy()
            continue
        try:
            X[:, j] = pd.to_numeric(col).to_numpy(dtype=float)
        except (TypeError, ValueError) as exc:
            raise InputError(
                f"{data}: column {name!r} must be numeric as when fitted: {exc}"
            ) from None
    return X


# -- k-NN pipelines (sections input, neighbors, knn, output) --------------------------------

#: Allowed values of k-NN pipeline keys (merged into the pipeline's CHOICES).
