"""The :class:`~distforest.jobs.plan.Plan` of the ``--dry-run`` of the commands that are not
yet a job kind (``simforest fit``, ``knn predict``).

Each plan counts the tasks the real run submits in the stages the pipelines'
plans count too: fit batches and neighbour searches.
"""

from __future__ import annotations

import math
from typing import Any

from distforest import location
from distforest.jobs import estimates
from distforest.jobs.estimates import SECONDS_PER
from distforest.jobs.plan import Plan, placement_of
from distforest.jobs.stages import PRODUCTS_NOTE  # noqa: F401 (the impute plan imports it here)


def model_fit_plan(what: str, source: str, n: int, d: int, cells: int, trees: int,
                   batch_size: int | None, cpu_seconds: float, disk: dict[str, int],
                   connect: dict[str, Any], out: str) -> Plan:  # fmt: skip
    """The plan of a command that fits a model of ``trees`` trees by batches and saves it
    (``simforest fit``): its fit batches, the model on disk."""
    from distforest.parallel.tasks import default_batch_size, plan_batches

    where, threads = placement_of(cells, connect)
    fit_tasks = len(plan_batches(trees, batch_size or default_batch_size(trees, threads)))
    return Plan(
        title=f"{what}: {n:,} rows x {d} features",
        steps=[("input", source), ("model", f"{fit_tasks} fit tasks -> {out}")],
        tasks=fit_tasks,
        tiles=0,
        disk=disk,
        free_bytes=estimates.free_space(location.parent(out)),
        worker_bytes=8 * cells,
        cpu_seconds=cpu_seconds,
        threads=threads,
        where=where,
    )  # fmt: skip


def simforest_fit_cpu(trees: int, pairs: int, n: int) -> float:
    """Core-seconds of a SimForest fit on ``n`` objects (rough, :data:`SECONDS_PER`)."""
    return SECONDS_PER["sim_fit"] * trees * pairs * n * math.log2(max(n, 2))


def neighbors_plan(source: str, n: int, m: int, d: int, k: int, metric: str, algorithm: str,
                   batch_size: int | None, cells: int, connect: dict[str, Any], out: str,
                   forest: bool = False, what: str = "neighbors") -> Plan:  # fmt: skip
    """The plan of ``distforest neighbors`` (``knn predict``: ``forest`` for a forest
    metric): ``n`` queries among ``m`` rows, by batches."""
    from distforest.forests.measures import parse_metric
    from distforest.forests.neighbors import query_batch_size, resolve_algorithm
    from distforest.parallel.tasks import plan_batches

    where, threads = placement_of(cells, connect)
    algorithm = "brute" if forest else resolve_algorithm(algorithm, parse_metric(metric), d)
    batch = batch_size or query_batch_size(n, m, algorithm, forest, threads)
    batches = len(plan_batches(n, batch))
    return Plan(
        title=f"{what}: {n:,} queries among {m:,} rows, {d} features",
        steps=[("input", source),
               ("neighbours", f"k={k}, {metric}, {algorithm} in {batches} tasks"),
               ("store", str(out))],
        tasks=batches,
        tiles=0,
        disk={"neighbours (index, distance)": n * k * 16},
        free_bytes=estimates.free_space(location.parent(out)),
        worker_bytes=3 * 8 * (n + m) * d,
        cpu_seconds=SECONDS_PER["measure"] * n * m * d,
        threads=threads,
        where=where,
    )  # fmt: skip
