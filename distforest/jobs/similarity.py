"""Similarity jobs: the run behind ``distforest similarity`` and ``kind: similarity`` pipelines.

One stage writes the similarity or distance matrix of INPUT's rows (against
``reference``'s rows, or against themselves: symmetric) tile by tile
(:func:`~distforest.forests.pairwise.pairwise`).  A glob, a folder of table
parts or a file over 32 MB is read by partitions on the workers, scaled and
checked by chunks into a temporary store
(:func:`~distforest.forests.scaled_rows.scaled_in_store`): the driver never
holds the rows.
The run follows the run protocol (:func:`~distforest.jobs.runs.execute`):
locked, resumable (finished tiles are kept), not repeated once complete,
reported.  A pipeline::

    kind: similarity
    input: {path: data.csv, drop: [Id, Class]}
    similarity: {metric: cosine, normalize: range, tile_size: 2048, reference: other.csv}
    output: {dir: results, store: similarity.zarr}
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from distforest import location
from distforest.errors import ConfigError
from distforest.forests.constraints import NEIGHBOR_TILE, NORMALIZATIONS, PAIRWISE_TILE
from distforest.jobs.base import JobBase, input_fields, new_run_id
from distforest.jobs.estimates import check_disk, check_size, estimate_matrix
from distforest.jobs.result import JobResult
from distforest.jobs.runs import Context, Run, execute
from distforest.jobs.stages import ON_A_CLUSTER, Cost, Pipeline, Stage
from distforest.store.run_store import RunStore

T = TypeVar("T")

#: The keys of a pipeline's ``similarity`` section.
SIMILARITY_KEYS = ("metric", "normalize", "feature_range", "tile_size", "reference")


@dataclass(kw_only=True)
class SimilarityJob(JobBase):
    """One similarity matrix: INPUT's rows against ``reference``'s (or their own)."""

    job_kind: ClassVar[str] = "similarity"

    out: str
    reference: str | None = None
    metric: str = "euclidean"
    normalize: str = "none"
    feature_range: tuple[float, float] = (0.0, 1.0)
    tile_size: int = PAIRWISE_TILE
    drop: tuple[str, ...] = ()
    name: str = "similarity"

    def spec(self, fingerprints: dict[str, str]) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep = ("drop", "na_values", "metric", "normalize", "feature_range", "tile_size")
        return self.spec_of(keep, input={"source": self.input, "reference": self.reference,
                                         "fingerprint": fingerprints})  # fmt: skip

    def describe(self) -> str:
        """What the job computes, for ``distforest validate``."""
        return f"{self.metric} similarity matrix"

    def summary(self, result: JobResult) -> str:
        """What the run wrote: the matrix, its measure and its store."""
        return (
            f"{result.name} ({result.task}) of {result.shape[0]} x {result.shape[1]} rows in "
            f"{result.seconds:.1f} s{_how(result.mode)}\n  store:  {self.out}"
            f" (array {result.name!r}, dims sample_i, sample_j, tiles {self.tile_size} x "
            f"{self.tile_size})"
        )

    def normalize_choice(self) -> str | None:
        from distforest.jobs.knn_model import normalize_choice

        return normalize_choice(self.normalize)


def _how(mode: str) -> str:
    """What the summary's first line adds for a resumed or an already complete run."""
    return {"already complete": ", already complete: nothing to do (use --overwrite to "
            "compute it again)", "resumed": ", resumed"}.get(mode, "")  # fmt: skip


@SimilarityJob.plans
def plan_similarity_job(job: SimilarityJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the inputs' sizes, runs nothing."""
    return _planned(job, similarity_pipeline)


def _planned(job: Any, pipeline: Callable[..., Pipeline]) -> Pipeline:
    """``pipeline(job, source, n, m, d, cells)`` from the inputs' sizes (rows read by
    partitions: from their metadata, nothing loaded)."""

    def whole(_: str) -> Pipeline:
        return pipeline(job, *_sizes(*_tables(job)))

    return _read(job, whole, lambda _: pipeline(job, *_input_sizes(job), ON_A_CLUSTER))


def _read(job: Any, whole: Callable[[str], T], parts: Callable[[str], T]) -> T:
    """``whole(INPUT)``: the tables read here; or ``parts(INPUT)``: INPUT or the reference
    read by partitions, both then read by partitions on a cluster.  The two readings give
    the same bytes up to one store chunk of rows
    (:data:`~distforest.store.schema.INPUT_ROWS`); above, ``zscore``'s scale differs in
    the last bit: the chunks' moments are merged by Chan et al.'s rule
    (:func:`~distforest.forests.scaled_rows.merge_scalers`), not summed in row order as
    scikit-learn's one fit sums them (measured: 240 rows in 5 chunks of 50, scale off by
    4.4e-16; one chunk, equal)."""
    from distforest.store.source import read_as

    return read_as(job.input, whole=whole, parts=parts, also=(job.reference,))


def similarity_pipeline(job: SimilarityJob, source: str, n: int, m: int, d: int, cells: int,
                        run: Any = None) -> Pipeline:  # fmt: skip
    """The one stage of a similarity job: the ``n x m`` matrix in tiles (``run(ctx)``: its
    work, for the run)."""
    from distforest.parallel.tiling import TilePlan

    tiles = TilePlan(n, m, job.tile_size, symmetric=job.reference is None)
    need = estimate_matrix(n, m, d, job.tile_size, job.reference is None)
    tile = Stage(
        "tiles", f"{job.metric}, {tiles.n_tasks:,} tiles of {tiles.chunks[0]} x "
                 f"{tiles.chunks[1]}",
        reads=tuple(p for p in (job.input, job.reference) if p), writes=(str(job.out),),
        tasks=tiles.n_tasks, tiles=tiles.n_tasks,
        cost=Cost(need["cpu_seconds"], need["memory_bytes"] + 3 * 4 * tiles.chunks[0]
                  * tiles.chunks[1], {"matrix (uncompressed)": need["disk_bytes"]}),
        run=run, again=True,
    )  # fmt: skip
    return Pipeline(
        title=f"similarity: {n:,} x {m:,} rows, {d} features",
        steps=[("input", source),
               ("matrix", f"{tiles.n_tasks:,} tiles of {tiles.chunks[0]} x {tiles.chunks[1]}"),
               ("store", str(job.out))],
        stages=[tile], cells=cells, connect=job.connect, out=str(job.out),
    )  # fmt: skip


def _tables(job: SimilarityJob) -> tuple[Any, Any]:
    """The tables loaded whole, checked for the measure."""
    from distforest.io import load_table
    from distforest.jobs.inputs import check_request

    X = load_table(job.input, drop=job.drop, na_values=job.na_values)
    Y = (None if job.reference is None
         else load_table(job.reference, drop=job.drop, na_values=job.na_values))  # fmt: skip
    check_request(X, Y, job.metric)
    return X, Y


def _cells(X: Any, Y: Any) -> int:
    from distforest.parallel.placement import cells_of

    return cells_of(X, Y)


#: ``(source, n, m, d, cells)`` of a matrix's inputs.
Sizes = tuple[str, int, int, int, int]


def _sizes(X: Any, Y: Any) -> Sizes:
    """The sizes of tables read whole: ``m`` the reference's rows (``n`` without one)."""
    m = X.n_samples if Y is None else Y.n_samples
    return str(X.source), X.n_samples, m, X.n_features, _cells(X, Y)


def _prints(X: Any, Y: Any) -> dict[str, str]:
    """The fingerprints of tables read whole (the job's spec)."""
    return {"X": X.fingerprint(), **({"Y": Y.fingerprint()} if Y is not None else {})}


@SimilarityJob.runs
def run_similarity_job(job: SimilarityJob, progress: Any = None, *, restart: bool = False,
                       run_id: str | None = None) -> JobResult:  # fmt: skip
    """Write the matrix under the run protocol; every input checked before any work."""
    start = time.perf_counter()
    run_id = run_id or new_run_id()

    def by_parts(_: str) -> tuple[Sizes, dict[str, str], Any]:  # pass 1: the fingerprints
        source, n, m, d, parts = _partitioned_sizes(job)
        return (source, n, m, d, ON_A_CLUSTER), parts, lambda ctx: _write_scaled(job, ctx)

    def whole(_: str) -> tuple[Sizes, dict[str, str], Any]:
        X, Y = _tables(job)
        return _sizes(X, Y), _prints(X, Y), lambda ctx: _write(job, X, Y, ctx)

    sizes, parts, work = _read(job, whole, by_parts)
    source, n, m, d, _ = sizes
    pipeline = similarity_pipeline(job, *sizes, work)

    def check(run: Run) -> None:
        need = estimate_matrix(n, m, d, job.tile_size, symmetric=job.reference is None)
        check_size(f"the {n:,} x {m:,} matrix of {source}", need, "the input sizes")
        check_disk(location.parent(job.out), need["disk_bytes"], replaces=job.out)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        params = rs.attrs["params"]
        name = str(params["kind"])
        rows, cols = rs.array(name).shape
        return JobResult(store=rs.path, name=name, shape=(int(rows), int(cols)), n_trees=0,
                         task=str(params["metric"]), seconds=time.perf_counter() - start,
                         outputs={"store": rs.path, **outputs}, mode=mode)  # fmt: skip

    return execute(job, pipeline, job.spec(parts), result, progress=progress, restart=restart,
                   run_id=run_id, check=check)  # fmt: skip


def _write(job: SimilarityJob, X: Any, Y: Any, ctx: Context, measure: Any = None) -> None:
    """The tiles stage: the matrix into ``job.out`` (a resumed run keeps finished tiles)."""
    from distforest.forests.pairwise import pairwise

    M = pairwise(X, Y, metric=measure or job.metric, normalize=job.normalize_choice(),
                 feature_range=job.feature_range, store=job.out, tile_size=job.tile_size,
                 overwrite=ctx.run.mode == "new", store_attrs=ctx.run.record,
                 complete=False)  # fmt: skip
    ctx.rs = RunStore.open(job.out, mode="r+")
    ctx.done.info["shape"] = [int(s) for s in M.shape]


def _write_scaled(job: SimilarityJob, ctx: Context) -> None:
    """The tiles stage of rows read by partitions: scaled and checked into a temporary
    store on the run's cluster, the tiles read from there."""
    with ctx.where.client.as_current(), _scaled_rows(job) as (measure, X, Y):
        _write(job, X, Y, ctx, measure)


@contextlib.contextmanager
def _scaled_rows(job: Any) -> Iterator[tuple[Any, Any, Any]]:
    """The rows of INPUT (and the reference), both read by partitions into temporary
    stores, scaled and checked by chunks into another
    (:func:`~distforest.forests.scaled_rows.scaled_in_store`): ``(measure, X, Y)``, ``Y``
    None without a reference; everything removed when the block ends."""
    import numpy as np

    from distforest.forests.scaled_rows import scaled_in_store
    from distforest.jobs.inputs import check_request
    from distforest.store.source import opened

    read = dict(drop=job.drop, na_values=job.na_values, partitions=True, dtype=np.float64)
    with contextlib.ExitStack() as stack:
        sources = [stack.enter_context(opened(path, **read))
                   for path in (job.input, job.reference) if path is not None]  # fmt: skip
        if len(sources) == 2:
            check_request(sources[0], sources[1], job.metric)
        measure, rows = stack.enter_context(scaled_in_store(
            sources, metric=job.metric, normalize=job.normalize_choice(),
            feature_range=job.feature_range))  # fmt: skip
        yield measure, rows[0], (rows[1] if len(rows) == 2 else None)


def _input_sizes(job: Any) -> tuple[str, int, int, int]:
    """For a dry run, without loading: ``(source, n, m, d)`` (``m`` the reference's rows,
    ``n`` without one)."""
    from distforest.jobs.inputs import input_shape

    source, n, d = input_shape(job.input, drop=job.drop, na_values=job.na_values)
    m = n if job.reference is None else input_shape(job.reference, drop=job.drop,
                                                    na_values=job.na_values)[1]  # fmt: skip
    return source, n, m, d


def similarity_job(data: dict[str, Any], sections: dict[str, dict[str, Any]],
                   input_path: str, out_dir: Path, connect: dict[str, Any],
                   source: str) -> SimilarityJob:  # fmt: skip
    """A :class:`SimilarityJob` from a pipeline whose sections were type-checked."""
    inp, out, section = sections["input"], sections["output"], dict(sections["similarity"])
    if inp.get("target") is not None:
        raise ConfigError(
            f"{source}: a similarity pipeline has no target; list the column in input.drop "
            "to leave it out of the features"
        )
    normalize = section.get("normalize", "none")
    if normalize not in ("none", *NORMALIZATIONS):
        raise ConfigError(f"{source}: similarity.normalize must be one of none, "
                          f"{', '.join(NORMALIZATIONS)}; got {normalize!r}")  # fmt: skip
    low_high = section.get("feature_range", [0.0, 1.0])
    if len(low_high) != 2 or not all(isinstance(v, int | float) for v in low_high):
        raise ConfigError(f"{source}: similarity.feature_range must be [LOW, HIGH], got "
                          f"{low_high!r}")  # fmt: skip
    reference = section.get("reference")
    return SimilarityJob(
        input=input_path,
        **input_fields(inp),
        out=str(out_dir / out.get("store", "similarity.zarr")),
        reference=str(reference) if reference else None,
        metric=str(section.get("metric", "euclidean")),
        normalize=normalize,
        feature_range=(float(low_high[0]), float(low_high[1])),
        tile_size=int(section.get("tile_size", PAIRWISE_TILE)),
        overwrite=bool(out.get("overwrite", False)),
        connect=connect,
        name=str(data.get("name") or "similarity"),
        source=source,
    )


@dataclass(kw_only=True)
class NeighborsJob(SimilarityJob):
    """The ``k`` nearest rows of every row of INPUT (among ``reference``'s, or its own)."""

    job_kind: ClassVar[str] = "neighbors"

    k: int = 10
    algorithm: str = "auto"
    batch_size: int | None = None
    tile_size: int = NEIGHBOR_TILE
    name: str = "neighbors"

    def spec(self, fingerprints: dict[str, str]) -> dict[str, Any]:
        """What determines the results (the search's batches and tiles do not)."""
        spec = super().spec(fingerprints)
        spec.pop("tile_size", None)
        spec.update(k=self.k, algorithm=self.algorithm)
        return spec

    def describe(self) -> str:
        """What the job computes, for ``distforest validate``."""
        return f"top-{self.k} {self.metric} neighbours"

    def summary(self, result: JobResult) -> str:
        """What the run wrote: the neighbours, their measure and the store."""
        params = RunStore.open(self.out).attrs["params"]
        return (
            f"{self.k} nearest neighbours of {result.shape[0]} rows by {params['metric']} "
            f"({params['algorithm']}) in {result.seconds:.1f} s{_how(result.mode)}\n"
            f"  store:  {self.out} (neighbor_index, neighbor_distance; distance = "
            f"{params['distance']})"
        )


@NeighborsJob.plans
def plan_neighbors_job(job: NeighborsJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the inputs' sizes, runs nothing."""
    return _planned(job, neighbors_pipeline)


def neighbors_pipeline(job: NeighborsJob, source: str, n: int, m: int, d: int, cells: int,
                       run: Any = None) -> Pipeline:  # fmt: skip
    """The one stage of a neighbours job: ``n`` queries among ``m`` rows, by batches."""
    from distforest.forests.measures import parse_metric
    from distforest.forests.neighbors import query_batch_size, resolve_algorithm
    from distforest.jobs.estimates import SECONDS_PER
    from distforest.jobs.stages import placement_of
    from distforest.parallel.tasks import plan_batches

    threads = placement_of(cells, job.connect)[1]
    algorithm = resolve_algorithm(job.algorithm, parse_metric(job.metric), d)
    batch = job.batch_size or query_batch_size(n, m, algorithm, False, threads)
    batches = len(plan_batches(n, batch))
    search = Stage(
        "neighbors", f"k={job.k}, {job.metric}, {algorithm} in {batches} tasks",
        reads=tuple(p for p in (job.input, job.reference) if p), writes=(str(job.out),),
        tasks=batches,
        cost=Cost(SECONDS_PER["measure"] * n * m * d, 3 * 8 * (n + m) * d,
                  {"neighbours (index, distance)": n * job.k * 16}),
        run=run,
    )  # fmt: skip
    return Pipeline(
        title=f"neighbors: {n:,} queries among {m:,} rows, {d} features",
        steps=[("input", source), ("store", str(job.out))],
        stages=[search], cells=cells, connect=job.connect, out=str(job.out),
    )  # fmt: skip


@NeighborsJob.runs
def run_neighbors_job(job: NeighborsJob, progress: Any = None, *, restart: bool = False,
                      run_id: str | None = None) -> JobResult:  # fmt: skip
    """Search the neighbours under the run protocol; every input checked before any work."""
    start = time.perf_counter()
    run_id = run_id or new_run_id()

    def by_parts(_: str) -> tuple[Sizes, dict[str, str], Any]:  # pass 1: the fingerprints
        source, n, m, d, parts = _partitioned_sizes(job)
        return (source, n, m, d, ON_A_CLUSTER), parts, lambda ctx: _search_scaled(job, ctx)

    def whole(_: str) -> tuple[Sizes, dict[str, str], Any]:
        X, Y = _tables(job)
        return _sizes(X, Y), _prints(X, Y), lambda ctx: _search(job, X, Y, ctx)

    sizes, parts, work = _read(job, whole, by_parts)
    n = sizes[1]
    pipeline = neighbors_pipeline(job, *sizes, work)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        params = rs.attrs["params"]
        return JobResult(store=rs.path, name="neighbor_index", shape=(n, job.k), n_trees=0,
                         task=str(params["metric"]), seconds=time.perf_counter() - start,
                         outputs={"store": rs.path, **outputs}, mode=mode)  # fmt: skip

    return execute(job, pipeline, job.spec(parts), result, progress=progress, restart=restart,
                   run_id=run_id)  # fmt: skip


def _partitioned_sizes(job: SimilarityJob) -> tuple[str, int, int, int, dict[str, str]]:
    """Sizes and pass-1 fingerprints of a job's rows read by partitions (a bad value is
    named with its part and row when the rows are read for the stage)."""
    from distforest.store.source import open_input

    source, n, m, d = _input_sizes(job)
    parts = {key: open_input(path, drop=job.drop, na_values=job.na_values,
                             partitions=True).fingerprint()
             for key, path in (("X", job.input), ("Y", job.reference)) if path}  # fmt: skip
    return source, n, m, d, parts


def _search(job: NeighborsJob, X: Any, Y: Any, ctx: Context, measure: Any = None) -> None:
    """The search stage: the neighbours into ``job.out`` (each task's rows as they come)."""
    from distforest.forests.neighbors import top_k_neighbors

    top_k_neighbors(X, Y, k=job.k, metric=measure or job.metric,
                    normalize=job.normalize_choice(), feature_range=job.feature_range,
                    algorithm=job.algorithm, store=job.out, overwrite=True,
                    batch_size=job.batch_size, tile_size=job.tile_size,
                    attrs=ctx.run.record, complete=False)  # fmt: skip
    ctx.rs = RunStore.open(job.out, mode="r+")


def _search_scaled(job: NeighborsJob, ctx: Context) -> None:
    """The search of rows read by partitions, on the run's cluster."""
    with ctx.where.client.as_current(), _scaled_rows(job) as (measure, X, Y):
        _search(job, X, Y, ctx, measure)
