"""Commands ``distforest similarity`` and ``distforest neighbors``, and the measure options.

The k-NN model commands (:mod:`distforest.cli.knn_cmd`) reuse the options
defined here; their choices and defaults come from
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
