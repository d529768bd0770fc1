"""The proximity job shared by ``distforest proximity`` and ``distforest run``."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from distforest.apps.plots import plot_matrix
from distforest.forests.proximity_forest import ProximityForest
from distforest.io import load_table
from distforest.parallel.cluster import connect
from distforest.store.run_store import RunStore, check_can_create

logger = logging.getLogger("distforest")


@dataclass
class ProximityJob:
    """Everything one proximity run needs (already type-checked)."""

    input: str
    out: str
    target: str | None = None
    drop: tuple[str, ...] = ()
    na_values: tuple[str, ...] = ()
    forest: dict[str, Any] = field(default_factory=dict)
    method: str = "original"
    plot: str | None = None
    overwrite: bool = False
    #: Keyword arguments of :func:`distforest.parallel.cluster.connect`.
    connect: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobResult:
    """What a finished job wrote, for the summary."""

    store: str
    name: str
    shape: tuple[int, int]
    n_trees: int
    task: str
    seconds: float
    plot: str | None


def run_proximity_job(job: ProximityJob, progress: Any = None) -> JobResult:
    """Load the input, fit the forest, write proximities (and a picture).

    Input and output problems are found before any cluster is started, so
    a bad run leaves nothing behind.
    """
    start = time.perf_counter()
    table = load_table(job.input, target=job.target, drop=job.drop, na_values=job.na_values)
    check_can_create(job.out, job.overwrite)
    logger.info("input %s: %d rows x %d features", table.source, table.n_samples, table.n_features)
    with connect(**job.connect) as client:
        logger.info(
            "cluster: %d workers, %d threads",
            len(client.nthreads()),
            sum(client.nthreads().values()),
        )
        forest = ProximityForest(**job.forest, client=client, progress=progress).fit(table)
        matrix = forest.proximity(method=job.method, store=job.out, overwrite=job.overwrite)
    plot = None
    if job.plot:
        codes = forest.y_ if forest.task_ == "classification" else None
        plot = str(
            plot_matrix(
                matrix,
                job.plot,
                labels=None if codes is None else np.asarray(codes),
                class_names=[str(c) for c in forest.classes_],
                title=f"{job.method} proximity, rows by class"
                if codes is not None
                else f"{job.method} proximity",
            )
        )
    store = RunStore.open(job.out)
    return JobResult(
        store=store.path,
        name=str(matrix.name),
        shape=tuple(matrix.shape),
        n_trees=forest.leaves_.shape[1],
        task=forest.task_,
        seconds=time.perf_counter() - start,
        plot=plot,
    )


def summary(result: JobResult) -> str:
    """A few lines telling the user what was written and how to open it."""
    lines = [
        f"{result.name} {result.shape[0]} x {result.shape[1]} "
        f"({result.task} forest, {result.n_trees} trees) in {result.seconds:.1f} s",
        f"  store:   {result.store}",
    ]
    if result.plot:
        lines.append(f"  picture: {Path(result.plot).resolve()}")
    lines += [
        f"  inspect: distforest info {result.store}",
        '  open:    python -c "import xarray as xr; '
        f"print(xr.open_zarr('{result.store}')['{result.name}'])\"",
    ]
    return "\n".join(lines)
