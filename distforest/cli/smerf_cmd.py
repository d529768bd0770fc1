"""Commands ``distforest smerf fit / predict / importances``.

::

    distforest smerf fit X.csv --distances D.npy [--trees 100] [--max-features sqrt] [--seed 0] --out model.zarr
    distforest smerf predict model.zarr A.csv [--against B.csv] --out predicted.zarr
    distforest smerf importances model.zarr [--plot importances.png]

Every input is read and checked before anything is written: a bad D (not
square, not as long as X, all NaN, infinite, not symmetric) or bad rows stop
the command with exit code 3 and no output; an output that would not fit on
the disk (the model holds D; the predicted matrix is counted uncompressed)
stops it with exit code 6.  The model is built under a
temporary name and renamed into place only when complete, so a failed or
killed ``fit`` leaves no half-written model.

``fit`` on an X that is a glob, a folder of parts or a file over 32 MB reads
it by partitions on the workers (a named cluster, else a LocalCluster): the
checks run on the partitions (a bad value names its part file, column and
row), the rows go into a temporary store that the tree tasks read, and the
model is the one the same rows in one file give.
"""  # noqa: E501

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    cluster_options,
    connect_kwargs,
    dry_run_option,
    id_dropped_option,
    input_options,
    parse_max_features,
    run_job,
    seed_option,
    tile_size_option,
    trees_option,
)
from distforest.jobs import constraints as C

#: ``SMERF().get_params()``, written out so that ``--help`` needs no estimator
#: (tests/test_startup.py checks that they are the estimator's own defaults).
SMERF_DEFAULTS: dict[str, Any] = {
    "bootstrap": True,
    "max_depth": None,
    "max_features": "sqrt",
    "min_samples_leaf": 1,
    "n_estimators": 100,
    "oblique": False,
    "random_state": 0,
}
SMERF_KEYS = ("n_estimators", "max_features", "oblique", "max_depth", "min_samples_leaf",
              "bootstrap")  # fmt: skip


@click.group()
def smerf() -> None:
    """SMERF: learn a distance from features plus an observed distance matrix."""


@smerf.command("fit")
@click.argument("input", metavar="X")
@click.option(
    "--distances",
    required=True,
    metavar="D.npy|D.zarr",
    help="Observed n x n distances of the rows of X (NaN = pair not observed).",
)
@click.option("--out", required=True, metavar="MODEL.zarr", help="Model store to write.")
@id_dropped_option
@input_options
@trees_option(SMERF_DEFAULTS["n_estimators"])
@click.option(
    "--max-features",
    default=str(SMERF_DEFAULTS["max_features"]),
    show_default=True,
    callback=parse_max_features,
    help="Candidates per split: sqrt, log2, an integer or a fraction.",
)
@click.option(
    "--oblique", is_flag=True, help="Sparse random +-1 projections as candidates (as SPORF)."
)
@click.option("--max-depth", type=click.IntRange(min=1), default=None)
@click.option(
    "--min-samples-leaf",
    type=click.IntRange(min=1),
    default=SMERF_DEFAULTS["min_samples_leaf"],
    show_default=True,
)
@click.option(
    "--no-bootstrap",
    "bootstrap",
    flag_value=False,
    default=True,
    help="Every tree sees every row once.",
)
@seed_option("random_state: same seed, same model.")
@tile_size_option(C.SMERF_TILE)
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@dry_run_option
@cluster_options
@click.pass_obj
def fit_cmd(
    obj: dict[str, Any],
    input: str,
    distances: str,
    out: str,
    drop: tuple[str, ...],
    na_values: tuple[str, ...],
    random_state: int,
    tile_size: int,
    overwrite: bool,
    dry_run: bool,
    **options: Any,
) -> None:  # fmt: skip
    """Fit SMERF on the features X (CSV with a header, no target) and distances D."""
    from distforest.jobs.smerf import fit_job

    params = {**{k: options.pop(k) for k in SMERF_KEYS}, "random_state": random_state}
    job = fit_job(input, distances, out, params, drop=drop, na_values=na_values,
                  tile_size=tile_size, overwrite=overwrite,
                  connect=connect_kwargs(options))  # fmt: skip
    run_job(obj, job, dry_run)


@smerf.command("predict")
@click.argument("model_path", metavar="MODEL.zarr")
@click.argument("input", metavar="A")
@click.option(
    "--against", metavar="B", help="Columns of the matrix [default: the model's training rows]."
)
@click.option(
    "--out", required=True, metavar="STORE.zarr", help="Zarr store to write (2-D array 'distance')."
)
@id_dropped_option
@input_options
@tile_size_option(C.SMERF_TILE)
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@dry_run_option
@cluster_options
@click.pass_obj
def predict_cmd(
    obj: dict[str, Any],
    model_path: str,
    input: str,
    against: str | None,
    out: str,
    drop: tuple[str, ...],
    na_values: tuple[str, ...],
    tile_size: int,
    overwrite: bool,
    dry_run: bool,
    **options: Any,
) -> None:  # fmt: skip
    """Learned distances between the rows of A and those of B (or the training rows)."""
    from distforest.jobs.smerf import SmerfPredictJob

    job = SmerfPredictJob(input=input, model=model_path, against=against, out=out, drop=drop,
                          na_values=na_values, tile_size=tile_size, overwrite=overwrite,
                          connect=connect_kwargs(options))  # fmt: skip
    run_job(obj, job, dry_run)


@smerf.command("importances")
@click.argument("model_path", metavar="MODEL.zarr")
@click.option("--plot", metavar="FILE.png", help="Also save a bar chart.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --plot file.")
def importances_cmd(model_path: str, plot: str | None, overwrite: bool) -> None:
    """Print the feature importances stored in a SMERF model (and plot them)."""
    from distforest.jobs.smerf import model_importances

    click.echo(model_importances(model_path, plot, overwrite))
