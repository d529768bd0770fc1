"""The state of a run store: complete, running, or interrupted, with its stages and tiles.

``distforest status`` prints :func:`state_text`, ``distforest info`` :func:`info_text`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from distforest.store.lock import is_locked, read_lock
from distforest.store.run_store import RunStore


def run_state(rs: RunStore) -> dict[str, Any]:
    """The state of the run that writes (or wrote) ``rs``.

    ``status`` is ``complete``, ``running`` (a live process holds the
    store's lock) or ``interrupted`` (not complete and nobody writes it:
    run the same pipeline again to resume).
    """
    attrs = rs.attrs
    locked = is_locked(rs.path)
    status = "complete" if rs.is_complete else "running" if locked else "interrupted"
    tiles = {}
    if "done" in rs.group:
        for name, record in rs.subgroup("done").arrays():
            done = np.asarray(record[...])
            total = int(np.triu(np.ones_like(done)).sum()) if _symmetric(rs, name) else done.size
            tiles[name] = {"done": int(done.sum()), "total": total}
    return {
        "store": rs.path,
        "status": status,
        "job": attrs.get("job"),
        "pipeline": attrs.get("pipeline"),
        "run_id": attrs.get("run_id"),
        "spec_hash": attrs.get("spec_hash"),
        "created": attrs.get("created"),
        "updated": attrs.get("updated"),
        "stages": {k: v.get("seconds") for k, v in (attrs.get("stages") or {}).items()},
        "tiles": tiles,
        "lock": read_lock(rs.path) if locked else None,
    }


def _symmetric(rs: RunStore, name: str) -> bool:
    attrs = rs.array_attrs(name)
    identity = attrs.get("identity")
    if isinstance(identity, dict) and "symmetric" in identity:  # the tile plan's own record
        return bool(identity["symmetric"])
    return attrs.get("method") in ("original", "oob")


def store_state(path: str) -> dict[str, Any]:
    """:func:`run_state` of the run store at ``path``."""
    return run_state(RunStore.open(path))


def state_text(state: dict[str, Any]) -> str:
    """:func:`run_state` as a few lines for people."""
    lock = state["lock"] or {}
    hint = {
        "complete": "",
        "running": f"  (being written by run {lock.get('run_id')}, "
        f"pid {lock.get('pid')} on {lock.get('host')})",
        "interrupted": "  (the run stopped before the end: run the same pipeline again to resume)",
    }[state["status"]]
    lines = [
        f"store:   {state['store']}",
        f"status:  {state['status']}{hint}",
        f"job:     {state['job']} (pipeline {state['pipeline']}, spec {state['spec_hash']}, "
        f"run {state['run_id']})",
        f"created: {state['created']}, updated {state['updated']}",
    ]
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in state["stages"].items() if v is not None)
    lines.append(f"stages:  {stages or 'none finished'}")
    for name, t in state["tiles"].items():
        lines.append(f"tiles:   {name}: {t['done']:,} of {t['total']:,} written")
    return "\n".join(lines)


def store_description(path: str) -> dict[str, Any]:
    """What the store at ``path`` holds (:meth:`RunStore.describe`)."""
    return RunStore.open(path).describe()


def info_text(description: dict[str, Any]) -> str:
    """:func:`store_description` as lines for people: status, provenance, arrays."""
    attrs = description["attrs"]
    status = attrs.get("status")
    inp = attrs.get("input", {})
    lines = [
        f"store:   {description['path']}",
        f"status:  {status}"
        + ("" if status == "complete" else "  (INCOMPLETE: the run did not finish)"),
        f"created: {attrs.get('created')} by distforest {attrs.get('distforest_version')}",
        f"input:   {inp.get('source')} ({inp.get('n_samples')} x {inp.get('n_features')}, "
        f"fingerprint {inp.get('fingerprint')})",
        f"forest:  {attrs.get('task')}, {attrs.get('n_trees')} trees, "
        f"params {json.dumps(attrs.get('params', {}))}",
        "arrays:",
    ]
    for name, a in description["arrays"].items():
        dims = ", ".join(a["dims"])
        lines.append(f"  {name:<28} {a['dtype']:<8} shape {tuple(a['shape'])} "
                     f"chunks {tuple(a['chunks'])} dims ({dims})")  # fmt: skip
    return "\n".join(lines)
