"""What a job will do before it does it: the :class:`Plan` every ``--dry-run`` prints.

The numbers come from :mod:`distforest.jobs.estimates` (upper bounds where
that is cheap); :func:`show_plan` prints the same fields for every command
and pipeline kind.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from distforest import location
from distforest.jobs import estimates
from distforest.jobs.estimates import (
    SECONDS_PER,
    estimate,
    estimate_smerf_model,
    estimate_xforest,
    size_text,
)
from distforest.parallel.tasks import default_batch_size, plan_batches
from distforest.parallel.tiling import TilePlan


def _free(free: int) -> str:
    """Free space as ``--dry-run`` prints it (object storage: no limit to check)."""
    return ("object storage: no free-space limit" if free >= estimates.UNBOUNDED
            else f"{size_text(free)} free")  # fmt: skip


@dataclass
class Plan:
    """What a job will do, in the fields every ``--dry-run`` prints (:func:`show_plan`).

    Attributes
    ----------
    title : str
        The job and its input's size.
    steps : list of (label, text)
        What the job computes, in order (kind-specific).
    tasks : int
        Dask tasks of the job's main stages (fit batches and tiles).
    tiles : int
        Tiles among them.
    disk : dict
        Bytes each output takes on disk (upper bounds, uncompressed).
    free_bytes : int
        Free space where the outputs go.
    worker_bytes : int
        Memory of one worker at its peak (estimate).
    cpu_seconds : float
        Computing, in core-seconds (rough: :data:`SECONDS_PER`).
    threads : int
        Threads the job would run on (assumed for a cluster not yet reached).
    where : str
        Where it would run (:func:`~distforest.parallel.placement.runs_in_process`).
    """

    title: str
    steps: list[tuple[str, str]]
    tasks: int
    tiles: int
    disk: dict[str, int]
    free_bytes: int
    worker_bytes: int
    cpu_seconds: float
    threads: int
    where: str
    notes: list[str] = field(default_factory=list)

    @property
    def disk_bytes(self) -> int:
        """Bytes of every output together."""
        return int(sum(self.disk.values()))


def placement_of(cells: int, options: dict[str, Any]) -> tuple[str, int]:
    """Where a command on ``cells`` input cells would run, and on how many threads."""
    from distforest.parallel import placement

    limit = placement.in_process_cells()
    if placement.runs_in_process(cells, options=options):
        threads = placement.in_process_threads()
        return (f"in this process on {threads} threads ({cells:,} input cells, at most "
                f"{limit:,})", threads)  # fmt: skip
    threads = os.cpu_count() or 1
    if placement.cluster_named(options=options):
        return f"on the cluster of the cluster options (assuming {threads} threads)", threads
    return (f"on a LocalCluster started for the run ({cells:,} input cells, more than "
            f"{limit:,}; assuming {threads} threads)", threads)  # fmt: skip


def show_plan(plan: Plan) -> str:
    """The lines every ``--dry-run`` prints."""
    lines = [plan.title, *(f"  {label + ':':<14}{text}" for label, text in plan.steps)]
    lines.append(f"  {'tasks:':<14}{plan.tasks:,} ({plan.tiles:,} of them tiles)")
    for label, size in plan.disk.items():
        lines.append(f"    {label:<34} {size_text(size):>10}")
    ok = plan.disk_bytes <= plan.free_bytes
    wall = plan.cpu_seconds / max(1, plan.threads)
    lines += [
        f"  disk:         up to {size_text(plan.disk_bytes)}; {_free(plan.free_bytes)} "
        + ("(ok)" if ok else "(NOT ENOUGH: the run would be refused)"),
        f"  memory:       about {size_text(plan.worker_bytes)} at peak per worker (estimate)",
        f"  time:         about {_seconds(wall)} on {plan.threads} threads "
        f"({_seconds(plan.cpu_seconds)} of computing; rough, start-up not counted)",
        f"  runs:         {plan.where}",
        *plan.notes,
    ]
    return "\n".join(lines)


def _seconds(seconds: float) -> str:
    if seconds < 1:  # three decimals: a small job's estimate is still a number to compare
        return f"{seconds:.3f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"


def proximity_plan(job: Any, n: int, d: int) -> Plan:
    """The plan of a proximity job (``distforest proximity`` or a pipeline) on ``n x d``."""
    where, threads = placement_of(n * d, job.connect)
    plan = estimate(job, n, d, threads=threads)
    apps = [a for a in ("impute", "outliers", "mislabels", "mds") if getattr(job, a, None)]
    return Plan(
        title=f"job {job.name}: {n:,} rows x {d} features",
        steps=[
            ("input", str(job.input) + (f" (target {job.target})" if job.target else "")),
            ("forest", f"{plan['trees']} trees in {plan['fit_tasks']} tasks of up to "
                       f"{plan['trees_per_task']}"),
            ("proximity", f"{job.method}, "
                          + (f"{plan['tiles']:,} tiles of {plan['tile_size']} x "
                             f"{plan['tile_size']}" if plan["dense"] else "no n x n matrix")
                          + (f"; the top {plan['top_k']} neighbours of every row"
                             if plan["top_k"] else "")),
            ("applications", ", ".join(apps) or "none"),
            ("store", str(job.out)),
        ],
        tasks=plan["fit_tasks"] + plan["tiles"],
        tiles=plan["tiles"],
        disk={**plan["store"], **plan["files"]},
        free_bytes=estimates.free_space(location.parent(job.out)),
        worker_bytes=plan["worker_peak_bytes"],
        cpu_seconds=plan["cpu_seconds"],
        threads=threads,
        where=where,
    )  # fmt: skip


def xforest_plan(job: Any, n: int, d: int) -> Plan:
    """The plan of an X-Forest job on ``n x d``."""
    from distforest.forests.xforest import XForest  # the estimator's own defaults

    params = {**XForest().get_params(), **job.forest}
    where, threads = placement_of(n * d, job.connect)
    plan = estimate_xforest(n, d, job.forest)
    trees = plan["trees"]
    tiles = TilePlan(n, n, int(params["tile_size"]), symmetric=True)
    tile = tiles.chunks[0]
    fit_tasks = len(plan_batches(trees, params["batch_size"] or default_batch_size(trees, threads)))
    return Plan(
        title=f"job {job.name}: {n:,} rows x {d} features",
        steps=[
            ("input", str(job.input)),
            ("X-Forest", f"{trees:,} trees, {job.kind} similarity in {tiles.n_tasks:,} tiles "
                         f"of {tile} x {tile}"),
            ("clustering", (job.clustering or {}).get("method", "none")),
            ("store", str(job.out)),
        ],
        tasks=fit_tasks + tiles.n_tasks,
        tiles=tiles.n_tasks,
        disk={"similarity matrix and forest (uncompressed)": plan["disk_bytes"]},
        free_bytes=estimates.free_space(location.parent(job.out)),
        # a tile: two row blocks of path codes, the tile and its mirror; or the driver's arrays
        worker_bytes=max(2 * tile * trees * 16 + 3 * 4 * tile * tile, 3 * 8 * n * d),
        cpu_seconds=plan["cpu_seconds"],
        threads=threads,
        where=where,
    )  # fmt: skip


def simforest_plan(job: Any, n: int, cells: int) -> Plan:
    """The plan of a SimForest job on ``n`` objects (``cells``: its input's cells)."""
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.forests.tiles import SYMMETRIC

    params = {**SimilarityForestClassifier().get_params(), **job.forest}
    where, threads = placement_of(cells, job.connect)
    trees, pairs = int(params["n_estimators"]), int(params["n_pairs"])
    tiles = TilePlan(n, n, int(params["tile_size"]), symmetric=SYMMETRIC[job.method])
    tile = tiles.chunks[0]
    batch = params["batch_size"] or default_batch_size(trees, threads)
    per_tree = n * math.log2(max(n, 2))
    apps = [a for a in ("outliers", "mds") if getattr(job, a, None)]
    return Plan(
        title=f"job {job.name}: {n:,} objects ({cells:,} input cells)",
        steps=[
            ("input", str(job.input)),
            ("SimForest", f"{trees} trees, {pairs} pair(s) per node, in "
                          f"{len(plan_batches(trees, batch))} tasks"),
            ("proximity", f"{job.method}, {tiles.n_tasks:,} tiles of {tile} x {tile}"),
            ("applications", ", ".join(apps) or "none"),
            ("store", str(job.out)),
        ],
        tasks=len(plan_batches(trees, batch)) + tiles.n_tasks,
        tiles=tiles.n_tasks,
        disk={"proximity matrix (uncompressed)": 4 * n * n,
              "model (nodes, leaves, inbag)": n * trees * (5 + 2 * 48)},
        free_bytes=estimates.free_space(location.parent(job.out)),
        worker_bytes=max(8 * cells + batch * n * 2 * 48,
                         2 * tile * trees * 5 + 3 * 4 * tile * tile),
        cpu_seconds=SECONDS_PER["sim_fit"] * trees * pairs * per_tree
        + SECONDS_PER["tile"] * trees * tiles.n_tasks * tile * tile,
        threads=threads,
        where=where,
    )  # fmt: skip


def smerf_plan(
    job: Any, n: int, d: int, itemsize: int, matrix: tuple[int, int, bool] | None
) -> Plan:
    """The plan of a SMERF job on ``n x d`` with ``n x n`` distances of ``itemsize`` bytes;
    ``matrix``: rows, columns and symmetry of the learned distances it writes (or None)."""
    from distforest.forests.smerf import SMERF, input_cells

    params = {**SMERF().get_params(), **job.forest}
    where, threads = placement_of(input_cells(n, d), job.connect)
    trees = int(params["n_estimators"])
    fit_tasks = len(plan_batches(trees, default_batch_size(trees, threads)))
    disk = {"model (distances, leaves, trees)": estimate_smerf_model(n, trees, itemsize)}
    tiles, tile, cpu = 0, 0, SECONDS_PER["smerf_fit"] * trees * n * n * math.log2(max(n, 2))
    steps = [("input", str(job.input)), ("SMERF", f"{trees} trees in {fit_tasks} tasks")]
    if matrix is not None:
        plan = TilePlan(matrix[0], matrix[1], job.tile_size, symmetric=matrix[2])
        tiles, tile = plan.n_tasks, plan.chunks[0]
        disk["learned distances (uncompressed)"] = plan.nbytes(4)
        cpu += SECONDS_PER["tile"] * trees * tiles * tile * plan.chunks[1]
        steps.append(("distance", f"{matrix[0]:,} x {matrix[1]:,} in {tiles:,} tiles of "
                                  f"{tile} x {plan.chunks[1]}"))  # fmt: skip
    steps.append(("store", str(job.out)))
    return Plan(
        title=f"job {job.name}: {n:,} rows x {d} features",
        steps=steps,
        tasks=fit_tasks + tiles,
        tiles=tiles,
        disk=disk,
        free_bytes=estimates.free_space(location.parent(job.out)),
        # every worker holds the training distances; a tile adds its own block
        worker_bytes=itemsize * n * n + 8 * n * d + 3 * 4 * tile * tile,
        cpu_seconds=cpu,
        threads=threads,
        where=where,
    )
