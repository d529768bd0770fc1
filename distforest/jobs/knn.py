"""k-NN pipelines: the ``neighbors`` and ``knn`` sections of a pipeline file, and their run.

A :class:`KNNJob` is built from YAML by :func:`knn_job`, previewed by
:func:`knn_plan` and run by :func:`run_knn_job` (resumable by stage).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from distforest import location
from distforest.apps.knn import WEIGHTS
from distforest.errors import ConfigError, ParameterError
from distforest.forests.constraints import ALGORITHMS, FOREST_METRICS, NORMALIZATIONS
from distforest.forests.measures import parse_metric
from distforest.forests.neighbors import top_k_neighbors
from distforest.jobs.base import TableJob, input_fields, new_run_id
from distforest.jobs.estimates import SECONDS_PER, fit_seconds
from distforest.jobs.inputs import input_shape, listing_stamp
from distforest.jobs.knn_model import (
    check_knn_size,
    fit_and_save_model,
    normalize_choice,
    predict_to_csv,
)
from distforest.jobs.outputs import check_new_file
from distforest.jobs.result import JobResult, summary
from distforest.jobs.runs import Context, Run, execute
from distforest.jobs.stages import ON_A_CLUSTER, Cost, Pipeline, Stage, placement_of
from distforest.store.run_store import RunStore, check_can_create, complete_output

KNN_CHOICES = {
    "neighbors.normalize": ("none", *NORMALIZATIONS),
    "neighbors.algorithm": ALGORITHMS,
    "knn.task": ("auto", "classification", "regression"),
    "knn.weights": WEIGHTS,
    "knn.normalize": ("none", *NORMALIZATIONS),
}
#: Sections of other pipelines that a k-NN pipeline must not have.
NOT_WITH_KNN = ("forest", "proximity", "impute", "outliers", "mislabels", "mds", "xforest",
                "clustering")  # fmt: skip
PREDICT_KEYS = ("input", "out")


@dataclass(kw_only=True)
class KNNJob(TableJob):
    """One k-NN run: input, optional top-k neighbours store, optional model (+ predictions)."""

    job_kind: ClassVar[str] = "knn"

    #: ``{"metric", "k", "normalize", "algorithm", "out"}`` (``out`` a store path).
    neighbors: dict[str, Any] | None = None
    #: ``{"task", "k", "weights", "metric", "normalize", "n_estimators",
    #: "random_state", "model", "predict": {"input", "out"}}``.
    knn: dict[str, Any] | None = None
    name: str = "knn"

    def spec(self, table: Any) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep = ("target", "drop", "na_values", "neighbors", "knn")
        return self.spec_of(keep, input={"source": table.source,
                                         "fingerprint": table.fingerprint()})  # fmt: skip

    @property
    def out(self) -> str:
        """The main output: the neighbours store, else the model store."""
        return str((self.neighbors or {}).get("out") or (self.knn or {})["model"])

    def describe(self) -> str:
        """What the job computes, for ``distforest validate``."""
        parts = [f"top-{self.neighbors['k']} {self.neighbors['metric']}"] if self.neighbors else []
        if self.knn:
            parts.append(f"k-NN model ({self.knn['metric']}, k={self.knn['k']})")
        return " and ".join(parts)

    def summary(self, result: JobResult) -> str:
        """The lines that tell the user what the run wrote: a k-NN headline, or (``knn
        fit``) the lines the command printed before it was a job, and the reports."""
        from distforest.jobs.result import mode_text

        text = getattr(result, "text", "")
        if self.name != "knn fit" or not text:  # (a pipeline: its headline)
            return knn_summary(result)
        lines = text.splitlines()
        lines[0] += mode_text(result.mode, self.out)
        reports = {k: v for k, v in result.outputs.items() if k.startswith("report")}
        return "\n".join([*lines, *(f"  {k + ':':<18} {v}" for k, v in reports.items())])


def knn_fit_job(train: str, target: str, out: str, model: dict[str, Any],
                connect: dict[str, Any], *, drop: tuple[str, ...] = (),
                na_values: tuple[str, ...] = (), overwrite: bool = False) -> KNNJob:  # fmt: skip
    """The job of ``distforest knn fit``: a k-NN pipeline with a ``knn`` section only
    (``model``: its keys, and the command's ``feature_range``, ``algorithm``,
    ``select``, ``n_features`` and ``distances``), the model store its output."""
    from distforest.jobs.knn_model import check_distances

    check_distances(model.get("distances"), str(model["metric"]))
    return KNNJob(input=train, target=target, drop=tuple(drop), na_values=tuple(na_values),
                  knn={**model, "model": out}, overwrite=overwrite, connect=dict(connect),
                  name="knn fit")  # fmt: skip


def knn_job(
    data: dict[str, Any],
    sections: dict[str, dict[str, Any]],
    input_path: str,
    out_dir: Path,
    connect: dict[str, Any],
    source: str,
    today_path: Any = str,
) -> KNNJob:
    """A :class:`KNNJob` from a pipeline whose sections were type-checked.

    Called by :func:`distforest.jobs.pipeline.load_pipeline` for a file with a
    ``neighbors`` or ``knn`` section; checks what is particular to k-NN
    pipelines (metrics, the target, ``knn.predict``).  Output names are
    relative to ``out_dir``; ``knn.predict.input`` is relative to the pipeline's
    folder (``today_path`` reads it so and fills in its ``{date}``).
    """
    clash = [name for name in NOT_WITH_KNN if name in data]
    if clash:
        raise ConfigError(
            f"{source}: a k-NN pipeline has the sections input, neighbors and/or knn, output "
            f"and cluster; remove {', '.join(clash)}"
        )
    extra = sorted(set(sections["output"]) - {"dir", "overwrite", "storage_options"})
    if extra:
        raise ConfigError(
            f"{source}: output.{extra[0]} does not apply to a k-NN pipeline (outputs are named "
            "in neighbors.out, knn.model and knn.predict.out); remove it"
        )
    inp = sections["input"]
    neighbors = None
    if "neighbors" in data:
        neighbors = {"metric": "euclidean", "k": 10, "normalize": "none", "algorithm": "auto",
                     "out": "neighbors.zarr", **sections["neighbors"]}  # fmt: skip
        _check_metric(neighbors["metric"], "neighbors.metric", source, forest=False)
        _check_k(neighbors["k"], "neighbors.k", source)
        neighbors["out"] = str(out_dir / neighbors["out"])
    model = None
    target = inp.get("target")
    if "knn" in data:
        model = {"task": "auto", "k": 5, "weights": "uniform", "metric": "euclidean",
                 "normalize": "none", "n_estimators": 100, "random_state": 0,
                 "model": "knn_model.zarr", **sections["knn"]}  # fmt: skip
        own = model.pop("target", None)
        if own and target and own != target:
            raise ConfigError(
                f"{source}: knn.target {own!r} differs from input.target {target!r}; give one"
            )
        target = own or target
        if not target:
            raise ConfigError(f"{source}: knn needs the column to predict: set knn.target")
        _check_metric(model["metric"], "knn.metric", source, forest=True)
        _check_k(model["k"], "knn.k", source)
        model["model"] = str(out_dir / model["model"])
        if model.get("predict") is not None:
            model["predict"] = _predict_section(model["predict"], out_dir, source, today_path)
    return KNNJob(
        input=input_path,
        target=target,
        **input_fields(inp),
        neighbors=neighbors,
        knn=model,
        overwrite=bool(sections["output"].get("overwrite", False)),
        connect=connect,
        name=str(data.get("name") or "knn"),
    )


def _check_metric(metric: str, where: str, source: str, *, forest: bool) -> None:
    if forest and metric == "smerf":  # learns from a distance matrix a pipeline cannot name
        raise ConfigError(
            f"{source}: {where}: 'smerf' learns from a matrix of observed distances, which a "
            "k-NN pipeline cannot pass; fit it with `distforest knn fit TRAIN --metric smerf "
            "--distances D.npy --out model.zarr`, or pick another metric"
        )
    if forest and metric in FOREST_METRICS:
        return
    try:
        parse_metric(metric)
    except ParameterError as exc:
        more = f" or a forest metric ({', '.join(FOREST_METRICS)})" if forest else ""
        raise ConfigError(f"{source}: {where}: {exc}{more}") from exc


def _check_k(k: int, where: str, source: str) -> None:
    if k < 1:
        raise ConfigError(f"{source}: {where} must be at least 1, got {k}")


def _predict_section(section: Any, out_dir: Path, source: str, today_path: Any) -> dict[str, str]:
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: knn.predict must be a mapping {{input: ..., out: ...}}")
    for key, value in section.items():
        if key not in PREDICT_KEYS:
            raise ConfigError(
                f"{source}: unknown key knn.predict.{key!r} (allowed: {', '.join(PREDICT_KEYS)})"
            )
        if not isinstance(value, str):
            raise ConfigError(f"{source}: knn.predict.{key} must be str, got {value!r}")
    missing = [key for key in PREDICT_KEYS if not section.get(key)]
    if missing:
        raise ConfigError(f"{source}: knn.predict.{missing[0]} is required")
    path = today_path(section["input"])
    if not location.is_remote(path) and not Path(path).exists():
        raise ConfigError(
            f"{source}: knn.predict.input {path!r} does not exist (relative paths are relative "
            "to the pipeline's folder)"
        )
    return {"input": path, "out": str(out_dir / section["out"])}


@KNNJob.plans
def knn_plan(job: KNNJob) -> Pipeline:
    """What ``--dry-run`` shows for a k-NN job: reads the inputs' shapes, runs nothing."""
    return knn_pipeline(job)


def _fit_params(model: dict[str, Any]) -> dict[str, Any]:
    """:class:`~distforest.apps.knn.KNNClassifier` parameters of a ``knn`` section (the
    command's extra keys: ``feature_range``, ``algorithm``, ``select``, ``n_features``,
    ``distances``)."""
    params = {"n_neighbors": model["k"], "weights": model["weights"], "metric": model["metric"],
              "normalize": normalize_choice(model["normalize"]),
              "n_estimators": model["n_estimators"],
              "random_state": model["random_state"]}  # fmt: skip
    for key, name in (("feature_range", "feature_range"), ("algorithm", "algorithm"),
                      ("select", "select"), ("n_features", "n_features_to_select")):  # fmt: skip
        if key in model:
            params[name] = tuple(model[key]) if key == "feature_range" else model[key]
    if model.get("distances") is not None:
        params["metric_params"] = {"distances": model["distances"]}
    return params


def knn_pipeline(job: KNNJob, progress: Any = None, start: float = 0.0) -> Pipeline:
    """The stages of a k-NN job: ``neighbors`` (the top-k store), ``fit`` (the model
    store), ``predict`` (the CSV); rows read by partitions are read by the first stage's
    tasks on the run's cluster."""
    from distforest.forests.neighbors import query_batch_size, resolve_algorithm
    from distforest.parallel.tasks import plan_batches, plan_tree_batches
    from distforest.store.source import input_plan

    # parts: the partitions the first stage's tasks read (0: the rows read here)
    source, n, d, parts = input_plan(job.input, job.target, drop=job.drop,
                                     na_values=job.na_values)  # fmt: skip
    nb, model = job.neighbors, job.knn
    forest = model is not None and model["metric"] in FOREST_METRICS
    searched = nb is not None or forest or bool((model or {}).get("select"))
    cells = ON_A_CLUSTER if parts else (n * d if searched else 0)
    threads = placement_of(cells, job.connect)[1]
    steps: list[tuple[str, str]] = [("input", f"{source} (target {job.target or '-'})")]
    stages: list[Stage] = []
    read = f", its rows read by {parts} tasks" if parts else ""
    rows: dict[str, Any] = {}
    if nb:
        algorithm = resolve_algorithm(nb["algorithm"], parse_metric(nb["metric"]), d)
        batches = len(plan_batches(n, query_batch_size(n, n, algorithm, False, threads)))
        what = (f"k={nb['k']}, {nb['metric']}, normalize {nb['normalize']}, {algorithm} in "
                f"{batches} tasks -> {nb['out']}")  # fmt: skip
        steps.append(("neighbours", what))
        stages.append(Stage("neighbors", what + read, reads=(job.input,), writes=(nb["out"],),
                            tasks=batches + parts,
                            cost=Cost(SECONDS_PER["measure"] * n * n * d, 3 * 8 * n * d,
                                      {"neighbours (index, distance)": n * nb["k"] * 16}),
                            run=lambda ctx: _neighbors_stage(job, rows, ctx, progress),
                            resume=_nothing))  # fmt: skip
        read = ""
    if model:  # features to select and a forest metric's size checked before any work
        check_knn_size(source, n, d, model.get("select"), model.get("n_features", "auto"),
                       model["metric"], model["n_estimators"])  # fmt: skip
        fit_tasks = len(plan_tree_batches(model["n_estimators"], threads, None)) if forest else 0
        what = (f"k={model['k']}, {model['weights']}, {model['metric']}, normalize "
                f"{model['normalize']}" + (f", {fit_tasks} fit tasks" if forest else "")
                + f" -> {model['model']}")  # fmt: skip
        steps.append(("model", what))
        stages.append(Stage("fit", what + read, reads=(job.input,), writes=(model["model"],),
                            tasks=fit_tasks + (parts if read else 0),
                            cost=Cost(fit_seconds(model["n_estimators"], n, d) if forest else 0.0,
                                      3 * 8 * n * d,
                                      {"model (rows, forest)": 8 * n * d + (
                                          n * model["n_estimators"] * 5 if forest else 0)}),
                            run=lambda ctx: _fit_stage(job, rows, ctx, start),
                            resume=_nothing))  # fmt: skip
        if model.get("predict"):
            predict = model["predict"]
            m = input_shape(predict["input"], drop=job.drop, na_values=job.na_values)[1]
            algorithm = "brute" if forest else resolve_algorithm(
                model.get("algorithm", "auto"), parse_metric(model["metric"]), d)  # fmt: skip
            batches = len(plan_batches(m, query_batch_size(m, n, algorithm, forest, threads)))
            steps.append(("predict", f"{m:,} rows in {batches} tasks -> {predict['out']}"))
            stages.append(Stage("predict", f"{m:,} rows in {batches} tasks -> {predict['out']}",
                                reads=(model["model"], predict["input"]),
                                writes=(predict["out"],), tasks=batches,
                                cost=Cost(SECONDS_PER["measure"] * m * n * d, 3 * 8 * (n + m) * d,
                                          {"predictions": m * 32}),
                                run=lambda ctx: _predict_stage(job, ctx)))  # fmt: skip
    return Pipeline(
        title=f"{job.name}: {n:,} rows x {d} features",
        steps=steps,
        stages=stages,
        cells=cells,
        connect=job.connect,
        out=str(job.out),
    )


def _nothing(ctx: Context) -> None:
    """Resuming a run that finished the stage: its output is in its store already."""


@contextlib.contextmanager
def _rows_of(job: KNNJob, rows: dict[str, Any], ctx: Context) -> Iterator[Any]:
    """The job's rows (:func:`~distforest.store.source.open_source`, on the run's cluster
    when there is one), opened once for every stage of the run."""
    from distforest.store.source import open_source

    with ctx.where.client.as_current() if ctx.where.client is not None else (
            contextlib.nullcontext()):  # fmt: skip
        if "source" not in rows:
            rows["source"] = open_source(job.input, target=job.target, drop=job.drop,
                                         na_values=job.na_values, dtype=np.float64)  # fmt: skip
        yield rows["source"]


def _neighbors_stage(job: KNNJob, rows: dict[str, Any], ctx: Context, progress: Any) -> None:
    nb = job.neighbors
    assert nb is not None
    with _rows_of(job, rows, ctx) as source:
        _neighbors(source, nb, ctx.where.client, progress, ctx.run.record)
    ctx.rs = RunStore.open(nb["out"], mode="r+")
    ctx.done.outputs = {"neighbours store": ctx.rs.path}


def _fit_stage(job: KNNJob, rows: dict[str, Any], ctx: Context, start: float) -> None:
    """The model fitted and saved (the job's store, or, beside a neighbours store, another
    output completed here); its summary lines recorded."""
    model = job.knn
    assert model is not None
    main = job.neighbors is None
    with _rows_of(job, rows, ctx) as source:
        fitted, task = fit_and_save_model(source, model["task"], _fit_params(model),
                                          model["model"], True,
                                          {**ctx.run.record, "predictions": None})  # fmt: skip
    saved = RunStore.open(model["model"], mode="r+")
    if main:
        ctx.rs = saved
    else:
        complete_output(saved)  # (another output of the job: complete once written)
    kept = [c for c, s in zip(fitted.feature_names_in_, fitted.support_, strict=True) if s]
    ctx.done.outputs = {"model": saved.path}
    ctx.done.info.update(task=task, rows=int(source.n_samples), features=len(kept))
    ctx.done.info["text"] = (
        f"k-NN {task} model (k={model['k']}, {model['weights']}, {model['metric']}, normalize "
        f"{model['normalize']}) on {source.n_samples} rows"
        f"{' read by partitions' if source.store_path is not None else ''} in "
        f"{time.perf_counter() - start:.1f} s\n  features: {', '.join(kept)}\n"
        f"  model:    {model['model']}"
    )


def _predict_stage(job: KNNJob, ctx: Context) -> None:
    model = job.knn
    assert model is not None and model.get("predict")
    predict = model["predict"]
    with ctx.where.client.as_current() if ctx.where.client is not None else (
            contextlib.nullcontext()):  # fmt: skip
        n, written = predict_to_csv(model["model"], predict["input"], predict["out"], job.drop,
                                    job.na_values, require_complete=False)  # fmt: skip
    RunStore.open(model["model"], mode="r+").update_attrs(predictions=written)
    ctx.done.outputs = {"predictions": _shown(written)}
    ctx.done.info["rows"] = int(n)


@dataclass
class KNNResult(JobResult):
    """What a k-NN job wrote, and (``knn fit``) the lines its command prints."""

    text: str = ""


@KNNJob.runs
def run_knn_job(job: KNNJob, progress: Any = None, *, restart: bool = False,
                run_id: str | None = None) -> KNNResult:  # fmt: skip
    """Write the top-k neighbours, fit and save the model, predict: the stages of
    :func:`knn_pipeline` under the run protocol (:func:`~distforest.jobs.runs.execute`).

    Run again, a complete job is kept; a half-written one (a killed run) resumes, its
    finished stages kept and the others written again from the same seeds, so the
    outputs end identical to an uninterrupted run; one of a different spec is refused
    unless ``restart`` or ``overwrite``.  Inputs, outputs and sizes are checked before
    any cluster starts.
    """
    start = time.perf_counter()
    pipeline = knn_pipeline(job, progress, start)
    nb, model = job.neighbors, job.knn
    spec = job.spec_of(
        ("target", "drop", "na_values", "neighbors", "knn"),
        input={"source": job.input, "stamp": listing_stamp(job.input)},
    )
    if model:  # a changed training table or a changed input to predict is another job
        more = (model.get("predict") or {}).get("input")
        spec["input"]["predict"] = listing_stamp(more) if more else None

    def check(run: Run) -> dict[str, Any]:
        done = run.stages.done if run.stages is not None else (lambda name: False)
        if model:
            if nb and not done("fit"):
                check_can_create(model["model"], run.replace)
            if model.get("predict") and not done("predict"):
                check_new_file(model["predict"]["out"], run.replace)
        for path in ((nb or {}).get("out"), (model or {}).get("model")):
            if path and not location.is_remote(path):
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        return {}

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> KNNResult:
        record = rs.attrs.get("stages") or {}
        fit, what = record.get("fit") or {}, []
        shape: tuple[int, int] = (0, 0)
        if nb:
            params = rs.attrs["params"]
            shape = (int(rs.array("neighbor_index").shape[0]), int(nb["k"]))
            what.append(f"top-{nb['k']} {params['metric']} neighbours ({params['algorithm']})")
        if model:
            task = fit.get("task") or {"KNNClassifier": "classification"}.get(
                str(RunStore.open(model["model"]).attrs.get("model")), "regression")  # fmt: skip
            what.append(f"k-NN {task} model (k={model['k']}, {model['weights']}, "
                        f"{model['metric']})")  # fmt: skip
            if not nb:
                rows, features = rs.array("X_fit").shape
                shape = (int(rows), int(features))
        shown = {k: _shown(v) if k != "predictions" else v for k, v in outputs.items()}
        return KNNResult(store=rs.path, name="neighbor_index" if nb else "X_fit", shape=shape,
                         n_trees=model["n_estimators"] if model and model["metric"]
                         in FOREST_METRICS else 0, task=" and ".join(what),
                         seconds=time.perf_counter() - start, outputs=shown,
                         mode={"resume": "resumed"}.get(mode, mode),
                         text=str(fit.get("text", "")))  # fmt: skip

    return execute(job, pipeline, spec, result, progress=progress, restart=restart,
                   run_id=run_id or new_run_id(), check=check)  # fmt: skip


def _neighbors(rows: Any, nb: dict[str, Any], client: Any, progress: Any,
               record: dict[str, Any]) -> None:  # fmt: skip
    """The neighbours stage, one path for every source: its rows scaled and checked by
    tasks into a temporary store, searched from there (each task writing its rows'
    neighbours into the store)."""
    from distforest.forests.scaled_rows import scaled_in_store

    normalize = normalize_choice(nb["normalize"])
    with scaled_in_store([rows], metric=nb["metric"], normalize=normalize,
                         feature_range=(0.0, 1.0)) as (measure, (X,)):  # fmt: skip
        top_k_neighbors(X, metric=measure, k=nb["k"], normalize=normalize,
                        algorithm=nb["algorithm"], store=nb["out"], overwrite=True,
                        client=client, progress=progress, attrs=record,
                        complete=False)  # fmt: skip


def _shown(path: str) -> str:
    """An output as the summary shows it: a URL as given, a local path resolved."""
    return str(path) if location.is_remote(path) else str(Path(path).resolve())


def knn_summary(result: JobResult) -> str:
    """:func:`distforest.jobs.proximity.summary` with a k-NN headline (trees only for a forest)."""
    lines = summary(result).splitlines()
    trees = f", {result.n_trees} trees" if result.n_trees else ""
    how = {"already complete": ", already complete: nothing to do (use --restart to compute "
           "it again)"}.get(result.mode, "")  # fmt: skip
    lines[0] = f"{result.task} of {result.shape[0]} rows{trees} in {result.seconds:.1f} s{how}"
    return "\n".join(lines)
