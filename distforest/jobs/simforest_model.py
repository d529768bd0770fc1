"""SimForest models for the commands: saved with their centring, new objects read as the
model needs them, predictions written.

Used by ``distforest simforest fit`` and ``distforest simforest predict``;
``distforest simforest proximity`` is a job (:class:`SimForestProximityJob`).
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
from distforest.jobs.result import JobResult, mode_text
from distforest.jobs.runs import Context, Run, execute
from distforest.jobs.stages import Cost, Pipeline, Stage


def save_model(forest: Any, out: str, overwrite: bool, attrs: dict[str, Any],
               distances: str | None, centring: Any) -> None:  # fmt: skip
    """Save a fitted SimForest (with, for one fitted on ``distances``, the column means
    that centre new objects' distances) and mark it complete, last."""
    attrs = dict(attrs)
    if centring is not None:
        attrs.update(source=distances, centring="double")
    rs = forest.save(out, overwrite=overwrite, attrs=attrs, complete=False)
    if centring is not None:  # what predict needs to centre new objects' distances
        rs.write_named("centring_means", centring.column_means,
                       attrs={"grand_mean": centring.grand_mean})  # fmt: skip
    rs.mark_complete()


def checked_fit(temporary: ExitStack, params: dict[str, Any], *, data: str | None,
                matrix: str | None, distances: str | None, labels: str | None,
                target: str | None, metric: str | None, normalize: str,
                drop: tuple[str, ...], na_values: tuple[str, ...], out: str,
                overwrite: bool) -> tuple[Any, Any, Any]:  # fmt: skip
    """``simforest fit``'s unfitted forest, its input and (for ``distances``) the centring,
    all checked before any work; ``distances`` are double-centred into a temporary
    similarity array beside ``out`` that ``temporary`` removes."""
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.jobs.estimates import check_size, estimate_forest_metric
    from distforest.jobs.simforest import metric_params, read_fit_input
    from distforest.store.run_store import check_can_create

    centring = None
    if distances is not None:
        from distforest.io.centring import centred_matrix, double_centre

        if matrix is not None or params["kind"] != "similarity":
            raise ParameterError(
                "--distances is turned into similarities: give it without --similarity "
                "and without --kind distance (or give --similarity D --kind distance to "
                "order by D_ki^2 - D_kj^2 without centring)"
            )
        check_can_create(out, overwrite)
        matrix = temporary.enter_context(centred_matrix(out))
        centring = double_centre(distances, matrix, what=f"--distances {distances!r}")
    fit_input = read_fit_input(data=data, matrix=matrix, labels=labels, target=target,
                               normalize=normalize, drop=drop,
                               na_values=na_values)  # fmt: skip
    if matrix is not None and metric is not None:
        raise ParameterError("--metric goes with a table DATA, not with --similarity")
    if data is not None:
        params["metric"], params["metric_params"] = metric_params(metric or "rbf")
    check_can_create(out, overwrite)
    forest = SimilarityForestClassifier(**params)
    n = fit_input.n
    plan = estimate_forest_metric(n, 1, params["n_estimators"] * params["n_pairs"])
    knobs = f"--trees ({params['n_estimators']:,}) and --pairs ({params['n_pairs']:,})"
    check_size(f"SimForest on {n:,} objects", plan, knobs)
    return forest, fit_input, centring


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


def predict_plan(forest: Any, source: Any, model: str, out: str, connect: dict[str, Any]) -> Any:
    """The :class:`~distforest.jobs.plan.Plan` of ``simforest predict --dry-run``: one task
    per block of test objects (as :meth:`SimilarityForestClassifier.predict_proba` cuts them)."""
    import math

    from distforest import location
    from distforest.forests.simforest import BLOCK_BYTES
    from distforest.jobs.estimates import SECONDS_PER, free_space
    from distforest.jobs.plan import Plan, placement_of
    from distforest.parallel.placement import cells_of
    from distforest.parallel.tasks import plan_batches

    _, function, n, per_row = forest._test_source(source, None)
    blocks = len(plan_batches(n, max(1, min(n, BLOCK_BYTES // (8 * max(1, per_row))))))
    where, threads = placement_of(cells_of(source), connect)
    width = 1 if function is None else int(np.shape(source)[1])  # values read per similarity
    trees, classes = len(forest.trees_), len(forest.classes_)
    return Plan(
        title=f"simforest predict: {n:,} objects against a {forest.n_samples_:,}-object model",
        steps=[("input", model), ("predict", f"{trees} trees in {blocks} task(s)"),
               ("writes", str(out))],
        tasks=blocks,
        tiles=0,
        disk={"predictions (CSV)": n * 24 * (1 + classes)},
        free_bytes=free_space(location.parent(out)),
        worker_bytes=8 * cells_of(source) + 8 * n * classes,
        # one similarity per node on the way down each tree (two objects of its pair)
        cpu_seconds=SECONDS_PER["measure"] * n * trees * 2 * width
        * math.log2(max(forest.n_samples_, 2)),
        threads=threads,
        where=where,
    )  # fmt: skip


def predict_command(model: str, data: str | None, matrix: str | None, distances: str | None,
                    out: str, overwrite: bool, na_values: tuple[str, ...],
                    connect: dict[str, Any], progress: Any = None,
                    dry_run: bool = False) -> Any:  # fmt: skip
    """``distforest simforest predict``: the predictions written and the summary line, or
    (``dry_run``) the plan, nothing written."""
    from distforest.jobs.outputs import check_new_file
    from distforest.parallel.placement import cells_of, place

    start = time.perf_counter()
    check_new_file(out, overwrite)
    if data is not None and matrix is None and distances is None:
        from distforest.jobs.inputs import partitioned_input

        if partitioned_input(data):  # a glob, a folder of parts, a large file
            return predict_partitioned(model, data, out, na_values, connect, dry_run)
    forest, source, n, temporary = read_predict_input(model, data, matrix, distances, na_values,
                                                      out)  # fmt: skip
    with temporary:
        if dry_run:
            return predict_plan(forest, source, model, out, connect)
        with place(cells_of(source), connect, progress=progress):
            path = predict_to_csv(forest, source, out)
    return f"{n} predictions in {time.perf_counter() - start:.1f} s\n  predictions:  {path}"


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


def predict_partitioned(model: str, data: str, out: str, na_values: tuple[str, ...],
                        connect: dict[str, Any], dry_run: bool = False) -> str:  # fmt: skip
    """``distforest simforest predict MODEL DATA`` of a DATA read by partitions: one task
    per partition predicts its rows and writes its piece of the CSV (joined in order, the
    in-memory command's file); the summary line, or (``dry_run``) what would run."""
    from distforest.io.partitions import open_partitions
    from distforest.jobs.model_columns import check_columns
    from distforest.jobs.row_pieces import row_frames, write_pieces
    from distforest.parallel.cluster import connect as connect_to
    from distforest.store.run_store import RunStore

    start = time.perf_counter()
    attrs = RunStore.open(model, require_complete=True).attrs
    if attrs.get("measure") in ("precomputed", "function", None):
        raise ParameterError(
            f"model {model!r} was fitted on a matrix: give --similarity Q.npy or --distances "
            "Q.npy (test objects x training objects), not DATA"
        )
    names = tuple(str(c) for c in attrs.get("feature_names") or ())
    parts = open_partitions(data, na_values=na_values)
    if parts.frame is None:
        raise InputError(f"{parts.source}: a numeric array has no column names; give a table")
    check_columns(parts.source, list(parts.columns), names)
    if dry_run:
        return (f"simforest predict of {parts.source}: read by partitions, "
                f"{parts.npartitions} tasks that each predict a partition's rows with "
                f"{model} and write a piece of {out}")  # fmt: skip
    with connect_to(**connect) as client, client.as_current():
        rows = row_frames(data, names, na_values=na_values, by_parts=True)
        n, path, _ = write_pieces(rows, partial(_predict_rows, model, attrs, names), out)
    return (f"{n} predictions read by partitions in {time.perf_counter() - start:.1f} s\n"
            f"  predictions:  {path}")  # fmt: skip


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
