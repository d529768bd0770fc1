"""The run protocol every job follows: lock, spec decision, stages, resume, report.

A job's *spec* (input fingerprint, parameters, output names, distforest
version) is hashed into ``spec_hash`` and recorded in its run store with the
finished *stages*.  Running the same job again resumes a half-written store
(finished stages and tiles are kept, the result is bit-identical to an
uninterrupted run) or does nothing for a complete one; a changed spec is
refused unless the user asks to restart or overwrite.  Jobs hold the output's
lock and the lock of its folder (:mod:`distforest.store.lock`) for the whole run.

:func:`execute` is the one protocol: it runs a job's
:class:`~distforest.jobs.stages.Pipeline` (the stages ``--dry-run``
printed), decides where they run (:func:`~distforest.parallel.placement.place`),
records each stage's measured time and memory beside its estimate, writes
the report and is the only place that marks an output complete
(:func:`complete`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distforest import location
from distforest.errors import ParameterError, StoreError
from distforest.jobs.outputs import check_job_inputs_read_only
from distforest.jobs.report import check_reports, cluster_facts, write_report
from distforest.jobs.stages import Pipeline
from distforest.jobs.stages import Stage as StageSpec
from distforest.store.lock import StoreLock, folder_lock
from distforest.store.run_store import RunStore, check_can_create, complete_output, is_half_created

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
class Run:
    """One run of a job under :func:`execute`, as its stages see it."""

    run_id: str
    #: "new", "resume" or "extend" (a store of the same forest gets another matrix).
    mode: str
    #: The finished stages when resuming, else None.
    stages: Stages | None
    #: Whether files of this job may be replaced (overwrite, restart or resume).
    replace: bool
    #: The attributes a new store starts with (spec, spec hash, run ID, job, pipeline).
    record: dict[str, Any]
    #: The lock a dead run left and this run took over (None: none).
    took_over: dict[str, Any] | None


@dataclass
class Done:
    """What the running stage records when it ends: its outputs and facts."""

    outputs: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What a stage's ``run(ctx)`` sees and leaves for the next stages.

    Attributes
    ----------
    run : Run
    where : Placement
        Where the stages run (its ``client`` is None in this process).
    rs : RunStore or None
        The job's store, set by the stage that creates it (a fit stage).
    stages : Stages or None
        Its record of finished stages.
    model : object
        What the fit stage fitted or, resuming, loaded.
    done : Done
        The running stage's outputs and facts.
    values : dict
        Anything else a job's stages pass on (its input, ...).
    """

    run: Run
    where: Any
    rs: RunStore | None = None
    stages: Stages | None = None
    model: Any = None
    done: Done = field(default_factory=Done)
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def store(self) -> RunStore:
        """The job's store, once a stage created it."""
        if self.rs is None:
            raise RuntimeError("no stage has created the job's store yet")
        return self.rs


def fit_into_store(estimator: Any, table: Any, ctx: Context, out: str) -> None:
    """A fit stage's work: fit ``estimator`` on ``table`` (anything
    :func:`~distforest.store.source.open_input` gives or opens) and keep it at ``out`` with
    the run's record; sets ``ctx.model`` and ``ctx.rs``.

    ``estimator`` is an estimator, or a function of the rows that returns one fitted.

    The rows are :meth:`~distforest.io.source.RowSummary.placed` first: rows read by
    partitions are written into the store, where the fit writes its arrays beside them;
    rows in memory are fitted as they are and the forest saved into the store.
    """
    from distforest.store.source import open_input

    rows = open_input(table).placed(out, ctx.run.record)
    ctx.model = (estimator.fit if hasattr(estimator, "fit") else estimator)(rows)
    if rows.store_path is not None:  # the fit wrote its arrays into the store
        ctx.rs = RunStore.open(out, mode="r+")
    else:
        ctx.rs = ctx.model.save(out, overwrite=True, attrs=ctx.run.record)


def fitted_rows(table: Any, out: str) -> Any:
    """The rows a finished fit stage fitted (a resumed run): those :func:`fit_into_store`
    wrote into the store at ``out`` (with its ``input/`` group), else ``table`` itself."""
    from distforest.store.schema import INPUT_GROUP
    from distforest.store.source import open_source

    return open_source(out) if INPUT_GROUP in RunStore.open(out).group else table


def _peak_rss() -> int:
    """This process's peak resident memory so far, bytes (0 where not known)."""
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    except (ImportError, OSError):  # pragma: no cover (Windows)
        return 0


#: The environment variable of the run protocol's fault-injection point (for tests):
#: ``STAGE:N`` SIGKILLs the run once stage ``STAGE`` finished ``N`` of its tasks, ``STAGE``
#: (or a stage that never gets to ``N``) when its work ended, before it is recorded.
KILL_AT = "DISTFOREST_SIGKILL_AT"


@dataclass
class KillPoint:
    """Where :data:`KILL_AT` says to SIGKILL the run: a stage, and tasks done in it."""

    stage: str
    tasks: int | None
    #: The stage running now.
    current: str | None = None

    @classmethod
    def from_env(cls) -> KillPoint | None:
        """The kill point :data:`KILL_AT` names, or None (unset: every real run)."""
        text = os.environ.get(KILL_AT, "").strip()
        if not text:
            return None
        stage, _, tasks = text.partition(":")
        if not stage or (tasks and not (tasks.isdigit() and int(tasks) > 0)):
            raise ParameterError(
                f"{KILL_AT}={text!r}: expected STAGE or STAGE:N (N tasks done, N >= 1), e.g. "
                f"tiles:3; unset it for a normal run"
            )
        return cls(stage, int(tasks) if tasks else None)

    def watch(self, progress: Any) -> Callable[[str, int, int], None]:
        """``progress`` (or nothing), then the kill once the stage finished its tasks."""

        def watched(stage: str, done: int, total: int) -> None:
            if progress is not None:
                progress(stage, done, total)
            if self.current == self.stage and self.tasks is not None and done >= self.tasks:
                self.kill()

        return watched

    def ended(self, stage: str) -> None:
        """A stage's work ended (not yet recorded): the kill, when it is that stage."""
        if stage == self.stage:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the run: its process group when it leads one (a command started in a
        session of its own, with any workers it started), else this process."""
        logger.warning("%s: SIGKILL in stage %s", KILL_AT, self.current)
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _run_stage(spec: StageSpec, ctx: Context, out: str, kill: KillPoint | None = None) -> None:
    """Run one stage (or, resuming a run that finished it, skip or reload it) and record
    its measured time and memory beside its estimate (``kill``: the test's kill point)."""
    run = ctx.run
    finished = ctx.stages is not None and ctx.stages.done(spec.name)
    if finished and run.mode == "extend" and spec.resume is None:
        finished = False  # another matrix of the same forest: only the fit is kept
    if finished and spec.resume is not None:
        logger.info("resuming run %s: stage %s was finished, loading its result from %s",
                    run.run_id, spec.name, out)  # fmt: skip
        spec.resume(ctx)
        ctx.rs, ctx.stages = resume_store(out, run.run_id)
        return
    if finished and not spec.again:
        return
    assert spec.run is not None, f"stage {spec.name!r} has nothing to run"
    ctx.done = Done()
    tick = time.perf_counter()
    spec.run(ctx)
    seconds = time.perf_counter() - tick
    if kill is not None:
        kill.ended(spec.name)
    if ctx.rs is None:
        raise RuntimeError(f"stage {spec.name!r} ended without a store to record it in")
    if ctx.stages is None or ctx.stages.rs is not ctx.rs:
        ctx.stages = Stages(ctx.rs)
    info = {**ctx.done.info, "planned_tasks": spec.tasks,
            "estimate": {"cpu_seconds": round(spec.cost.cpu_seconds, 3),
                         "worker_bytes": int(spec.cost.worker_bytes)},
            "process_peak_bytes": _peak_rss()}  # fmt: skip
    ctx.stages.finish(spec.name, seconds, ctx.done.outputs, **info)


def execute(
    job: Any,
    pipeline: Pipeline,
    spec: dict[str, Any],
    result: Callable[[RunStore, dict[str, str], str], Any],
    *,
    progress: Any = None,
    restart: bool = False,
    run_id: str,
    check: Callable[[Run], dict[str, Any] | None] | None = None,
    extends: Callable[[str], str | None] | None = None,
    quality: Callable[[], dict[str, Any]] | None = None,
    create: Callable[[Run], RunStore] | None = None,
) -> Any:
    """The run protocol of every job: lock, decide, run the stages, report, mark complete.

    Under the lock of ``job.out``: ``extends(digest)`` may say the store
    holds this job's forest (``"extend"``: another matrix of it, ``"complete"``:
    that one too), else :func:`decide` says ``new``, ``resume`` or
    ``complete``.  A complete store returns ``result(rs, outputs, "already
    complete")``.  Otherwise ``check(run)`` refuses outputs it may not
    replace (before any cluster starts; it may return values for the stages'
    :class:`Context`), the pipeline's stages run where
    :func:`~distforest.parallel.placement.place` says, each recorded when it
    ends, the report (``report.json`` / ``report.md`` in the job's
    ``report_dir``, by default beside ``job.out``; None: none) is written as
    the last stage and the store is marked complete (:func:`complete`).
    A job without a stage that creates its store (scoring) gives ``create(run)``,
    the store a new run records its stages in.
    """
    from distforest.parallel.placement import place

    digest = spec_hash(spec)
    kill = KillPoint.from_env()
    if kill is not None:
        progress = kill.watch(progress)
    report_dir = getattr(job, "report_dir", location.parent(job.out))
    check_job_inputs_read_only(job)
    with StoreLock(job.out, run_id) as lock, folder_lock(job.out, run_id):
        mode = None if extends is None or restart else extends(digest)
        if mode is None:
            mode = decide(job.out, spec, digest, restart=restart, overwrite=job.overwrite,
                          pipeline=getattr(job, "source", None))  # fmt: skip
        if mode == "complete":
            logger.info("%s is already complete for this job (spec %s)", job.out, digest)
            rs = RunStore.open(job.out)
            return result(rs, Stages(rs).outputs(), "already complete")
        if mode != "extend":
            check_can_create(job.out, overwrite=True)
        stages = Stages(RunStore.open(job.out)) if mode in ("resume", "extend") else None
        record = {"spec": spec, "spec_hash": digest, "run_id": run_id, "job": job.name,
                  "pipeline": job.source, "stages": {}}  # fmt: skip
        replace = job.overwrite or restart or stages is not None
        run = Run(run_id, mode, stages, replace, record, lock.took_over)
        values = (check(run) if check is not None else None) or {}
        if report_dir:  # a pipeline's folder is its run's: another store's report refused
            check_reports(report_dir, replace, store=str(job.out) if job.source else None)
        if not location.is_remote(job.out):
            Path(job.out).parent.mkdir(parents=True, exist_ok=True)
        with place(pipeline.cells, job.connect, progress=progress, watch=True) as where:
            ctx = Context(run, where, stages=stages, values=values)
            if create is not None and stages is not None:
                ctx.rs, ctx.stages = resume_store(job.out, run_id)
            elif create is not None:
                ctx.rs = create(run)
                ctx.stages = Stages(ctx.rs)
            for stage in pipeline.stages:
                if kill is not None:
                    kill.current = stage.name
                _run_stage(stage, ctx, str(job.out), kill)
            facts = cluster_facts(where.monitor)  # engine, tasks and retries, while connected
        assert ctx.rs is not None and ctx.stages is not None
        done = result(ctx.rs, ctx.stages.outputs(),
                      {"resume": "resumed", "extend": "new"}.get(mode, mode))  # fmt: skip
        if report_dir and mode != "extend":
            tick = time.perf_counter()
            written = write_report(job, done, ctx.rs, ctx.stages.record, facts, run,
                                   report_dir, quality() if quality else None)  # fmt: skip
            if getattr(job, "report_dir", None):  # (asked for: a stage of its own, as before)
                ctx.stages.finish("report", time.perf_counter() - tick, written)
            done.outputs.update(written)
        complete_output(ctx.rs)
    return done
