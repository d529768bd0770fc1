"""The run protocol every pipeline job follows: spec hash, stages, resume.

A job's *spec* (input fingerprint, parameters, output names, distforest
version) is hashed into ``spec_hash`` and recorded in its run store with the
finished *stages*.  Running the same job again resumes a half-written store
(finished stages and tiles are kept, the result is bit-identical to an
uninterrupted run) or does nothing for a complete one; a changed spec is
refused unless the user asks to restart or overwrite.  Jobs hold the output's
lock (:mod:`distforest.store.lock`) for the whole run.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distforest import location
from distforest.errors import StoreError
from distforest.jobs.report import check_reports, write_simple_report
from distforest.store.lock import StoreLock
from distforest.store.run_store import RunStore, check_can_create, is_half_created

logger = logging.getLogger("distforest")


def spec_hash(spec: dict[str, Any]) -> str:
    """A short, stable digest of a job spec."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changed_keys(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += changed_keys(a, b, f"{prefix}{key}.")
        elif a != b:
            keys.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return keys


def decide(out: str | Path, spec: dict[str, Any], digest: str, *, restart: bool = False,
           overwrite: bool = False) -> str:  # fmt: skip
    """``new``, ``resume`` or ``complete`` for the run store at ``out``.

    Same spec hash: ``complete`` when the store is complete, else ``resume``.
    A different hash is refused (:class:`StoreError`, listing what changed)
    unless ``restart`` or ``overwrite``; a path that is not a distforest
    store is never replaced.
    """
    path = out
    if not location.exists(path) or is_half_created(path):
        return "new"  # nothing there, or a store a killed run had only begun to create
    try:
        rs = RunStore.open(path)
    except StoreError:
        check_can_create(path, overwrite=True)  # refuses non-distforest directories
        raise
    old = rs.attrs.get("spec_hash")
    if old is None and not rs.is_complete:
        logger.warning("replacing %s: a half-written store that records no job", path)
        return "new"
    if old == digest and not restart:
        return "complete" if rs.is_complete else "resume"
    if restart or overwrite:
        logger.warning("replacing %s (%s)", path, "--restart" if restart else "overwrite")
        return "new"
    changes = changed_keys(rs.attrs.get("spec") or {}, spec) or ["(no spec recorded)"]
    state = "a complete run" if rs.is_complete else "a half-written run"
    raise StoreError(
        f"{path} already exists and holds {state} of a different job (spec {old}, this job "
        f"{digest}); changed: {'; '.join(changes[:6])}.  Replace it with --overwrite "
        "(output.overwrite: true in a pipeline) or start over with `run --restart`, or write "
        "to another output"
    )


class Stages:
    """The store's record of finished stages (driver-side attribute writes)."""

    def __init__(self, rs: RunStore) -> None:
        self.rs = rs
        self.record: dict[str, Any] = dict(rs.attrs.get("stages") or {})
        self.timings: dict[str, float] = {}

    def done(self, name: str) -> bool:
        entry = self.record.get(name)
        if not entry:
            return False
        return all(location.exists(p) for p in entry.get("outputs", {}).values())

    def finish(self, name: str, seconds: float, outputs: dict[str, str] | None = None,
               **info: Any) -> None:  # fmt: skip
        self.timings[name] = seconds
        self.record[name] = {"seconds": round(seconds, 3), "outputs": outputs or {}, **info}
        self.rs.update_attrs(stages=self.record)

    def outputs(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for entry in self.record.values():
            out.update(entry.get("outputs", {}))
        return out


def now() -> str:
    """The current UTC time, as recorded in stores."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def resume_store(path: str | Path, run_id: str) -> tuple[RunStore, Stages]:
    """Reopen the half-written store of a resumed run for writing, recording the new run."""
    rs = RunStore.open(path, mode="r+")
    rs.mark_running()
    rs.update_attrs(run_id=run_id, resumed_at=now())
    return rs, Stages(rs)


def run_staged(
    job: Any,
    spec: dict[str, Any],
    body: Callable[
        [Stages | None, bool, dict[str, Any]], tuple[RunStore, Stages, dict[str, Any] | None]
    ],
    result: Callable[[RunStore, dict[str, str], str], Any],
    *,
    restart: bool,
    run_id: str,
) -> Any:
    """The run protocol of a job whose stages all record into one store ``job.out``.

    Under the output's lock: :func:`decide`; a complete store returns
    ``result(rs, outputs, "already complete")`` at once; otherwise
    ``body(stages, replace, record)`` runs the stages (``stages`` is None for
    a new run, the finished ones when resuming; ``replace``: files of this
    job may be replaced; ``record``: attributes a new store starts with) and
    returns the store, its stages and what the cluster did
    (:func:`~distforest.jobs.report.cluster_facts`, or None).  Then the result
    gets a simple report and the store is marked complete, last.
    """
    digest = spec_hash(spec)
    with StoreLock(job.out, run_id) as lock:
        mode = decide(job.out, spec, digest, restart=restart, overwrite=job.overwrite)
        if mode == "complete":
            logger.info("%s is already complete for this job (spec %s)", job.out, digest)
            rs = RunStore.open(job.out)
            return result(rs, Stages(rs).outputs(), "already complete")
        check_can_create(job.out, overwrite=True)
        stages = Stages(RunStore.open(job.out)) if mode == "resume" else None
        record = {"spec": spec, "spec_hash": digest, "run_id": run_id, "job": job.name,
                  "pipeline": job.source, "stages": {}}  # fmt: skip
        replace = job.overwrite or restart or stages is not None
        check_reports(Path(job.out).parent, replace)
        rs, stages, facts = body(stages, replace, record)
        done = result(rs, stages.outputs(), "resumed" if mode == "resume" else "new")
        done.outputs.update(write_simple_report(job, done, run_id, lock.took_over, facts))
        rs.mark_complete()
    return done


def run_locked(job: Any, runner: Any, progress: Any, run_id: str) -> Any:
    """Run a job whose outputs are several stores (k-NN) under its main output's lock.

    The job resumes by stage (see :func:`distforest.jobs.knn.run_knn_job`);
    a report is written next to its main output.
    """
    with StoreLock(job.out, run_id) as lock:
        check_reports(Path(job.out).parent, bool(getattr(job, "overwrite", False)))
        result = runner(job, progress)
        result.outputs.update(write_simple_report(job, result, run_id, lock.took_over))
    return result
