"""The ``distforest`` command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from distforest._version import __version__
from distforest.cli.jobs import ProximityJob, run_proximity_job, summary
from distforest.cli.pipeline import load_pipeline
from distforest.cli.progress import ProgressBars, setup_logging
from distforest.errors import DistforestError
from distforest.store.run_store import RunStore


def _cluster_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--scheduler", metavar="ADDRESS",
                     help="Use an existing Dask scheduler, e.g. tcp://host:8786."),
        click.option("--cluster", "cluster", metavar="FILE.yaml",
                     type=click.Path(dir_okay=False),
                     help="Start or reach a cluster described in a YAML file "
                          "(see cluster_configs/)."),
        click.option("--workers", type=click.IntRange(min=1),
                     help="Workers of the default LocalCluster [default: CPU count]."),
        click.option("--threads", type=click.IntRange(min=1),
                     help="Threads per worker of the default LocalCluster [default: 1]."),
        click.option("--memory-limit", metavar="SIZE",
                     help="Memory per worker of the default LocalCluster, e.g. 4GiB."),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def _overrides(workers: int | None, threads: int | None, memory: str | None) -> dict[str, Any]:
    given = {"n_workers": workers, "threads_per_worker": threads, "memory_limit": memory}
    return {k: v for k, v in given.items() if v is not None}


class _Group(click.Group):
    """Turns distforest's errors into one clear line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DistforestError as exc:
            click.echo(f"distforest: error: {exc}", err=True)
            sys.exit(exc.exit_code)


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
@click.option(
    "--drop",
    multiple=True,
    metavar="COLUMN",
    help="Column to ignore, e.g. an identifier (repeatable).",
)
@click.option(
    "--na-values",
    multiple=True,
    metavar="TOKEN",
    help="Extra token meaning 'missing' in text files, e.g. '?' (repeatable).",
)
@click.option(
    "--task",
    type=click.Choice(["auto", "classification", "regression", "unsupervised"]),
    default="auto",
    show_default=True,
    help="auto: unsupervised without --target, classification for labels, "
    "regression for real values.",
)
@click.option(
    "--trees",
    "n_estimators",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Number of trees.",
)
@click.option(
    "--method",
    type=click.Choice(["original", "oob", "rfgap"]),
    default="original",
    show_default=True,
    help="original: share of trees with a common leaf; oob: the same over trees where both "
    "rows are out of bag; rfgap: RF-GAP (rows sum to 1, not symmetric).",
)
@click.option(
    "--kind",
    type=click.Choice(["random-forest", "extra-trees"]),
    default="random-forest",
    show_default=True,
    help="Tree learner.",
)
@click.option(
    "--max-features",
    default="auto",
    show_default=True,
    help="Features tried per split: auto, sqrt, log2, an integer or a fraction.",
)
@click.option("--min-samples-leaf", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--max-depth", type=click.IntRange(min=1), default=None)
@click.option(
    "--seed",
    "random_state",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="random_state of the forest: same seed, same matrix.",
)
@click.option(
    "--tile-size",
    type=click.IntRange(min=16),
    default=2048,
    show_default=True,
    help="Rows/columns of one tile (one task, one Zarr chunk).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Trees per task [default: about 4 tasks per worker thread].",
)
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the matrix.")
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@_cluster_options
@click.pass_obj
def proximity(obj: dict[str, Any], input: str, out: str, target: str | None,
              drop: tuple[str, ...], na_values: tuple[str, ...], method: str, plot: str | None,
              overwrite: bool, scheduler: str | None, cluster: str | None,
              workers: int | None, threads: int | None, memory_limit: str | None,
              max_features: str, **forest: Any) -> None:  # fmt: skip
    """Fit a forest on INPUT and write its proximity matrix to a Zarr store.

    INPUT is a CSV/TSV, Parquet, .npy file or Zarr store.  Text columns
    become ordinal category codes; missing values are allowed (the trees
    route them).
    """
    forest["max_features"] = _parse_max_features(max_features)
    job = ProximityJob(
        input=input, out=out, target=target, drop=drop, na_values=na_values, forest=forest,
        method=method, plot=plot, overwrite=overwrite, scheduler=scheduler, cluster=cluster,
        cluster_overrides=_overrides(workers, threads, memory_limit),
    )  # fmt: skip
    result = run_proximity_job(job, progress=ProgressBars(enabled=not obj["quiet"]))
    click.echo(summary(result))


def _parse_max_features(value: str) -> str | int | float:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


@cli.command()
@click.argument("pipeline", type=click.Path(dir_okay=False))
@_cluster_options
@click.pass_obj
def run(obj: dict[str, Any], pipeline: str, scheduler: str | None, cluster: str | None,
        workers: int | None, threads: int | None, memory_limit: str | None) -> None:  # fmt: skip
    """Run the job described in a PIPELINE YAML file (see pipelines/)."""
    job = load_pipeline(pipeline)
    if scheduler or cluster:
        job.scheduler, job.cluster = scheduler, cluster
    job.cluster_overrides = _overrides(workers, threads, memory_limit)
    result = run_proximity_job(job, progress=ProgressBars(enabled=not obj["quiet"]))
    click.echo(summary(result))


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


def main() -> None:
    """Entry point of the ``distforest`` console script."""
    cli(prog_name="distforest")
