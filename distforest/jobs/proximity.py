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

import contextlib
import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from distforest import location
from distforest.forests.proximity_forest import ProximityForest
from distforest.forests.targets import require_classes
from distforest.forests.tiles import ARRAY_NAMES
from distforest.io.model_files import model_record
from distforest.io.source import RowSummary
from distforest.jobs.applications import APP_STAGES, app_stage, check_outputs
from distforest.jobs.base import ForestJob, new_run_id
from distforest.jobs.estimates import check_disk, check_size, estimate
from distforest.jobs.outputs import check_new_file
from distforest.jobs.report import table_quality
from distforest.jobs.result import JobResult
from distforest.jobs.runs import Context, Run, execute, fit_into_store, fitted_rows
from distforest.jobs.stages import Cost, Pipeline, Stage, placement_of
from distforest.store.run_store import RunStore
from distforest.store.source import input_shape, open_input

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
    #: A model file fitted elsewhere whose trees are used instead of ``forest``
    #: (:func:`~distforest.io.model_files.load_model`; the input is its training table).
    model: str | None = None
    name: str = "proximity"

    def __post_init__(self) -> None:
        # top-k neighbours: the refined forest where it is faster (leaf_bound="auto":
        # trees on a sample of at most a fifth of the rows, from 1,000,000 rows with
        # the default sample; benchmarks/results/refine-phases.md), unless given
        if self.top_k is not None and self.model is None and "leaf_bound" not in self.forest:
            self.forest = {**self.forest, "leaf_bound": "auto"}

    def spec(self, table: RowSummary) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep: tuple[str, ...] = ("target", "drop", "na_values", "forest", "method", "plot",
                                 *APP_STAGES)  # fmt: skip
        # id and top-k only when given: the specs of earlier runs are unchanged
        keep += ("id",) * (self.id is not None) + ("top_k", "dense") * (self.top_k is not None)
        more = {} if self.model is None else {"model": model_record(self.model)}
        return self.spec_of(keep, input={"source": table.source,
                                         "fingerprint": table.fingerprint()}, **more)  # fmt: skip

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
    resuming and re-running.  The stages are :func:`proximity_pipeline`'s,
    run by :func:`~distforest.jobs.runs.execute`.
    """
    start = time.perf_counter()
    run_id = run_id or new_run_id()
    table = open_input(job.input, **job.table_kw(), id=job.id)
    if job.mislabels and table.target_classes() is None:  # (text labels are classes)
        require_classes(job.forest.get("task", "auto"), table.read_y(), table.target_name,
                        "mislabels")  # fmt: skip
    spec = job.spec(table)
    pipeline = proximity_pipeline(job, table.n_samples, table.n_features, table)

    def check(run: Run) -> dict[str, Any]:
        # A resumed or restarted run may replace the files of its own job.
        values = {"plan": check_outputs(job, run.stages, replace=run.replace)}
        if run.mode == "extend":
            if job.plot:
                check_new_file(job.plot, job.overwrite)
            return values
        need = estimate(job, table.n_samples, table.n_features)
        check_size(f"the proximity job on {table.source} ({table.n_samples:,} rows)", need,
                   f"the number of trees ({need['trees']:,})"
                   + (f" and imputation iterations ({job.impute.get('iterations', 5)})"
                      if job.impute else ""))  # fmt: skip
        check_disk(location.parent(job.out), need["disk_bytes"], replaces=job.out)
        logger.info("input %s: %d rows x %d features", table.source, table.n_samples,
                    table.n_features)  # fmt: skip
        return values

    def extends(digest: str) -> str | None:
        return _same_forest(job, spec, digest)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        return _result(job, rs, outputs, start, mode)

    return execute(job, pipeline, spec, result, progress=progress, restart=restart,
                   run_id=run_id, check=check, extends=extends,
                   quality=lambda: table_quality(table, _record(job)))  # fmt: skip


@ProximityJob.plans
def plan_proximity_job(job: ProximityJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the input's shape, runs nothing."""
    _, n, d = input_shape(job.input, job.target, drop=job.drop, na_values=job.na_values,
                          id=job.id)  # fmt: skip
    return proximity_pipeline(job, n, d)


def _record(job: ProximityJob) -> dict[str, Any]:
    """The stages recorded in the job's store (for the report's data-quality counts)."""
    return dict(RunStore.open(job.out).attrs.get("stages") or {})


def proximity_pipeline(job: ProximityJob, n: int, d: int, table: Any = None) -> Pipeline:
    """The stages of a proximity job on ``n x d`` (``table``: the input, for the run).

    fit, the top-k neighbours, the tiles of the n x n matrix, its picture and
    the applications (impute, outliers, mislabels, mds), each with its tasks
    and cost (:func:`~distforest.jobs.estimates.estimate`).
    """
    threads = placement_of(n * d, job.connect)[1]
    plan = estimate(job, n, d, threads=threads)
    cpu, peak = plan["stage_cpu"], plan["stage_bytes"]
    store = plan["store"]
    matrix = "proximity matrix (uncompressed)"
    fit_disk = {k: v for k, v in store.items()
                if k != matrix and not k.startswith("top-k")}  # fmt: skip
    fitting = (f"{plan['trees']} trees in {plan['fit_tasks']} tasks of up to "
               f"{plan['trees_per_task']}" if job.model is None
               else f"the rows routed through the trees of {job.model}")  # fmt: skip
    stages = [Stage(
        "fit", fitting,
        reads=(str(job.input),), writes=(str(job.out),), tasks=plan["fit_tasks"],
        cost=Cost(cpu["fit"], peak["fit"], fit_disk),
        run=lambda ctx: _fit(job, table, ctx),
        resume=lambda ctx: setattr(ctx, "model", _fitted(job, table)),
    )]  # fmt: skip
    if job.top_k is not None:
        stages.append(Stage(
            "neighbors", f"the top {job.top_k} neighbours of every row ({job.method})",
            reads=("leaves",), writes=("neighbors_index", "neighbors_proximity"),
            cost=Cost(cpu["neighbors"], peak["neighbors"],
                      {k: v for k, v in store.items() if k.startswith("top-k")}),
            run=lambda ctx: _neighbors(job, ctx),
        ))  # fmt: skip
    if writes_dense(job):
        tile = plan["tile_size"]
        stages.append(Stage(
            "tiles", f"{job.method}, {plan['tiles']:,} tiles of {tile} x {tile}",
            reads=("leaves",), writes=(ARRAY_NAMES[job.method],), tasks=plan["tiles"],
            tiles=plan["tiles"], cost=Cost(cpu["tiles"], peak["tiles"], {matrix: store[matrix]}),
            run=lambda ctx: _tiles(job, ctx), again=True,
        ))  # fmt: skip
        if job.plot:
            stages.append(Stage(
                "plot", f"a picture of the matrix -> {job.plot}",
                reads=(ARRAY_NAMES[job.method],), writes=(job.plot,),
                cost=Cost(0.0, 0, {"pictures": 300_000}), run=lambda ctx: _plot(job, ctx),
            ))  # fmt: skip
    for name in APP_STAGES:
        if getattr(job, name):
            stages.append(app_stage(name, job, plan, table))
    return Pipeline(
        title=f"job {job.name}: {n:,} rows x {d} features",
        steps=[("input", str(job.input) + (f" (target {job.target})" if job.target else "")),
               ("proximity", f"{job.method}, "
                             + (f"{plan['tiles']:,} tiles of {plan['tile_size']} x "
                                f"{plan['tile_size']}" if plan["dense"] else "no n x n matrix")
                             + (f"; the top {plan['top_k']} neighbours of every row"
                                if plan["top_k"] else "")),
               *forest_step(job, n, d),
               ("store", str(job.out))],
        stages=stages, cells=n * d, connect=job.connect, out=str(job.out),
    )  # fmt: skip


def forest_step(job: ProximityJob, n: int, d: int) -> list[tuple[str, str]]:
    """The dry run's ``forest`` line: whether its leaves are refined, and why."""
    if job.model is not None:
        return [("forest", f"the trees of {job.model} as they are (no refinement)")]
    _, why = ProximityForest.refinement_plan(job.forest, job.target is not None, n, d)
    return [("forest", why)]


#: Spec keys that choose a matrix of a forest, not the forest: a job differing from a
#: store's job only in these adds its matrix to the store (``proximity --method oob``).
MATRIX_KEYS = ("method", "plot")


def _same_forest(job: ProximityJob, spec: dict[str, Any], digest: str) -> str | None:
    """``"extend"`` when the complete store at ``job.out`` holds this job's forest and not
    yet this matrix (``"complete"`` when it holds that too), else None.

    That is: a complete distforest store of a job whose spec equals this one
    but for :data:`MATRIX_KEYS` (same input and fingerprint, same forest
    parameters and seed, no applications), while this job asks for no
    applications (nor top-k neighbours) either.  None: :func:`decide` rules.
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
    if strip(old) != strip(spec):
        return None
    name = ARRAY_NAMES[job.method]
    done = rs.done_tiles(name)
    have = name in rs.group and done is not None and bool(done.all())
    if have and (not job.plot or Path(job.plot).exists()):
        logger.info("%s already holds the %s matrix of this forest", job.out, job.method)
        return "complete"
    logger.info("%s holds this forest: adding its %s matrix", job.out, job.method)
    return "extend"


def _fit(job: ProximityJob, table: Any, ctx: Context) -> None:
    """The fit stage: fit the forest and save it (its spec from the store's first moment);
    with ``job.model``, the model's trees route the rows instead."""
    fit = ProximityForest(**job.forest) if job.model is None else partial(_routed, job)
    fit_into_store(fit, table, ctx, job.out)
    ctx.done.info["trees"] = int(ctx.model.leaves_.shape[1])


def _fitted(job: ProximityJob, table: Any) -> ProximityForest:
    """The job's forest again (a resumed run): loaded from its store, or the model's
    rows routed once more (a model's trees are not in the store)."""
    if job.model is None:
        return ProximityForest.load(job.out)
    return _routed(job, fitted_rows(table, job.out))


def _routed(job: ProximityJob, rows: Any) -> ProximityForest:
    """The rows routed through the trees of ``job.model`` (the store's fit, if any)."""
    from distforest.io.model_files import load_model

    assert job.model is not None
    forest = ProximityForest.from_model(load_model(job.model), rows,
                                        tile_size=job.forest.get("tile_size", 2048))  # fmt: skip
    if location.exists(job.out):  # a resumed run: this fit is the store's
        with contextlib.suppress(Exception):
            forest.fit_id_ = RunStore.open(job.out).attrs["fit_id"]
    return forest


def writes_dense(job: ProximityJob) -> bool:
    """Whether the job writes the n x n matrix (not only the top-k neighbours)."""
    return job.top_k is None or job.dense


def _neighbors(job: ProximityJob, ctx: Context) -> None:
    """Each row's top-k neighbours (self excluded), resumable by row block."""
    from distforest.forests.proximity_neighbors import write_forest_neighbors

    info = ctx.done.info = write_forest_neighbors(
        ctx.model, ctx.store, job.method, int(job.top_k or 0)
    )
    if info["skipped"]:
        logger.info("resumed: %d of %d neighbour blocks were already written",
                    info["skipped"], info["blocks"])  # fmt: skip


def _tiles(job: ProximityJob, ctx: Context) -> None:
    """The tiles of the n x n matrix; a resumed run keeps the tiles already written."""
    assert ctx.stages is not None
    stats = ctx.done.info = ctx.model.write_proximity(ctx.rs, job.method)
    if stats["skipped"]:
        logger.info("resumed: %d of %d tiles were already written", stats["skipped"],
                    stats["tiles"])  # fmt: skip
    previous = ctx.stages.record.get("tiles", {})
    stats["bytes"] += int(previous.get("bytes", 0)) if stats["skipped"] else 0


def _plot(job: ProximityJob, ctx: Context) -> None:
    """A picture of the matrix, rows by class."""
    from distforest.apps.plots import plot_matrix

    forest = ctx.model
    matrix = ctx.store.dataset()[ARRAY_NAMES[job.method]]
    codes = forest.y_ if forest.task_ == "classification" else None
    title = f"{job.method} proximity" + (", rows by class" if codes is not None else "")
    picture = plot_matrix(matrix, str(job.plot), labels=codes, title=title,
                          class_names=[str(c) for c in forest.classes_])  # fmt: skip
    ctx.done.outputs = {"proximity picture": location.resolved(picture)}


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
