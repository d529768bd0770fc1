"""Commands ``distforest similarity`` and ``distforest neighbors``, and the measure options.

The k-NN model commands are in :mod:`distforest.cli.knn_cmd`, k-NN pipelines
in :mod:`distforest.jobs.knn`; both reuse the options defined here.  The
measures, searches and stores are imported when a command runs (``--help``
stays quick); the option choices and defaults come from
:mod:`distforest.forests.constraints`.
"""

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    cluster_options,
    connect_kwargs,
    dry_run_option,
    id_dropped_option,
    input_options,
    parameter_option,
    run_job,
    tile_size_option,
)
from distforest.cli.progress import ProgressBars
from distforest.jobs import constraints as C

METRIC_HELP = (
    "Measure: " + ", ".join(C.METRICS) + "; minkowski:P and rbf:GAMMA take a number. "
    "Similarities (cosine, rbf, jaccard, russell-rao, sokal-michener) are stored as "
    "'similarity', distances as 'distance'."
)


def measure_options(func: Any) -> Any:
    options = [
        click.option("--metric", default="euclidean", show_default=True, help=METRIC_HELP),
        click.option("--normalize", type=click.Choice(["none", *C.NORMALIZATIONS]), default="none",
                     show_default=True,
                     help="range: rescale each feature to --feature-range from the data's min and "
                          "max; zscore: (x - mean) / std."),
        click.option("--feature-range", nargs=2, type=float, default=(0.0, 1.0),
                     show_default=True, metavar="LOW HIGH", help="Interval of --normalize range."),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def k_option(default: int, help: str) -> Any:
    return parameter_option("k", C.SECTION_PARAMETERS["neighbors.k"], default=default, help=help)


def cluster_kw(options: dict[str, Any]) -> dict[str, Any]:
    keys = ("scheduler", "cluster", "workers", "threads", "memory_limit")
    return connect_kwargs({k: options.pop(k, None) for k in keys})


def bars(ctx: click.Context) -> ProgressBars:
    return ProgressBars(enabled=not (ctx.obj or {}).get("quiet", False))


@click.command("similarity")
@click.argument("input", metavar="INPUT")
@click.option("--out", required=True, metavar="STORE.zarr", help="Zarr store to write.")
@click.option("--reference", metavar="FILE",
              help="Columns of the matrix: rows of this table (default: INPUT against itself, "
                   "symmetric, upper triangle computed and mirrored).")  # fmt: skip
@measure_options
@id_dropped_option
@input_options
@tile_size_option(C.PAIRWISE_TILE)
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@dry_run_option
@cluster_options
@click.pass_context
def similarity(ctx: click.Context, input: str, out: str, reference: str | None, metric: str,
               normalize: str, feature_range: tuple[float, float], drop: tuple[str, ...],
               na_values: tuple[str, ...], tile_size: int, overwrite: bool, dry_run: bool,
               **options: Any) -> None:  # fmt: skip
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
    from distforest.jobs.similarity import SimilarityJob

    job = SimilarityJob(input=input, out=out, reference=reference, metric=metric,
                        normalize=normalize, feature_range=feature_range, drop=drop,
                        na_values=na_values, tile_size=tile_size, overwrite=overwrite,
                        connect=cluster_kw(options))  # fmt: skip
    run_job(ctx.obj or {"quiet": False}, job, dry_run)


@click.command("neighbors")
@click.argument("input", metavar="INPUT")
@click.option(
    "--out",
    required=True,
    metavar="STORE.zarr",
    help="Zarr store with neighbor_index and neighbor_distance (sample, neighbor).",
)
@k_option(10, "Neighbours per row (the row itself excluded).")
@click.option(
    "--reference",
    metavar="FILE",
    help="Search among the rows of this table instead of INPUT's own rows.",
)
@measure_options
@click.option(
    "--algorithm",
    type=click.Choice(C.ALGORITHMS),
    default="auto",
    show_default=True,
    help="auto: k-d tree for Minkowski distances on <= 15 features, else brute tiles.",
)
@id_dropped_option
@input_options
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Query rows per task.")
@click.option(
    "--tile-size",
    type=click.IntRange(min=C.MIN_TILE),
    default=C.NEIGHBOR_TILE,
    show_default=True,
    help="Candidate rows per tile of the brute search.",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@dry_run_option
@cluster_options
@click.pass_context
def neighbors(ctx: click.Context, input: str, out: str, k: int, reference: str | None,
              metric: str, normalize: str, feature_range: tuple[float, float], algorithm: str,
              drop: tuple[str, ...], na_values: tuple[str, ...], batch_size: int | None,
              tile_size: int, overwrite: bool, dry_run: bool,
              **options: Any) -> None:  # fmt: skip
    """Find the k nearest rows of every row of INPUT; never forms the n x n matrix.

    Similarities s are ranked as distances 1 - s.  A glob, a folder of table
    parts or a file over 32 MB is read by partitions on the workers (also for
    --reference), and each task's neighbours are written as they arrive: this
    process holds neither the rows nor the n x k answers.

    \b
    Example:
      distforest neighbors data.csv --metric euclidean --k 10 --out knn.zarr
    """
    from distforest.jobs.similarity import NeighborsJob

    job = NeighborsJob(input=input, out=out, reference=reference, k=k, metric=metric,
                       normalize=normalize, feature_range=feature_range, algorithm=algorithm,
                       drop=drop, na_values=na_values, batch_size=batch_size,
                       tile_size=tile_size, overwrite=overwrite,
                       connect=cluster_kw(options))  # fmt: skip
    run_job(ctx.obj or {"quiet": False}, job, dry_run)
