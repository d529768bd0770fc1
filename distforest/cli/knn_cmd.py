"""Commands ``distforest knn fit`` and ``distforest knn predict``: k-NN models as Zarr stores.

A shell: each command's options become a job (:func:`~distforest.jobs.knn.knn_fit_job`,
:func:`~distforest.jobs.knn_model.knn_predict_job`), run or planned (``--dry-run``)
by :func:`~distforest.cli.options.run_job`.
"""

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    cluster_options,
    dry_run_option,
    id_dropped_option,
    input_options,
    run_job,
    seed_option,
)
from distforest.cli.similarity_cmd import cluster_kw, k_option, measure_options
from distforest.jobs.knn_model import ALGORITHMS, FOREST_METRICS


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
@id_dropped_option
@input_options
@click.option("--overwrite", is_flag=True, help="Replace an existing model store.")
@dry_run_option
@cluster_options
@click.pass_obj
def knn_fit(obj: dict | None, train: str, target: str, out: str, k: int, weights: str,
            task: str, metric: str, normalize: str, feature_range: tuple[float, float],
            algorithm: str, select: str | None, n_features: str, n_estimators: int,
            distances: str | None, random_state: int, drop: tuple[str, ...],
            na_values: tuple[str, ...], overwrite: bool, dry_run: bool,
            **options: Any) -> None:  # fmt: skip
    """Fit a k-NN model on TRAIN and save it (Zarr, no pickle).

    METRIC may also be a forest similarity (rf-proximity, rfgap, beta,
    simforest) or smerf, the distance a SMERF learns from the features and
    --distances: its trees are fitted with the model (in this process for a
    small TRAIN, else on the named cluster or a LocalCluster) and saved in the
    model store, which `knn predict` reads.

    A glob, a folder of parts or a file over 32 MB is read by partitions on
    the cluster and fitted by chunks, the model's rows written into the model
    store by tasks (any metric; --select cross-validates on every row, read
    into this process).

    \b
    Example:
      distforest knn fit train.csv --target price --k 3 --weights distance \\
          --normalize range --out model.zarr
    """
    from distforest.jobs.knn import knn_fit_job

    model = {"task": task, "k": k, "weights": weights, "metric": metric,
             "normalize": normalize, "n_estimators": n_estimators,
             "random_state": random_state, "feature_range": list(feature_range),
             "algorithm": algorithm, "select": select, "n_features": _n_features(n_features),
             "distances": distances}  # fmt: skip
    job = knn_fit_job(train, target, out, model, cluster_kw(options), drop=drop,
                      na_values=na_values, overwrite=overwrite)  # fmt: skip
    run_job(obj or {"quiet": False}, job, dry_run)


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
@id_dropped_option
@input_options
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@dry_run_option
@cluster_options
@click.pass_obj
def knn_predict(obj: dict | None, model_path: str, data: str, out: str, drop: tuple[str, ...],
                na_values: tuple[str, ...], overwrite: bool, dry_run: bool,
                **options: Any) -> None:  # fmt: skip
    """Predict the target of every row of DATA with a saved k-NN model.

    DATA needs the model's feature columns (in any order); the target column
    and other columns are ignored.  The neighbour search runs in this process
    for small inputs and no cluster option, else on the (named) cluster.  A glob,
    a folder of parts or a file over 32 MB is read by partitions on the cluster:
    each task predicts its partition and writes a piece of the CSV; so is any
    DATA for a model whose training rows take more than 32 MB.
    """
    from distforest.jobs.knn_model import knn_predict_job

    job = knn_predict_job(model_path, data, out, cluster_kw(options), drop=drop,
                          na_values=na_values, overwrite=overwrite)  # fmt: skip
    run_job(obj or {"quiet": False}, job, dry_run)
