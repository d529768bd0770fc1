"""The run protocol every pipeline job follows: spec hash, stages, resume.

A job's *spec* (input fingerprint, parameters, output names, distforest
version) is hashed into ``spec_hash`` and recorded in its run store with the
finished *stages*.  Running the same job again resumes a half-written store
(finished stages and tiles are kept, the result is bit-identical to an
uninterrupted run) or does nothing for a complete one; a changed spec is
refused unless the user asks to restart or overwrite.  Jobs hold the output's
lock and the lock of its folder (:mod:`distforest.store.lock`) for the whole run.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distforest import location
from distforest.errors import StoreError
from distforest.jobs.outputs import check_job_inputs_read_only
from distforest.jobs.report import check_reports, write_simple_report
from distforest.store.lock import StoreLock, folder_lock
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
           overwrite: bool = False, pipeline: str | None = "PIPELINE") -> str:  # fmt: skip
    """``new``, ``resume`` or ``complete`` for the run store at ``out``.

    Same spec hash: ``complete`` when the store is complete, else ``resume``.
    A different hash is refused (:class:`StoreError`, listing what changed)
    unless ``restart`` or ``overwrite``; a path that is not a distforest
    store is never replaced.  The refusal names the fixes of the caller:
    ``pipeline`` (the YAML file) for ``distforest run``, None for a command
    (which has ``--overwrite``).
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
    if pipeline is None:
        fix = "pass --overwrite to replace it, or write to another --out"
    else:
        fix = (
            f"start over with `distforest run {pipeline} --restart` (or set output.overwrite: "
            "true in the pipeline), or write to another output.dir"
        )
    raise StoreError(
        f"{path} already exists and holds {state} of a different job (spec {old}, this job "
        f"{digest}); changed: {'; '.join(changes[:6])}; {fix}"
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


@dataclass
class Stage:
    """What a stage records when it ends (:func:`stage`): its outputs and facts."""

    stages: Stages | None = None
    outputs: dict[str, str] | None = None
    info: dict[str, Any] = field(default_factory=dict)


@contextmanager
def stage(name: str, stages: Stages | None = None) -> Iterator[Stage]:
    """Time the block and record it as the finished stage ``name`` when it ends.

    The block may set ``outputs`` and add ``info`` to the yielded
    :class:`Stage`, and sets its ``stages`` when the record is created inside
    the block (the fit stage creates the store).  A block that raises
    records nothing: the stage runs again on resume.
    """
    done = Stage(stages)
    tick = time.perf_counter()
    yield done
    if done.stages is None:
        raise RuntimeError(f"stage {name!r} ended without a store to record it in")
    done.stages.finish(name, time.perf_counter() - tick, done.outputs, **done.info)


@dataclass
class Run:
    """One run of a job under :func:`run_protocol`, as its stages see it."""

    run_id: str
    #: "new" or "resume".
    mode: str
    #: The finished stages when resuming, else None.
    stages: Stages | None
    #: Whether files of this job may be replaced (overwrite, restart or resume).
    replace: bool
    #: The attributes a new store starts with (spec, spec hash, run ID, job, pipeline).
    record: dict[str, Any]
    #: The lock a dead run left and this run took over (None: none).
    took_over: dict[str, Any] | None


def load_or_fit(run: Run, out: str, load: Callable[[], Any],
                fit: Callable[[Stage], tuple[Any, RunStore]],
                what: str = "model") -> tuple[Any, RunStore, Stages]:  # fmt: skip
    """The fit stage of every job: the saved model when resuming, else a new one, saved.

    When ``run`` resumes a run whose fit stage finished, ``load()`` reads the
    model from ``out`` and the store is reopened for this run
    (:func:`resume_store`).  Otherwise ``fit(done)`` fits the model, saves it
    to ``out`` (the store records ``run.record`` from its first moment) and
    returns ``(model, store)``; it may add outputs and facts to ``done``, the
    :class:`Stage` recorded as ``fit`` in that store when it returns.

    Returns
    -------
    (model, store, stages)
    """
    if run.stages is not None and run.stages.done("fit"):
        logger.info("resuming run %s: loading the saved %s from %s", run.run_id, what, out)
        return (load(), *resume_store(out, run.run_id))
    with stage("fit") as done:
        model, rs = fit(done)
        done.stages = Stages(rs)
    return model, rs, done.stages


def run_protocol(
    job: Any,
    spec: dict[str, Any],
    body: Callable[[Run], tuple[RunStore, Stages, dict[str, Any] | None]],
    result: Callable[[RunStore, dict[str, str], str], Any],
    *,
    restart: bool,
    run_id: str,
    shortcut: Callable[[str], Any] | None = None,
    simple_report: bool = True,
) -> Any:
    """The run protocol of every job: lock, decide, stages, report, mark complete.

    Under the lock of ``job.out``: ``shortcut(digest)`` may answer at once
    (a proximity job adding a matrix to a store of the same forest); else
    :func:`decide`.  A complete store returns ``result(rs, outputs, "already
    complete")``; otherwise ``body(run)`` runs the stages (``run.stages`` is
    None for a new run, the finished ones when resuming) and returns the
    store, its stages and what the cluster did
    (:func:`~distforest.jobs.report.cluster_facts`, or None).  The result gets
    a simple report beside ``job.out`` (unless ``simple_report`` is False:
    the body then writes its own report, after checking it may) and the
    store is marked complete, last.
    """
    digest = spec_hash(spec)
    check_job_inputs_read_only(job)
    with StoreLock(job.out, run_id) as lock, folder_lock(job.out, run_id):
        done = None if shortcut is None or restart else shortcut(digest)
        if done is not None:
            return done
        mode = decide(job.out, spec, digest, restart=restart, overwrite=job.overwrite,
                      pipeline=getattr(job, "source", None))  # fmt: skip
        if mode == "complete":
            logger.info("%s is already complete for this job (spec %s)", job.out, digest)
            rs = RunStore.open(job.out)
            return result(rs, Stages(rs).outputs(), "already complete")
        check_can_create(job.out, overwrite=True)
        stages = Stages(RunStore.open(job.out)) if mode == "resume" else None
        record = {"spec": spec, "spec_hash": digest, "run_id": run_id, "job": job.name,
                  "pipeline": job.source, "stages": {}}  # fmt: skip
        replace = job.overwrite or restart or stages is not None
        if simple_report:
            check_reports(Path(job.out).parent, replace)
        rs, stages, facts = body(Run(run_id, mode, stages, replace, record, lock.took_over))
        done = result(rs, stages.outputs(), "resumed" if mode == "resume" else "new")
        if simple_report:
            done.outputs.update(write_simple_report(job, done, run_id, lock.took_over, facts))
        rs.mark_complete()
    return done


def run_per_output(job: Any, body: Callable[[], Any], *, run_id: str) -> Any:
    """The run protocol of a job whose stages each write their own store (k-NN).

    Under the lock of the main output ``job.out``: each stage decides for its
    own store (:func:`decide`: kept when complete with the same spec, written
    again when half-written) and marks it complete when written; ``body()``
    returns the job's result, which gets a simple report beside ``job.out``.
    """
    check_job_inputs_read_only(job)
    with StoreLock(job.out, run_id) as lock, folder_lock(job.out, run_id):
        check_reports(Path(job.out).parent, bool(getattr(job, "overwrite", False)))
        done = body()
        done.outputs.update(write_simple_report(job, done, run_id, lock.took_over))
    return done
