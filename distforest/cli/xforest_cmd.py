"""Commands ``distforest xforest`` (beta-similarity to Zarr) and ``distforest cluster``.

Each builds its job (:mod:`distforest.jobs.specs`, :mod:`distforest.jobs.xforest`)
and runs it; the job is imported when a command runs, so that ``--help`` answers
at once.
"""

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    id_dropped_option,
    input_options,
    job_command,
    out_option,
    overwrite_option,
    parameter_option,
    seed_option,
)
from distforest.jobs import constraints as C
from distforest.jobs import specs

#: ``XForest().get_params()``, from its one declaration, so that ``--help`` needs no
#: estimator (tests/test_startup.py checks that they are the estimator's own defaults).
XFOREST_DEFAULTS: dict[str, Any] = {name: p.default for name, p in C.XFOREST_PARAMETERS.items()}


def _parameter(name: str, **override: Any) -> Any:
    return parameter_option(name, C.XFOREST_PARAMETERS[name], **override)


@click.command()
@click.argument("input", metavar="INPUT")
@out_option("STORE.zarr", "Zarr store to write.")
@id_dropped_option
@input_options
@_parameter("n_estimators")
@_parameter("n_directions")
@_parameter("mode")
@_parameter("leaf_size")
@_parameter("beta")
@click.option("--kind", type=click.Choice(C.SIMILARITY_KINDS), default=C.SIMILARITY_KINDS[0],
              show_default=True,
              help="beta: mean of beta**edges; basic: share of trees with a common "
                   "leaf.")  # fmt: skip
@_parameter("normalize")
@seed_option("random_state: same seed, same matrix.")
@_parameter("batch_size", help=C.FOREST_PARAMETERS["batch_size"].help)
@_parameter("tile_size")
@click.option("--target", metavar="COLUMN",
              help="A class column to leave out of the features (kept for scoring "
                   "clusters).")  # fmt: skip
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the matrix.")
@overwrite_option()
@job_command(specs.xforest)
def xforest() -> None:
    """Fit X-Forest on INPUT and write its beta-similarity matrix to a Zarr store.

    INPUT: CSV/TSV, Parquet, .npy or Zarr, numeric features without missing
    values (use --drop for identifiers and labels).  A glob of files, a folder
    of Parquet parts or a file over 32 MB is read by partitions on the workers.
    """


@click.command(name="cluster")
@click.argument("store", type=click.Path())
@click.option("--method", type=click.Choice(C.CLUSTER_METHODS), required=True)
@parameter_option("k", C.SECTION_PARAMETERS["clustering.k"])
@click.option("--eps", type=click.FloatRange(0, 2, min_open=True),
              help="DBSCAN radius in the distance sqrt(2 - 2 S).")  # fmt: skip
@parameter_option("min_samples", C.SECTION_PARAMETERS["clustering.min_samples"])
@parameter_option("n_init", C.SECTION_PARAMETERS["clustering.n_init"])
@click.option("--kind", type=click.Choice(["beta", "basic"]), default="beta", show_default=True)
@click.option("--matrix-free", is_flag=True,
              help="Use S @ V from the stored trees instead of the stored matrix.")  # fmt: skip
@seed_option("random_state of the clustering: same seed, same labels.")
@out_option("FILE.csv", "Labels, one row per row.")
@click.option("--truth", metavar="FILE:COLUMN", help="True classes to score against.")
@click.option("--plot", metavar="FILE.png", help="Picture of the matrix ordered by cluster.")
@overwrite_option("Replace existing output files.")
@job_command(specs.cluster)
def cluster_cmd() -> None:
    """Cluster the rows of an X-Forest STORE (kernel k-means, spectral or DBSCAN)."""
