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

import time
from typing import Any

import click
import numpy as np

from distforest import location
from distforest.cli.options import (
    cluster_options,
    connect_kwargs,
    dry_run_option,
    input_options,
    parse_max_features,
    run_job,
    seed_option,
    show,
    tile_size_option,
    trees_option,
)
from distforest.cli.progress import ProgressBars
from distforest.errors import StoreError
from distforest.forests.constraints import SMERF_TILE
from distforest.jobs.outputs import check_new_file

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
@tile_size_option(SMERF_TILE)
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
    from distforest.forests.smerf import SMERF, input_cells
    from distforest.io import load_table
    from distforest.io.distances import load_distances
    from distforest.jobs.estimates import check_disk, estimate_smerf_model
    from distforest.jobs.inputs import input_shape, partitioned_input
    from distforest.jobs.smerf import save_model
    from distforest.parallel.placement import place
    from distforest.store.run_store import check_can_create

    check_can_create(out, overwrite)
    params = {k: options.pop(k) for k in SMERF_KEYS}
    model = SMERF(**params, random_state=random_state)
    model._validated()
    by_parts = partitioned_input(input)  # a glob, a folder of parts, a large file
    if dry_run:
        from distforest.jobs.command_plans import model_fit_plan, smerf_fit_cpu

        if by_parts:  # not loaded: rows from the metadata or a count of the lines
            source, n, d = input_shape(input, drop=drop, na_values=na_values)
        else:
            table = load_table(input, drop=drop, na_values=na_values, allow_missing=False)
            source, n, d = str(table.source), table.n_samples, table.n_features
        dist = load_distances(distances, n=n)
        need = estimate_smerf_model(n, params["n_estimators"], dist.itemsize)
        trees = params["n_estimators"]
        show(model_fit_plan("smerf fit", source, n, d, input_cells(n, d), trees, None,
                            smerf_fit_cpu(trees, n), {"model (distances, leaves, trees)": need},
                            connect_kwargs(options), out), out)  # fmt: skip
        return
    start = time.perf_counter()
    bars = ProgressBars(enabled=not obj["quiet"])
    if by_parts:
        dist = _fit_by_parts(model, input, distances, out, overwrite, tile_size, drop,
                             na_values, connect_kwargs(options), bars)  # fmt: skip
        click.echo(f"  features of {input} read by partitions on the workers")
    else:
        table = load_table(input, drop=drop, na_values=na_values, allow_missing=False)
        dist = load_distances(distances, n=table.n_samples)  # checked before any cluster starts
        need = estimate_smerf_model(table.n_samples, params["n_estimators"], dist.itemsize)
        check_disk(location.parent(out), need, replaces=out)
        cells = input_cells(table.n_samples, table.n_features)
        with place(cells, connect_kwargs(options), progress=bars):
            model.fit(table, dist)
        save_model(model, out, overwrite, tile_size, {"distances": str(distances)})
    seconds = time.perf_counter() - start
    observed = dist.observed
    click.echo(
        f"SMERF: {params['n_estimators']} trees on {model.n_samples_} rows x "
        f"{model.n_features_in_} features ({observed:.0%} of pairs observed) in {seconds:.1f} s"
    )
    _echo_importances(model.feature_importances_, model.feature_names_in_, top=5)
    click.echo(f"  model: {location.resolved(out)}")


def _fit_by_parts(model: Any, input: str, distances: str, out: str, overwrite: bool,
                  tile_size: int, drop: tuple[str, ...], na_values: tuple[str, ...],
                  connect: dict[str, Any], bars: Any) -> Any:  # fmt: skip
    """``smerf fit`` of an X read by partitions, on the named cluster (or a LocalCluster):
    pass 1 (every check) and D's check before anything is written, the rows into a
    temporary store, the fit from there, the model saved; returns the checked D."""
    from distforest.io.distances import load_distances
    from distforest.jobs.estimates import check_disk, estimate_smerf_model
    from distforest.jobs.inputs import temporary_store
    from distforest.jobs.smerf import read_by_parts, save_model
    from distforest.parallel.cluster import connect as connect_to

    with connect_to(**connect) as client, client.as_current():
        pending = read_by_parts(input, None, drop, na_values)
        dist = load_distances(distances, n=pending.n_samples)
        need = estimate_smerf_model(pending.n_samples, model.n_estimators, dist.itemsize)
        check_disk(location.parent(out), need, replaces=out)
        with temporary_store() as path:
            model.set_execution(client, progress=bars).fit(pending.write(path, {}), dist)
            save_model(model, out, overwrite, tile_size, {"distances": str(distances)})
    return dist


@smerf.command("predict")
@click.argument("model_path", metavar="MODEL.zarr")
@click.argument("input", metavar="A")
@click.option(
    "--against", metavar="B", help="Columns of the matrix [default: the model's training rows]."
)
@click.option(
    "--out", required=True, metavar="STORE.zarr", help="Zarr store to write (2-D array 'distance')."
)
@input_options
@tile_size_option(SMERF_TILE)
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
    from distforest.apps.plots import plot_importances
    from distforest.store.run_store import RunStore

    check_new_file(plot, overwrite)
    rs = RunStore.open(model_path, require_complete=True)
    if rs.attrs.get("method") != "smerf" or "feature_importances" not in rs.group:
        raise StoreError(
            f"{rs.path!r} is not a SMERF model (method {rs.attrs.get('method')!r}); make one "
            "with `distforest smerf fit`"
        )
    values = rs.read("feature_importances")
    names = tuple(rs.attrs["input"]["feature_names"])
    _echo_importances(values, names, top=len(names))
    if plot:
        written = plot_importances(values, names, plot, title="SMERF feature importances")
        click.echo(f"  plot: {written.resolve()}")


def _echo_importances(values: np.ndarray, names: tuple[str, ...], top: int) -> None:
    order = np.argsort(-values, kind="stable")[:top]
    width = max(len(str(names[k])) for k in order)
    click.echo("  feature importances (share of the objective decrease):")
    for k in order:
        click.echo(f"    {names[k]!s:<{width}}  {values[k]:.4f}")
