"""SMERF pipelines: the ``smerf`` and ``distance`` sections of a pipeline file, and their run.

A pipeline with a ``smerf`` section fits :class:`~distforest.forests.smerf.SMERF`
on the features of ``input.path`` and an observed distance matrix, saves the
model in ``output.store`` and, with a ``distance`` section, writes learned
distances tile by tile to the Zarr store ``distance.out`` (2-D array
``distance``)::

    input:    {path: X.csv}                   # or {path: X.csv, target: Class}
    smerf:    {distances: D.npy, n_estimators: 100, random_state: 0, tile_size: 1024}
    distance: {out: distance.zarr}            # training rows x training rows
              # {rows: A.csv, against: B.csv, out: ...}: new rows (x other rows)
              # {oob: true, out: ...}: training rows, out-of-bag
    output:   {dir: results/smerf, store: model.zarr}

The observed D is ``smerf.distances`` (.npy or Zarr, NaN = pair not
observed) or, without it, ``D = 1[y_a != y_b]`` of the class column
``input.target`` (the Gini distance: SMERF then grows classification trees).
A run follows the protocol of :mod:`distforest.jobs.runs`: locked, resumable
by stage (``fit``, ``distance``), not repeated once complete.

The features are the job's source
(:func:`~distforest.store.source.open_input`): a glob, a folder of parts or
a file over 32 MB is read by partitions, pass 1 (every check, named with its
part file, column and row) before anything is written; the fit
:meth:`~distforest.io.source.RowSummary.placed` the rows, encoded as float64,
into a temporary run store that the trees read
(:meth:`distforest.forests.smerf.SMERF.fit`), removed when the run ends.  The
``distance`` rows (``rows``, ``against``) are read whole, or (such a table) by
partitions into a temporary store and routed by chunks.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from distforest import location
from distforest.errors import ConfigError, ParameterError, StoreError
from distforest.forests import constraints as C
from distforest.forests.smerf import DISTANCE, SMERF, input_cells
from distforest.io.distances import load_distances
from distforest.jobs.base import ForestJob, JobBase, input_fields, new_run_id
from distforest.jobs.estimates import check_disk, estimate_matrix, estimate_smerf_model
from distforest.jobs.inputs import input_shape, temporary_store
from distforest.jobs.outputs import check_new_file
from distforest.jobs.result import JobResult, mode_text
from distforest.jobs.runs import Context, Run, execute
from distforest.jobs.stages import Cost, Pipeline, Stage, placement_of
from distforest.store.run_store import RunStore, check_can_create
from distforest.store.source import open_input, open_source

logger = logging.getLogger("distforest")

#: Keys of the ``smerf`` section besides the estimator's parameters.
SMERF_EXTRA = ("distances", "tile_size")
#: Keys of the ``distance`` section.
DISTANCE_KEYS = ("rows", "against", "oob", "out")
#: Sections of other pipelines that a SMERF pipeline must not have.
NOT_WITH_SMERF = ("forest", "proximity", "impute", "outliers", "mislabels", "mds", "xforest",
                  "clustering", "simforest", "neighbors", "knn")  # fmt: skip


@dataclass(kw_only=True)
class SmerfJob(ForestJob):
    """One SMERF run: the model (``out``) and optionally a learned-distance store.

    Its ``forest`` holds keyword arguments of :class:`SMERF`.
    """

    job_kind: ClassVar[str] = "smerf"

    #: The observed distances (.npy or Zarr); None: 1[y_a != y_b] of ``target``.
    distances: str | None = None
    tile_size: int = C.SMERF_TILE
    #: ``{"out": store, "rows": path or None, "against": path or None, "oob": bool}``.
    distance: dict[str, Any] | None = None
    name: str = "smerf"

    def spec(self, fingerprints: dict[str, str]) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep = ("distances", "target", "drop", "na_values", "forest", "tile_size", "distance")
        return self.spec_of(keep, input={"source": self.input, "fingerprints": fingerprints})

    def summary(self, result: JobResult) -> str:
        """The lines of ``distforest smerf fit`` (a model only, from the command line):
        trees, rows, observed pairs, the top five importances, the model; else the
        summary of every job."""
        if self.distance is not None or self.source is not None:
            return super().summary(result)
        rs = RunStore.open(self.out)
        fit = (rs.attrs.get("stages") or {}).get("fit", {})
        names = tuple(rs.attrs["input"]["feature_names"])
        return "\n".join([
            *([f"  features of {self.input} read by partitions on the workers"]
              if fit.get("rows_in_store") else []),
            f"SMERF: {self.forest.get('n_estimators', SMERF().n_estimators)} trees on "
            f"{rs.attrs['input']['n_samples']} rows x {len(names)} features "
            f"({fit.get('observed', 1.0):.0%} of pairs observed) in "
            f"{result.seconds:.1f} s{mode_text(result.mode, self.out)}",
            *importance_lines(rs.read("feature_importances"), names, top=5),
            f"  model: {location.resolved(self.out)}",
        ])  # fmt: skip

    def describe(self) -> str:
        """What the job computes, for ``distforest validate``."""
        d = self.distance
        if d is None:
            return "SMERF model"
        rows = "out-of-bag training" if d["oob"] else d["rows"] or "training"
        return f"SMERF model and distances ({rows} rows x {d['against'] or 'training rows'})"


def class_distances(y: np.ndarray | None) -> np.ndarray:
    """``D = 1[y_a != y_b]`` (float32) of a target ``y``: the Gini distance."""
    y = np.asarray(y)
    return (y[:, None] != y[None, :]).astype(np.float32)


@SmerfJob.plans
def plan_smerf_job(job: SmerfJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the inputs' sizes, runs nothing."""
    # (rows read by partitions: from their metadata or line counts, nothing loaded)
    _, n, d = input_shape(job.input, job.target, drop=job.drop, na_values=job.na_values,
                          allow_missing=False)  # fmt: skip
    itemsize = 4  # the class distances are float32
    if job.distances is not None:
        itemsize = load_distances(job.distances, n=n, what=f"smerf.distances {job.distances!r}",
                                  fingerprint=False).itemsize  # fmt: skip
    dist, matrix = job.distance, None
    if dist is not None:
        rows = {key: input_shape(dist[key], drop=job.drop, na_values=job.na_values,
                                 allow_missing=False, min_rows=1)[1]
                for key in ("rows", "against") if dist.get(key)}  # fmt: skip
        n_a, n_b = rows.get("rows", n), rows.get("against", n)
        matrix = (n_a, n_b, bool(dist["oob"]))
    return smerf_pipeline(job, n, d, itemsize, matrix)


def smerf_pipeline(job: SmerfJob, n: int, d: int, itemsize: int,
                   matrix: tuple[int, int, bool] | None,
                   run: dict[str, Any] | None = None) -> Pipeline:  # fmt: skip
    """The stages of a SMERF job on ``n x d`` with ``n x n`` distances of ``itemsize`` bytes:
    fit, and (``matrix``: rows, columns, symmetry) the learned distances.  ``run``: what
    the run's stages read (``table``, ``D``, ``other``, ``stack``)."""
    import math

    from distforest.jobs.estimates import SECONDS_PER
    from distforest.parallel.tasks import default_batch_size, plan_batches
    from distforest.parallel.tiling import TilePlan

    params = {**SMERF().get_params(), **job.forest}
    cells = input_cells(n, d)
    threads = placement_of(cells, job.connect)[1]
    trees = int(params["n_estimators"])
    fit_tasks = len(plan_batches(trees, default_batch_size(trees, threads)))
    stages = [Stage(
        "fit", f"{trees} trees in {fit_tasks} tasks", reads=(str(job.input),),
        writes=(str(job.out),), tasks=fit_tasks,
        cost=Cost(SECONDS_PER["smerf_fit"] * trees * n * n * math.log2(max(n, 2)),
                  itemsize * n * n + 8 * n * d,
                  {"model (distances, leaves, trees)": estimate_smerf_model(n, trees, itemsize)}),
        run=lambda ctx: _fit(job, run or {}, ctx),
        resume=lambda ctx: setattr(ctx, "model", SMERF.load(job.out, require_complete=False)),
    )]  # fmt: skip
    if matrix is not None:
        plan = TilePlan(matrix[0], matrix[1], job.tile_size, symmetric=matrix[2])
        tile, cols = plan.chunks
        stages.append(Stage(
            "distance", f"{matrix[0]:,} x {matrix[1]:,} in {plan.n_tasks:,} tiles of "
                        f"{tile} x {cols}",
            reads=("leaves",), writes=(str((job.distance or {}).get("out")),),
            tasks=plan.n_tasks, tiles=plan.n_tasks,
            cost=Cost(SECONDS_PER["tile"] * trees * plan.n_tasks * tile * cols,
                      itemsize * n * n + 8 * n * d + 3 * 4 * tile * cols,
                      {"learned distances (uncompressed)": plan.nbytes(4)}),
            run=lambda ctx: _distance(job, run or {}, ctx),
        ))  # fmt: skip
    return Pipeline(title=f"job {job.name}: {n:,} rows x {d} features",
                    steps=[("input", str(job.input)), ("store", str(job.out))], stages=stages,
                    cells=cells, connect=job.connect, out=str(job.out))  # fmt: skip


def _fit(job: SmerfJob, given: dict[str, Any], ctx: Context) -> None:
    """The fit stage: fit SMERF and save it (not complete: the protocol marks it)."""
    D = given["D"]
    # rows read by partitions are written into a temporary store, the trees read there
    rows = given["table"].placed(str(given["stack"].enter_context(temporary_store())), {})
    model = SMERF(**job.forest).fit(rows, D)
    given_d = {"distances": str(job.distances)} if job.distances is not None else {}
    ctx.rs = model.save(job.out, overwrite=True, attrs={**given_d, **ctx.run.record},
                        tile_size=job.tile_size, complete=False)  # fmt: skip
    ctx.done.outputs = {"model": ctx.rs.path}
    ctx.done.info["trees"] = int(model.seeds_.shape[0])
    ctx.done.info["observed"] = float(D.observed)
    if rows.store_path is not None:
        ctx.done.info["rows_in_store"] = True
    ctx.model = model


def _distance(job: SmerfJob, given: dict[str, Any], ctx: Context) -> None:
    """The learned distances: out of bag among the training rows, or between given rows."""
    dist, other = job.distance or {}, given["other"]
    if dist["oob"]:
        matrix = ctx.model.oob_distance(dist["out"], tile_size=job.tile_size, overwrite=True)
    else:
        matrix = ctx.model.predict_distance(  # no rows: the training rows' leaves
            other.get("rows"), other.get("against"), dist["out"],
            tile_size=job.tile_size, overwrite=True,
        )  # fmt: skip
    ctx.done.outputs = {"distance store": str(Path(dist["out"]).resolve())}
    ctx.done.info["shape"] = [int(s) for s in matrix.shape]


@SmerfJob.runs
def run_smerf_job(
    job: SmerfJob, progress: Any = None, *, restart: bool = False, run_id: str | None = None
) -> JobResult:
    """Fit and save SMERF, then write the learned distances; resumable by stage.

    Every input (features, D, the ``distance`` rows) is read and checked, and
    the disk space planned, before a cluster is started or a file written.
    """
    start = time.perf_counter()
    run_id = run_id or new_run_id()
    # the rows in memory, or (read by partitions) their summaries: written into a
    # temporary store by the fit
    table = open_input(job.input, **job.table_kw(), allow_missing=False, dtype=np.float64)
    if job.distances is not None:
        what = f"smerf.distances {job.distances!r}"
        D = load_distances(job.distances, n=table.n_samples, what=what, fingerprint=True)
    else:
        D = load_distances(class_distances(table.read_y()), fingerprint=True)
    dist = job.distance or {}
    other = {key: _new_rows(dist[key], job.drop, job.na_values)
             for key in ("rows", "against") if dist.get(key)}  # fmt: skip
    fingerprints = {"X": table.fingerprint(), "D": str(D.fingerprint),
                    **{k: t.fingerprint() for k, t in other.items()}}  # fmt: skip

    matrix = None
    if dist:
        n_a = other["rows"].n_samples if "rows" in other else table.n_samples
        n_b = other["against"].n_samples if "against" in other else table.n_samples
        matrix = (n_a, n_b, bool(dist["oob"]))
    itemsize = D.itemsize

    def check(run: Run) -> None:
        stages, replace = run.stages, run.replace
        need = (
            0
            if stages is not None and stages.done("fit")
            else estimate_smerf_model(
                table.n_samples, job.forest.get("n_estimators", SMERF().n_estimators), itemsize
            )
        )
        if matrix is not None and (stages is None or not stages.done("distance")):
            check_can_create(dist["out"], overwrite=replace)
            need += estimate_matrix(matrix[0], matrix[1], 1, job.tile_size,
                                    matrix[2])["disk_bytes"]  # fmt: skip
        check_disk(location.parent(job.out), need, replaces=job.out)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        n_trees = int(rs.attrs.get("n_trees", 0))
        shape = (rs.attrs.get("stages") or {}).get("distance", {}).get("shape")
        if shape:
            store, name = str(Path(dist["out"]).resolve()), DISTANCE
        else:
            store, name, shape = rs.path, "leaves", rs.array("leaves").shape
        return JobResult(store=store, name=name, shape=(int(shape[0]), int(shape[1])),
                         n_trees=n_trees, task="SMERF distance-learning",
                         seconds=time.perf_counter() - start,
                         outputs={**outputs, "model": rs.path}, mode=mode)  # fmt: skip

    with contextlib.ExitStack() as stack:  # a temporary input store lives for the run
        given = {"table": table, "D": D, "other": other, "stack": stack}
        pipeline = smerf_pipeline(job, table.n_samples, table.n_features, itemsize, matrix,
                                  given)  # fmt: skip
        return execute(job, pipeline, job.spec(fingerprints), result, progress=progress,
                       restart=restart, run_id=run_id, check=check)  # fmt: skip


def smerf_job(
    data: dict[str, Any],
    sections: dict[str, dict[str, Any]],
    input_path: str,
    out_dir: Path,
    connect_kw: dict[str, Any],
    source: str,
) -> SmerfJob:
    """A :class:`SmerfJob` from a pipeline whose sections were type-checked.

    Called by :func:`distforest.jobs.pipeline.load_pipeline` for a file with a
    ``smerf`` section; checks what is particular to SMERF pipelines.  Output
    names are relative to ``out_dir``; ``smerf.distances``, ``distance.rows``
    and ``distance.against`` are relative to the current directory.
    """
    clash = [name for name in NOT_WITH_SMERF if name in data]
    if clash or "smerf" not in data:
        raise ConfigError(
            f"{source}: a SMERF pipeline has the sections input, smerf, distance (optional), "
            "output and cluster; "
            + (f"remove {', '.join(clash)}" if clash else "add a 'smerf' section")
        )
    extra = sorted(set(sections["output"]) - {"dir", "store", "overwrite", "storage_options"})
    if extra:
        raise ConfigError(
            f"{source}: output.{extra[0]} does not apply to a SMERF pipeline (outputs are "
            "output.store, the model, and distance.out); remove it"
        )
    forest = dict(sections["smerf"])
    distances = forest.pop("distances", None)
    tile_size = forest.pop("tile_size", C.SMERF_TILE)
    target = sections["input"].get("target")
    if (distances is None) == (target is None):
        raise ConfigError(
            f"{source}: SMERF needs the observed distances: set smerf.distances to a .npy or "
            "Zarr matrix, or input.target to a class column (D = 1 where the classes differ), "
            + ("not both" if target else "not neither")
        )
    if distances is not None:
        if not isinstance(distances, str):
            raise ConfigError(f"{source}: smerf.distances must be a path, got {distances!r}")
        _check_exists(distances, "smerf.distances", source)
    try:
        SMERF(**forest)._validated()
    except ParameterError as exc:
        raise ConfigError(f"{source}: smerf: {exc}") from exc
    distance = None
    if "distance" in data:
        distance = {"rows": None, "against": None, "oob": False, "out": "distance.zarr",
                    **sections["distance"]}  # fmt: skip
        if distance["oob"] and (distance["rows"] or distance["against"]):
            raise ConfigError(
                f"{source}: distance.oob is for the training rows against themselves; remove "
                "distance.rows and distance.against, or set distance.oob: false"
            )
        if distance["oob"] and forest.get("bootstrap") is False:
            raise ConfigError(
                f"{source}: distance.oob needs out-of-bag rows, but smerf.bootstrap is false; "
                "set smerf.bootstrap: true or distance.oob: false"
            )
        for key in ("rows", "against"):
            if distance[key]:
                _check_exists(distance[key], f"distance.{key}", source)
        distance["out"] = str(out_dir / distance["out"])
    inp, out = sections["input"], sections["output"]
    store = str(out_dir / out.get("store", "model.zarr"))
    if distance and Path(distance["out"]).resolve() == Path(store).resolve():
        raise ConfigError(
            f"{source}: distance.out and output.store are both {store!r}; name two stores"
        )
    return SmerfJob(
        input=input_path,
        out=store,
        distances=distances,
        target=target,
        **input_fields(inp),
        forest=forest,
        tile_size=tile_size,
        distance=distance,
        overwrite=bool(out.get("overwrite", False)),
        connect=connect_kw,
        name=str(data.get("name") or "smerf"),
        source=source,
    )


def _check_exists(path: str, key: str, source: str) -> None:
    if not Path(path).exists():
        raise ConfigError(
            f"{source}: {key} {path!r} does not exist (relative paths are relative to the "
            f"current directory {str(Path.cwd())!r})"
        )


@dataclass(kw_only=True)
class SmerfPredictJob(JobBase):
    """``distforest smerf predict``: the learned distances between the rows of ``input``
    (A) and those of ``against`` (B; None: the model's training rows), tile by tile."""

    job_kind: ClassVar[str] = "smerf-predict"

    model: str
    out: str
    against: str | None = None
    drop: tuple[str, ...] = ()
    tile_size: int = C.SMERF_TILE
    name: str = "smerf predict"

    def describe(self) -> str:
        """What the job computes."""
        return "SMERF's learned distances"

    def summary(self, result: JobResult) -> str:
        """The matrix and its store."""
        columns = "training rows" if self.against is None else f"rows of {self.against}"
        return (f"SMERF distance: {result.shape[0]} rows of {self.input} x {result.shape[1]} "
                f"{columns} in {result.seconds:.1f} s{mode_text(result.mode, self.out)}\n"
                f"  store: {Path(self.out).resolve()} (array 'distance', tiles of "
                f"{self.tile_size})")  # fmt: skip

    def read(self) -> tuple[SMERF, Any, Any]:
        """The model and the rows A (and B, or None), checked: tables read whole, or
        (a glob, a folder of parts, a large file) sources read by partitions."""
        if Path(self.out).resolve() == Path(self.model).resolve():
            raise StoreError(f"--out {self.out!r} is the model itself; choose another path")
        model = SMERF.load(self.model)
        rows = [None if path is None else _new_rows(path, self.drop, self.na_values)
                for path in (self.input, self.against)]  # fmt: skip
        assert rows[0] is not None
        return model, rows[0], rows[1]


@SmerfPredictJob.plans
def plan_predict_job(job: SmerfPredictJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the model and the rows, runs nothing."""
    return predict_pipeline(job, *job.read())


def predict_pipeline(job: SmerfPredictJob, model: SMERF, a: Any, b: Any) -> Pipeline:
    """The one stage of ``smerf predict``: the ``n x m`` distances in tiles."""
    from distforest.parallel.tiling import TilePlan

    n, m = a.n_samples, model.n_samples_ if b is None else b.n_samples
    tiles = TilePlan(n, m, job.tile_size, symmetric=False)
    need = estimate_matrix(n, m, 1, job.tile_size, False)
    chunk = f"{tiles.chunks[0]} x {tiles.chunks[1]}"
    stage = Stage(
        "tiles", f"{n:,} x {m:,} in {tiles.n_tasks:,} tiles of {chunk}",
        reads=tuple(p for p in (job.model, job.input, job.against) if p), writes=(DISTANCE,),
        tasks=tiles.n_tasks, tiles=tiles.n_tasks,
        cost=Cost(need["cpu_seconds"], need["memory_bytes"] + 3 * 4 * tiles.chunks[0]
                  * tiles.chunks[1], {"matrix (uncompressed)": need["disk_bytes"]}),
        run=lambda ctx: _predict(job, model, a, b, ctx),
    )  # fmt: skip
    return Pipeline(title=f"smerf predict: {n:,} x {m:,} rows, 1 features",
                    steps=[("input", str(a.source)), ("matrix", f"{tiles.n_tasks:,} tiles of "
                                                                f"{chunk}"),
                           ("store", str(job.out))],
                    stages=[stage], cells=model._distance_cells(n, m), connect=job.connect,
                    out=str(job.out))  # fmt: skip


def _predict(job: SmerfPredictJob, model: SMERF, a: Any, b: Any, ctx: Context) -> None:
    """The tiles stage: the distances into a new store with the run's record (resuming:
    the tiles a killed run did not write into its store)."""
    matrix = model.predict_distance(a, b, store=job.out, tile_size=job.tile_size,
                                    overwrite=True, complete=False, attrs=ctx.run.record,
                                    resume=ctx.run.mode == "resume")  # fmt: skip
    ctx.rs = RunStore.open(job.out, mode="r+")
    ctx.rs.update_attrs(**ctx.run.record)
    ctx.done.info["shape"] = [int(s) for s in matrix.shape]


@SmerfPredictJob.runs
def run_predict_job(job: SmerfPredictJob, progress: Any = None, *, restart: bool = False,
                    run_id: str | None = None) -> JobResult:  # fmt: skip
    """Write the learned distances under the run protocol; the disk checked first."""
    start = time.perf_counter()
    model, a, b = job.read()
    m = model.n_samples_ if b is None else b.n_samples

    def check(run: Run) -> None:
        need = estimate_matrix(a.n_samples, m, 1, job.tile_size, False)["disk_bytes"]
        check_disk(location.parent(job.out), need, replaces=job.out)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        rows, cols = rs.array(DISTANCE).shape
        return JobResult(store=rs.path, name=DISTANCE, shape=(int(rows), int(cols)),
                         n_trees=int(model.seeds_.shape[0]), task="distance learning",
                         seconds=time.perf_counter() - start, outputs={"store": rs.path},
                         mode=mode)  # fmt: skip

    spec = job.spec_of(("drop", "na_values", "tile_size"),
                       model={"path": job.model, "fit_id": model.fit_id_},
                       input={"A": a.fingerprint(),
                              "B": None if b is None else b.fingerprint()})  # fmt: skip
    return execute(job, predict_pipeline(job, model, a, b), spec, result, progress=progress,
                   restart=restart, run_id=run_id or new_run_id(), check=check)  # fmt: skip


def importance_lines(values: np.ndarray, names: tuple[str, ...], top: int) -> list[str]:
    """The ``top`` feature importances of a SMERF model, largest first (the commands'
    lines)."""
    order = np.argsort(-values, kind="stable")[:top]
    width = max(len(str(names[k])) for k in order)
    return ["  feature importances (share of the objective decrease):",
            *(f"    {names[k]!s:<{width}}  {values[k]:.4f}" for k in order)]  # fmt: skip


def model_importances(model_path: str, plot: str | None, overwrite: bool) -> str:
    """``distforest smerf importances``: the feature importances stored in a SMERF model,
    as lines (and a bar chart saved to ``plot``)."""
    from distforest.apps.plots import plot_importances

    check_new_file(plot, overwrite)
    rs = RunStore.open(model_path, require_complete=True)
    if rs.attrs.get("method") != "smerf" or "feature_importances" not in rs.group:
        raise StoreError(
            f"{rs.path!r} is not a SMERF model (method {rs.attrs.get('method')!r}); make one "
            "with `distforest smerf fit`"
        )
    values = rs.read("feature_importances")
    names = tuple(rs.attrs["input"]["feature_names"])
    lines = importance_lines(values, names, top=len(names))
    if plot:
        written = plot_importances(values, names, plot, title="SMERF feature importances")
        lines.append(f"  plot: {written.resolve()}")
    return "\n".join(lines)


def fit_job(input: str, distances: str, out: str, params: dict[str, Any],
            **fields: Any) -> SmerfJob:  # fmt: skip
    """``distforest smerf fit``'s job: a model only (its parameters checked first)."""
    SMERF(**params)._validated()
    return SmerfJob(input=input, distances=distances, out=out, forest=params, name="smerf fit",
                    **fields)  # fmt: skip


def _new_rows(path: str, drop: tuple[str, ...], na_values: tuple[str, ...]) -> Any:
    """Rows to route, as a source (:func:`~distforest.store.source.open_source` decides how
    to read ``path``: a glob, a folder of parts or a large file by partitions into a
    temporary store living as long as the source), routed by its chunks
    (:meth:`SMERF._route`)."""
    return open_source(path, drop=drop, na_values=na_values, allow_missing=False,
                       dtype=np.float64, min_rows=1)  # fmt: skip
