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
from distforest.io import load_table
from distforest.jobs.base import TableJob, input_fields, new_run_id
from distforest.jobs.estimates import SECONDS_PER, fit_seconds, free_space
from distforest.jobs.inputs import input_shape, partitioned_input
from distforest.jobs.knn_model import fit_and_save_model, normalize_choice, predict_to_csv
from distforest.jobs.outputs import check_new_file
from distforest.jobs.plan import Plan, placement_of
from distforest.jobs.result import JobResult, summary
from distforest.jobs.runs import decide, run_per_output, spec_hash
from distforest.parallel.placement import place
from distforest.store.inputs import PendingInput
from distforest.store.run_store import RunStore, check_can_create

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
        """The lines that tell the user what the run wrote (a k-NN headline)."""
        return knn_summary(result)


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
def knn_plan(job: KNNJob) -> Plan:
    """What ``distforest run --dry-run`` shows for a k-NN pipeline: reads the inputs, runs
    nothing."""
    from distforest.forests.neighbors import query_batch_size, resolve_algorithm
    from distforest.parallel.tasks import plan_batches, plan_tree_batches

    _, n, d = input_shape(job.input, job.target, drop=job.drop, na_values=job.na_values)
    nb, model = job.neighbors, job.knn
    forest = model is not None and model["metric"] in FOREST_METRICS
    tasks_fit = forest or partitioned_input(job.input)  # a fit by partitions: tasks
    where, threads = placement_of(n * d if nb or tasks_fit else 0, job.connect)
    steps: list[tuple[str, str]] = [("input", f"{job.input} (target {job.target or '-'})")]
    tasks, disk, cpu = 0, {}, 0.0
    if nb:
        algorithm = resolve_algorithm(nb["algorithm"], parse_metric(nb["metric"]), d)
        batches = len(plan_batches(n, query_batch_size(n, n, algorithm, False, threads)))
        tasks += batches
        disk["neighbours (index, distance)"] = n * nb["k"] * 16
        cpu += SECONDS_PER["measure"] * n * n * d
        steps.append(("neighbours", f"k={nb['k']}, {nb['metric']}, normalize "
                                    f"{nb['normalize']}, {algorithm} in {batches} tasks -> "
                                    f"{nb['out']}"))  # fmt: skip
    if model:
        fit_tasks = len(plan_tree_batches(model["n_estimators"], threads, None)) if forest else 0
        tasks += fit_tasks
        cpu += fit_seconds(model["n_estimators"], n, d) if forest else 0.0
        disk["model (rows, forest)"] = 8 * n * d + (n * model["n_estimators"] * 5 if forest else 0)
        steps.append(("model", f"k={model['k']}, {model['weights']}, {model['metric']}, "
                               f"normalize {model['normalize']}"
                               + (f", {fit_tasks} fit tasks" if forest else "")
                               + f" -> {model['model']}"))  # fmt: skip
        if model.get("predict"):
            m = input_shape(model["predict"]["input"], drop=job.drop,
                            na_values=job.na_values)[1]  # fmt: skip
            algorithm = "brute" if forest else resolve_algorithm("auto", parse_metric(
                model["metric"]), d)  # fmt: skip
            batches = len(plan_batches(m, query_batch_size(m, n, algorithm, forest, threads)))
            tasks += batches
            disk["predictions"] = m * 32
            cpu += SECONDS_PER["measure"] * m * n * d
            steps.append(("predict", f"{m:,} rows in {batches} tasks -> "
                                     f"{model['predict']['out']}"))  # fmt: skip
    return Plan(
        title=f"job {job.name}: {n:,} rows x {d} features",
        steps=steps,
        tasks=tasks,
        tiles=0,
        disk=disk,
        free_bytes=free_space(location.parent(job.out)),
        worker_bytes=3 * 8 * n * d,  # the reference rows, the queries, a block of distances
        cpu_seconds=cpu,
        threads=threads,
        where=where,
    )


@KNNJob.runs
def run_knn_protocol(job: KNNJob, progress: Any = None, *, restart: bool = False,
                     run_id: str | None = None) -> JobResult:  # fmt: skip
    """Run the job under the run protocol of a job with one store per stage
    (:func:`~distforest.jobs.runs.run_per_output`)."""
    run_id = run_id or new_run_id()
    return run_per_output(job, lambda: run_knn_job(job, progress, restart=restart,
                                                   run_id=run_id), run_id=run_id)  # fmt: skip


def run_knn_job(
    job: KNNJob, progress: Any = None, *, restart: bool = False, run_id: str | None = None
) -> JobResult:
    """Write the top-k neighbours, fit and save the model, predict; resumable by stage.

    Each output records the job's spec hash.  Run again, a stage whose
    output is complete and of the same spec is kept; a half-written one (a
    killed run) is written again from the same seeds, so the outputs end
    identical to an uninterrupted run; one of a different spec is refused
    unless ``restart`` or ``overwrite``.  Output problems are found before
    any cluster is started; a cluster is started only for the neighbours
    search or a forest metric.
    """
    start = time.perf_counter()
    by_parts = partitioned_input(job.input)
    table = _partitioned_table(job) if by_parts else load_table(job.input, **job.table_kw())
    spec = job.spec(table)
    digest = spec_hash(spec)
    record = {"spec": spec, "spec_hash": digest, "job": job.name, "run_id": run_id}
    nb, model = job.neighbors, job.knn
    predict = (model or {}).get("predict")
    todo = {
        name: _stage_todo(path, spec, digest, restart=restart, overwrite=job.overwrite)
        for name, path in (("neighbors", (nb or {}).get("out")),
                           ("model", (model or {}).get("model"))) if path
    }  # fmt: skip
    for name, path in (("neighbors", (nb or {}).get("out")), ("model", (model or {}).get("model"))):
        if path and todo[name] and not location.is_remote(path):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    if predict and todo.get("model", True):
        check_new_file(predict["out"], job.overwrite or restart or "model" in todo)
    needed = (nb is not None and todo["neighbors"]) or (
        (model or {}).get("metric") in FOREST_METRICS and todo.get("model", False)
    )
    outputs: dict[str, str] = {}
    shape: tuple[int, int] = (table.n_samples, 0)
    n_trees, what = 0, []
    with contextlib.ExitStack() as stack:
        work = any(todo.values()) or bool(predict and not location.exists(predict["out"]))
        if by_parts and work:  # the fit's tasks read the partitions on the workers
            from distforest.parallel.cluster import connect

            client = stack.enter_context(connect(**job.connect))
            stack.enter_context(client.as_current())
        else:
            cells = table.n_samples * table.n_features if needed else 0
            client = stack.enter_context(place(cells, job.connect, progress=progress)).client
        rows = stack.enter_context(_stored(table)) if work else table
        if nb:
            if todo["neighbors"]:
                _neighbors(rows, nb, client, progress, record)
            ds = RunStore.open(nb["out"])
            outputs["neighbours store"] = ds.path
            shape = (table.n_samples, nb["k"])
            params = ds.attrs["params"]
            what.append(f"top-{nb['k']} {params['metric']} neighbours ({params['algorithm']})")
        if model:
            if todo["model"] or (predict and not location.exists(predict["out"])):
                params = {"n_neighbors": model["k"], "weights": model["weights"],
                          "metric": model["metric"],
                          "normalize": normalize_choice(model["normalize"]),
                          "n_estimators": model["n_estimators"],
                          "random_state": model["random_state"]}  # fmt: skip
                task = fit_and_save_model(rows, model["task"], params, model["model"], True,
                                          {**record, "predictions": None})[1]  # fmt: skip
                if predict:
                    _, written = predict_to_csv(model["model"], predict["input"], predict["out"],
                                                job.drop, job.na_values)  # fmt: skip
                    # the model store is complete: only the driver adds this record
                    RunStore.open(model["model"], mode="r+").update_attrs(predictions=written)
            saved = RunStore.open(model["model"])
            task = {"KNNClassifier": "classification"}.get(saved.attrs["model"], "regression")
            outputs["model"] = saved.path
            if predict:
                outputs["predictions"] = _shown(predict["out"])
            if model["metric"] in FOREST_METRICS:
                n_trees = model["n_estimators"]
            what.append(f"k-NN {task} model (k={model['k']}, {model['weights']}, "
                        f"{model['metric']})")  # fmt: skip
            if not nb:
                rows, features = saved.array("X_fit").shape
                shape = (rows, features)
    store = outputs.get("neighbours store") or outputs["model"]
    mode = "already complete" if not any(todo.values()) and (
        not predict or location.exists(predict["out"])) else "new"  # fmt: skip
    return JobResult(
        store=store,
        name="neighbor_index" if nb else "X_fit",
        shape=(int(shape[0]), int(shape[1])),
        n_trees=n_trees,
        task=" and ".join(what),
        seconds=time.perf_counter() - start,
        outputs=outputs,
        mode=mode,
    )


def _partitioned_table(job: KNNJob) -> PendingInput:
    """The job's table read by partitions: pass 1 (summaries) only, the rows written into
    a temporary store when a stage needs them (:func:`_stored`)."""
    from distforest.io.ingest import read_partitioned

    return PendingInput(read_partitioned(job.input, target=job.target, drop=job.drop,
                                         na_values=job.na_values,
                                         dtype=np.float64))  # fmt: skip


@contextlib.contextmanager
def _stored(table: Any) -> Iterator[Any]:
    """The job's rows as a source: a table in memory as it is, a table read by partitions
    written (pass 2, by tasks) into a temporary store removed when the block ends."""
    if not isinstance(table, PendingInput):
        yield table
        return
    from distforest.jobs.inputs import temporary_store

    with temporary_store() as path:
        yield table.write(path, {})


def _neighbors(rows: Any, nb: dict[str, Any], client: Any, progress: Any,
               record: dict[str, Any]) -> None:  # fmt: skip
    """The neighbours stage: rows in memory searched as they are; rows in a store scaled
    and checked by tasks into a temporary store, searched from there (the same answer)."""
    from distforest.forests.scaled_rows import scaled_in_store

    normalize = normalize_choice(nb["normalize"])
    options = dict(k=nb["k"], normalize=normalize, algorithm=nb["algorithm"], store=nb["out"],
                   overwrite=True, client=client, progress=progress, attrs=record)  # fmt: skip
    if getattr(rows, "store_path", None) is None:  # a Table, loaded whole
        top_k_neighbors(rows, metric=nb["metric"], **options)
        return
    with scaled_in_store([rows], metric=nb["metric"], normalize=normalize,
                         feature_range=(0.0, 1.0)) as (measure, (X,)):  # fmt: skip
        top_k_neighbors(X, metric=measure, **options)


def _stage_todo(path: str, spec: dict[str, Any], digest: str, *, restart: bool,
                overwrite: bool) -> bool:  # fmt: skip
    """Whether the stage writing ``path`` must run (False: its output is complete, same spec)."""
    mode = decide(path, spec, digest, restart=restart, overwrite=overwrite)
    if mode == "complete":
        return False
    if location.exists(path):
        check_can_create(path, overwrite=True)  # ours, half-written or replaced on request
    return True


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
