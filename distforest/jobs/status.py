"""The state of a run store: complete, running, or interrupted, with its stages and tiles."""

from __future__ import annotations

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
