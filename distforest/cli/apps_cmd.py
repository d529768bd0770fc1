"""The forest commands: ``proximity``, the answers of a forest (outliers, mislabels, MDS,
importances) and ``score``; each builds its job (:mod:`distforest.jobs.specs`) and runs
it, the job imported when the command runs (``--help`` stays quick)."""

from __future__ import annotations

from functools import partial
from typing import Any

import click

from distforest.cli.options import (
    FOREST_DEFAULTS,
    forest_options,
    id_option,
    input_options,
    job_command,
    leaf_bound_option,
    model_option,
    option_group,
    out_option,
    overwrite_option,
    parameter_option,
    tile_size_option,
)
from distforest.jobs import constraints as C
from distforest.jobs import specs

#: What the forest answers take: INPUT, the class column, the table's and the forest's options.
_common = option_group([
    click.argument("input", metavar="INPUT"),
    click.option("--target", metavar="COLUMN",
                 help="Class column; omit for an unsupervised forest."),
    overwrite_option("Replace existing output files."),
    id_option("the first column of the output, named as it"),
    input_options, forest_options(),
])  # fmt: skip


def _top(help: str) -> Any:
    return click.option("--top", type=click.IntRange(min=0), default=10, show_default=True,
                        help=help)  # fmt: skip


@click.command()
@_common
@model_option
@out_option("FILE.csv", "CSV of scores, one row per row.")
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the scores.")
@job_command(partial(specs.forest_answer, "outliers"))
def outliers() -> None:
    """Outlier scores of INPUT's rows (R randomForest's outlier(), matrix-free).

    Per class: raw = n / sum of squared proximities to the class, then
    (raw - median) / MAD.  Column outlier_flag marks the rows above their
    class's far-out fence (Tukey's, on log1p(score - the class's lowest)): at
    most 0.1 % of a clean table's rows.
    """


@click.command()
@_common
@out_option("FILE.csv", "Ranked CSV of suspects.")
@_top("Print this many top suspects.")
@job_command(partial(specs.forest_answer, "mislabels"))
def mislabels() -> None:
    """Rank INPUT's rows by how likely their --target label is wrong.

    The out-of-bag (RF-GAP) vote of each row's neighbours against its label,
    combined with its outlier score.
    """


@click.command()
@_common
@model_option
@out_option("FILE.csv", "CSV of coordinates.")
@parameter_option("components", C.SECTION_PARAMETERS["mds.components"])
@click.option("--dissimilarity", type=click.Choice(["sqrt", "linear"]), default="sqrt",
              show_default=True, help="sqrt: scale sqrt(1 - P) (Breiman); linear: 1 - "
                                      "P.")  # fmt: skip
@click.option("--plot", metavar="FILE.png",
              help="Also save a scatter of the first two dimensions, outliers "
                   "circled.")  # fmt: skip
@job_command(partial(specs.forest_answer, "mds"))
def mds() -> None:
    """Classical MDS of the proximities of INPUT's rows (matrix-free Lanczos)."""


@click.command()
@_common
@out_option("FILE.csv", "CSV of importances, one row per feature.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True,
              help="Shuffles of each feature for the permutation importance.")  # fmt: skip
@click.option("--test-size", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.25, show_default=True,
              help="Fraction of the rows held out to measure permutations on.")  # fmt: skip
@_top("Print this many features.")
@job_command(partial(specs.forest_answer, "importances"))
def importances() -> None:
    """Feature importances of a forest on INPUT: impurity-based and by permutation.

    The forest is fitted on the rows not held out (--test-size); impurity
    importances come from its trees, permutation importances are the drop of
    accuracy (R² for regression) on the held-out rows when a column is shuffled.
    """


@click.command()
@click.argument("model", metavar="MODEL")
@click.argument("input", metavar="INPUT")
@out_option("FILE.csv", "CSV of scores, one row per row.")
@click.option("--training", metavar="TABLE",
              help="With a model file fitted elsewhere: the table it was fitted on (its rows "
                   "are the training rows the new rows are compared with).")  # fmt: skip
@click.option("--target", metavar="COLUMN", help="With --training: its target column.")
@id_option("the first column of the output")
@click.option("--method", type=click.Choice(["rfgap", "original", "oob"]), default="rfgap",
              show_default=True, help="Proximity weighing the training targets.")  # fmt: skip
@overwrite_option("Replace an existing output file.")
@input_options
@job_command(specs.score)
def score() -> None:
    """Score INPUT's rows against a saved forest (MODEL.zarr) without refitting it.

    MODEL may also be a model fitted elsewhere (a skops file of a scikit-learn
    forest, a LightGBM text model, an XGBoost JSON/UBJSON model; never a pickle)
    with --training TABLE, the rows it was fitted on, and --target COLUMN.

    Per row: the forest's prediction, the proximity-weighted prediction from
    the training targets, and the outlier score on the training rows' scale.
    The model's proximities are not recomputed: only the new rows' leaves.
    A glob, a folder of parts or a file over 32 MB is read by partitions on the
    cluster: each task scores its partition and writes a piece of the CSV.
    """


@click.command()
@click.argument("input", metavar="INPUT")
@out_option("STORE.zarr", "Zarr store to write.")
@click.option("--target", metavar="COLUMN", help="Target column; omit for an unsupervised forest.")
@input_options
@id_option("the store's sample coordinates")
@forest_options()
@click.option("--method", type=click.Choice(["original", "oob", "rfgap", "kerf", "boosted"]),
              default="original", show_default=True,
              help="original: share of trees with a common leaf; oob: the same over trees where "
                   "both rows are out of bag; rfgap: RF-GAP (rows sum to 1, not symmetric); "
                   "kerf: each shared leaf weighted by one over its size (rows sum to 1); "
                   "boosted (--model of a boosted ensemble): trees weighted by their mean "
                   "absolute leaf value.")  # fmt: skip
@parameter_option("top_k", C.SECTION_PARAMETERS["proximity.top_k"], metavar="K")
@leaf_bound_option
@click.option("--dense", is_flag=True, help="With --top-k: write the n x n matrix as well.")
@tile_size_option(FOREST_DEFAULTS["tile_size"])
@model_option
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the matrix.")
@overwrite_option()
@job_command(specs.proximity)
def proximity() -> None:
    """Fit a forest on INPUT and write its proximity matrix to a Zarr store.

    INPUT is a CSV/TSV, Parquet, .npy file or Zarr store.  Text columns
    become ordinal category codes; missing values are allowed (the trees
    route them).  Small inputs with no --scheduler, --cluster or cluster size
    given run in this process (no cluster to start; the same tasks, the same
    results).
    """
