"""SimForest models for the commands: saved with their centring, new objects read as the
model needs them, predictions written.

``distforest simforest fit``, ``proximity`` and ``predict`` are jobs
(:class:`SimForestFitJob`, :class:`SimForestProximityJob`, :class:`SimForestPredictJob`).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.jobs.base import JobBase, new_run_id
from distforest.jobs.outputs import write_csv
from distforest.jobs.result import JobResult, mode_text, output_lines
from distforest.jobs.runs import Context, Run, execute
from distforest.jobs.stages import Cost, Pipeline, Stage


@dataclass(kw_only=True)
class SimForestFitJob(JobBase):
    """``distforest simforest fit``: a SimForest model store at ``out``, fitted from a
    similarity matrix (``matrix``) or distances (``distances``, double-centred into a
    temporary array beside ``out``) with ``labels``, or from a table (``data``, with
    ``target`` and a ``metric``; read by partitions when it is a glob, a folder of parts
    or a large file).  ``input`` is whichever of them is given; ``params`` holds keyword
    arguments of :class:`~distforest.forests.simforest.SimilarityForestClassifier`."""

    job_kind: ClassVar[str] = "simforest-fit"

    out: str
    params: dict[str, Any]
    data: str | None = None
    matrix: str | None = None
    distances: str | None = None
    labels: str | None = None
    target: str | None = None
    metric: str | None = None
    normalize: str = "zscore"
    drop: tuple[str, ...] = ()
    name: str = "simforest fit"

    def describe(self) -> str:
        """What the job computes."""
        return "a SimForest model"

    def summary(self, result: JobResult) -> str:
        """The forest, its similarity evaluations and the files written."""
        from distforest.store.run_store import RunStore

        fit = (RunStore.open(result.store).attrs.get("stages") or {}).get("fit") or {}
        n, trees, evaluations = result.shape[0], result.n_trees, int(fit.get("evaluations", 0))
        parts = " read by partitions" if fit.get("by_partitions") else ""
        return "\n".join([
            f"SimForest of {trees} trees on {n} objects{parts} ({fit.get('classes')} classes) "
            f"in {result.seconds:.1f} s{mode_text(result.mode, self.out)}; {evaluations} "
            f"similarities evaluated ({evaluations / max(1, trees * n):.1f} per object per tree)",
            *output_lines(result.outputs),
        ])  # fmt: skip


def simforest_fit_job(params: dict[str, Any], *, data: str | None, matrix: str | None,
                      distances: str | None, labels: str | None, target: str | None,
                      metric: str | None, normalize: str, drop: tuple[str, ...],
                      na_values: tuple[str, ...], out: str, overwrite: bool,
                      connect: dict[str, Any]) -> SimForestFitJob:  # fmt: skip
    """The job of ``distforest simforest fit``, its request checked (which inputs go
    together, the measure, the forest's parameters) before anything is read."""
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.jobs.simforest import metric_params

    if distances is not None and (matrix is not None or params["kind"] != "similarity"):
        raise ParameterError(
            "--distances is turned into similarities: give it without --similarity "
            "and without --kind distance (or give --similarity D --kind distance to "
            "order by D_ki^2 - D_kj^2 without centring)"
        )
    if (data is None) == (matrix is None and distances is None):
        raise ParameterError(
            "give either --similarity S.npy with --labels, or a table DATA with --target "
            "(not both, not neither)"
        )
    if data is None and (labels is None or target is not None):
        raise ParameterError("--similarity needs --labels LABELS.csv (and takes no --target)")
    if data is not None and (target is None or labels is not None):
        raise ParameterError("a table DATA needs --target COLUMN (and takes no --labels)")
    if data is None and metric is not None:
        raise ParameterError("--metric goes with a table DATA, not with --similarity")
    params = dict(params)
    if data is not None:
        params["metric"], params["metric_params"] = metric_params(metric or "rbf")
    SimilarityForestClassifier(**params)._validated()
    return SimForestFitJob(input=str(data or matrix or distances), out=out, params=params,
                           data=data, matrix=matrix, distances=distances, labels=labels,
                           target=target, metric=metric, normalize=normalize, drop=drop,
                           na_values=tuple(na_values), overwrite=overwrite,
                           connect=connect)  # fmt: skip


@dataclass
class _FitRows:
    """What the fit reads: the objects held whole (with the centring of distances), or
    only the shape of a table read by partitions (its rows read by the fit stage:
    ``placed`` on a cluster)."""

    n: int
    d: int
    cells: int
    fit_input: Any
    centring: Any = None
    placed: int | None = None
    what: str = "simforest fit"


def _fit_rows(job: SimForestFitJob, temporary: ExitStack) -> _FitRows:
    """The objects of the fit (``distances`` double-centred into a temporary array beside
    ``out`` that ``temporary`` removes), their number checked against the size limit."""
    from distforest.jobs.simforest import read_fit_input, table_parts
    from distforest.jobs.stages import ON_A_CLUSTER
    from distforest.store.source import read_as

    def held(_: Any = None) -> _FitRows:  # a matrix, centred distances or a table read here
        matrix, centring = job.matrix, None
        if job.distances is not None:
            from distforest.io.centring import centred_matrix, double_centre

            matrix = temporary.enter_context(centred_matrix(job.out))
            centring = double_centre(job.distances, matrix,
                                     what=f"--distances {job.distances!r}")  # fmt: skip
        fit_input = read_fit_input(data=job.data, matrix=matrix, labels=job.labels,
                                   target=job.target, normalize=job.normalize, drop=job.drop,
                                   na_values=job.na_values)  # fmt: skip
        _check_size(job.params, fit_input.n)
        return _FitRows(fit_input.n, 1, fit_input.cells, fit_input, centring)

    def parts(data: str) -> _FitRows:  # read by the fit stage, on a cluster
        assert job.target is not None  # (the request was checked)
        fit_input = table_parts(data, job.target, job.normalize, job.drop, job.na_values,
                                summaries=False)  # fmt: skip
        _check_size(job.params, fit_input.n)
        return _FitRows(fit_input.n, fit_input.cells // max(1, fit_input.n), fit_input.cells,
                        fit_input, placed=ON_A_CLUSTER,
                        what="simforest fit (read by partitions)")  # fmt: skip

    return held() if job.data is None else read_as(job.data, whole=held, parts=parts)


def _check_size(params: dict[str, Any], n: int) -> None:
    """Refuse a forest on ``n`` objects too large for the size limit (exit 6, the knobs)."""
    from distforest.jobs.estimates import check_size, estimate_forest_metric

    need = estimate_forest_metric(n, 1, params["n_estimators"] * params["n_pairs"])
    knobs = f"--trees ({params['n_estimators']:,}) and --pairs ({params['n_pairs']:,})"
    check_size(f"SimForest on {n:,} objects", need, knobs)


@SimForestFitJob.plans
def plan_fit_job(job: SimForestFitJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the objects (centred distances go into
    a temporary array removed before it returns), fits nothing."""
    with ExitStack() as temporary:
        return fit_pipeline(job, _fit_rows(job, temporary))


def fit_pipeline(job: SimForestFitJob, rows: _FitRows) -> Pipeline:
    """The one stage of ``simforest fit``: the trees in batches of tasks, the model saved."""
    import math

    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.jobs.estimates import SECONDS_PER
    from distforest.jobs.stages import placement_of
    from distforest.parallel.tasks import default_batch_size, plan_batches

    placed = rows.cells if rows.placed is None else rows.placed
    trees, pairs, n = job.params["n_estimators"], job.params["n_pairs"], rows.n
    batch = job.params.get("batch_size") or default_batch_size(trees, placement_of(
        placed, job.connect)[1])  # fmt: skip
    fit_tasks = len(plan_batches(trees, batch))
    cpu = SECONDS_PER["sim_fit"] * trees * pairs * n * math.log2(max(n, 2))
    fit = Stage("fit", f"{fit_tasks} fit tasks -> {job.out}", reads=(job.input,),
                writes=(job.out,), tasks=fit_tasks,
                cost=Cost(cpu, 8 * rows.cells,
                          {"model (nodes, leaves, inbag)": n * trees * (5 + 2 * 48)}),
                run=lambda ctx: _fit(job, rows, ctx),
                resume=lambda ctx: setattr(ctx, "model", SimilarityForestClassifier.load(
                    job.out, rows_in_store=rows.fit_input.rows_in_store)))  # fmt: skip
    return Pipeline(title=f"{rows.what}: {n:,} rows x {rows.d} features",
                    steps=[("input", job.input)],
                    stages=[fit], cells=placed, connect=job.connect, out=job.out)  # fmt: skip


def _fit(job: SimForestFitJob, rows: _FitRows, ctx: Context) -> None:
    """The fit stage: fit the forest and save it with the run's record (not complete: the
    run protocol marks it); a model fitted on distances keeps their column means, which
    centre new objects' distances."""
    from distforest.forests.simforest import SimilarityForestClassifier

    forest = SimilarityForestClassifier(**job.params)
    record = ctx.run.record

    def save(fitted: Any, attrs: dict[str, Any]) -> Any:
        if rows.centring is not None:
            attrs = {**attrs, "source": job.distances, "centring": "double"}
        rs = fitted.save(job.out, overwrite=True, complete=False, attrs={**attrs, **record})
        if rows.centring is not None:  # what predict needs to centre new objects' distances
            rs.write_named("centring_means", rows.centring.column_means,
                           attrs={"grand_mean": rows.centring.grand_mean})  # fmt: skip
        return rs

    # a table read by partitions: pass 1 on the workers, fitted from a temporary store
    rs = rows.fit_input.fit_saved(forest, save)
    if rows.placed is not None:  # (the summary says so)
        ctx.done.info["by_partitions"] = True
    ctx.rs, ctx.model = rs, forest
    ctx.done.outputs = {"model": rs.path}
    ctx.done.info.update(evaluations=int(forest.n_similarity_evaluations_),
                         classes=len(forest.classes_), objects=int(forest.n_samples_))  # fmt: skip


@SimForestFitJob.runs
def run_fit_job(job: SimForestFitJob, progress: Any = None, *, restart: bool = False,
                run_id: str | None = None) -> JobResult:  # fmt: skip
    """Fit and save the model under the run protocol (a killed run fits again; a complete
    model of the same request is kept)."""
    from distforest.jobs.inputs import listing_stamp
    from distforest.store.run_store import RunStore

    start = time.perf_counter()

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        fit = (rs.attrs.get("stages") or {}).get("fit") or {}
        n = int(fit.get("objects", 0))
        return JobResult(store=rs.path, name="model", shape=(n, n),
                         n_trees=int(job.params["n_estimators"]), task="SimForest classification",
                         seconds=time.perf_counter() - start, outputs={"model": rs.path, **outputs},
                         mode=mode)  # fmt: skip

    with ExitStack() as temporary:  # (centred distances beside the model, removed at the end)
        pipeline = fit_pipeline(job, _fit_rows(job, temporary))  # (the input checked first)
        given = {key: listing_stamp(str(path)) for key, path in
                 (("data", job.data), ("matrix", job.matrix), ("distances", job.distances),
                  ("labels", job.labels)) if path is not None}  # fmt: skip
        spec = job.spec_of(("params", "target", "normalize", "drop", "na_values"), input=given)
        return execute(job, pipeline, spec, result, progress=progress, restart=restart,
                       run_id=run_id or new_run_id())  # fmt: skip


def read_predict_input(model: str, data: str | None, matrix: str | None,
                       distances: str | None, na_values: tuple[str, ...],
                       out: str) -> tuple[Any, Any, int, ExitStack]:  # fmt: skip
    """The saved model, its new objects (scaled features, a similarity matrix, or centred
    distances in a temporary array beside ``out``, removed when the returned stack closes)
    and their number; an input that does not match how the model was fitted is refused."""
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.io import load_table, read_frame
    from distforest.io.matrices import load_matrix
    from distforest.jobs.simforest import scale
    from distforest.store.run_store import RunStore

    forest = SimilarityForestClassifier.load(model)
    attrs = RunStore.open(model).attrs
    fitted_on_table = attrs.get("measure") not in ("precomputed", "function")
    if fitted_on_table:
        if data is None or matrix is not None or distances is not None:
            raise ParameterError(
                f"model {model!r} was fitted on a table: give the new rows as DATA "
                "(not --similarity or --distances)"
            )
        names = attrs.get("feature_names") or []
        frame = read_frame(data, na_values=na_values)
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise InputError(
                f"{data!r} lacks the model's feature column(s) {missing}; it needs "
                f"{', '.join(names)}"
            )
        table = load_table(frame[names], min_rows=1)
        source: Any = scale(table.X.astype(np.float64), attrs.get("scaling"))
        n = source.shape[0]
    temporary = ExitStack()
    if not fitted_on_table:
        centred = attrs.get("centring") == "double"
        given = "--distances Q.npy" if centred else "--similarity Q.npy"
        wanted, other = (distances, matrix) if centred else (matrix, distances)
        if wanted is None or other is not None or data is not None:
            raise ParameterError(
                f"model {model!r} was fitted on a {'distance' if centred else 'similarity'} "
                f"matrix: give {given} (test objects x training objects)"
            )
        if centred:
            from distforest.io.centring import Centring, centre_new_rows, centred_matrix

            means = RunStore.open(model).array("centring_means")
            grand_mean = means.attrs["grand_mean"]
            assert isinstance(grand_mean, float)
            centring = Centring(np.asarray(means[...]), grand_mean)
            matrix = temporary.enter_context(centred_matrix(out))
            centre_new_rows(distances, centring, matrix, what=f"--distances {distances!r}")
        source = load_matrix(matrix, f"--similarity {matrix!r}")
        n = source.shape[0]
    return forest, source, n, temporary


def prediction_frame(forest: Any, proba: np.ndarray) -> Any:
    """``prediction, proba_<label>...`` of class probabilities, one row per object."""
    import pandas as pd

    frame = pd.DataFrame({"prediction": forest.classes_[np.argmax(proba, axis=1)]})
    for k, label in enumerate(forest.classes_):
        frame[f"proba_{label}"] = proba[:, k]
    return frame


def predict_to_csv(forest: Any, source: Any, out: str) -> str:
    """Predict on the current placement; write ``prediction, proba_<label>...`` to ``out``."""
    return write_csv(prediction_frame(forest, forest.predict_proba(source)), out)


def _predict_rows(model_path: str, attrs: dict[str, Any], names: tuple[str, ...],
                  frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """``prediction, proba_<label>...`` of one partition by a saved SimForest (read once
    per worker, its per-row arrays left in its store)."""
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.jobs.model_columns import feature_matrix
    from distforest.jobs.row_pieces import model_once
    from distforest.jobs.simforest import scale
    from distforest.parallel.execution import execution

    X = feature_matrix(frame, part, attrs, names, start)
    bad = ~np.isfinite(X)
    if bad.any():
        rows, cols = np.nonzero(bad)
        raise InputError(
            f"{part}: column {names[cols[0]]!r} is missing or infinite at row "
            f"{start + int(rows[0]) + 1} of the table (counted from 1); the model's measure "
            "needs complete rows: impute them first (distforest impute) or drop those rows"
        )
    forest = model_once(model_path, lambda path: SimilarityForestClassifier.load(
        path, rows_in_store=True))  # fmt: skip
    if X.shape[0] == 0:  # an empty part still has its place
        return prediction_frame(forest, np.empty((0, len(forest.classes_))))
    with execution(client="synchronous"):  # in this worker: it is one task of many
        return prediction_frame(forest, forest.predict_proba(scale(X, attrs.get("scaling"))))


@dataclass(kw_only=True)
class SimForestProximityJob(JobBase):
    """``distforest simforest proximity``: a saved model's proximity of its training
    objects, tile by tile, into a store of its own (``input`` is the model)."""

    job_kind: ClassVar[str] = "simforest-proximity"

    out: str
    method: str = "original"
    #: Rows/columns of one tile; None: the model's.
    tile_size: int | None = None
    name: str = "simforest proximity"

    def describe(self) -> str:
        """What the job computes."""
        return f"{self.method} proximity of a SimForest model's training objects"

    def summary(self, result: JobResult) -> str:
        """The matrix and its store."""
        how = mode_text(result.mode, self.out)
        return (f"{result.name} of {result.shape[0]} x {result.shape[1]} objects in "
                f"{result.seconds:.1f} s{how}\n  store:  {self.out} (array {result.name!r}, "
                "dims sample_i, sample_j)")  # fmt: skip


def _proximity_model(job: SimForestProximityJob) -> Any:
    from distforest.forests.simforest import SimilarityForestClassifier

    return SimilarityForestClassifier.load(job.input, rows_in_store=True)  # copied by tasks


@SimForestProximityJob.plans
def plan_proximity_job(job: SimForestProximityJob) -> Pipeline:
    """What the job would do (``--dry-run``): opens the model, runs nothing."""
    return proximity_pipeline(job, _proximity_model(job))


def proximity_pipeline(job: SimForestProximityJob, forest: Any) -> Pipeline:
    """The one stage of ``simforest proximity``: the ``n x n`` matrix in tiles."""
    from distforest.forests.tiles import ARRAY_NAMES, SYMMETRIC
    from distforest.jobs.estimates import estimate_matrix
    from distforest.parallel.tiling import TilePlan

    n, tile = forest.n_samples_, job.tile_size or forest.params_["tile_size"]
    tiles = TilePlan(n, n, tile, symmetric=SYMMETRIC[job.method])
    need = estimate_matrix(n, n, 1, tile, SYMMETRIC[job.method])
    chunk = f"{tiles.chunks[0]} x {tiles.chunks[1]}"
    stage = Stage(
        "tiles", f"{job.method}, {tiles.n_tasks:,} tiles of {chunk}", reads=(job.input,),
        writes=(ARRAY_NAMES[job.method],), tasks=tiles.n_tasks, tiles=tiles.n_tasks,
        cost=Cost(need["cpu_seconds"], need["memory_bytes"] + 3 * 4 * tiles.chunks[0]
                  * tiles.chunks[1], {"matrix (uncompressed)": need["disk_bytes"]}),
        run=lambda ctx: _proximity(job, forest, ctx), again=True,
    )  # fmt: skip
    return Pipeline(title=f"simforest proximity: {n:,} x {n:,} rows, 1 features",
                    steps=[("input", job.input), ("matrix", f"{tiles.n_tasks:,} tiles of {chunk}"),
                           ("store", str(job.out))],
                    stages=[stage], cells=forest._fitted_cells(), connect=job.connect,
                    out=str(job.out))  # fmt: skip


def _proximity(job: SimForestProximityJob, forest: Any, ctx: Context) -> None:
    """The tiles stage: the store created with the run's record first (a killed run
    resumes it, its finished tiles kept), then the tiles."""
    from distforest.store.run_store import RunStore

    rs = forest._proximity_store(job.out, True)
    if rs.attrs.get("spec_hash") != ctx.run.record["spec_hash"]:
        rs.update_attrs(**ctx.run.record)
    P = forest.proximity(job.method, store=job.out, tile_size=job.tile_size, complete=False)
    ctx.rs = RunStore.open(job.out, mode="r+")
    ctx.done.info["shape"] = [int(s) for s in P.shape]


@SimForestProximityJob.runs
def run_proximity_job(job: SimForestProximityJob, progress: Any = None, *,
                      restart: bool = False, run_id: str | None = None) -> JobResult:  # fmt: skip
    """Write the model's proximity under the run protocol; the disk checked first."""
    from distforest import location
    from distforest.forests.tiles import ARRAY_NAMES
    from distforest.jobs.estimates import check_disk, estimate_matrix
    from distforest.store.run_store import RunStore

    start = time.perf_counter()
    forest = _proximity_model(job)
    n, tile = forest.n_samples_, job.tile_size or forest.params_["tile_size"]
    name = ARRAY_NAMES[job.method]

    def check(run: Run) -> None:
        need = estimate_matrix(n, n, 1, tile, True)["disk_bytes"]
        check_disk(location.parent(job.out), need, replaces=job.out)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        rows, cols = rs.array(name).shape
        return JobResult(store=rs.path, name=name, shape=(int(rows), int(cols)),
                         n_trees=len(forest.trees_), task="SimForest proximity",
                         seconds=time.perf_counter() - start, outputs={"store": rs.path},
                         mode=mode)  # fmt: skip

    spec = job.spec_of(("method", "tile_size"), model={"path": job.input,
                                                      "fit_id": forest.fit_id_})  # fmt: skip
    return execute(job, proximity_pipeline(job, forest), spec, result, progress=progress,
                   restart=restart, run_id=run_id or new_run_id(), check=check)  # fmt: skip


@dataclass(kw_only=True)
class SimForestPredictJob(JobBase):
    """``distforest simforest predict``: the class of new objects by a saved model,
    written to ``files["out"]`` (a CSV); ``out`` is the job's store beside it
    (:func:`~distforest.jobs.outputs.record_path`: its spec and stages)."""

    job_kind: ClassVar[str] = "simforest-predict"

    model: str
    out: str
    files: dict[str, Any]
    data: str | None = None
    matrix: str | None = None
    distances: str | None = None
    name: str = "simforest predict"

    def describe(self) -> str:
        """What the job computes."""
        return "SimForest predictions"

    def summary(self, result: JobResult) -> str:
        """The predictions written (as the command printed them), and the reports."""
        from distforest.jobs.result import mode_text
        from distforest.store.run_store import RunStore

        stage = (RunStore.open(result.store).attrs.get("stages") or {}).get("predict") or {}
        parts = " read by partitions" if stage.get("by_partitions") else ""
        return "\n".join([
            f"{result.shape[0]} predictions{parts} in {result.seconds:.1f} s"
            f"{mode_text(result.mode, self.out)}",
            *output_lines(result.outputs, 13),
        ])  # fmt: skip


@SimForestPredictJob.plans
def plan_predict_job(job: SimForestPredictJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the model and the new objects, runs
    nothing (centred distances go into a temporary array removed before it returns)."""
    pipeline, temporary = _read_new_objects(job)
    with temporary:
        return pipeline


def _read_new_objects(job: SimForestPredictJob) -> tuple[Pipeline, ExitStack]:
    """The job's pipeline, from the new objects as read: a similarity or distance matrix,
    or DATA read here whole (its features scaled), or DATA's partitions (each read by a
    task); the stack removes centred distances (a temporary array beside the CSV)."""
    from distforest.store.source import read_as

    def whole(_: Any) -> tuple[Pipeline, ExitStack]:
        forest, source, n, temporary = read_predict_input(job.model, job.data, job.matrix,
                                                          job.distances, job.na_values,
                                                          job.files["out"])  # fmt: skip
        return predict_pipeline(job, forest, source, n), temporary

    def parts(_: Any) -> tuple[Pipeline, ExitStack]:
        return parts_pipeline(job, *_partitions(job)), ExitStack()

    if job.data is None or job.matrix is not None or job.distances is not None:
        return whole(None)
    return read_as(str(job.data), whole=whole, parts=parts)


def _partitions(job: SimForestPredictJob) -> tuple[Any, Any, int]:
    """The model's attributes, the partitions of DATA and their count, the columns checked."""
    from distforest.io.partitions import open_partitions
    from distforest.jobs.model_columns import check_columns
    from distforest.store.run_store import RunStore

    attrs = RunStore.open(job.model, require_complete=True).attrs
    if attrs.get("measure") in ("precomputed", "function", None):
        raise ParameterError(
            f"model {job.model!r} was fitted on a matrix: give --similarity Q.npy or "
            "--distances Q.npy (test objects x training objects), not DATA"
        )
    parts = open_partitions(str(job.data), na_values=job.na_values)
    if parts.frame is None:
        raise InputError(f"{parts.source}: a numeric array has no column names; give a table")
    names = tuple(str(c) for c in attrs.get("feature_names") or ())
    check_columns(parts.source, list(parts.columns), names)
    return attrs, parts, parts.npartitions


def parts_pipeline(job: SimForestPredictJob, attrs: Any, parts: Any, n: int) -> Pipeline:
    """The one stage of ``simforest predict`` of DATA read by partitions: one task per
    partition (``attrs``: the model's attributes, ``parts``: the partitions, ``n``: their
    count; the rows are not counted)."""
    from distforest.jobs.stages import ON_A_CLUSTER

    out = job.files["out"]
    stage = Stage("predict", f"{n} tasks that each predict a partition's rows and write a "
                             f"piece of {out}, joined in order",
                  reads=(job.model, str(job.data)), writes=(out,), tasks=n,
                  run=lambda ctx: _predict_parts(job, attrs, parts, ctx))  # fmt: skip
    return Pipeline(title=f"simforest predict: {parts.source} read by partitions",
                    steps=[("input", job.model), ("store", f"{job.out} (this run's stages)")],
                    stages=[stage], cells=ON_A_CLUSTER, connect=job.connect,
                    out=str(job.out))  # fmt: skip


def predict_pipeline(job: SimForestPredictJob, forest: Any, source: Any, n: int) -> Pipeline:
    """The one stage of ``simforest predict`` of objects read here: one task per block of
    test objects (as :meth:`SimilarityForestClassifier.predict_proba` cuts them)."""
    import math

    from distforest.forests.simforest import BLOCK_BYTES
    from distforest.jobs.estimates import SECONDS_PER
    from distforest.parallel.placement import cells_of
    from distforest.parallel.tasks import plan_batches

    out = job.files["out"]
    _, function, _, per_row = forest._test_source(source, None)
    blocks = len(plan_batches(n, max(1, min(n, BLOCK_BYTES // (8 * max(1, per_row))))))
    width = 1 if function is None else int(np.shape(source)[1])  # values read per similarity
    trees, classes = len(forest.trees_), len(forest.classes_)
    # one similarity per node on the way down each tree (two objects of its pair)
    cpu = SECONDS_PER["measure"] * n * trees * 2 * width * math.log2(max(forest.n_samples_, 2))
    stage = Stage("predict", f"{trees} trees in {blocks} task(s) -> {out}",
                  reads=(job.model, job.input), writes=(out,), tasks=blocks,
                  cost=Cost(cpu, 8 * cells_of(source) + 8 * n * classes,
                            {"predictions (CSV)": n * 24 * (1 + classes)}),
                  run=lambda ctx: _predict(job, forest, source, ctx))  # fmt: skip
    return Pipeline(
        title=f"simforest predict: {n:,} objects against a {forest.n_samples_:,}-object model",
        steps=[("input", job.model), ("predict", f"{trees} trees in {blocks} task(s)"),
               ("writes", str(out)), ("store", f"{job.out} (this run's stages)")],
        stages=[stage], cells=cells_of(source), connect=job.connect, out=str(job.out),
    )  # fmt: skip


def _predict(job: SimForestPredictJob, forest: Any, source: Any, ctx: Context) -> None:
    ctx.done.outputs = {"predictions": predict_to_csv(forest, source, job.files["out"])}
    ctx.done.info["rows"] = int(np.shape(source)[0])


def _predict_parts(job: SimForestPredictJob, attrs: Any, parts: Any, ctx: Context) -> None:
    """Each partition's rows predicted by a task (the model read once per worker) and
    written as a piece of the CSV, joined in order (the in-memory command's file)."""
    from distforest.jobs.row_pieces import row_frames, write_pieces

    names = tuple(str(c) for c in attrs.get("feature_names") or ())
    rows = row_frames(str(job.data), names, na_values=job.na_values, by_parts=True)
    n, path, _ = write_pieces(rows, partial(_predict_rows, job.model, attrs, names),
                              job.files["out"])  # fmt: skip
    ctx.done.outputs = {"predictions": path}
    ctx.done.info.update(rows=int(n), by_partitions=True)


@SimForestPredictJob.runs
def run_predict_job(job: SimForestPredictJob, progress: Any = None, *, restart: bool = False,
                    run_id: str | None = None) -> JobResult:  # fmt: skip
    """Predict under the run protocol; the model, the inputs and the output checked first."""
    from distforest.jobs.inputs import listing_stamp
    from distforest.jobs.row_pieces import run_rows_job
    from distforest.store.run_store import RunStore

    model = RunStore.open(job.model, require_complete=True).attrs.get("fit_id")
    pipeline, temporary = _read_new_objects(job)
    given = {k: listing_stamp(str(p)) for k, p in
             (("data", job.data), ("matrix", job.matrix), ("distances", job.distances))
             if p is not None}  # fmt: skip

    spec = job.spec_of(("na_values", "files"), model={"path": job.model, "fit_id": model},
                       input=given)  # fmt: skip
    with temporary:  # (centred distances beside the CSV, removed at the end)
        return run_rows_job(job, pipeline, spec, "SimForest classification",
                            progress=progress, restart=restart,
                            run_id=run_id or new_run_id())  # fmt: skip


def simforest_predict_job(data: dict[str, Any], sections: dict[str, dict[str, Any]],
                          input_path: str, out_dir: Any, connect: dict[str, Any], source: str,
                          templated: Any) -> SimForestPredictJob:  # fmt: skip
    """The job of a ``simforest-predict`` pipeline (sections type-checked): the job
    ``distforest simforest predict`` builds from the same values.  ``model.path`` is the
    model (``templated``: dates filled in, read from the pipeline's folder);
    ``input.path`` the new objects, or with ``predict.matrix`` their similarities or
    distances to the training objects."""
    from distforest.errors import ConfigError
    from distforest.jobs.base import input_fields
    from distforest.jobs.outputs import record_path

    model, out, section = sections["model"], sections["output"], sections["predict"]
    if "model" not in data:
        raise ConfigError(f"{source}: a simforest-predict pipeline needs 'model: PATH', a "
                          "SimForest model (distforest simforest fit, or a simforest "
                          "pipeline's store)")  # fmt: skip
    extra = [f"model.{k}" for k in model if k != "path"] + [f"output.{k}" for k in ("plot",)
                                                            if k in out]  # fmt: skip
    if extra:
        raise ConfigError(f"{source}: {extra[0]} does not apply to a simforest-predict "
                          "pipeline: remove it")  # fmt: skip
    matrix = section.get("matrix")
    given: dict[str, str | None] = {"data": None, "similarity": None, "distances": None}
    given[matrix or "data"] = input_path
    csv = str(out_dir / section["out"])
    store = str(out_dir / out["store"]) if out.get("store") else record_path(csv)
    return SimForestPredictJob(input=input_path, model=templated(model["path"]), out=store,
                               files={"out": csv}, data=given["data"],
                               matrix=given["similarity"], distances=given["distances"],
                               **input_fields(sections["input"], table=False),
                               overwrite=bool(out.get("overwrite", False)), connect=connect,
                               source=source)  # fmt: skip
