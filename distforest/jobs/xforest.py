"""X-Forest jobs: the run behind ``distforest xforest`` and X-Forest pipelines, and clustering.

The commands themselves are in :mod:`distforest.cli.xforest_cmd` (light, for ``--help``).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from distforest import location
from distforest.errors import ConfigError, InputError, ParameterError, StoreError
from distforest.forests import constraints as C
from distforest.forests.xforest import XForest
from distforest.forests.xforest_similarity import SIMILARITY_NAMES
from distforest.io import read_frame
from distforest.io.source import RowSummary
from distforest.jobs.base import ForestJob, JobBase, input_fields, new_run_id
from distforest.jobs.estimates import (
    SECONDS_PER,
    check_disk,
    check_size,
    estimate_kmeans,
    estimate_xforest,
)
from distforest.jobs.inputs import input_shape
from distforest.jobs.outputs import check_new_file, write_csv
from distforest.jobs.result import JobResult, mode_text, output_lines
from distforest.jobs.runs import Context, Run, execute, fit_into_store, fitted_rows
from distforest.jobs.stages import PRODUCTS_NOTE, Cost, Pipeline, Stage, placement_of
from distforest.store.run_store import RunStore

logger = logging.getLogger("distforest")


@dataclass(kw_only=True)
class XForestJob(ForestJob):
    """One X-Forest run: input, forest, similarity store, optional clustering.

    Its ``target`` is a class column: left out of the features, used only to
    score clusters.
    """

    job_kind: ClassVar[str] = "xforest"

    kind: str = "beta"
    plot: str | None = None
    #: ``{"method": ..., "k": ..., "eps": ..., "out": labels.csv, "plot": png}``.
    clustering: dict[str, Any] | None = None
    name: str = "xforest"

    def spec(self, table: RowSummary) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep = ("target", "drop", "na_values", "forest", "kind", "plot", "clustering")
        return self.spec_of(keep, input={"source": table.source,
                                         "fingerprint": table.fingerprint()})  # fmt: skip

    def describe(self) -> str:
        """What the job computes, for ``distforest validate``."""
        return f"{self.kind} similarity (X-Forest)"


@XForestJob.plans
def plan_xforest_job(job: XForestJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the input's shape, runs nothing."""
    _, n, d = input_shape(job.input, job.target, drop=job.drop, na_values=job.na_values)
    return xforest_pipeline(job, n, d)


def xforest_pipeline(job: XForestJob, n: int, d: int, table: Any = None) -> Pipeline:
    """The stages of an X-Forest job on ``n x d``: fit, tiles, picture, clustering."""
    from distforest.parallel.tasks import default_batch_size, plan_batches
    from distforest.parallel.tiling import TilePlan

    params = {**XForest().get_params(), **job.forest}
    threads = placement_of(n * d, job.connect)[1]
    plan = estimate_xforest(n, d, job.forest)
    trees = plan["trees"]
    tiles = TilePlan(n, n, int(params["tile_size"]), symmetric=True)
    tile = tiles.chunks[0]
    batch = params["batch_size"] or default_batch_size(trees, threads)
    fit_tasks = len(plan_batches(trees, batch))
    name = SIMILARITY_NAMES[job.kind]
    tile_cpu = SECONDS_PER["tile"] * trees * tiles.n_tasks * tile * tile
    matrix_bytes = 4 * n * n
    stages = [
        Stage("fit", f"{trees:,} trees in {fit_tasks} tasks", reads=(str(job.input),),
              writes=(str(job.out),), tasks=fit_tasks,
              cost=Cost(max(0.0, plan["cpu_seconds"] - tile_cpu), 3 * 8 * n * d,
                        {"forest (path codes)": max(0, plan["disk_bytes"] - matrix_bytes)}),
              run=lambda ctx: _fit(job, table, ctx),
              resume=lambda ctx: setattr(ctx, "model", XForest.load(job.out))),
        Stage("tiles", f"{job.kind} similarity in {tiles.n_tasks:,} tiles of {tile} x {tile}",
              reads=("path codes",), writes=(name,), tasks=tiles.n_tasks, tiles=tiles.n_tasks,
              cost=Cost(tile_cpu, 2 * tile * trees * 16 + 3 * 4 * tile * tile,
                        {"similarity matrix (uncompressed)": min(matrix_bytes,
                                                                 plan["disk_bytes"])}),
              run=lambda ctx: setattr(ctx.done, "info",
                                      ctx.model.write_similarity(ctx.rs, job.kind)),
              again=True),
    ]  # fmt: skip
    if job.plot:
        stages.append(Stage("plot", f"a picture of the matrix -> {job.plot}", reads=(name,),
                            writes=(job.plot,), cost=Cost(0.0, 0, {"pictures": 300_000}),
                            run=lambda ctx: _plot(job, ctx)))  # fmt: skip
    if job.clustering:
        method = job.clustering.get("method", "none")
        writes = tuple(str(job.clustering[k]) for k in ("out", "plot") if job.clustering.get(k))
        stages.append(Stage("clustering", f"{method} -> {', '.join(writes) or 'scores'}",
                            reads=(name,), writes=writes, cost=Cost(0.0, 4 * n * n),
                            run=lambda ctx: _cluster(job, table, ctx)))  # fmt: skip
    return Pipeline(title=f"job {job.name}: {n:,} rows x {d} features",
                    steps=[("input", str(job.input)),
                           ("X-Forest", f"{trees:,} trees, {job.kind} similarity in "
                                        f"{tiles.n_tasks:,} tiles of {tile} x {tile}"),
                           ("store", str(job.out))], stages=stages,
                    cells=n * d, connect=job.connect, out=str(job.out))  # fmt: skip


def _fit(job: XForestJob, table: Any, ctx: Context) -> None:
    """The fit stage: fit X-Forest and save it (its spec from the store's first moment)."""
    fit_into_store(XForest(**job.forest), table, ctx, job.out)
    ctx.done.info["trees"] = int(ctx.model.codes_.shape[1])


def _plot(job: XForestJob, ctx: Context) -> None:
    from distforest.apps.plots import plot_matrix

    matrix = ctx.store.dataset()[SIMILARITY_NAMES[job.kind]]
    picture = plot_matrix(matrix, str(job.plot), title=f"{matrix.name}, rows in input order")
    ctx.done.outputs = {"similarity picture": location.resolved(picture)}


def _cluster(job: XForestJob, table: Any, ctx: Context) -> None:
    matrix = ctx.store.dataset()[SIMILARITY_NAMES[job.kind]]
    truth = _truth(table, job.out)
    ctx.done.outputs, scores = run_clustering(matrix, job.clustering or {}, truth=truth)
    if scores is not None:
        ctx.done.info["scores"] = {k: round(v, 4) for k, v in scores.items()}


def _read_input(job: XForestJob) -> RowSummary:
    """The job's table (:func:`~distforest.store.source.open_input`): rows in memory, or (a
    glob, a folder of parts, a large file) its partitions' summaries, the encoded rows
    written into the job's store by the fit."""
    from distforest.store.source import open_input

    return open_input(job.input, **job.table_kw(), allow_missing=False, dtype=np.float64)


def _truth(table: RowSummary, out: str) -> np.ndarray | None:
    """The target column (classes to score clusters against), or None: of the rows the fit
    read (rows read by partitions: from the job's store, without their features)."""
    y = fitted_rows(table, out).read_y()
    return None if y is None else np.asarray(y)


def _cluster_labels_for_plot(labels: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Cluster ids as codes 0..m-1 (noise last) and their names, for :func:`plot_matrix`."""
    ids = sorted(set(labels.tolist()), key=lambda c: (c < 0, c))
    order = {c: k for k, c in enumerate(ids)}
    codes = np.array([order[c] for c in labels.tolist()], dtype=np.int64)
    return codes, [("noise" if c < 0 else f"cluster {c}") for c in ids]


def check_clustering(method: str, params: dict[str, Any], n: int) -> None:
    """Before any work: ``k`` at most the rows, ``n_init`` within the computing limit."""
    k = params.get("k")
    if n and k is not None and method != "dbscan" and k > n:
        raise ParameterError(
            f"k={k:,} clusters is more than the {n:,} rows to cluster; give k at most {n:,}"
        )
    if n and method == "kernel-kmeans":
        from distforest.apps import clustering  # scipy's and scikit-learn's solvers: when used

        n_init = int(params.get("n_init", 10))
        plan = estimate_kmeans(n, int(k or 1), n_init, clustering.KMEANS_MAX_ITER)
        check_size(f"kernel k-means of {n:,} rows", plan, f"n_init ({n_init:,} restarts)")


def run_clustering(
    similarity: Any,
    options: dict[str, Any],
    *,
    truth: np.ndarray | None = None,
    title: str = "",
) -> tuple[dict[str, str], dict[str, float] | None]:
    """Cluster, write the labels CSV (and an ordered picture); score against ``truth``.

    Returns
    -------
    written : dict of label to path
    scores : dict or None
    """
    params = {
        k: options[k]
        for k in ("k", "eps", "min_samples", "n_init", "random_state")
        if options.get(k) is not None
    }
    from distforest.apps import clustering

    check_clustering(options["method"], params, int(getattr(similarity, "shape", (0,))[0]))
    labels = clustering.cluster(similarity, options["method"], **params)
    frame = pd.DataFrame({"row": np.arange(labels.size), "cluster": labels})
    result = None
    if truth is not None:
        frame["truth"] = truth
        result = clustering.scores(truth, labels)
    written = {"cluster labels": write_csv(frame, options["out"])}
    import xarray as xr  # here: only a run that clusters needs it

    if options.get("plot") and isinstance(similarity, xr.DataArray):
        from distforest.apps.plots import plot_matrix  # matplotlib: only for a picture

        codes, names = _cluster_labels_for_plot(labels)
        picture = plot_matrix(
            similarity,
            options["plot"],
            labels=codes,
            class_names=names,
            title=title or f"{similarity.name}, rows by cluster",
        )
        written["clustered picture"] = location.resolved(picture)
    return written, result


@XForestJob.runs
def run_xforest_job(
    job: XForestJob, progress: Any = None, *, restart: bool = False, run_id: str | None = None
) -> JobResult:
    """Fit X-Forest, write the similarity tiles, optionally plot and cluster; resumable.

    The stages of :func:`xforest_pipeline` under the run protocol
    (:func:`~distforest.jobs.runs.execute`): under the output's lock, a killed
    run resumes (the saved forest is loaded, finished tiles and stages are
    kept, the store ends bit-identical to an uninterrupted run), a complete
    one is not repeated, a changed spec is refused unless ``restart`` or
    ``overwrite``.  Input and output problems are found before any cluster
    is started.
    """
    start = time.perf_counter()
    table = _read_input(job)
    run_id = run_id or new_run_id()
    pipeline = xforest_pipeline(job, table.n_samples, table.n_features, table)

    def check(run: Run) -> None:
        extra = job.clustering or {}
        for path in (job.plot, extra.get("out"), extra.get("plot")):
            check_new_file(path, run.replace)
        need = estimate_xforest(table.n_samples, table.n_features, job.forest)
        check_size(f"X-Forest on {table.source} ({table.n_samples:,} rows)", need,
                   f"the number of trees ({need['trees']:,}) and of directions per tree "
                   f"(--x {need['directions']:,})")  # fmt: skip
        check_disk(location.parent(job.out), need["disk_bytes"], replaces=job.out)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        return _xforest_result(job, rs, outputs, start, mode)

    return execute(job, pipeline, job.spec(table), result, progress=progress, restart=restart,
                   run_id=run_id, check=check)  # fmt: skip


def _xforest_result(job: XForestJob, rs: RunStore, outputs: dict[str, str], start: float,
                    mode: str) -> JobResult:  # fmt: skip
    name = SIMILARITY_NAMES[job.kind]
    scores = (rs.attrs.get("stages") or {}).get("clustering", {}).get("scores")
    if scores:
        outputs = {**outputs, "scores": json.dumps(scores)}
    return JobResult(
        store=rs.path,
        name=name,
        shape=(rs.array(name).shape[0], rs.array(name).shape[1]) if name in rs.group else (0, 0),
        n_trees=int(rs.attrs.get("n_trees", 0)),
        task="random-projection",
        seconds=time.perf_counter() - start,
        outputs={"store": rs.path, **outputs},
        mode=mode,
    )


def read_truth(spec: str, n: int) -> np.ndarray:
    """The true classes ``FILE:COLUMN`` (``distforest cluster --truth``), checked to have n rows."""
    path, sep, column = spec.rpartition(":")
    if not sep or not path:
        raise InputError(f"--truth must be FILE:COLUMN, e.g. data.csv:Class, got {spec!r}")
    frame = read_frame(path)
    if column not in frame.columns:
        raise InputError(f"{path}: no column {column!r} (columns: {', '.join(frame.columns)})")
    if len(frame) != n:
        raise InputError(f"{path} has {len(frame)} rows but the similarity has {n}")
    return frame[column].to_numpy()


#: Allowed values of X-Forest pipeline keys (merged into the pipeline's CHOICES).
XFOREST_CHOICES = {"clustering.method": C.CLUSTER_METHODS}
#: Sections of a proximity pipeline that an X-Forest pipeline must not have.
NOT_WITH_XFOREST = ("forest", "proximity", "impute", "outliers", "mislabels", "mds")


def xforest_job(
    data: dict[str, Any],
    sections: dict[str, dict[str, Any]],
    input_path: str,
    out_dir: Path,
    connect: dict[str, Any],
    source: str,
) -> XForestJob:
    """An :class:`XForestJob` from a pipeline whose sections were type-checked.

    Called by :func:`distforest.jobs.pipeline.load_pipeline` for a file with an
    ``xforest`` section; checks what is particular to X-Forest pipelines.
    Output names are relative to ``out_dir``.
    """
    clash = [name for name in NOT_WITH_XFOREST if name in data]
    if clash or "xforest" not in data:
        raise ConfigError(
            f"{source}: an X-Forest pipeline has the sections input, xforest, clustering "
            f"(optional), output and cluster; "
            + (f"remove {', '.join(clash)}" if clash else "add an 'xforest' section")
        )
    forest = dict(sections["xforest"])
    kind = forest.pop("kind", "beta")
    try:
        XForest(**forest)._validated()
    except ParameterError as exc:
        raise ConfigError(f"{source}: xforest: {exc}") from exc
    cluster = None
    if "clustering" in data:
        cluster = dict(sections["clustering"])
        method = cluster["method"]
        if method != "dbscan" and "k" not in cluster:
            raise ConfigError(f"{source}: clustering.k is required for method {method!r}")
        if method == "dbscan" and "eps" not in cluster:
            raise ConfigError(f"{source}: clustering.eps is required for method 'dbscan'")
        for key in ("out", "plot"):
            if cluster.get(key):
                cluster[key] = str(out_dir / cluster[key])
    inp, out = sections["input"], sections["output"]
    plot = out.get("plot")
    return XForestJob(
        input=input_path,
        out=str(out_dir / out.get("store", "similarity.zarr")),
        **input_fields(inp),
        target=inp.get("target"),
        forest=forest,
        kind=kind,
        plot=str(out_dir / plot) if plot else None,
        overwrite=bool(out.get("overwrite", False)),
        clustering=cluster,
        connect=connect,
        name=str(data.get("name") or "xforest"),
        source=source,
    )


def stored_for_clustering(store: str, kind: str, matrix_free: bool) -> tuple[RunStore, str, int]:
    """``distforest cluster``'s store, the name of its similarity and its rows; a store
    without the stored matrix (unless ``matrix_free``) is refused."""
    rs = RunStore.open(store, require_complete=not matrix_free)
    name = SIMILARITY_NAMES[kind]
    if not matrix_free and name not in rs.group:
        raise StoreError(
            f"store {rs.path!r} has no {name}; write it with `distforest xforest "
            f"--kind {kind}` or pass --matrix-free"
        )
    return rs, name, int(rs.attrs.get("input", {}).get("n_samples", 0))


@dataclass(kw_only=True)
class ClusterJob(JobBase):
    """``distforest cluster``: the rows of an X-Forest store (``input``) clustered.

    Its store (``out``, :func:`~distforest.jobs.outputs.record_path` of the
    labels CSV) holds only its spec and stages; the labels (and a picture)
    are files of ``clustering``.
    """

    job_kind: ClassVar[str] = "cluster"

    out: str
    kind: str = "beta"
    #: Use S @ V from the stored trees instead of the stored matrix.
    matrix_free: bool = False
    #: ``FILE:COLUMN`` of true classes to score against.
    truth: str | None = None
    #: ``{"method", "k", "eps", "min_samples", "n_init", "random_state", "out", "plot"}``.
    clustering: dict[str, Any] = field(default_factory=dict)
    name: str = "cluster"

    def describe(self) -> str:
        """What the job computes."""
        return f"{self.clustering.get('method')} clusters of an X-Forest store"

    def summary(self, result: JobResult) -> str:
        """The method, the scores against the truth and the files written."""
        how = mode_text(result.mode, result.store)
        scores = json.loads(result.outputs.pop("scores", "null"))
        return "\n".join([
            f"{self.clustering['method']} on {result.name} of {result.shape[0]} rows in "
            f"{result.seconds:.1f} s{how}",
            *(["  " + "  ".join(f"{k} {v:.4f}" for k, v in scores.items())] if scores else []),
            *output_lines(result.outputs, 19),
        ])  # fmt: skip


@ClusterJob.plans
def plan_cluster_job(job: ClusterJob) -> Pipeline:
    """What the job would do (``--dry-run``): opens the store, runs nothing."""
    rs, name, n = stored_for_clustering(job.input, job.kind, job.matrix_free)
    return cluster_pipeline(job, rs, name, n)


def cluster_pipeline(job: ClusterJob, rs: RunStore, name: str, n: int,
                     truth: np.ndarray | None = None) -> Pipeline:  # fmt: skip
    """The one stage of ``distforest cluster``: no tiles nor fits; with ``matrix_free``
    one product task per batch of trees and iteration (noted, not counted)."""
    options = job.clustering
    method = options["method"]
    n_init = int(options.get("n_init") or 10) if method == "kernel-kmeans" else 1
    need = estimate_kmeans(n, int(options.get("k") or 1), n_init, 100)
    cells = XForest.load(rs.path)._fitted_cells() if job.matrix_free else 0
    source = "the stored trees (matrix-free)" if job.matrix_free else "the stored matrix"
    writes = tuple(str(options[k]) for k in ("out", "plot") if options.get(k))
    files = {"labels": 16 * n, **({"pictures": 300_000} if options.get("plot") else {})}
    stage = Stage("clustering", f"{method} -> {', '.join(writes)}", reads=(job.input,),
                  writes=writes, cost=Cost(need["cpu_seconds"], need["memory_bytes"], files),
                  run=lambda ctx: _cluster_stored(job, rs, name, truth, ctx))  # fmt: skip
    return Pipeline(title=f"cluster: {n:,} rows",
                    steps=[("input", f"{job.input}: {source}"), ("method", method),
                           ("writes", ", ".join(writes)),
                           ("store", f"{job.out} (this run's stages)")],
                    stages=[stage], cells=cells, connect=job.connect, out=str(job.out),
                    notes=[PRODUCTS_NOTE] if job.matrix_free else [])  # fmt: skip


@ClusterJob.runs
def run_cluster_job(job: ClusterJob, progress: Any = None, *, restart: bool = False,
                    run_id: str | None = None) -> JobResult:  # fmt: skip
    """Cluster the store's rows under the run protocol; the store, the truth and the
    options checked before any work."""
    start = time.perf_counter()
    rs, name, n = stored_for_clustering(job.input, job.kind, job.matrix_free)
    truth = None if job.truth is None else read_truth(job.truth, n)
    if job.matrix_free and job.clustering.get("plot"):
        raise ParameterError("--plot needs the stored matrix; drop --matrix-free")
    check_clustering(job.clustering["method"], job.clustering, n)
    pipeline = cluster_pipeline(job, rs, name, n, truth)
    spec = job.spec_of(("kind", "matrix_free", "truth", "clustering"),
                       input={"store": job.input, "fit_id": rs.attrs.get("fit_id"),
                              "spec_hash": rs.attrs.get("spec_hash")})  # fmt: skip

    def check(run: Run) -> None:
        if run.stages is None or not run.stages.done("clustering"):
            for key in ("out", "plot"):
                check_new_file(job.clustering.get(key), run.replace)

    def create(run: Run) -> RunStore:
        return RunStore.create(job.out, attrs=run.record, overwrite=True)

    def result(store: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        scores = (store.attrs.get("stages") or {}).get("clustering", {}).get("scores")
        return JobResult(store=store.path, name=name, shape=(n, n), n_trees=0,
                         task="clustering", seconds=time.perf_counter() - start,
                         outputs={**outputs, "scores": json.dumps(scores)}, mode=mode)  # fmt: skip

    return execute(job, pipeline, spec, result, progress=progress, restart=restart,
                   run_id=run_id or new_run_id(), check=check, create=create)  # fmt: skip


def _cluster_stored(job: ClusterJob, rs: RunStore, name: str, truth: np.ndarray | None,
                    ctx: Context) -> None:  # fmt: skip
    """The clustering stage: from the stored matrix, or matrix-free from the stored trees
    (products where the run protocol placed the job)."""
    params = {
        k: job.clustering.get(k)
        for k in ("method", "k", "eps", "min_samples", "n_init", "random_state", "out", "plot")
    }
    if not job.matrix_free:
        ctx.done.outputs, scores = run_clustering(rs.dataset()[name], params, truth=truth)
    else:
        forest = XForest.load(rs.path)
        with forest.product_session(job.kind) as product:
            ctx.done.outputs, scores = run_clustering(product, params, truth=truth)
    if scores is not None:
        ctx.done.info["scores"] = {k: float(v) for k, v in scores.items()}
