"""``distforest proximity``: fit a forest and write its proximity matrix.

Only click and the light option modules are imported here; the job (Dask,
scikit-learn, Zarr) is imported when the command runs, so that
``distforest proximity --help`` answers at once.
"""

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    FOREST_DEFAULTS,
    FOREST_KEYS,
    cluster_options,
    connect_kwargs,
    dry_run_option,
    forest_options,
    id_option,
    input_options,
    leaf_bound_option,
    model_option,
    parameter_option,
    pop_keys,
    run_job,
    tile_size_option,
)
from distforest.jobs import constraints as C


@click.command()
@click.argument("input", metavar="INPUT")
@click.option("--out", required=True, metavar="STORE.zarr", help="Zarr store to write.")
@click.option("--target", metavar="COLUMN", help="Target column; omit for an unsupervised forest.")
@input_options
@id_option("the store's sample coordinates")
@forest_options()
@click.option(
    "--method",
    type=click.Choice(["original", "oob", "rfgap", "kerf", "boosted"]),
    default="original",
    show_default=True,
    help="original: share of trees with a common leaf; oob: the same over trees where both "
    "rows are out of bag; rfgap: RF-GAP (rows sum to 1, not symmetric); kerf: each shared "
    "leaf weighted by one over its size (rows sum to 1); boosted (--model of a boosted "
    "ensemble): trees weighted by their mean absolute leaf value.",
)
@parameter_option("top_k", C.SECTION_PARAMETERS["proximity.top_k"], metavar="K")
@leaf_bound_option
@click.option("--dense", is_flag=True,
              help="With --top-k: write the n x n matrix as well.")  # fmt: skip
@tile_size_option(FOREST_DEFAULTS["tile_size"])
@model_option
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the matrix.")
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@cluster_options
@dry_run_option
@click.pass_obj
def proximity(obj: dict[str, Any], input: str, out: str, target: str | None, method: str,
              top_k: int | None, dense: bool, plot: str | None, overwrite: bool,
              dry_run: bool, model_file: str | None, leaf_bound: int | str | None,
              **options: Any) -> None:  # fmt: skip
    """Fit a forest on INPUT and write its proximity matrix to a Zarr store.

    INPUT is a CSV/TSV, Parquet, .npy file or Zarr store.  Text columns
    become ordinal category codes; missing values are allowed (the trees
    route them).  Small inputs with no --scheduler, --cluster or cluster size
    given run in this process (no cluster to start; the same tasks, the same
    results).
    """
    from distforest.jobs import check_model_file, parent
    from distforest.jobs.proximity import ProximityJob

    if dense and top_k is None:
        raise click.UsageError("--dense goes with --top-k K (without it the matrix is dense)")
    if plot and top_k is not None and not dense:
        raise click.UsageError("--plot draws the n x n matrix: add --dense to write it too")

    if model_file is not None:  # a pickle or an untrusted type refused before any plan
        check_model_file(model_file)
    input_kw = pop_keys(options, ("drop", "na_values"))
    input_kw["id"] = options.pop("id_column", None)
    forest = pop_keys(options, FOREST_KEYS)
    forest["tile_size"] = options.pop("tile_size")
    if click.get_current_context().get_parameter_source(
            "leaf_bound") is not click.core.ParameterSource.DEFAULT:  # fmt: skip
        forest["leaf_bound"] = leaf_bound  # (given only: the specs of earlier runs unchanged)
    job = ProximityJob(
        input=input, out=out, target=target, forest=forest, method=method, top_k=top_k,
        dense=dense, plot=plot, model=model_file,
        overwrite=overwrite, connect=connect_kwargs(options), **input_kw,
        report_dir=parent(out),  # report.json / report.md beside the store
    )  # fmt: skip
    run_job(obj, job, dry_run)
