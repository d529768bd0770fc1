"""``distforest proximity``: fit a forest and write its proximity matrix.

Only click and the light option modules are imported here; the job (Dask,
scikit-learn, Zarr) is imported when the command runs, so that
``distforest proximity --help`` answers at once.
"""

from __future__ import annotations

import click

from distforest.cli.options import (
    FOREST_DEFAULTS,
    forest_options,
    id_option,
    input_options,
    job_command,
    leaf_bound_option,
    model_option,
    out_option,
    overwrite_option,
    parameter_option,
    tile_size_option,
)
from distforest.jobs import constraints as C
from distforest.jobs import specs


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
