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
