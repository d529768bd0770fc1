"""Commands ``distforest similarity``, ``neighbors`` and ``knn fit | predict`` (k-NN models
as Zarr stores), and their measure options, whose choices and defaults come from
:mod:`distforest.forests.constraints`.  Each command builds its job
(:mod:`distforest.jobs.specs`) and runs it.
"""

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    id_dropped_option,
    input_options,
    job_command,
    option_group,
    out_option,
    overwrite_option,
    parameter_option,
    seed_option,
    tile_size_option,
)
from distforest.jobs import constraints as C
from distforest.jobs import specs

METRIC_HELP = (
    "Measure: " + ", ".join(C.METRICS) + "; minkowski:P and rbf:GAMMA take a number. "
    "Similarities (cosine, rbf, jaccard, russell-rao, sokal-michener) are stored as "
    "'similarity', distances as 'distance'."
)

measure_options = option_group([
    click.option("--metric", default="euclidean", show_default=True, help=METRIC_HELP),
    click.option("--normalize", type=click.Choice(["none", *C.NORMALIZATIONS]), default="none",
                 show_default=True,
                 help="range: rescale each feature to --feature-range from the data's min and "
                      "max; zscore: (x - mean) / std."),
    click.option("--feature-range", nargs=2, type=float, default=(0.0, 1.0),
                 show_default=True, metavar="LOW HIGH", help="Interval of --normalize range."),
])  # fmt: skip


def k_option(default: int, help: str) -> Any:
    return parameter_option("k", C.SECTION_PARAMETERS["neighbors.k"], default=default, help=help)


@click.command("similarity")
@click.argument("input", metavar="INPUT")
@out_option("STORE.zarr", "Zarr store to write.")
@click.option("--reference", metavar="FILE",
              help="Columns of the matrix: rows of this table (default: INPUT against itself, "
                   "symmetric, upper triangle computed and mirrored).")  # fmt: skip
@measure_options
@id_dropped_option
@input_options
@tile_size_option(C.PAIRWISE_TILE)
@overwrite_option()
@job_command(specs.similarity)
def similarity() -> None:
    """Write the similarity or distance matrix of the rows of INPUT to a Zarr store.

    Tile by tile, one Dask task per tile; never the whole matrix in memory.
    Normalisation and Mahalanobis' covariance are fitted on the reference
    rows (--reference, else INPUT).  Use --drop for the target and identifiers.
    A glob, a folder of table parts or a file over 32 MB is read by partitions
    on the workers (also for --reference); this process never holds the rows.
    Safe to run again: an interrupted run resumes, a finished one is not repeated.

    \b
    Example:
      distforest similarity data.csv --metric cosine --normalize range --out S.zarr --drop Class
    """


@click.command("neighbors")
@click.argument("input", metavar="INPUT")
@out_option("STORE.zarr", "Zarr store with neighbor_index and neighbor_distance (sample, "
                          "neighbor).")  # fmt: skip
@k_option(10, "Neighbours per row (the row itself excluded).")
@click.option("--reference", metavar="FILE",
              help="Search among the rows of this table instead of INPUT's own rows.")  # fmt: skip
@measure_options
@click.option("--algorithm", type=click.Choice(C.ALGORITHMS), default="auto", show_default=True,
              help="auto: k-d tree for Minkowski distances on <= 15 features, else brute "
                   "tiles.")  # fmt: skip
@id_dropped_option
@input_options
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Query rows per task.")
@click.option("--tile-size", type=click.IntRange(min=C.MIN_TILE), default=C.NEIGHBOR_TILE,
              show_default=True, help="Candidate rows per tile of the brute search.")  # fmt: skip
@overwrite_option()
@job_command(specs.neighbors)
def neighbors() -> None:
    """Find the k nearest rows of every row of INPUT; never forms the n x n matrix.

    Similarities s are ranked as distances 1 - s.  A glob, a folder of table
    parts or a file over 32 MB is read by partitions on the workers (also for
    --reference), and each task's neighbours are written as they arrive: this
    process holds neither the rows nor the n x k answers.

    \b
    Example:
      distforest neighbors data.csv --metric euclidean --k 10 --out knn.zarr
    """


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
