"""``distforest run`` and ``validate`` (pipelines described in YAML), ``status`` and
``info`` (what a run store holds), ``examples`` (the shipped pipelines, cluster files and
data, :func:`distforest.examples.copy_to`).

The pipeline loader, the jobs and the stores (Dask, scikit-learn, Zarr) are imported
when a command runs, so that ``--help`` answers at once.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from distforest.cli.options import cluster_options, run_job
from distforest.errors import ConfigError
from distforest.jobs import specs


@click.command()
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
        restart: bool, **options: Any) -> None:  # fmt: skip
    """Run the job described in a PIPELINE YAML file (see pipelines/).

    PIPELINE is a file, or the name of a shipped example (main, knn, mds,
    mislabels, nightly_impute, nightly_score, outliers, simforest, smerf,
    xforest_cluster), which then reads the bundled data wherever distforest
    is installed.

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
    from distforest.errors import OVERWRITE_FIX
    from distforest.jobs import decimal_mark

    OVERWRITE_FIX.set("set output.overwrite: true in the pipeline (or --set output.overwrite=true)")
    job = specs.pipeline(pipeline, overrides, options)
    with decimal_mark(job.decimal):  # every table the job reads follows input.decimal
        run_job(obj, job, dry_run, restart)


@click.command()
@click.argument("pipelines", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Check with these overrides applied (as `run --set`).")  # fmt: skip
def validate(pipelines: tuple[str, ...], overrides: tuple[str, ...]) -> None:
    """Check PIPELINES (YAML files) without running anything.

    Prints one line per file; exits 4 if any is invalid.
    """
    lines = [specs.validation(path, overrides) for path in pipelines]
    for _, line in lines:
        click.echo(line)
    bad = sum(not ok for ok, _ in lines)
    if bad:
        click.echo(f"{bad} of {len(pipelines)} pipeline(s) invalid", err=True)
        sys.exit(ConfigError.exit_code)


@click.command()
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(store: str, as_json: bool) -> None:
    """Say whether a run STORE is complete, running, or was interrupted.

    Exits 0 when complete, 1 when not (running now, or interrupted: run the
    same pipeline again to resume it).
    """
    from distforest.jobs.status import state_text, store_state

    state = store_state(store)
    click.echo(json.dumps(state, indent=2, default=str) if as_json else state_text(state))
    if state["status"] != "complete":
        sys.exit(1)


@click.command()
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the full description as JSON.")
def info(store: str, as_json: bool) -> None:
    """Describe a STORE: status, provenance, arrays with shapes and chunks."""
    from distforest.jobs.status import info_text, store_description

    description = store_description(store)
    click.echo(json.dumps(description, indent=2, default=str) if as_json
               else info_text(description))  # fmt: skip
    if not as_json and description["attrs"].get("status") != "complete":
        sys.exit(1)


@click.command("examples")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False), default=".")
@click.option("--overwrite", is_flag=True, help="Replace example files already in DIR.")
def examples_cmd(directory: str, overwrite: bool) -> None:
    """Copy the example pipelines, cluster files and bundled data into DIR.

    DIR (default: the current folder) gets pipelines/, cluster_configs/ and
    distforest/data/ (the data the pipelines read), so that
    `distforest run pipelines/main.yaml` works there as in the repository.
    The shipped files are also found by name from anywhere:
    `distforest run main`, `--cluster local`.
    """
    from distforest.jobs import examples

    click.echo(examples.copy_to(directory, overwrite))
