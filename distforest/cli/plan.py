"""What a job will do before it does it: tasks, tiles, bytes, memory, disk.

The numbers are estimates from the job's sizes, written to be upper bounds
where that is cheap (the proximity matrix is counted uncompressed; a forest
is counted with as many nodes as a fully grown tree on the bootstrap rows
can have).  ``distforest run --dry-run`` prints them; every run checks the
disk estimate against the free space before it starts.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

from distforest.errors import StoreError
from distforest.forests.proximity_forest import ProximityForest
from distforest.forests.tiles import SYMMETRIC
from distforest.parallel.tasks import default_batch_size
from distforest.parallel.tiling import TilePlan

#: Bytes per tree node as stored (children, feature, threshold, flags, counts).
_NODE_BYTES = 29
#: Share of distinct rows in a bootstrap sample (1 - 1/e).
_BOOTSTRAP_SHARE = 0.632


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def estimate(job: Any, n: int, d: int, threads: int | None = None) -> dict[str, Any]:
    """Sizes of a job on ``n`` rows and ``d`` features.

    Returns
    -------
    dict
        ``fit_tasks``, ``trees_per_task``, ``tiles``, ``tile_size``,
        ``disk_bytes`` (store and files, upper bound), ``store_bytes``,
        ``worker_peak_bytes`` (rough peak of one worker) and ``threads``
        (assumed when not known).
    """
    # the estimator's own defaults, and the same tile plan as the run
    forest = {**ProximityForest().get_params(), **job.forest}
    trees = int(forest["n_estimators"])
    plan = TilePlan(n, n, int(forest["tile_size"]), symmetric=SYMMETRIC[job.method])
    tile = plan.chunks[0]
    leaf = max(1, int(forest["min_samples_leaf"]))
    threads = threads or os.cpu_count() or 1
    batch = int(forest["batch_size"] or default_batch_size(trees, threads))
    tiles = plan.n_tasks
    outputs_per_node = 4 * 8  # class probabilities or values, at most a few columns
    nodes = trees * 2 * _BOOTSTRAP_SHARE * n / leaf
    per_row = {"leaves": 4, "inbag": 1, "leaf_mass": 4 if job.method == "rfgap" else 0}
    store = {
        "proximity matrix (uncompressed)": 4 * n * n,
        "leaves, inbag (and leaf mass)": n * trees * sum(per_row.values()),
        "forest nodes": int(nodes * (_NODE_BYTES + outputs_per_node)),
    }
    files = {}
    if job.impute:
        files["imputed table"] = n * (d + 2) * 12
    if job.outliers:
        files["outlier scores"] = n * 32
    if job.mislabels:
        files["suspects"] = n * 64
    if job.mds:
        files["MDS coordinates"] = n * 24 * (1 + int(job.mds.get("components", 2)))
    sections = (job.outliers or {}, job.mds or {})
    pictures = bool(job.plot) + sum(bool(s.get("plot")) for s in sections)
    files["pictures"] = 300_000 * pictures
    x_bytes = 8 * n * d
    fit_peak = 3 * x_bytes + batch * (n * 5 + int(2 * _BOOTSTRAP_SHARE * n / leaf) * 120)
    tile_peak = 2 * tile * trees * 9 + 3 * 4 * tile * tile
    product_peak = n * trees * 9 + 8 * n * (d + 4) * 2
    return {
        "rows": n,
        "features": d,
        "trees": trees,
        "threads": threads,
        "fit_tasks": math.ceil(trees / batch),
        "trees_per_task": batch,
        "tiles": tiles,
        "tile_size": tile,
        "store": store,
        "files": files,
        "store_bytes": sum(store.values()),
        "disk_bytes": sum(store.values()) + sum(files.values()),
        "worker_peak_bytes": max(fit_peak, tile_peak, product_peak),
    }


def free_space(directory: str | Path) -> int:
    """Free bytes on the file system that holds ``directory`` (or its nearest parent)."""
    p = Path(directory).resolve()
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def check_disk(directory: str | Path, need: int) -> None:
    """Refuse to start when the planned output does not fit on the disk."""
    free = free_space(directory)
    if need > free:
        raise StoreError(
            f"not enough disk space in {str(directory)!r}: the run plans to write up to "
            f"{_size(need)} (upper bound, uncompressed) but only {_size(free)} are free; free "
            "some space, write to another output.dir, or use a larger tile size / fewer rows"
        )


def describe(job: Any, plan: dict[str, Any], free: int) -> str:
    """The plan as the lines ``--dry-run`` prints."""
    lines = [
        f"job {job.name}: {plan['rows']:,} rows x {plan['features']} features",
        f"  input:        {job.input}" + (f" (target {job.target})" if job.target else ""),
        f"  forest:       {plan['trees']} trees in {plan['fit_tasks']} tasks of up to "
        f"{plan['trees_per_task']} (assuming {plan['threads']} worker threads)",
        f"  proximity:    {job.method}, {plan['tiles']:,} tile tasks of "
        f"{plan['tile_size']} x {plan['tile_size']}",
        f"  applications: {', '.join(a for a in ('impute', 'outliers', 'mislabels', 'mds') if getattr(job, a)) or 'none'}",  # noqa: E501
        f"  store:        {job.out}",
    ]
    for label, size in {**plan["store"], **plan["files"]}.items():
        lines.append(f"    {label:<34} {_size(size):>10}")
    lines += [
        f"  disk:         up to {_size(plan['disk_bytes'])}; {_size(free)} free "
        + ("(ok)" if plan["disk_bytes"] <= free else "(NOT ENOUGH: the run would be refused)"),
        f"  memory:       about {_size(plan['worker_peak_bytes'])} at peak per worker (estimate)",
    ]
    return "\n".join(lines)
