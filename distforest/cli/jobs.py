"""The proximity job shared by ``distforest proximity`` and ``distforest run``."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distforest.apps.plots import plot_matrix
from distforest.cli.impute_cmd import plan_imputation, run_imputation
from distforest.cli.outputs import check_new_file, write_mds, write_outliers
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
    #: ``{"out": csv, "plot": png}`` to also write outlier scores.
    outliers: dict[str, Any] | None = None
    #: ``{"out": csv, "plot": png, "components": 2, "dissimilarity": "sqrt"}`` for MDS.
    mds: dict[str, Any] | None = None
    #: ``{"out": path, "iterations": 5, "n_estimators": 100, ...}`` to impute the input.
    impute: dict[str, Any] | None = None
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
    outputs: dict[str, str]


def run_proximity_job(job: ProximityJob, progress: Any = None) -> JobResult:
    """Load the input, fit the forest, write proximities (and a picture).

    Input and output problems are found before any cluster is started, so
    a bad run leaves nothing behind.
    """
    start = time.perf_counter()
    table = load_table(job.input, target=job.target, drop=job.drop, na_values=job.na_values)
    check_can_create(job.out, job.overwrite)
    Path(job.out).parent.mkdir(parents=True, exist_ok=True)
    plan = None
    if job.impute:
        plan = plan_imputation(job.input, job.impute["out"], target=job.target, drop=job.drop,
                               na_values=job.na_values, overwrite=job.overwrite)  # fmt: skip
    for extra in (job.outliers, job.mds):
        for path in (extra or {}).values():
            if isinstance(path, str) and path.endswith((".csv", ".png")):
                check_new_file(path, job.overwrite)
    logger.info("input %s: %d rows x %d features", table.source, table.n_samples, table.n_features)
    with connect(**job.connect) as client:
        logger.info(
            "cluster: %d workers, %d threads",
            len(client.nthreads()),
            sum(client.nthreads().values()),
        )
        forest = ProximityForest(**job.forest, client=client, progress=progress).fit(table)
        matrix = forest.proximity(method=job.method, store=job.out, overwrite=job.overwrite)
        outputs = {"store": RunStore.open(job.out).path}
        if plan is not None:
            params = {k: v for k, v in job.impute.items() if k != "out"}
            params.setdefault("random_state", job.forest.get("random_state"))
            _, _, written = run_imputation(plan, params, client)
            outputs["imputed table"] = str(Path(written).resolve())
        if job.outliers:
            outputs.update(write_outliers(forest, job.outliers["out"], job.outliers.get("plot"),
                                          title=f"outlier scores, {table.source}"))  # fmt: skip
        if job.mds:
            options = {k: v for k, v in job.mds.items() if k not in ("out", "plot")}
            outputs.update(write_mds(forest, job.mds["out"], job.mds.get("plot"),
                                     title=f"MDS, {table.source}", **options))  # fmt: skip
    if job.plot:
        codes = forest.y_ if forest.task_ == "classification" else None
        title = f"{job.method} proximity" + (", rows by class" if codes is not None else "")
        picture = plot_matrix(matrix, job.plot, labels=codes, title=title,
                              class_names=[str(c) for c in forest.classes_])  # fmt: skip
        outputs["proximity picture"] = str(picture.resolve())
    return JobResult(
        store=outputs["store"],
        name=str(matrix.name),
        shape=tuple(matrix.shape),
        n_trees=forest.leaves_.shape[1],
        task=forest.task_,
        seconds=time.perf_counter() - start,
        outputs=outputs,
    )


def summary(result: JobResult) -> str:
    """A few lines telling the user what was written and how to open it."""
    width = max(len(k) for k in result.outputs) + 1
    lines = [
        f"{result.name} {result.shape[0]} x {result.shape[1]} "
        f"({result.task} forest, {result.n_trees} trees) in {result.seconds:.1f} s",
        *(f"  {label + ':':<{width}} {path}" for label, path in result.outputs.items()),
        f"  {'inspect:':<{width}} distforest info {result.store}",
        f'  {"open:":<{width}} python -c "import xarray as xr; '
        f"print(xr.open_zarr('{result.store}')['{result.name}'])\"",
    ]
    return "\n".join(lines)
