"""``distforest status`` and ``distforest info``: what a run store holds.

The store modules (Zarr, xarray) are imported when a command runs, so that
``--help`` answers at once.
"""

from __future__ import annotations

import json
import sys

import click


@click.command()
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(store: str, as_json: bool) -> None:
    """Say whether a run STORE is complete, running, or was interrupted.

    Exits 0 when complete, 1 when not (running now, or interrupted: run the
    same pipeline again to resume it).
    """
    from distforest.cli.status import format_state
    from distforest.jobs.status import run_state
    from distforest.store.run_store import RunStore

    state = run_state(RunStore.open(store))
    if as_json:
        click.echo(json.dumps(state, indent=2, default=str))
    else:
        click.echo(format_state(state))
    if state["status"] != "complete":
        sys.exit(1)


@click.command()
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the full description as JSON.")
def info(store: str, as_json: bool) -> None:
    """Describe a STORE: status, provenance, arrays with shapes and chunks."""
    from distforest.store.run_store import RunStore

    description = RunStore.open(store).describe()
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
