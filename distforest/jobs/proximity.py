"""The proximity job shared by ``distforest proximity`` and ``distforest run``.

A job runs in stages (fit, tiles, plot, impute, outliers, mislabels, mds,
report), each recorded in the store's ``stages`` attribute when it ends.
It is safe to run again:

- the output store is locked for the whole run (:mod:`distforest.store.lock`);
- the job's *spec* (input fingerprint, forest, matrix, applications, output
  names, distforest version) is hashed into ``spec_hash``.  Same hash and a
  half-written store: the run resumes (the saved forest is loaded, finished
  tiles and stages are skipped), and the result is bit-identical to an
  uninterrupted run.  Same hash and a complete store: nothing to do.  A
  different hash is refused unless ``restart`` (or ``overwrite``) is given;
- the store is marked complete only after every stage and the report.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from distforest import location
from distforest.errors import InputError
from distforest.forests.proximity_forest import ProximityForest
from distforest.forests.targets import require_classes
from distforest.forests.tiles import ARRAY_NAMES
from distforest.io import Table, load_table
from distforest.jobs.applications import APP_STAGES, app_stages, check_outputs
from distforest.jobs.base import ForestJob, new_run_id
from distforest.jobs.estimates import check_disk, check_size, estimate
from distforest.jobs.inputs import input_shape, partitioned_input
from distforest.jobs.outputs import check_new_file
from distforest.jobs.plan import Plan, proximity_plan
from distforest.jobs.report import check_reports, write_report
from distforest.jobs.result import JobResult
from distforest.jobs.runs import Run, Stage, Stages, load_or_fit, run_protocol, stage
from distforest.parallel.placement import place
from distforest.store.inputs import PendingInput
from distforest.store.run_store import RunStore

logger = logging.getLogger("distforest")


@dataclass(kw_only=True)
class ProximityJob(ForestJob):
    """Everything one proximity run needs (already type-checked)."""

    job_kind: ClassVar[str] = "proximity"

    #: Column of row IDs (the stores' ``sample`` coordinates, the CSVs' first column).
    id: str | None = None
    method: str = "original"
    #: Write each row's ``top_k`` proximity neighbours instead of the n x n matrix.
    top_k: int | None = None
    #: With ``top_k``: write the n x n matrix as well.
    dense: bool = False
    plot: str | None = None
    #: ``{"out": csv, "plot": png}`` to also write outlier scores.
    outliers: dict[str, Any] | None = None
    #: ``{"out": csv}`` to rank suspected mislabels.
    mislabels: dict[str, Any] | None = None
    #: ``{"out": csv, "plot": png, "components": 2, "dissimilarity": "sqrt"}`` for MDS.
    mds: dict[str, Any] | None = None
    #: ``{"out": path, "iterations": 5, "n_estimators": 100, ...}`` to impute the input.
    impute: dict[str, Any] | None = None
    #: Directory for ``report.json`` and ``report.md`` (None: no report).
    report_dir: str | None = None
    name: str = "proximity"

    def spec(self, table: Table | PendingInput) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep: tuple[str, ...] = ("target", "drop", "na_values", "forest", "method", "plot",
                                 *APP_STAGES)  # fmt: skip
        # id and top-k only when given: the specs of earlier runs are unchanged
        keep += ("id",) * (self.id is not None) + ("top_k", "dense") * (self.top_k is not None)
        return self.spec_of(keep, input={"source": table.source,
                                         "fingerprint": table.fingerprint()})  # fmt: skip

    def describe(self) -> str:
        """What the job computes, for ``distforest validate``."""
        return f"{self.method} proximity"


@ProximityJob.runs
def run_proximity_job(
    job: ProximityJob, progress: Any = None, *, restart: bool = False, run_id: str | None = None
) -> JobResult:
    """Run a job: load, fit, write proximities, then the applications and a report.

    Input and output problems are found before any cluster is started, so
    a bad run leaves nothing behind; see the module docstring for locking,
    resuming and re-running.
    """
    start = time.perf_counter()
    run_id = run_id or new_run_id()
    table = _read_input(job)
    if job.mislabels and isinstance(table, Table):
        require_classes(job.forest.get("task", "auto"), table.y, table.target_name, "mislabels")
    spec = job.spec(table)

    def stages_of_run(run: Run) -> tuple[RunStore, Stages, None]:
        # A resumed or restarted run may replace the files of its own job.
        plan = check_outputs(job, run.stages, replace=run.replace)
        if job.report_dir:
            check_reports(job.report_dir, run.replace)
        need = estimate(job, table.n_samples, table.n_features)
        check_size(f"the proximity job on {table.source} ({table.n_samples:,} rows)", need,
                   f"the number of trees ({need['trees']:,})"
                   + (f" and imputation iterations ({job.impute.get('iterations', 5)})"
                      if job.impute else ""))  # fmt: skip
        check_disk(location.parent(job.out), need["disk_bytes"], replaces=job.out)
        logger.info("input %s: %d rows x %d features", table.source, table.n_samples,
                    table.n_features)  # fmt: skip
        cells = table.n_samples * table.n_features
        with place(cells, job.connect, progress=progress, watch=True) as where:
            forest, rs, stages = _fit_stage(job, table, run)
            _tiles_stage(job, forest, rs, stages)
            app_stages(job, table, forest, rs, stages, plan, where.client)
            if job.report_dir:
                with stage("report", stages) as done:
                    done.outputs = write_report(job, table, rs, stages.record, where.monitor,
                                                spec, run.record["spec_hash"], run.run_id,
                                                run.mode, run.took_over)  # fmt: skip
        return rs, stages, None

    def shortcut(digest: str) -> JobResult | None:
        same_forest = _same_forest(job, spec, digest)
        return None if same_forest is None else _add_matrix(job, same_forest, table, progress,
                                                            start)  # fmt: skip

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        return _result(job, rs, outputs, start, mode)

    return run_protocol(job, spec, stages_of_run, result, restart=restart, run_id=run_id,
                        shortcut=shortcut, simple_report=False)  # fmt: skip


@ProximityJob.plans
def plan_proximity_job(job: ProximityJob) -> Plan:
    """What the job would do (``--dry-run``): reads the input, runs nothing."""
    _, n, d = input_shape(job.input, job.target, drop=job.drop, na_values=job.na_values,
                          id=job.id)  # fmt: skip
    return proximity_plan(job, n, d)


def _read_input(job: ProximityJob) -> Table | PendingInput:
    """The job's table: loaded whole, or (a glob, a folder of parts, a large file) its
    partitions' summaries only, the encoded rows written into the job's store later."""
    if not partitioned_input(job.input):
        return load_table(job.input, **job.table_kw(), id=job.id)
    if job.impute and job.impute.get("from") == "proximity":
        raise InputError(
            f"{job.input}: impute.from: proximity reads the n x n matrix of a table loaded "
            "whole, not of a glob, a folder of parts or a file over 32 MB; remove impute.from"
        )
    from distforest.io.ingest import read_partitioned  # pass 1 (summaries only)

    data = read_partitioned(job.input, target=job.target, drop=job.drop,
                            na_values=job.na_values, id=job.id)  # fmt: skip
    return PendingInput(data)


#: Spec keys that choose a matrix of a forest, not the forest: a job differing from a
#: store's job only in these adds its matrix to the store (``proximity --method oob``).
MATRIX_KEYS = ("method", "plot")


def _same_forest(job: ProximityJob, spec: dict[str, Any], digest: str) -> RunStore | None:
    """The complete store at ``job.out`` when it holds this job's forest, for another matrix.

    That is: a complete distforest store of a job whose spec equals this one
    but for :data:`MATRIX_KEYS` (same input and fingerprint, same forest
    parameters and seed, no applications), while this job asks for no
    applications (nor top-k neighbours) either.  None otherwise (then :func:`decide` rules).
    """
    path = Path(job.out)
    if any(getattr(job, name) for name in APP_STAGES) or job.top_k is not None:
        return None  # (a top-k job's neighbours are not a dense matrix to add)
    if not path.is_dir():
        return None
    try:
        rs = RunStore.open(path)
    except Exception:  # not a store, half created...: decide() says what to do
        return None
    old = rs.attrs.get("spec")
    if not rs.is_complete or rs.attrs.get("spec_hash") == digest or not isinstance(old, dict):
        return None
    if any(old.get(name) for name in APP_STAGES):
        return None
    strip = lambda s: {k: v for k, v in s.items() if k not in MATRIX_KEYS}  # noqa: E731
    return rs if strip(old) == strip(spec) else None


def _add_matrix(job: ProximityJob, rs: RunStore, table: Any, progress: Any,
                start: float) -> JobResult:  # fmt: skip
    """Write ``job.method``'s matrix (and picture) into a complete store of the same forest.

    ``table`` is the job's input (a :class:`Table` or a pending partitioned
    input: only its size is used).  The forest is loaded from the store, not
    fitted again; a matrix already
    complete there is not written again (exit 0, "already complete").
    """
    name = ARRAY_NAMES[job.method]
    done = rs.done_tiles(name)
    have = name in rs.group and done is not None and bool(done.all())
    plot_done = not job.plot or Path(job.plot).exists()
    if have and plot_done:
        logger.info("%s already holds the %s matrix of this forest", job.out, job.method)
        return _result(job, rs, {}, start, "already complete")
    if job.plot:
        check_new_file(job.plot, job.overwrite)
    need = estimate(job, table.n_samples, table.n_features)
    check_disk(Path(job.out).parent, 0 if have else need["disk_bytes"])
    logger.info("%s holds this forest: adding its %s matrix", job.out, job.method)
    forest = ProximityForest.load(job.out)
    rs = RunStore.open(job.out, mode="r+")
    rs.mark_running()
    outputs: dict[str, str] = {}
    with place(table.n_samples * table.n_features, job.connect, progress=progress):
        forest.write_proximity(rs, job.method)
        if job.plot:
            from distforest.apps.plots import plot_matrix

            matrix = rs.dataset()[name]
            codes = forest.y_ if forest.task_ == "classification" else None
            picture = plot_matrix(matrix, job.plot, labels=codes, title=f"{job.method} proximity",
                                  class_names=[str(c) for c in forest.classes_])  # fmt: skip
            outputs["proximity picture"] = str(picture.resolve())
    rs.mark_complete()
    return _result(job, rs, outputs, start, "new")


def _fit_stage(job: ProximityJob, table: Any, run: Run) -> tuple[ProximityForest, RunStore, Stages]:
    """Fit (or, resuming, load) the forest; it runs where :func:`place` says."""

    def fit(done: Stage) -> tuple[ProximityForest, RunStore]:
        if isinstance(table, PendingInput):  # rows into the store, trees read them there
            forest = ProximityForest(**job.forest).fit(table.write(job.out, run.record))
            rs = RunStore.open(job.out, mode="r+")
        else:
            forest = ProximityForest(**job.forest).fit(table)
            # the spec from the store's first moment
            rs = forest.save(job.out, overwrite=True, attrs=run.record)
        done.info["trees"] = int(forest.leaves_.shape[1])
        return forest, rs

    return load_or_fit(run, job.out, lambda: ProximityForest.load(job.out), fit, "forest")


def writes_dense(job: ProximityJob) -> bool:
    """Whether the job writes the n x n matrix (not only the top-k neighbours)."""
    return job.top_k is None or job.dense


def _neighbors_stage(job: ProximityJob, forest: ProximityForest, rs: RunStore,
                     stages: Stages) -> None:  # fmt: skip
    """Each row's top-k neighbours (self excluded), resumable by row block."""
    if job.top_k is None or stages.done("neighbors"):
        return
    from distforest.forests.proximity_neighbors import write_forest_neighbors

    with stage("neighbors", stages) as done:
        done.info = write_forest_neighbors(forest, rs, job.method, job.top_k)
        if done.info["skipped"]:
            logger.info("resumed: %d of %d neighbour blocks were already written",
                        done.info["skipped"], done.info["blocks"])  # fmt: skip


def _tiles_stage(job: ProximityJob, forest: ProximityForest, rs: RunStore, stages: Stages) -> None:
    _neighbors_stage(job, forest, rs, stages)
    if not writes_dense(job):
        return
    with stage("tiles", stages) as done:
        stats = done.info = forest.write_proximity(rs, job.method)
        if stats["skipped"]:
            logger.info("resumed: %d of %d tiles were already written", stats["skipped"],
                        stats["tiles"])  # fmt: skip
        previous = stages.record.get("tiles", {})
        stats["bytes"] += int(previous.get("bytes", 0)) if stats["skipped"] else 0
    if job.plot and not stages.done("plot"):
        from distforest.apps.plots import plot_matrix

        with stage("plot", stages) as done:
            matrix = rs.dataset()[ARRAY_NAMES[job.method]]
            codes = forest.y_ if forest.task_ == "classification" else None
            title = f"{job.method} proximity" + (", rows by class" if codes is not None else "")
            picture = plot_matrix(matrix, job.plot, labels=codes, title=title,
                                  class_names=[str(c) for c in forest.classes_])  # fmt: skip
            done.outputs = {"proximity picture": location.resolved(picture)}


def _result(job: ProximityJob, rs: RunStore, outputs: dict[str, str], start: float,
            mode: str) -> JobResult:  # fmt: skip
    attrs = rs.attrs
    name = ARRAY_NAMES[job.method] if writes_dense(job) else "neighbors_index"
    rows, cols = rs.array(name).shape if name in rs.group else (0, 0)
    return JobResult(
        store=rs.path,
        name=name,
        shape=(rows, cols),
        n_trees=int(attrs.get("n_trees", 0)),
        task=str(attrs.get("task")),
        seconds=time.perf_counter() - start,
        outputs={"store": rs.path, **outputs},
        mode=mode,
    )
