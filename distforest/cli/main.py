"""The ``distforest`` command line."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import click

from distforest._version import __version__
from distforest.cli.apps_cmd import mds, mislabels, outliers
from distforest.cli.impute_cmd import impute
from distforest.cli.jobs import ProximityJob, run_locked, run_proximity_job, summary
from distforest.cli.knn_cmd import knn
from distforest.cli.knn_job import KNNJob, knn_plan, knn_summary, run_knn_job
from distforest.cli.options import (
    FOREST_DEFAULTS,
    FOREST_KEYS,
    cluster_options,
    connect_kwargs,
    forest_options,
    input_options,
    pop_keys,
    tile_size_option,
)
from distforest.cli.pipeline import load_pipeline
from distforest.cli.plan import check_disk, describe, describe_xforest, estimate, free_space
from distforest.cli.progress import ProgressBars, setup_logging
from distforest.cli.simforest_cmd import simforest
from distforest.cli.simforest_job import SimForestJob, run_simforest_job
from distforest.cli.similarity_cmd import neighbors, similarity
from distforest.cli.smerf_cmd import smerf
from distforest.cli.status import format_state, run_state
from distforest.cli.xforest_cmd import XForestJob, cluster_cmd, run_xforest_job, xforest
from distforest.errors import DISK_FULL_ERRNOS, ConfigError, DiskFullError, DistforestError
from distforest.io import load_table
from distforest.store.run_store import RunStore


class _Group(click.Group):
    """Turns distforest's errors into one clear line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DistforestError as exc:
            click.echo(f"distforest: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:  # a disk that fills up under any command: exit 6, one line
            if exc.errno not in DISK_FULL_ERRNOS:
                raise
            click.echo(f"distforest: error: {DiskFullError.from_os_error(exc)}", err=True)
            sys.exit(DiskFullError.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distforest")
@click.option("-q", "--quiet", is_flag=True, help="Only print errors and the final summary.")
@click.option("-v", "--verbose", is_flag=True, help="Print debug log lines.")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: bool) -> None:
    """Tree ensembles as Dask tasks; pairwise matrices as chunked Zarr arrays.

    \b
    Examples:
      distforest proximity data.csv --target Class --trees 500 --out prox.zarr
      distforest info prox.zarr
      distforest run pipelines/main.yaml
    """
    ctx.obj = {"quiet": quiet, "run_id": setup_logging(quiet, verbose)}


@cli.command()
@click.argument("input", metavar="INPUT")
@click.option("--out", required=True, metavar="STORE.zarr", help="Zarr store to write.")
@click.option("--target", metavar="COLUMN", help="Target column; omit for an unsupervised forest.")
@input_options
@forest_options()
@click.option(
    "--method",
    type=click.Choice(["original", "oob", "rfgap"]),
    default="original",
    show_default=True,
    help="original: share of trees with a common leaf; oob: the same over trees where both "
    "rows are out of bag; rfgap: RF-GAP (rows sum to 1, not symmetric).",
)
@tile_size_option(FOREST_DEFAULTS["tile_size"])
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the matrix.")
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@cluster_options
@click.pass_obj
def proximity(obj: dict[str, Any], input: str, out: str, target: str | None, method: str,
              plot: str | None, overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Fit a forest on INPUT and write its proximity matrix to a Zarr store.

    INPUT is a CSV/TSV, Parquet, .npy file or Zarr store.  Text columns
    become ordinal category codes; missing values are allowed (the trees
    route them).
    """
    input_kw = pop_keys(options, ("drop", "na_values"))
    forest = pop_keys(options, FOREST_KEYS)
    forest["tile_size"] = options.pop("tile_size")
    job = ProximityJob(
        input=input, out=out, target=target, forest=forest, method=method, plot=plot,
        overwrite=overwrite, connect=connect_kwargs(options), **input_kw,
    )  # fmt: skip
    result = run_proximity_job(job, progress=ProgressBars(enabled=not obj["quiet"]),
                               run_id=obj["run_id"])  # fmt: skip
    click.echo(summary(result))


@cli.command()
@click.argument("pipeline", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True,
              help="Check the pipeline and print the plan (tasks, tiles, bytes, memory, disk); "
              "run nothing.")  # fmt: skip
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override a pipeline value, e.g. --set forest.n_estimators=300 "
              "(repeatable).")  # fmt: skip
@click.option("--restart", is_flag=True,
              help="Start over when the output holds a half-written or different run "
              "(default: resume the same job, refuse a different one).")  # fmt: skip
@cluster_options
@click.pass_obj
def run(obj: dict[str, Any], pipeline: str, dry_run: bool, overrides: tuple[str, ...],
        restart: bool, scheduler: str | None, cluster: str | None, workers: int | None,
        threads: int | None, memory_limit: str | None) -> None:  # fmt: skip
    """Run the job described in a PIPELINE YAML file (see pipelines/).

    Safe to run again: the output store is locked while a run writes it; a
    run that was killed resumes where it stopped (same config: finished
    tiles and stages are kept); a finished run is not repeated; a changed
    config is refused unless --restart.  Exit codes: 0 done, 2 bad option,
    3 bad input data, 4 bad pipeline, 5 cluster unreachable, 6 store or
    disk problem, 7 another run holds the output's lock, 75 no progress
    (no worker or no finished task for too long: run it again later).

    \b
    Examples:
      distforest run pipelines/main.yaml
      distforest run pipelines/nightly_impute.yaml --cluster cluster_configs/slurm.yaml
      distforest run pipelines/nightly_impute.yaml --dry-run --set forest.n_estimators=300
    """
    job = load_pipeline(pipeline, overrides=overrides)
    given = {"workers": workers, "threads": threads, "memory_limit": memory_limit}
    if scheduler or cluster:
        given.update(scheduler=scheduler, cluster=cluster)
    else:
        given.update(job.connect)
    job.connect = connect_kwargs(given)
    bars = ProgressBars(enabled=not obj["quiet"])
    if isinstance(job, KNNJob):  # a k-NN pipeline (input, neighbors, knn)
        if dry_run:
            click.echo(knn_plan(job))
            return
        runner = functools.partial(run_knn_job, restart=restart, run_id=obj["run_id"])
        click.echo(knn_summary(run_locked(job, runner, bars, obj["run_id"])))
        return
    if isinstance(job, SimForestJob):  # a SimForest pipeline (input, simforest, apps)
        if not dry_run:
            click.echo(summary(run_simforest_job(job, bars, restart=restart,
                                                 run_id=obj["run_id"])))  # fmt: skip
        return
    if isinstance(job, XForestJob):  # an X-Forest pipeline (input, xforest, clustering)
        if dry_run:
            table = load_table(job.input, target=job.target, drop=job.drop,
                               na_values=job.na_values)  # fmt: skip
            free = free_space(Path(job.out).parent)
            click.echo(describe_xforest(job, table.n_samples, table.n_features, free))
            return
        click.echo(summary(run_xforest_job(job, bars, restart=restart,
                                           run_id=obj["run_id"])))  # fmt: skip
        return
    if dry_run:
        table = load_table(job.input, target=job.target, drop=job.drop, na_values=job.na_values)
        plan = estimate(job, table.n_samples, table.n_features, threads=None)
        free = free_space(Path(job.out).parent)
        click.echo(describe(job, plan, free))
        check_disk(Path(job.out).parent, plan["disk_bytes"])
        return
    result = run_proximity_job(job, progress=ProgressBars(enabled=not obj["quiet"]),
                               restart=restart, run_id=obj["run_id"])  # fmt: skip
    click.echo(summary(result))


@cli.command()
@click.argument("pipelines", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Check with these overrides applied (as `run --set`).")  # fmt: skip
def validate(pipelines: tuple[str, ...], overrides: tuple[str, ...]) -> None:
    """Check PIPELINES (YAML files) without running anything.

    Prints one line per file; exits 4 if any is invalid.
    """
    bad = 0
    for path in pipelines:
        try:
            job = load_pipeline(path, overrides=overrides)
        except DistforestError as exc:
            bad += 1
            click.echo(f"INVALID {exc}")
            continue
        apps = [a for a in ("impute", "outliers", "mislabels", "mds", "clustering")
                if getattr(job, a, None)]  # fmt: skip
        if isinstance(job, ProximityJob):
            what = f"{job.method} proximity"
        elif isinstance(job, XForestJob):
            what = f"{job.kind} similarity (X-Forest)"
        elif isinstance(job, SimForestJob):
            what = f"SimForest model and {job.method} proximity"
        else:
            what = job.kind
        click.echo(f"ok      {path}: {what} of {job.input} -> {job.out}"
                   + (f" (+ {', '.join(apps)})" if apps else ""))  # fmt: skip
    if bad:
        click.echo(f"{bad} of {len(pipelines)} pipeline(s) invalid", err=True)
        sys.exit(ConfigError.exit_code)


@cli.command()
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(store: str, as_json: bool) -> None:
    """Say whether a run STORE is complete, running, or was interrupted.

    Exits 0 when complete, 1 when not (running now, or interrupted: run the
    same pipeline again to resume it).
    """
    rs = RunStore.open(store)
    state = run_state(rs)
    if as_json:
        click.echo(json.dumps(state, indent=2, default=str))
    else:
        click.echo(format_state(state))
    if state["status"] != "complete":
        sys.exit(1)


@cli.command()
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the full description as JSON.")
def info(store: str, as_json: bool) -> None:
    """Describe a STORE: status, provenance, arrays with shapes and chunks."""
    rs = RunStore.open(store)
    description = rs.describe()
    if as_json:
        click.echo(json.dumps(description, indent=2, default=str))
        return
    attrs = description["attrs"]
    status = attrs.get("status")
    click.echo(f"store:   {description['path']}")
    click.echo(
        f"status:  {status}"
        + ("" if status == "complete" else "  (INCOMPLETE: the run did not finish)")
    )
    click.echo(f"created: {attrs.get('created')} by distforest {attrs.get('distforest_version')}")
    inp = attrs.get("input", {})
    click.echo(
        f"input:   {inp.get('source')} ({inp.get('n_samples')} x {inp.get('n_features')}, "
        f"fingerprint {inp.get('fingerprint')})"
    )
    click.echo(f"forest:  {attrs.get('task')}, {attrs.get('n_trees')} trees, "
               f"params {json.dumps(attrs.get('params', {}))}")  # fmt: skip
    click.echo("arrays:")
    for name, a in description["arrays"].items():
        dims = ", ".join(a["dims"])
        click.echo(f"  {name:<28} {a['dtype']:<8} shape {tuple(a['shape'])} "
                   f"chunks {tuple(a['chunks'])} dims ({dims})")  # fmt: skip
    if status != "complete":
        sys.exit(1)


_COMMANDS = (
    impute, outliers, mislabels, mds, similarity, neighbors, knn, xforest, cluster_cmd, simforest,
    smerf,
)  # fmt: skip
for _command in _COMMANDS:
    cli.add_command(_command)


def main() -> None:
    """Entry point of the ``distforest`` console script."""
    cli(prog_name="distforest")
