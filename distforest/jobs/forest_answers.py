"""Forest-answer jobs: the runs behind ``outliers``, ``mislabels``, ``mds`` and ``importances``.

Each fits a proximity forest on INPUT (``fit``) and answers from it
matrix-free in one stage named after the command, writing CSV files (and a
picture).  The forest is not saved: the job's store
(:func:`~distforest.jobs.outputs.record_path`,
``<out>.run.zarr`` beside the CSV) holds only its spec and its finished
stages, so that the run follows the run protocol
(:func:`~distforest.jobs.runs.execute`): locked, reported, not repeated once
complete, a changed job refused unless ``--overwrite``.  A killed run fits
again (same seed, same forest) and writes what it had not written.  The rows
come from :func:`~distforest.store.source.open_source`, which decides how the
input is read (whole, or by partitions into a temporary store removed when the
run ends); the forest, its answer and its scratch arrays go where the source
says (:attr:`~distforest.io.source.RowSource.store_path`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from distforest.io.model_files import model_record
from distforest.jobs.base import ForestJob, new_run_id
from distforest.jobs.estimates import fit_seconds, rows_per_tree
from distforest.jobs.outputs import check_new_file
from distforest.jobs.result import JobResult, mode_text, output_lines
from distforest.jobs.runs import Context, Run, execute
from distforest.jobs.stages import (
    ON_A_CLUSTER,
    PRODUCTS_NOTE,
    Cost,
    Pipeline,
    Stage,
    placement_of,
)
from distforest.store.run_store import RunStore
from distforest.store.source import input_plan

#: Threads of this process that read an input by partitions before the run's cluster starts.
ROWS_READ_BY = 1

#: The commands of this kind, and the label of the CSV each writes.
ANSWERS = {"outliers": "outlier scores", "mislabels": "suspects", "mds": "MDS coordinates",
           "importances": "importances"}  # fmt: skip


@dataclass(kw_only=True)
class ForestAnswerJob(ForestJob):
    """One forest answer: fit on ``input``, then ``answer`` into ``files``.

    Attributes
    ----------
    answer : str
        ``outliers``, ``mislabels``, ``mds`` or ``importances``.
    files : dict
        ``{"out": csv, "plot": png or None}``.
    options : dict
        The answer's options: ``components`` and ``dissimilarity`` (mds),
        ``top`` (mislabels, importances), ``repeats`` and ``test_size``
        (importances).
    id : str or None
        Column of row IDs (the CSVs' first column).
    model : str or None
        A model file fitted elsewhere whose trees route the rows instead of a forest
        fitted here (:func:`~distforest.io.model_files.load_model`; ``forest`` unused).
    """

    job_kind: ClassVar[str] = "forest-answer"

    answer: str
    files: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    #: A model file fitted elsewhere whose trees are used instead of ``forest``
    #: (:func:`~distforest.io.model_files.load_model`; the input is its training table).
    model: str | None = None

    def __post_init__(self) -> None:
        self.name = self.answer

    def spec(self, fingerprint: str) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep = ("target", "drop", "na_values", "id", "forest", "answer", "files")
        options = {k: v for k, v in self.options.items() if k != "top"}  # (printing only)
        more = {} if self.model is None else {"model": model_record(self.model)}
        return self.spec_of(keep, options=options, **more,
                            input={"source": self.input, "fingerprint": fingerprint})  # fmt: skip

    def describe(self) -> str:
        """What the job computes."""
        return f"{self.answer} of a proximity forest"

    def summary(self, result: JobResult) -> str:
        """What the run printed before it was a job, and the files (reports too) it wrote."""
        assert isinstance(result, AnswerResult)
        how = mode_text(result.mode, result.store)
        return "\n".join([
            *([result.head] if result.head else []),
            f"{result.what} in {result.seconds:.1f} s{how}",
            *output_lines(result.outputs),
        ])  # fmt: skip


#: The options of ``importances`` (its command's defaults, its pipeline section's keys).
IMPORTANCES = {"repeats": 5, "test_size": 0.25, "top": 10}


@dataclass(kw_only=True)
class ImportancesJob(ForestAnswerJob):
    """``distforest importances`` and a pipeline's ``kind: importances``: a forest answer
    (``answer="importances"``) of its own pipeline kind (the forest is fitted on the rows
    not held out, so it is no section of a proximity pipeline)."""

    job_kind: ClassVar[str] = "importances"
    answer: str = "importances"


def importances_job(data: dict[str, Any], sections: dict[str, dict[str, Any]],
                    input_path: str, out_dir: Any, connect: dict[str, Any],
                    source: str) -> ImportancesJob:  # fmt: skip
    """The job of an ``importances`` pipeline (sections type-checked): the job
    ``distforest importances`` builds from the same values (``input.id`` names the rows'
    IDs, ``output.store`` the run's store, by default beside the CSV)."""
    from distforest.errors import ConfigError
    from distforest.jobs.base import input_fields
    from distforest.jobs.outputs import record_path

    inp, out, section = sections["input"], sections["output"], sections["importances"]
    if not inp.get("target"):
        raise ConfigError(f"{source}: importances needs input.target, the column the features "
                          "predict (the forest is scored on held-out rows)")  # fmt: skip
    if "plot" in out or out.get("report") is False:
        raise ConfigError(f"{source}: output.{'plot' if 'plot' in out else 'report'} does not "
                          "apply to an importances pipeline (it writes a CSV and its report): "
                          "remove it")  # fmt: skip
    options = {**IMPORTANCES, **{k: v for k, v in section.items() if k != "out"}}
    if not 0 < options["test_size"] < 1:
        raise ConfigError(f"{source}: importances.test_size must be a fraction in (0, 1) of the "
                          f"rows held out, got {options['test_size']!r}; e.g. 0.25")  # fmt: skip
    csv = str(out_dir / section["out"])
    store = str(out_dir / out["store"]) if out.get("store") else record_path(csv)
    return ImportancesJob(input=input_path, target=inp["target"], **input_fields(inp),
                          id=inp.get("id"), out=store, files={"out": csv}, options=options,
                          forest=dict(sections["forest"]), connect=connect, source=source,
                          overwrite=bool(out.get("overwrite", False)))  # fmt: skip


@dataclass
class AnswerResult(JobResult):
    """What a forest-answer job wrote: its files, and the lines its command prints."""

    #: The first line (what was computed).
    what: str = ""
    #: The ranking's first rows (mislabels, importances), else empty.
    head: str = ""


@ForestAnswerJob.plans
def plan_answer_job(job: ForestAnswerJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the input's shape, runs nothing (a
    model file that is a pickle or of an untrusted type refused first)."""
    if job.model is not None:
        from distforest.io.model_files import check_model_file

        check_model_file(job.model)
    plan = input_plan(job.input, job.target, drop=job.drop, na_values=job.na_values, id=job.id)
    return answer_pipeline(job, plan.source, plan.n_samples, plan.n_features,
                           stored=plan.parts > 0)  # fmt: skip


def answer_pipeline(job: ForestAnswerJob, source: str, n: int, d: int,
                    table: Any = None, *, stored: bool) -> Pipeline:  # fmt: skip
    """The stages of a forest answer on ``n x d``: ``fit``, then the answer
    (``table``: the input, for the run; its held-out split for ``importances``;
    ``stored``: its rows are read into a store, by partitions)."""
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.forests.square_sums import plan as square_sums_plan
    from distforest.parallel.tasks import plan_tree_batches

    cells = ON_A_CLUSTER if stored else n * d
    params = {**ProximityForest().get_params(), **job.forest}
    threads = placement_of(cells, job.connect)[1]
    trees = int(params["n_estimators"])
    fit_tasks = len(plan_tree_batches(trees, threads, params["batch_size"] or None))
    fit_rows = n
    if job.answer == "importances":
        fit_rows = n - math.ceil(float(job.options["test_size"]) * n)
    rows = rows_per_tree(fit_rows, params)
    # the matrix-free products share every tree's leaves and in-bag counts with each worker
    table_bytes = 3 * 8 * n * d + 8 * n * (d + 4) * 2
    products, cpu = n * trees * 9, 0.0
    notes = [PRODUCTS_NOTE]
    if job.answer in ("outliers", "mislabels"):  # the sums of squared proximities
        sums = square_sums_plan(n, trees, rows, int(params["min_samples_leaf"]))
        cpu = sums["cpu_seconds"]
        notes.insert(0, f"  outliers:     {sums['method']} sums of squared proximities")
        if job.answer == "outliers":  # mislabels also runs an RF-GAP product (all leaves)
            products = sums["worker_bytes"]
    files = {ANSWERS[job.answer]: job.files["out"], "pictures": job.files.get("plot")}
    disk = {label: 300_000 if label == "pictures" else n * 64
            for label, path in files.items() if path}  # fmt: skip
    if stored:
        disk.update(_temporary_bytes(job, n, d, trees))
    writes = tuple(str(p) for p in files.values() if p)
    stages = [
        Stage("fit", (f"{trees} trees in {fit_tasks} tasks" if job.model is None else
                      f"the rows routed through the trees of {job.model}")
              + " (not saved: a resumed run fits again)",
              reads=(str(job.input),), writes=(), tasks=fit_tasks,
              cost=Cost(fit_seconds(trees, rows, d, params["max_features"]), table_bytes),
              run=lambda ctx: _fit(job, table, ctx), again=True),
        Stage(job.answer, f"{job.answer} -> {', '.join(writes)}", reads=("the forest",),
              writes=writes, cost=Cost(cpu, table_bytes + products, disk),
              run=lambda ctx: _answer(job, table, ctx)),
    ]  # fmt: skip
    return Pipeline(
        title=f"{job.answer}: {n:,} rows x {d} features",
        steps=[("input", source), ("forest", f"{trees} trees in {fit_tasks} tasks"),
               ("writes", ", ".join(writes)), ("store", f"{job.out} (this run's stages)")],
        stages=stages, cells=cells, connect=job.connect, out=str(job.out), notes=notes,
    )  # fmt: skip


def _temporary_bytes(job: ForestAnswerJob, n: int, d: int, trees: int) -> dict[str, int]:
    """The disk a table read by partitions takes besides the outputs: the temporary store
    its forest is fitted in (removed at the end) and the scratch arrays of ``mislabels``
    (two classes; 8 bytes a row more per class above eight) and ``mds``."""
    need = {"temporary store (rows, leaves; removed after)":
            n * (4 * d + 8) + n * trees * (4 + 1 + 1)}  # fmt: skip
    if job.answer == "mislabels":
        from distforest.apps.mislabels import scratch_bytes

        need["ranking scratch (removed after)"] = scratch_bytes(n, 2)
    if job.answer == "mds":
        from distforest.apps.mds import scratch_bytes as mds_scratch_bytes

        components = int(job.options.get("components", 2))
        need["MDS scratch (removed after)"] = mds_scratch_bytes(n, components, trees)
    return need


def _read_input(job: ForestAnswerJob) -> tuple[Any, Any]:
    """The input's rows and, for ``importances``, its rows to fit and rows to measure on.

    The rows are a :class:`~distforest.io.source.RowSource`
    (:func:`~distforest.store.source.open_source` decides how they are read); the
    caller releases it (:func:`~distforest.store.temporary.release`).  ``importances``
    holds rows out of a table read whole (:func:`~distforest.io.load_table`).
    """
    if job.answer == "importances":
        from distforest.forests.proximity_forest import ProximityForest
        from distforest.io import load_table
        from distforest.jobs.fitting import held_out

        table = load_table(job.input, **job.table_kw(), id=job.id)
        return table, held_out(table, ProximityForest(**job.forest), job.options["test_size"])
    import dask

    from distforest.store.source import open_source

    # read before the run's cluster starts: by partitions, one at a time in this process
    # (two threads held two of them at once: the driver peaked at 0.94 GB against 0.63 GB
    # reading 10,000,000 rows of 40 parts; on a client's cluster the setting is not used)
    with dask.config.set(num_workers=ROWS_READ_BY):
        source = open_source(job.input, **job.table_kw(), id=job.id)
    if job.answer == "mislabels" and source.target_classes() is None:
        # a continuous target is refused before any work (labels kept as codes are classes)
        from distforest.forests.targets import require_classes

        require_classes(str(job.options.get("task", "auto")), source.read_y(),
                        source.target_name, "mislabels")  # fmt: skip
    return source, None


@ForestAnswerJob.runs
def run_answer_job(job: ForestAnswerJob, progress: Any = None, *, restart: bool = False,
                   run_id: str | None = None) -> AnswerResult:  # fmt: skip
    """Fit the forest and write the answer under the run protocol; every input and output
    checked before any work."""
    from distforest.store.temporary import release

    start = time.perf_counter()
    run_id = run_id or new_run_id()
    table, split = _read_input(job)
    try:
        return _run(job, table, split, start, progress, restart, run_id)
    finally:
        release(table)  # a temporary store of rows read by partitions


def _run(job: ForestAnswerJob, table: Any, split: Any, start: float, progress: Any,
         restart: bool, run_id: str) -> AnswerResult:  # fmt: skip
    """:func:`run_answer_job` once its input is open."""
    stored = getattr(table, "store_path", None) is not None  # (a held-out split: a Table)
    pipeline = answer_pipeline(job, str(table.source), table.n_samples, table.n_features,
                               (table, split), stored=stored)  # fmt: skip

    def check(run: Run) -> None:
        if run.stages is None or not run.stages.done(job.answer):
            for path in job.files.values():
                check_new_file(path, run.replace)

    def create(run: Run) -> RunStore:
        return RunStore.create(job.out, attrs=run.record, overwrite=True)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> AnswerResult:
        info = (rs.attrs.get("stages") or {}).get(job.answer, {})
        return AnswerResult(store=rs.path, name=job.answer, shape=(0, 0), n_trees=0,
                            task=str(job.forest.get("task", "auto")),
                            seconds=time.perf_counter() - start, outputs=dict(outputs),
                            mode=mode, what=str(info.get("what", job.answer)),
                            head=str(info.get("head", "")))  # fmt: skip

    return execute(job, pipeline, job.spec(table.fingerprint()), result, progress=progress,
                   restart=restart, run_id=run_id, check=check, create=create)  # fmt: skip


def _fit(job: ForestAnswerJob, inputs: Any, ctx: Context) -> None:
    """The fit stage: the forest, its rows' arrays where the source keeps results (in
    memory, or in the store of rows read by partitions)."""
    from distforest.forests.proximity_forest import ProximityForest

    table, split = inputs
    rows = table if split is None else split[0]
    if job.model is None:
        ctx.model = ProximityForest(**job.forest).fit(rows)
    else:  # the rows routed through a model fitted elsewhere
        from distforest.io.model_files import load_model

        ctx.model = ProximityForest.from_model(load_model(job.model), rows)
    ctx.done.info["trees"] = int(ctx.model.leaves_.shape[1])


def _answer(job: ForestAnswerJob, inputs: Any, ctx: Context) -> None:
    """The answer's stage: its files, and the lines the command prints."""
    from distforest.jobs import outputs

    table, split = inputs
    forest, out, plot = ctx.model, job.files["out"], job.files.get("plot")
    source = table.source
    info = ctx.done.info
    if job.answer == "outliers":
        written = outputs.write_outliers(forest, out, plot, title=f"outlier scores, {source}")
        info["what"] = (f"outlier scores of {forest.n_samples_} rows (flag: the far-out fence "
                        "of each class)")  # fmt: skip
    elif job.answer == "mislabels":
        top = int(job.options.get("top", 10))
        written, ranking = outputs.write_mislabels(forest, out, top)
        if top:
            info["head"] = ranking.head.to_string(index=False, float_format=lambda v: f"{v:.3f}")
        info["what"] = (f"ranked {ranking.rows} rows; {ranking.disagrees} out-of-bag votes "
                        "disagree with the label")  # fmt: skip
    elif job.answer == "mds":
        components = int(job.options.get("components", 2))
        dissimilarity = str(job.options.get("dissimilarity", "sqrt"))
        title = f"MDS of {dissimilarity} dissimilarity, {source}"
        written = outputs.write_mds(forest, out, plot, components=components,
                                    dissimilarity=dissimilarity, title=title)  # fmt: skip
        info["what"] = f"{components}-D MDS of {forest.n_samples_} rows"
    else:
        from distforest.jobs.fitting import measure

        test = split[1]
        ranking, score = measure(forest, test, int(job.options.get("repeats", 5)))
        written = {"importances": outputs.write_csv(ranking, out)}
        top = int(job.options.get("top", 10))
        if top:
            head = ranking.head(top)
            info["head"] = head.to_string(index=False, float_format=lambda v: f"{v:.4f}")
        metric = "accuracy" if forest.task_ == "classification" else "R²"
        info["what"] = (f"importances of {table.n_features} features (held-out {metric} "
                        f"{score:.3f} on {test.n_samples} rows)")  # fmt: skip
    ctx.done.outputs = written
