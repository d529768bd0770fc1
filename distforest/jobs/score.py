"""Scoring pipelines: a saved model applied to tonight's table (``model:`` and ``input:``).

A pipeline with a ``model`` key reads the forest a finished proximity run
saved in its store and writes, for the rows of ``input.path`` only, their
scores and their imputed values::

    model:  results/model/run.zarr        # or {path: ..., training: train.csv}
    input:  {path: data/{date}.csv, id: Id, na_values: ["?"]}
    score:  {out: scores.csv, method: rfgap, proximity_prediction: true, outliers: true}
    impute: {out: imputed.csv, proximity: rfgap, categorical_vote: sum}
    output: {dir: results/{date}, store: scores.zarr, overwrite: false}

Nothing is refitted and the model's proximities are not recomputed: the
model store is opened read-only; no ``fit`` or ``tiles`` stage runs.  The
computing is :mod:`distforest.apps.scoring` (the code of ``distforest
score``).  The run records its stages (``score``, ``impute``) in a store of
its own (``output.store``) and follows the protocol of
:mod:`distforest.jobs.runs`: locked, resumable by stage, not repeated once
complete, a changed config refused unless ``--restart``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from distforest import location
from distforest.errors import ConfigError, InputError, StoreError
from distforest.forests.constraints import PROXIMITY_METHODS
from distforest.jobs.base import JobBase, input_fields, new_run_id
from distforest.jobs.estimates import SECONDS_PER
from distforest.jobs.outputs import check_new_file, write_csv
from distforest.jobs.result import JobResult, mode_text, output_lines
from distforest.jobs.row_pieces import RowFrames, model_once, write_pieces
from distforest.jobs.runs import Context, Run, execute
from distforest.jobs.stages import Cost, Pipeline, Stage
from distforest.store.run_store import RunStore

#: Sections of other pipelines that a scoring pipeline must not have (the model fixes them).
NOT_WITH_MODEL = ("forest", "proximity", "outliers", "mislabels", "mds", "xforest",
                  "clustering", "simforest", "neighbors", "knn", "smerf", "distance")  # fmt: skip
#: Keys of ``impute`` that would fit new forests: not in a scoring pipeline.
REFIT_KEYS = ("iterations", "n_estimators", "max_samples")


@dataclass(kw_only=True)
class ScoreJob(JobBase):
    """One scoring run: the rows of ``input`` against the saved forest in ``model``."""

    job_kind: ClassVar[str] = "score"

    model: str
    #: This run's own store (its spec and stages), not the model's.
    out: str
    #: The table the model was fitted on (for imputation); None: the one the model records.
    #: Required when ``model`` is a model file fitted elsewhere (its rows are routed).
    training: str | None = None
    #: The target column of ``training`` (a model file fitted elsewhere).
    target: str | None = None
    id: str | None = None
    #: ``{"out": csv, "method": "rfgap", "proximity_prediction": bool, "outliers": bool}``.
    score: dict[str, Any] | None = None
    #: ``{"out": csv, "proximity": "rfgap", "categorical_vote": "sum"}``.
    impute: dict[str, Any] | None = None
    name: str = "score"

    def spec(self, fingerprint: str, fit_id: str) -> dict[str, Any]:
        """What determines the results: the model's fit, the rows, the options."""
        keep = ("id", "na_values", "score", "impute", "training") + ("target",) * bool(self.target)
        return self.spec_of(keep,
                            model={"path": self.model, "fit_id": fit_id},
                            input={"source": self.input, "fingerprint": fingerprint})  # fmt: skip

    def describe(self) -> str:
        """What the job computes, for ``distforest validate``."""
        return f"scores of new rows against the model {self.model}"

    def summary(self, result: JobResult) -> str:
        """The lines that tell the user what the run wrote."""
        stages = RunStore.open(result.store).attrs.get("stages") or {}
        by_parts = any(stage.get("by_partitions") for stage in stages.values())
        return score_summary(result, by_parts=by_parts, command=self.source is None)


def open_model(path: str, training: str | None = None, target: str | None = None,
               na_values: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """The saved forest of a complete store (exit 6 otherwise), or a model file fitted
    elsewhere (:func:`~distforest.io.model_files.load_model`) with its training rows
    ``training`` (target column ``target``) routed through it."""
    from distforest.forests.proximity_forest import ProximityForest

    if Path(path).is_file():  # a model file, not a store (a directory)
        from distforest.io import load_table
        from distforest.io.model_files import load_model, model_record

        model = load_model(path)
        if training is None:
            raise ConfigError(
                f"{path} is a model fitted elsewhere: its proximities are to the rows it was "
                "fitted on; name that table (model.training in a pipeline, --training in "
                "distforest score) and its target column (model.target, --target)"
            )
        table = load_table(training, target=target, na_values=na_values)
        forest = ProximityForest.from_model(model, table)
        digest = model_record(path)["sha256"][:16]  # the same model and rows: the same fit
        forest.fit_id_ = f"{digest}-{table.fingerprint()}"
        return forest
    if not location.exists(path):
        raise StoreError(f"model {path!r} does not exist; run the pipeline that fits it first")
    rs = RunStore.open(path)
    if not rs.is_complete:
        raise StoreError(
            f"model {path!r} is not complete (status {rs.attrs.get('status')!r}: a run still "
            "writing it, or killed); finish that run first (run it again: it resumes)"
        )
    return ProximityForest.load(path)


def _sizes(job: ScoreJob) -> tuple[Any, Any]:
    """The model (loaded) and the new rows (read, columns matched; a glob, a folder of
    parts or a large file: summarised by partitions, :class:`NewRows`)."""
    from distforest.apps.scoring import new_rows_table
    from distforest.store.source import read_as

    forest = open_model(job.model, job.training, job.target, job.na_values)

    def whole(data: str) -> Any:
        return new_rows_table(forest, data, id_column=job.id, na_values=job.na_values,
                              decimal=job.decimal)  # fmt: skip

    def parts(data: str) -> NewRows:
        if Path(job.model).is_file():
            raise ConfigError(
                f"{data}: new rows read by partitions are scored against a saved forest "
                f"(its store read by each worker); {job.model} is a model file: score a "
                "table loaded whole, or save a proximity run of the model first"
            )
        return read_new_rows(forest, data, job.id, job.na_values)

    return forest, read_as(job.input, whole=whole, parts=parts)


@ScoreJob.plans
def plan_score_job(job: ScoreJob) -> Pipeline:
    """What the job would do (``--dry-run``): opens the model, reads the rows, runs nothing."""
    return score_pipeline(job, *_sizes(job))


def score_pipeline(job: ScoreJob, forest: Any, table: Any,
                   X_train: Any = None) -> Pipeline:  # fmt: skip
    """The stages of a scoring job: score and/or impute the new rows against the model
    (no fit batch, no tile: rows routed, leaf sums, sparse leaf-member rows)."""
    n, m, d = forest.n_samples_, table.n_samples, forest.n_features_in_
    trees = int(forest.leaves_.shape[1])
    # the training leaves and their leaf index (three int32 arrays), the training features
    memory = 12 * n * trees + 8 * n * d + 4 * m * trees
    stages = []
    if job.score:
        parts = ["prediction"] * (forest.task_ != "unsupervised")
        parts += ["proximity-weighted prediction"] * bool(
            forest.task_ != "unsupervised" and job.score.get("proximity_prediction", True)
        )
        parts += ["outlier score"] * bool(job.score.get("outliers", True))
        # the outlier reference: one sparse row per training row, then per new row
        stages.append(Stage(
            "score", f"{', '.join(parts)} -> {job.score['out']}", reads=(job.model, job.input),
            writes=(job.score["out"],),
            cost=Cost(SECONDS_PER["neighbors"] * trees * (n + m), memory,
                      {"scores (CSV)": m * 48}),
            run=lambda ctx: _score(job, forest, table, ctx),
        ))  # fmt: skip
    if job.impute:
        stages.append(Stage(
            "impute", f"{job.impute.get('proximity', 'rfgap')} proximity to the training rows "
                      f"-> {job.impute['out']}",
            reads=(job.model, job.input), writes=(job.impute["out"],),
            cost=Cost(SECONDS_PER["tile"] * trees * n * 4, memory,
                      {"imputed rows (CSV)": m * (d + 1) * 12}),
            run=lambda ctx: _impute(job, forest, table, X_train, ctx),
        ))  # fmt: skip
    by_parts = not hasattr(table, "X")
    return Pipeline(
        title=f"job {job.name}: {m:,} new rows against a {n:,}-row model",
        steps=[("model", f"{job.model}: {forest.task_} forest, {trees} trees, {n:,} training "
                         "rows (read, not refitted; no proximity recomputed)"),
               ("input", f"{job.input}: {m:,} new rows"),
               ("store", f"{job.out} (this run's stages)")],
        stages=stages,
        cells=forest._fitted_cells() + (table.cells if by_parts else int(table.n_samples * d)),
        connect=job.connect, out=str(job.out),
        notes=["  no fit, no tiles: the model's proximities are not recomputed"],
    )  # fmt: skip


def score_command(model: str, input: str, out: str, *, method: str, training: str | None,
                  target: str | None, id_column: str | None, na_values: tuple[str, ...],
                  overwrite: bool, connect: dict[str, Any]) -> ScoreJob:  # fmt: skip
    """``distforest score``: the scoring job of a pipeline with one ``score`` section,
    its scores in the CSV ``out`` and its store beside it
    (:func:`~distforest.jobs.outputs.record_path`); a model file fitted elsewhere (not a
    store) is checked first (a pickle refused before any work)."""
    from distforest.io.model_files import check_model_file
    from distforest.jobs.outputs import record_path

    if training is not None or Path(model).is_file():
        check_model_file(model)
    return ScoreJob(input=input, model=model, out=record_path(out), training=training,
                    target=target, id=id_column, na_values=tuple(na_values),
                    score={"out": out, "method": method}, overwrite=overwrite,
                    connect=connect, name="score")  # fmt: skip


def _score(job: ScoreJob, forest: Any, table: Any, ctx: Context) -> None:
    from distforest.apps.scoring import score_rows

    options = job.score
    assert options is not None  # a stage only when there is a score section
    how = {"method": options.get("method", "rfgap"),
           "proximity_prediction": options.get("proximity_prediction", True),
           "outliers": options.get("outliers", True)}  # fmt: skip
    if not hasattr(table, "X"):  # read by partitions: tasks score and write them
        written = _by_parts(job, table, "score", options["out"], how)[0]
        ctx.done.info["by_partitions"] = True
    else:
        written = write_csv(score_rows(forest, table, **how), options["out"])
    ctx.done.outputs = {"scores": written}
    ctx.done.info["rows"] = table.n_samples


def _impute(job: ScoreJob, forest: Any, table: Any, X_train: Any, ctx: Context) -> None:
    from distforest.apps.scoring import impute_rows

    options = job.impute
    assert X_train is not None and options is not None  # read when there is an impute section
    method = options.get("proximity", "rfgap")
    vote = options.get("categorical_vote", "sum")
    if not hasattr(table, "X"):
        written, cells_filled = _by_parts(
            job, table, "impute", options["out"],
            {"method": method, "vote": vote, "training": job.training,
             "na_values": job.na_values},
        )  # fmt: skip
    else:
        imputed, cells_filled = impute_rows(forest, table, X_train, method=method, vote=vote)
        written = write_csv(imputed, options["out"])
    ctx.done.outputs = {"imputed rows": written}
    ctx.done.info["cells_imputed"] = cells_filled


@ScoreJob.runs
def run_score_job(
    job: ScoreJob, progress: Any = None, *, restart: bool = False, run_id: str | None = None
) -> JobResult:
    """Score (and impute) the new rows against the model; resumable by stage."""
    import numpy as np

    from distforest.apps.scoring import training_features
    from distforest.io import load_table

    start = time.perf_counter()
    run_id = run_id or new_run_id()
    forest, table = _sizes(job)
    X_train = None
    if job.impute and forest.__dict__.get("outside_") is not None:  # a model file's rows
        X_train = np.asarray(forest._model_rows(load_table(job.training, target=job.target,
                                                            na_values=job.na_values)))  # fmt: skip
    elif job.impute:  # the training rows read (and checked) before anything is written
        X_train = training_features(job.model, forest, job.training, job.na_values)
    pipeline = score_pipeline(job, forest, table, X_train)

    def check(run: Run) -> None:
        for section in (job.score, job.impute):
            if section and (run.stages is None or not run.stages.done(_stage(section, job))):
                check_new_file(section["out"], run.replace)

    def create(run: Run) -> RunStore:
        return RunStore.create(job.out, attrs={**run.record, "model": job.model}, overwrite=True)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        return JobResult(store=rs.path, name="scores", shape=(table.n_samples, forest.n_samples_),
                         n_trees=int(forest.leaves_.shape[1]), task=str(forest.task_),
                         seconds=time.perf_counter() - start, outputs={**outputs},
                         mode=mode)  # fmt: skip

    spec = job.spec(table.fingerprint(), forest.fit_id_)
    return execute(job, pipeline, spec, result, progress=progress, restart=restart,
                   run_id=run_id, check=check, create=create)  # fmt: skip


def _by_parts(job: ScoreJob, rows: Any, what: str, out: str,
              options: dict[str, Any]) -> tuple[str, int]:  # fmt: skip
    """A stage over new rows read by partitions, on dask's current scheduler (the run's
    cluster): ``(path written, cells filled)``."""
    _, written, cells = rows_to_csv(job.model, rows, out, what, options)
    return written, cells


def _stage(section: dict[str, Any], job: ScoreJob) -> str:
    return "score" if section is job.score else "impute"


def score_summary(result: JobResult, by_parts: bool = False, command: bool = False) -> str:
    """A few lines telling the user what was written (``by_parts``: the new rows were read
    by partitions; ``command``: ``distforest score``, which has no ``--restart``)."""
    width = max(len(k) for k in result.outputs) + 1
    how = {"new": "", "resumed": ", resumed", "already complete": ", already complete: nothing "
           "to do (use --restart to compute it again)"}[result.mode]  # fmt: skip
    if command:
        how = mode_text(result.mode, result.store)
    return "\n".join([
        f"scored {result.shape[0]:,} new rows{' read by partitions' * by_parts} against "
        f"{result.shape[1]:,} training rows "
        f"({result.task} forest, {result.n_trees} trees) in {result.seconds:.1f} s{how}",
        *output_lines(result.outputs, width),
        f"  {'inspect:':<{width}} distforest status {result.store}",
    ])  # fmt: skip


def score_job(
    data: dict[str, Any],
    sections: dict[str, dict[str, Any]],
    input_path: str,
    out_dir: Path,
    connect_kw: dict[str, Any],
    source: str,
    templated: Callable[[str], str],
) -> ScoreJob:
    """A :class:`ScoreJob` from a pipeline whose sections were type-checked.

    Called by :func:`distforest.jobs.pipeline.load_pipeline` for a file with a
    ``model`` key.  ``model.path`` and ``model.training`` are relative to the
    current directory (``{date}`` and ``{yesterday}`` filled in); output
    names to ``out_dir``.
    """
    clash = [name for name in NOT_WITH_MODEL if name in data]
    if clash:
        raise ConfigError(
            f"{source}: a scoring pipeline (with 'model') applies a saved forest: it has the "
            f"sections model, input, score, impute, output and cluster; remove {clash[0]!r} "
            "(the model fixes the forest; fit it with its own pipeline)"
        )
    if "model" not in data:
        raise ConfigError(f"{source}: 'score' needs 'model: PATH', the store of a finished "
                          "proximity run whose forest it applies")  # fmt: skip
    if "score" not in data and "impute" not in data:
        raise ConfigError(f"{source}: a scoring pipeline writes score and/or impute: add "
                          "`score: {out: scores.csv}` or `impute: {out: imputed.csv}`")  # fmt: skip
    inp, out = sections["input"], sections["output"]
    for key in ("target", "labels", "drop"):
        if key in inp:
            raise ConfigError(
                f"{source}: input.{key} is not read by a scoring pipeline (the model's feature "
                "columns are read by name, other columns ignored); remove it"
            )
    if "plot" in out or out.get("report") is False:
        raise ConfigError(
            f"{source}: output.{'plot' if 'plot' in out else 'report'} does not apply to a "
            "scoring pipeline (no matrix to draw; report.json and report.md are always "
            "written next to output.store): remove it"
        )
    impute = None
    if "impute" in data:
        impute = dict(sections["impute"])
        refit = [k for k in REFIT_KEYS if k in impute]
        if refit:
            raise ConfigError(
                f"{source}: impute.{refit[0]} would fit new forests; a scoring pipeline fills "
                "the new rows from the model's own trees: remove it"
            )
        if impute.setdefault("proximity", "rfgap") not in PROXIMITY_METHODS:
            raise ConfigError(
                f"{source}: impute.proximity {impute['proximity']!r} fits new forests; a "
                f"scoring pipeline weighs by the model's proximity: one of "
                f"{', '.join(PROXIMITY_METHODS)}"
            )
        impute["out"] = str(out_dir / impute["out"])
    score = None
    if "score" in data:
        score = dict(sections["score"])
        score["out"] = str(out_dir / score["out"])
    model = sections["model"]
    training = model.get("training")
    return ScoreJob(
        target=model.get("target"),
        input=input_path,
        model=templated(model["path"]),
        out=str(out_dir / out.get("store", "scores.zarr")),
        training=templated(training) if training else None,
        id=inp.get("id"),
        **input_fields(inp, table=False),
        score=score,
        impute=impute,
        overwrite=bool(out.get("overwrite", False)),
        connect=connect_kw,
        name=str(data.get("name") or "score"),
        source=source,
    )


# -- new rows read by partitions: one task per partition, the forest read once per worker --


@dataclass(frozen=True)
class NewRows:
    """New rows read by partitions for a saved forest (pass 1 done): what a scoring
    pipeline needs of its table before any work (rows, cells, fingerprint)."""

    data: Any  # distforest.io.ingest.Ingested
    id_column: str | None

    @property
    def n_samples(self) -> int:
        return self.data.encoding.n_samples

    @property
    def cells(self) -> int:
        return self.n_samples * len(self.data.encoding.features)

    def fingerprint(self) -> str:
        return str(self.data.encoding.fingerprint)


def read_new_rows(forest: Any, data: str, id_column: str | None,
                  na_values: tuple[str, ...]) -> NewRows:  # fmt: skip
    """Pass 1 over ``data``'s partitions, for the forest's feature columns (and the IDs).

    Raises
    ------
    InputError
        A feature column of the model (or the ID column) is not there, or a
        value of those columns cannot be read (named with its file and row).
    """
    from distforest.io.ingest import read_partitioned
    from distforest.io.partitions import open_partitions

    names = [str(c) for c in forest.feature_names_in_]
    columns = open_partitions(data, na_values=na_values).columns
    absent = [c for c in [*names, *([id_column] if id_column else [])] if c not in columns]
    if absent:
        raise InputError(f"{data}: the model needs column(s) {absent} that are not there; "
                         f"available: {', '.join(list(columns)[:20])}")  # fmt: skip
    other = tuple(c for c in columns if c not in names and c != id_column)
    ingested = read_partitioned(data, drop=other, na_values=na_values, min_rows=1, id=id_column)
    return NewRows(ingested, id_column)


def _new_table(model_path: str, encoding: Any, id_column: str | None, frame: Any,
               part: str) -> tuple[Any, Any]:  # fmt: skip
    """The saved forest (read once per worker) and one partition as its new rows' table."""
    from distforest.apps.scoring import new_rows_table
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.io.summaries import typed_partition

    typed = typed_partition(frame, encoding)
    forest = model_once(model_path, ProximityForest.load)
    if not len(typed):
        return forest, None
    try:
        return forest, new_rows_table(forest, typed, id_column=id_column)
    except InputError as exc:
        raise InputError(f"{part}: {exc}") from None


def _numbered(result: Any, id_column: str | None, start: int) -> Any:
    if id_column is None:  # the rows' numbers in the whole table
        result["row"] += start
    return result


def _score_rows(model_path: str, encoding: Any, id_column: str | None, options: dict[str, Any],
                frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """One partition scored against a saved forest (``distforest score``'s columns)."""
    from distforest.apps.scoring import score_rows
    from distforest.parallel.execution import execution

    forest, table = _new_table(model_path, encoding, id_column, frame, part)
    if table is None:
        return None
    with execution(client="synchronous"):  # in this worker: it is one task of many
        return _numbered(score_rows(forest, table, **options), id_column, start)


def _training(model_path: str, training: str | None, na_values: tuple[str, ...]) -> Any:
    from distforest.apps.scoring import training_features
    from distforest.forests.proximity_forest import ProximityForest

    forest = model_once(model_path, ProximityForest.load)
    return training_features(model_path, forest, training, na_values)


def _impute_rows(model_path: str, encoding: Any, id_column: str | None, options: dict[str, Any],
                 frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """One partition's missing cells filled from the model's training rows (a task)."""
    from distforest.apps.scoring import impute_rows
    from distforest.parallel.execution import execution

    forest, table = _new_table(model_path, encoding, id_column, frame, part)
    if table is None:
        return None
    X_train = model_once(model_path, partial(_training, training=options["training"],
                                         na_values=options["na_values"]), "training")  # fmt: skip
    with execution(client="synchronous"):  # in this worker: it is one task of many
        imputed, cells = impute_rows(forest, table, X_train, method=options["method"],
                                     vote=options["vote"])  # fmt: skip
    imputed.attrs["cells"] = cells  # counted by the caller
    return _numbered(imputed, id_column, start)


def rows_to_csv(model_path: str, rows: NewRows, out: str, what: str,
                options: dict[str, Any]) -> tuple[int, str, int]:  # fmt: skip
    """Score (``what="score"``, ``options`` of :func:`~distforest.apps.scoring.score_rows`)
    or impute (``"impute"``: method, vote, training, na_values) the new rows by
    partitions into the CSV ``out``: ``(rows, path, cells filled)``."""
    data = rows.data
    blocks = data.partitions.frame.to_delayed()
    starts = np.concatenate([[0], np.cumsum(data.encoding.lengths)]).astype(np.int64)
    labels = [data.partitions.partition_name(k) for k in range(len(blocks))]
    work = _score_rows if what == "score" else _impute_rows
    return write_pieces(RowFrames(str(data.source), list(blocks), starts, labels, False),
                        partial(work, model_path, data.encoding, rows.id_column, options),
                        out)  # fmt: skip
