"""Commands ``distforest knn fit`` and ``distforest knn predict``: k-NN models as Zarr stores."""

from __future__ import annotations

import time
from typing import Any

import click

from distforest.cli.options import (
    cluster_options,
    dry_run_option,
    id_dropped_option,
    input_options,
    seed_option,
    show,
)
from distforest.cli.similarity_cmd import cluster_kw, k_option, measure_options
from distforest.forests.constraints import ALGORITHMS, FOREST_METRICS


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
def knn_fit(train: str, target: str, out: str, k: int, weights: str, task: str, metric: str,
            normalize: str, feature_range: tuple[float, float], algorithm: str,
            select: str | None, n_features: str, n_estimators: int, distances: str | None,
            random_state: int, drop: tuple[str, ...], na_values: tuple[str, ...],
            overwrite: bool, dry_run: bool, **options: Any) -> None:  # fmt: skip
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
    from distforest.io import load_table
    from distforest.jobs import knn_model
    from distforest.jobs.inputs import partitioned_input
    from distforest.parallel.placement import place
    from distforest.store.run_store import check_can_create

    start = time.perf_counter()
    knn_model.check_distances(distances, metric)
    params = {"n_neighbors": k, "weights": weights, "metric": metric,
              "normalize": knn_model.normalize_choice(normalize), "feature_range": feature_range,
              "algorithm": algorithm, "select": select,
              "n_features_to_select": _n_features(n_features), "n_estimators": n_estimators,
              "random_state": random_state}  # fmt: skip
    if distances is not None:
        params["metric_params"] = {"distances": distances}
    if partitioned_input(train):  # a glob, a folder of parts, a large file: by partitions
        _fit_partitioned(train, target, task, params, out, overwrite, drop, na_values, dry_run,
                         options)  # fmt: skip
        return
    table = load_table(train, target=target, drop=drop, na_values=na_values)
    check_can_create(out, overwrite)
    knn_model.check_knn_size(table, select, _n_features(n_features), metric, n_estimators)
    if dry_run:  # the plan of a k-NN pipeline with this model (cross-validation not counted)
        from distforest.jobs.knn import KNNJob

        model = {"task": task, "k": k, "weights": weights, "metric": metric,
                 "normalize": normalize, "n_estimators": n_estimators,
                 "random_state": random_state, "model": out}  # fmt: skip
        job = KNNJob(input=train, target=target, drop=drop, na_values=na_values, knn=model,
                     connect=cluster_kw(options), name="knn fit")  # fmt: skip
        show(job.plan(), out)
        return
    tasks = metric in FOREST_METRICS or select is not None  # else the fit only keeps the rows
    with place(table.X.size if tasks else 0, cluster_kw(options)):
        model, task = knn_model.fit_and_save_model(table, task, params, out, overwrite)
    kept = [n for n, s in zip(table.feature_names, model.support_, strict=True) if s]
    click.echo(
        f"k-NN {task} model (k={k}, {weights}, {metric}, normalize {normalize}) on "
        f"{table.n_samples} rows in {time.perf_counter() - start:.1f} s\n"
        f"  features: {', '.join(kept)}\n  model:    {out}"
    )


def _fit_partitioned(train: str, target: str, task: str, params: dict[str, Any], out: str,
                     overwrite: bool, drop: tuple[str, ...], na_values: tuple[str, ...],
                     dry_run: bool, options: dict[str, Any]) -> None:  # fmt: skip
    """``knn fit`` of a TRAIN read by partitions (into a temporary store, on the named
    cluster or a LocalCluster): the same fit, by chunks."""
    import numpy as np

    from distforest.jobs.knn_model import check_knn_size, fit_and_save_model
    from distforest.parallel.cluster import connect
    from distforest.store.run_store import check_can_create
    from distforest.store.source import opened

    start = time.perf_counter()
    check_can_create(out, overwrite)
    if dry_run:
        _show_partitions("knn fit", train, na_values, "each summarise a partition, then tasks "
                         "that each encode a partition's rows, then tasks that each scale and "
                         f"check a chunk of rows and write it into {out}")  # fmt: skip
        return
    with (
        connect(**cluster_kw(options)) as client,
        client.as_current(),
        opened(train, target=target, drop=drop, na_values=na_values, partitions=True,
               dtype=np.float64) as source,
    ):  # fmt: skip
        check_knn_size(source, params["select"], params["n_features_to_select"],
                       str(params["metric"]), int(params["n_estimators"]))  # fmt: skip
        model, task = fit_and_save_model(source, task, params, out, overwrite)
    kept = [n for n, s in zip(model.feature_names_in_, model.support_, strict=True) if s]
    click.echo(
        f"k-NN {task} model (k={model.n_neighbors}, {model.weights}, {model.metric}, normalize "
        f"{model.normalize or 'none'}) on {source.n_samples} rows read by partitions in "
        f"{time.perf_counter() - start:.1f} s\n"
        f"  features: {', '.join(kept)}\n  model:    {out}"
    )


def _show_partitions(what: str, data: str, na_values: tuple[str, ...], tasks: str) -> None:
    """The dry run of a command reading ``data`` by partitions: what its tasks do."""
    from distforest.io.partitions import open_partitions

    parts = open_partitions(data, na_values=na_values)
    click.echo(f"{what} of {parts.source}: read by partitions, {parts.npartitions} tasks that "
               f"{tasks}")  # fmt: skip


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
def knn_predict(model_path: str, data: str, out: str, drop: tuple[str, ...],
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
    from distforest.jobs.knn_model import predict_to_csv, predicts_by_partitions
    from distforest.jobs.outputs import check_new_file
    from distforest.parallel.cluster import connect

    start = time.perf_counter()
    check_new_file(out, overwrite)
    # a glob, a folder of parts, a large file (or a model of more rows than such a file):
    # by partitions, on the cluster; else in this process, the search placed by its size
    by_parts = predicts_by_partitions(model_path, data)
    if dry_run:
        _show_prediction(model_path, data, out, drop, na_values, by_parts, options)
        return
    if by_parts:
        with connect(**cluster_kw(options)) as client, client.as_current():
            n, written = predict_to_csv(model_path, data, out, drop, na_values, by_parts=True)
    else:
        n, written = predict_to_csv(model_path, data, out, drop, na_values, by_parts=False,
                                    connect=cluster_kw(options))  # fmt: skip
    how = " by partitions" if by_parts else ""
    click.echo(f"predicted {n} rows{how} in {time.perf_counter() - start:.1f} s\n"
               f"  predictions: {written}")  # fmt: skip


def _show_prediction(model_path: str, data: str, out: str, drop: tuple[str, ...],
                     na_values: tuple[str, ...], by_parts: bool,
                     options: dict[str, Any]) -> None:  # fmt: skip
    """The dry run of ``knn predict``: the partitions' tasks, or the search's plan."""
    if by_parts:
        _show_partitions("knn predict", data, na_values, "each read a partition, predict its "
                         "rows with the model (read once per worker) and write a piece of "
                         f"{out}, joined in order")  # fmt: skip
        return
    import numpy as np

    from distforest.apps.knn import load_model
    from distforest.jobs.command_plans import neighbors_plan
    from distforest.jobs.row_pieces import row_frames

    model = load_model(model_path)
    rows = row_frames(data, model.feature_names_in_, drop, na_values, by_parts=False)
    (n, d), m = (len(rows.blocks[0]), model.n_features_in_), model.X_fit_.shape[0]
    show(neighbors_plan(data, n, m, d, model.n_neighbors, str(model.metric), model.algorithm,
                        model.batch_size, n * d + int(np.prod(model.X_fit_.shape)),
                        cluster_kw(options), out, forest=model.similarity_ is not None,
                        what="knn predict"), out)  # fmt: skip


# -- k-NN pipelines (sections input, neighbors, knn, output) --------------------------------

#: Allowed values of k-NN pipeline keys (merged into the pipeline's CHOICES).
