"""Commands ``distforest knn fit`` and ``distforest knn predict``: k-NN models as Zarr stores.

A shell: each command's options become a job (:func:`~distforest.jobs.specs.knn_fit`,
:func:`~distforest.jobs.specs.knn_predict`), run or planned (``--dry-run``).
"""

from __future__ import annotations

import click

from distforest.cli.options import (
    id_dropped_option,
    input_options,
    job_command,
    out_option,
    overwrite_option,
    seed_option,
)
from distforest.cli.similarity_cmd import k_option, measure_options
from distforest.jobs import constraints as C
from distforest.jobs import specs


@click.group("knn")
def knn() -> None:
    """k-nearest-neighbour classification and regression (fit a model, predict with it)."""


@knn.command("fit")
@click.argument("train", metavar="TRAIN")
@click.option("--target", required=True, metavar="COLUMN", help="Column to predict.")
@out_option("MODEL.zarr", "Model store to write.")
@k_option(5, "Neighbours that vote.")
@click.option("--weights", type=click.Choice(["uniform", "distance"]), default="uniform",
              show_default=True, help="distance: weights 1/d^2 (exact matches take the "
                                      "vote).")  # fmt: skip
@click.option("--task", type=click.Choice(["auto", "classification", "regression"]),
              default="auto", show_default=True,
              help="auto: classification for labels and integers with few values.")  # fmt: skip
@measure_options
@click.option("--algorithm", type=click.Choice(C.ALGORITHMS), default="auto", show_default=True)
@click.option("--select", type=click.Choice(["forward", "backward"]), default=None,
              help="Sequential feature selection (5-fold cross-validated k-NN).")  # fmt: skip
@click.option("--n-features", default="auto", show_default=True, metavar="N",
              help="Features the selection keeps: auto (half), an integer or a "
                   "fraction.")  # fmt: skip
@click.option("--trees", "n_estimators", type=click.IntRange(min=1), default=100,
              show_default=True, help="Trees of a forest metric (" + ", ".join(C.FOREST_METRICS)
              + ").")  # fmt: skip
@click.option("--distances", metavar="D.npy|D.zarr",
              help="With --metric smerf: the observed n x n distances of TRAIN's rows, in its "
                   "row order (NaN = not observed); the model keeps a copy.")  # fmt: skip
@seed_option("random_state of a forest metric.")
@id_dropped_option
@input_options
@overwrite_option("Replace an existing model store.")
@job_command(specs.knn_fit)
def knn_fit() -> None:
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


@knn.command("predict")
@click.argument("model_path", metavar="MODEL.zarr")
@click.argument("data", metavar="DATA")
@out_option("FILE.csv", "Predictions, one row per row.")
@id_dropped_option
@input_options
@overwrite_option("Replace an existing output file.")
@job_command(specs.knn_predict)
def knn_predict() -> None:
    """Predict the target of every row of DATA with a saved k-NN model.

    DATA needs the model's feature columns (in any order); the target column
    and other columns are ignored.  The neighbour search runs in this process
    for small inputs and no cluster option, else on the (named) cluster.  A glob,
    a folder of parts or a file over 32 MB is read by partitions on the cluster:
    each task predicts its partition and writes a piece of the CSV; so is any
    DATA for a model whose training rows take more than 32 MB.
    """
