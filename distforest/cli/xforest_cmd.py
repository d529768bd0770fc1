"""Commands ``distforest xforest`` (beta-similarity to Zarr) and ``distforest cluster``.

Only click and light modules are imported here; the job
(:mod:`distforest.jobs.xforest`: X-Forest, Dask, Zarr, clustering) is
imported when a command runs, so that ``--help`` answers at once.
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
    run_job,
    seed_option,
    tile_size_option,
    trees_option,
)
from distforest.jobs import constraints as C

#: ``XForest().get_params()``, written out so that ``--help`` needs no estimator
#: (tests/test_startup.py checks that they are the estimator's own defaults).
XFOREST_DEFAULTS: dict[str, Any] = {
    "batch_size": None,
    "beta": 0.9,
    "leaf_size": 10,
    "mode": "x",
    "n_directions": 2,
    "n_estimators": 1000,
    "normalize": True,
    "random_state": None,
    "tile_size": 2048,
}


@click.command()
@click.argument("input", metavar="INPUT")
@click.option("--out", required=True, metavar="STORE.zarr", help="Zarr store to write.")
@id_dropped_option
@input_options
@trees_option(XFOREST_DEFAULTS["n_estimators"])
@click.option(
    "--x",
    "n_directions",
    type=click.IntRange(min=1),
    default=XFOREST_DEFAULTS["n_directions"],
    show_default=True,
    help="X: random directions per tree (depth d splits on direction d mod X).",
)
@click.option(
    "--mode",
    type=click.Choice(C.MODES),
    default=XFOREST_DEFAULTS["mode"],
    show_default=True,
    help="standard: a fresh direction at every node (Dasgupta-Freund RP tree).",
)
@click.option(
    "--leaf-size",
    type=click.IntRange(min=1),
    default=XFOREST_DEFAULTS["leaf_size"],
    show_default=True,
    help="A node with at most this many rows is a leaf (the paper's tau is this + 1: it "
    "splits nodes of at least tau rows).",
)
@click.option(
    "--beta",
    type=click.FloatRange(0, 1),
    default=XFOREST_DEFAULTS["beta"],
    show_default=True,
    help="Similarity decay per edge between two leaves.",
)
@click.option(
    "--kind",
    type=click.Choice(C.SIMILARITY_KINDS),
    default=C.SIMILARITY_KINDS[0],
    show_default=True,
    help="beta: mean of beta**edges; basic: share of trees with a common leaf.",
)
@click.option(
    "--no-normalize",
    "normalize",
    flag_value=False,
    default=True,
    help="Skip the per-feature min-max normalisation.",
)
@seed_option("random_state: same seed, same matrix.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Trees per task [default: about 4 tasks per worker thread].",
)
@tile_size_option(XFOREST_DEFAULTS["tile_size"])
@click.option(
    "--target",
    metavar="COLUMN",
    help="A class column to leave out of the features (kept for scoring clusters).",
)
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the matrix.")
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@dry_run_option
@cluster_options
@click.pass_obj
def xforest(
    obj: dict[str, Any],
    input: str,
    out: str,
    drop: tuple[str, ...],
    na_values: tuple[str, ...],
    kind: str,
    target: str | None,
    plot: str | None,
    overwrite: bool,
    dry_run: bool,
    **options: Any,
) -> None:
    """Fit X-Forest on INPUT and write its beta-similarity matrix to a Zarr store.

    INPUT: CSV/TSV, Parquet, .npy or Zarr, numeric features without missing
    values (use --drop for identifiers and labels).  A glob of files, a folder
    of Parquet parts or a file over 32 MB is read by partitions on the workers.
    """
    from distforest.jobs.xforest import XForestJob

    keys = ("n_estimators", "n_directions", "mode", "leaf_size", "beta", "normalize",
            "random_state", "batch_size", "tile_size")  # fmt: skip
    forest = {k: options.pop(k) for k in keys}
    job = XForestJob(input=input, out=out, drop=drop, na_values=na_values, target=target,
                     forest=forest, kind=kind, plot=plot, overwrite=overwrite,
                     connect=connect_kwargs(options))  # fmt: skip
    run_job(obj, job, dry_run)


@click.command(name="cluster")
@click.argument("store", type=click.Path())
@click.option("--method", type=click.Choice(C.CLUSTER_METHODS), required=True)
@click.option(
    "--k", type=click.IntRange(min=1), help="Number of clusters (kernel-kmeans, spectral)."
)
@click.option(
    "--eps",
    type=click.FloatRange(0, 2, min_open=True),
    help="DBSCAN radius in the distance sqrt(2 - 2 S).",
)
@click.option(
    "--min-samples",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="DBSCAN: rows within eps (itself included) to be a core row.",
)
@click.option(
    "--n-init",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Kernel k-means restarts (the lowest objective wins).",
)
@click.option("--kind", type=click.Choice(["beta", "basic"]), default="beta", show_default=True)
@click.option(
    "--matrix-free",
    is_flag=True,
    help="Use S @ V from the stored trees instead of the stored matrix.",
)
@seed_option("random_state of the clustering: same seed, same labels.")
@click.option("--out", required=True, metavar="FILE.csv", help="Labels, one row per row.")
@click.option("--truth", metavar="FILE:COLUMN", help="True classes to score against.")
@click.option("--plot", metavar="FILE.png", help="Picture of the matrix ordered by cluster.")
@click.option("--overwrite", is_flag=True, help="Replace existing output files.")
@dry_run_option
@cluster_options
@click.pass_obj
def cluster_cmd(
    obj: dict[str, Any],
    store: str,
    kind: str,
    matrix_free: bool,
    truth: str | None,
    overwrite: bool,
    dry_run: bool,
    **options: Any,
) -> None:
    """Cluster the rows of an X-Forest STORE (kernel k-means, spectral or DBSCAN)."""
    from distforest.jobs.outputs import record_path
    from distforest.jobs.xforest import ClusterJob

    keys = ("method", "k", "eps", "min_samples", "n_init", "random_state", "out", "plot")
    clustering = {k: options.pop(k) for k in keys}
    job = ClusterJob(input=store, out=record_path(clustering["out"]), kind=kind,
                     matrix_free=matrix_free, truth=truth, clustering=clustering,
                     overwrite=overwrite, connect=connect_kwargs(options))  # fmt: skip
    run_job(obj, job, dry_run)
