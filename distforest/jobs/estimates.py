"""A job's sizes before it runs: bytes, memory, computing, disk; refusals of absurd sizes.

The numbers are estimates from the job's sizes, written to be upper bounds
where that is cheap (the proximity matrix is counted uncompressed; a forest
is counted with as many nodes as a fully grown tree on the bootstrap rows
can have).  ``distforest run --dry-run`` prints them; every command that
writes a matrix checks the disk estimate against the free space, and every
command that fits or writes refuses absurd sizes (:func:`check_size`: more
memory than the machine has, or more computing than the ``distforest.max-cpu-hours``
setting of :mod:`distforest.settings`) before it starts.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from distforest import location, settings
from distforest.errors import ParameterError, StoreError
from distforest.parallel.tasks import default_batch_size, most_trees_a_task, plan_tree_batches
from distforest.parallel.tiling import TilePlan

#: Core-seconds per unit of work, measured on a 2-core x86 machine and rounded up
#: (``benchmarks/bench_faults.py --calibrate``; table in ``benchmarks/results/faults.md``).
#: Rough: enough to tell a typo (1e8 trees) from a big job, not to schedule one.
SECONDS_PER = {
    "fit": 1e-7,  # one tree: per row x log2(rows) x features tried per split
    "rp_fit": 1e-7,  # one X-Forest tree: per row x log2(rows)
    "tile": 7e-10,  # a pair of rows of a forest matrix, per tree (X-Forest, SimForest, SMERF)
    # a pair of rows of a proximity matrix, per tree: tiles measured 6e-11 at n = 100,000
    # and 2e-10 at 20,000 (benchmarks/results/proximity.md, estimates.md); between the two
    "proximity_tile": 1e-10,
    "measure": 1e-8,  # one pair of rows of a similarity matrix, per feature
    # calibrated on one quiet run each (benchmarks/results/estimates.md, 2026-11-26)
    "sim_fit": 7e-7,  # one SimForest tree: per object x log2(objects) x pairs tried
    "smerf_fit": 3e-9,  # one SMERF tree: per row pair x log2(rows)
    # share of fit_seconds that a column forest of the column imputation takes (12.5x too
    # high before, with 10 passes counted where the stopping rule ran 3)
    "column_fit_share": 0.3,
    # one row's top-k proximity neighbours, per tree, when trees grow on all n rows:
    # 0.55 us measured at n = 20,000 and 1.2 us at n = 100,000 (100 trees, k = 50, a busy
    # machine), rounded up.  Trees grown on m < n rows have leaves n / m times as crowded:
    # the work is multiplied by (0.35 + 0.65 n / m) (wall 2.65 us a row and tree at n =
    # 1,000,000, m = 200,000, against 0.73 us at m = n: benchmarks/results/
    # proximity_neighbors.md), so it grows as n^2 at a fixed m
    "neighbors": 2e-6,
    # a refined forest (leaf_bound), per row and tree, CPU measured at 1,000,000 rows (trees
    # on 200,000, bound 8, k = 50, five seeds; benchmarks/results/refine-phases.md): every
    # row routed through the tree grown on the sample (0.38-0.46 us), its crowded leaves
    # refined (0.83-0.88 us; 0.91-0.94 after the kernel's rewrite), the top-k neighbours
    # from leaves of at most 8 rows (0.36-0.41 us, whatever n: the co-leaf events a row
    # stay 5.7)
    "route": 0.45e-6,
    "refine": 0.9e-6,
    "refined_neighbors": 0.45e-6,
}

#: Bytes a row that a refined fit task holds besides its rows and its batch's results (one
#: tree routed and refined at a time: leaves, rows by leaf, weights, the appended nodes'
#: room): 26 B growing and routing, 46 B refining, measured at 1,000,000 rows
#: (benchmarks/results/refine-memory.md), rounded up.
REFINE_TASK_ROW_BYTES = 60

#: Passes of the column imputation counted (its stopping rule ended every measured run at 3).
EXPECTED_COLUMN_PASSES = 4
#: Bytes per tree node as stored (children, feature, threshold, flags, counts).
_NODE_BYTES = 29
#: Share of distinct rows in a bootstrap sample (1 - 1/e).
_BOOTSTRAP_SHARE = 0.632


def size_text(n: float) -> str:
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
        ``worker_peak_bytes`` (rough peak of one worker; ``tile_worker_bytes``
        while writing tiles, the row blocks it keeps included) and ``threads``
        (assumed when not known).
    """
    # the estimator's own defaults, and the same tile plan as the run (imported here:
    # the imputation's size check needs neither Zarr nor numba: 0.6 s at start)
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.forests.refine import NODES_TIMES_BOUND
    from distforest.forests.tiles import SYMMETRIC
    from distforest.store.schema import count_dtype

    forest = {**ProximityForest().get_params(), **job.forest}
    trees = int(forest["n_estimators"])
    plan = TilePlan(n, n, int(forest["tile_size"]), symmetric=SYMMETRIC[job.method])
    tile = plan.chunks[0]
    leaf = max(1, int(forest["min_samples_leaf"]))
    m = rows_per_tree(n, forest)
    threads = threads or os.cpu_count() or 1
    refined = None
    if getattr(job, "model", None) is None:  # (a model fitted elsewhere: its own trees)
        refined, _ = ProximityForest.refinement_plan(
            job.forest, getattr(job, "target", None) is not None, n, d
        )
    # a task's trees: fewer on many rows (the fit's own plan, distforest.fit-task-bytes)
    row_tree = 5.0 if refined is None else refined.row_tree_bytes()
    most = most_trees_a_task(n, row_tree)
    batch = int(forest["batch_size"] or min(default_batch_size(trees, threads), most))
    top_k = getattr(job, "top_k", None)
    dense = top_k is None or bool(getattr(job, "dense", False))
    tiles = plan.n_tasks if dense else 0
    outputs_per_node = 4 * 8  # class probabilities or values, at most a few columns
    # a refined tree's nodes grow with n (0.41 a row at bound 8), a grown one's with m
    nodes_a_row = 0.0 if refined is None else min(2.0, NODES_TIMES_BOUND / refined.bound)
    nodes = trees * (nodes_a_row * n if refined else 2 * _BOOTSTRAP_SHARE * m / leaf)
    per_row = {"leaves": 4, "inbag": 1, "leaf_mass": 4 if job.method == "rfgap" else 0}
    # Breiman's proximity is stored as counts of trees (uint8 / uint16), the others as float32
    stored = count_dtype(trees) if job.method == "original" else None
    store = {
        "proximity matrix (uncompressed)": np.dtype(stored or "float32").itemsize * n * n,
        "leaves, inbag (and leaf mass)": n * trees * sum(per_row.values()),
        "forest nodes": int(nodes * (_NODE_BYTES + outputs_per_node)),
    }
    if not dense:
        del store["proximity matrix (uncompressed)"]
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
    if top_k is not None:
        store["top-k neighbours (index, proximity)"] = n * top_k * 12
    fit_cpu = fit_seconds(trees, m, d, forest["max_features"])
    if refined is not None:
        fit_cpu += (SECONDS_PER["route"] + SECONDS_PER["refine"]) * n * trees
    tile_cpu = SECONDS_PER["proximity_tile"] * trees * tiles * tile * tile
    cpu = fit_cpu + tile_cpu
    neighbor_cpu = impute_cpu = sums_cpu = 0.0
    # the rows' co-leaf index (members, leaf table: up to 2 nodes a bootstrap row; the
    # leaves and in-bag counts read to build it) and one task's counters and keys
    neighbor_peak = 0.0
    if top_k is not None:
        crowding = 0.35 + 0.65 * n / max(m, 1)
        neighbor_cpu = n * trees * (SECONDS_PER["refined_neighbors"] if refined
                                    else SECONDS_PER["neighbors"] * crowding)  # fmt: skip
        cpu += neighbor_cpu
        neighbor_peak = n * trees * (5 + 5 + 4 * 2 * _BOOTSTRAP_SHARE / leaf) + n * 30
        if refined:  # members (4 B a row and tree) and the leaf table (4 B a node)
            neighbor_peak = n * trees * (4 + 4 * nodes_a_row) + n * 30
    if job.impute:
        imp = {**job.impute}
        impute_cpu = int(imp.get("iterations", 5)) * fit_seconds(
            int(imp.get("n_estimators", 100)), n, d, imp.get("max_features", "auto")
        )
        cpu += impute_cpu
    x_bytes = 8 * n * d
    fit_peak = 3 * x_bytes + batch * (n * 5 + int(2 * _BOOTSTRAP_SHARE * n / leaf) * 120)
    if refined:  # the batch's results and nodes, one tree's refinement at a time
        fit_peak = 3 * x_bytes + int(batch * n * row_tree) + REFINE_TASK_ROW_BYTES * n
    # the row blocks a worker keeps while writing tiles: rows by leaf, leaf runs (12 B a cell)
    kept_max = int(settings.get("block-cache-bytes"))
    blocks_kept = min(kept_max, math.ceil(n / tile) * tile * trees * 12)
    tile_peak = 2 * tile * trees * 9 + 3 * 4 * tile * tile + blocks_kept
    # matrix-free products share every tree's leaves and in-bag counts with each worker; the
    # outlier scores' sums over pairs of trees read two blocks of trees a task (square_sums)
    products = n * trees * 9
    if job.outliers or job.mislabels:
        from distforest.forests.square_sums import plan as square_sums_plan

        sums = square_sums_plan(n, trees, m, leaf)
        sums_cpu = sums["cpu_seconds"]
        cpu += sums_cpu
        if not (job.impute or job.mislabels or job.mds):  # no other product
            products = sums["worker_bytes"]
    product_peak = products + 8 * n * (d + 4) * 2
    return {
        "rows": n,
        "features": d,
        "trees": trees,
        "threads": threads,
        "fit_tasks": len(plan_tree_batches(trees, threads, forest["batch_size"] or None, most)),
        "trees_per_task": batch,
        "tiles": tiles,
        "tile_size": tile,
        "store": store,
        "files": files,
        "store_bytes": sum(store.values()),
        "disk_bytes": sum(store.values()) + sum(files.values()),
        "worker_peak_bytes": max(
            fit_peak, tile_peak if dense else 0, product_peak, int(neighbor_peak)
        ),
        "tile_worker_bytes": tile_peak if dense else 0,
        "top_k": top_k,
        "dense": dense,
        # the driver gathers the per-row arrays of every tree (twice while joining batches)
        "memory_bytes": 2 * n * trees * sum(per_row.values()) + 3 * x_bytes,
        "cpu_seconds": cpu,
        # the same, by stage
        "stage_cpu": {
            "fit": fit_cpu,
            "tiles": tile_cpu,
            "neighbors": neighbor_cpu,
            "impute": impute_cpu,
            "sums": sums_cpu,
        },
        "stage_bytes": {
            "fit": fit_peak,
            "tiles": tile_peak,
            "neighbors": int(neighbor_peak),
            "products": product_peak,
        },
    }


def rows_per_tree(n: int, forest: dict[str, Any]) -> int:
    """Rows each tree grows on: ``max_samples`` of the forest, or its default rule for ``n``."""
    from distforest.forests.proximity_forest import AUTO_ROWS_PER_TREE, LARGE_FOREST_ROWS

    share = forest.get("max_samples")
    if not forest.get("bootstrap", True):
        return n
    if share is None:
        return n if n <= LARGE_FOREST_ROWS else AUTO_ROWS_PER_TREE
    if isinstance(share, Mapping):  # rows per class (R's sampsize)
        return int(sum(share.values()))
    if isinstance(share, int) and not isinstance(share, bool):  # a count of rows
        return min(share, n)
    return max(1, round(float(share) * n))


def fit_seconds(trees: int, n: int, d: int, max_features: Any = "auto") -> float:
    """Core-seconds to grow ``trees`` CART trees on ``n`` rows of ``d`` features (estimate)."""
    if isinstance(max_features, str) and max_features in ("sqrt", "auto"):
        tried = math.sqrt(d)
    elif max_features == "log2":
        tried = math.log2(max(d, 2))
    elif isinstance(max_features, float):
        tried = max_features * d
    elif isinstance(max_features, int):
        tried = min(max_features, d)
    else:
        tried = d
    return SECONDS_PER["fit"] * trees * n * math.log2(max(n, 2)) * max(1.0, tried)


def estimate_xforest(n: int, d: int, forest: dict[str, Any]) -> dict[str, Any]:
    """Disk, driver memory and computing of an X-Forest job on ``n`` rows, ``d`` features.

    Each row keeps a leaf id, a depth and (at least) one 64-bit path word per tree.
    """
    from distforest.forests.xforest import XForest  # the estimator's own defaults

    params = {**XForest().get_params(), **forest}
    trees, leaf = int(params["n_estimators"]), max(1, int(params["leaf_size"]))
    plan = TilePlan(n, n, int(params["tile_size"]), symmetric=True)
    per_tree_row = 4 + 4 + 8
    nodes = trees * 2 * n / leaf * (5 * 4 + 8) + trees * 64 * d * 8
    # each tree draws its X random directions (d float64 each) at once
    directions = 8 * d * int(params["n_directions"])
    store = 4 * n * n + plan.n_tasks + n * trees * per_tree_row + nodes
    tile = plan.chunks[0]
    return {
        "trees": trees,
        "directions": int(params["n_directions"]),
        "disk_bytes": int(store),
        "memory_bytes": int(2 * n * trees * per_tree_row + 3 * 8 * n * d + 2 * directions),
        "cpu_seconds": SECONDS_PER["rp_fit"] * trees * n * math.log2(max(n, 2))
        + SECONDS_PER["tile"] * trees * plan.n_tasks * tile * tile,
    }


def estimate_forest_metric(n: int, d: int, trees: int) -> dict[str, Any]:
    """Computing and driver memory of a forest fitted as a k-NN metric or a SimForest."""
    return {
        "trees": trees,
        "disk_bytes": 4 * n * trees,
        "memory_bytes": 2 * n * trees * 8 + 3 * 8 * n * d,
        "cpu_seconds": fit_seconds(trees, n, d, "sqrt"),
    }


def estimate_kmeans(n: int, k: int, n_init: int, iterations: int) -> dict[str, Any]:
    """Kernel k-means: each of ``n_init`` runs reads ``n x n`` similarities per iteration."""
    return {
        "disk_bytes": 8 * n,
        "memory_bytes": 3 * 8 * n * max(k, 1),
        "cpu_seconds": SECONDS_PER["measure"] * n_init * iterations * n * n,
    }


def estimate_impute(n: int, d: int, params: dict[str, Any], columns: int | None = None
                    ) -> dict[str, Any]:  # fmt: skip
    """Disk, memory and computing of ``params["iterations"]`` passes on ``n x d``.

    A pass of ``proximity: column`` fits one forest per column with missing
    values (``columns``; None: all ``d``) on the others; the other proximities
    refit one forest on all columns.  Column passes may stop earlier
    (missForest's rule): the time is an upper bound.
    """
    trees, iterations = int(params["n_estimators"]), int(params["iterations"])
    max_features = params.get("max_features", "auto")
    if params.get("proximity") == "column":
        per_pass = (d if columns is None else columns) * fit_seconds(trees, n, max(d - 1, 1),
                                                                     max_features)  # fmt: skip
        # missForest's rule usually stops after 3-4 passes; column trees (regression on
        # half the features) ran COLUMN_FIT_SHARE of fit_seconds' time (estimates.md)
        iterations = min(iterations, EXPECTED_COLUMN_PASSES)
        per_pass *= SECONDS_PER["column_fit_share"]
    else:
        per_pass = fit_seconds(trees, n, d, max_features)
    return {
        "disk_bytes": 12 * n * (d + 2),
        "memory_bytes": 2 * n * trees * 5 + 6 * 8 * n * d,
        "cpu_seconds": iterations * per_pass,
    }


def estimate_matrix(n: int, m: int, d: int, tile_size: int, symmetric: bool) -> dict[str, Any]:
    """Disk, memory and computing of an ``n x m`` similarity matrix over ``d`` features."""
    plan = TilePlan(n, m, tile_size, symmetric=symmetric)
    tile = plan.chunks
    return {
        "disk_bytes": plan.nbytes(4) + plan.n_tasks + 8 * (n + m),
        "memory_bytes": 3 * 8 * (n + m) * d,
        "cpu_seconds": SECONDS_PER["measure"] * max(d, 1) * plan.n_tasks * tile[0] * tile[1],
    }


#: Bytes a SMERF tree keeps per training row at most: up to 2 nodes per bootstrap row
#: (7 int64/float64 columns), a projection per internal node, one leaf member per row.
_SMERF_TREE_BYTES_PER_ROW = 2 * 56 + 16 + 8


def estimate_smerf_model(n: int, n_trees: int, itemsize: int) -> int:
    """Bytes of a saved SMERF model (upper bound, uncompressed).

    The training distances (``n x n`` of ``itemsize`` bytes), ``leaves``
    (int32) and ``inbag`` (uint8) of the training rows, and the flat trees.
    """
    return n * n * itemsize + n * n_trees * (4 + 1 + _SMERF_TREE_BYTES_PER_ROW)


def physical_memory() -> int:
    """Bytes of RAM of this machine (0 if unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not POSIX: no memory check
        return 0


def max_cpu_hours() -> float:
    """The computing a command may plan (``distforest.max-cpu-hours``, default 1000)."""
    return float(settings.get("max-cpu-hours"))


def _duration(seconds: float) -> str:
    hours = seconds / 3600
    if hours >= 1:
        return f"{hours:,.0f} CPU-hours"
    return f"{max(seconds / 60, 1):,.0f} CPU-minutes"


def check_size(what: str, plan: dict[str, Any], knobs: str) -> None:
    """Refuse, before any work, a job beyond reason: a typo such as ``--trees 100000000``.

    Refused when the estimated memory of this process exceeds the machine's
    RAM, or the estimated computing exceeds ``distforest.max-cpu-hours``
    (:mod:`distforest.settings`, default 1000; raise it to run a really big job).  The message
    gives the estimated time, memory and disk, like ``--dry-run``.

    Parameters
    ----------
    what : str
        The job, e.g. ``"xforest on data.csv (699 rows)"``.
    plan : dict
        ``cpu_seconds``, ``memory_bytes`` and ``disk_bytes`` estimates.
    knobs : str
        The options that set the size, as the user gave them (for the message).
    """
    ram, limit = physical_memory(), max_cpu_hours()
    too_much = []
    if ram and plan["memory_bytes"] > ram:
        too_much.append(f"memory: about {size_text(plan['memory_bytes'])} in this process, the "
                        f"machine has {size_text(ram)}")  # fmt: skip
    if plan["cpu_seconds"] > limit * 3600:
        too_much.append(f"time: about {_duration(plan['cpu_seconds'])}, more than "
                        f"{settings.source('max-cpu-hours')}={limit:g}")  # fmt: skip
    if too_much:
        slow = plan["cpu_seconds"] > limit * 3600
        knob = settings.how_to_set("max-cpu-hours")
        longer = f"; to run a job this long on a big cluster, set {knob} higher"
        raise ParameterError(
            f"{what} is too large to start ({'; '.join(too_much)}; it would write about "
            f"{size_text(plan['disk_bytes'])} and compute about {_duration(plan['cpu_seconds'])}): "
            f"check {knobs}" + (longer if slow else "")
        )


#: The free space of object storage (see :func:`free_space`).
UNBOUNDED = 2**62


def free_space(directory: str | Path) -> int:
    """Free bytes on the file system that holds ``directory`` (or its nearest parent).

    Object storage has no such limit to check: its free space counts as unbounded.
    """
    if location.is_remote(directory):
        return UNBOUNDED
    p = Path(directory).resolve()
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def _bytes_in(path: str | Path | None) -> int:
    """Bytes of the files under ``path`` (0 if it does not exist)."""
    if path is None or location.is_remote(path) or not Path(path).is_dir():
        return 0
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def check_disk(directory: str | Path, need: int, *, replaces: str | Path | None = None) -> None:
    """Refuse to start when the planned output does not fit on the disk.

    ``replaces``: the output store, whose bytes count as free (a resumed run
    keeps what it wrote, an overwrite removes it first).
    """
    free = free_space(directory) + _bytes_in(replaces)
    if need > free:
        raise StoreError(
            f"not enough disk space in {str(directory)!r}: the run plans to write up to "
            f"{size_text(need)} (upper bound, uncompressed) but only {size_text(free)} are "
            "free; free "
            "some space, write to another output.dir, or use a larger tile size / fewer rows"
        )
