"""The dry run of ``simforest fit``, the one command not yet a job kind: its fit stage
as a :class:`~distforest.jobs.stages.Pipeline` (the module goes when it is a job).

The plan counts the tasks the real run submits in the stage the pipelines'
plans count too: fit batches.
"""

from __future__ import annotations

import math
from typing import Any

from distforest.jobs.estimates import SECONDS_PER
from distforest.jobs.stages import ON_A_CLUSTER, Cost, Pipeline, Stage, placement_of


def model_fit_plan(what: str, source: str, n: int, d: int, cells: int, trees: int,
                   batch_size: int | None, cpu_seconds: float, disk: dict[str, int],
                   connect: dict[str, Any], out: str,
                   by_partitions: bool = False) -> Pipeline:  # fmt: skip
    """The plan of a command that fits a model of ``trees`` trees by batches and saves it
    (``simforest fit``): its fit batches, the model on disk.  ``by_partitions``: the rows
    are read by partitions, on a cluster whatever their number."""
    from distforest.parallel.tasks import default_batch_size, plan_batches

    placed = ON_A_CLUSTER if by_partitions else cells
    threads = placement_of(placed, connect)[1]
    fit_tasks = len(plan_batches(trees, batch_size or default_batch_size(trees, threads)))
    fit = Stage("fit", f"{fit_tasks} fit tasks -> {out}", reads=(source,), writes=(out,),
                tasks=fit_tasks, cost=Cost(cpu_seconds, 8 * cells, disk))  # fmt: skip
    return Pipeline(title=f"{what}: {n:,} rows x {d} features", steps=[("input", source)],
                    stages=[fit], cells=placed, connect=connect, out=out)  # fmt: skip


def simforest_fit_cpu(trees: int, pairs: int, n: int) -> float:
    """Core-seconds of a SimForest fit on ``n`` objects (rough, :data:`SECONDS_PER`)."""
    return SECONDS_PER["sim_fit"] * trees * pairs * n * math.log2(max(n, 2))
