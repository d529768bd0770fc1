"""The :class:`~distforest.jobs.plan.Plan` of the app commands' ``--dry-run``.

Each command's plan counts the tasks its real run submits in the stages the
pipelines' plans count too: fit batches, tiles and neighbour searches.  The
products of a matrix-free application (outliers, mislabels, MDS, kernel
k-means) depend on how many iterations the data needs: they are named in the
plan's notes, not counted.
"""

from __future__ import annotations

import math
from typing import Any

from distforest import location
from distforest.forests.square_sums import plan as square_sums_plan
from distforest.jobs import estimates
from distforest.jobs.estimates import SECONDS_PER, estimate_matrix, fit_seconds
from distforest.jobs.plan import Plan, placement_of
from distforest.parallel.tasks import plan_tree_batches
from distforest.parallel.tiling import TilePlan

#: The note of a plan whose application runs products not counted in its tasks.
PRODUCTS_NOTE = ("  note:         plus one product task per batch of trees and iteration "
                 "(matrix-free; iterations depend on the data)")  # fmt: skip


def forest_app_plan(what: str, input: str, target: str | None, input_kw: dict[str, Any],
                    forest: dict[str, Any], connect: dict[str, Any],
                    files: dict[str, str | None], components: int = 2) -> Plan:  # fmt: skip
    """The plan of a command that fits a proximity forest on ``input`` and answers
    matrix-free (``outliers``, ``mislabels``, ``mds``, ``importances``); ``files``: label ->
    path (None: not written), the first the main output; ``components`` of ``mds``.

    A table read by partitions adds the temporary run store its forest is fitted
    in (and the scratch arrays ``mislabels`` and ``mds`` make there) to the disk.
    """
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.jobs.inputs import input_shape, partitioned_input

    source, n, d = input_shape(input, target, **input_kw)
    out = next(p for p in files.values() if p)
    params = {**ProximityForest().get_params(), **forest}
    where, threads = placement_of(n * d, connect)
    trees = int(params["n_estimators"])
    fit_tasks = len(plan_tree_batches(trees, threads, params["batch_size"] or None))
    per_file = {"pictures": 300_000}
    disk = {label: per_file.get(label, n * 64) for label, path in files.items() if path}
    rows = estimates.rows_per_tree(n, params)
    if partitioned_input(input):
        disk.update(temporary_store_bytes(what, n, d, trees, components))
    cpu = fit_seconds(trees, rows, d, params["max_features"])
    # the matrix-free products share every tree's leaves and in-bag counts with each worker
    products = n * trees * 9
    notes = [PRODUCTS_NOTE]
    if what in ("outliers", "mislabels"):  # the sums of squared proximities (square_sums)
        sums = square_sums_plan(n, trees, rows, int(params["min_samples_leaf"]))
        cpu += sums["cpu_seconds"]
        notes.insert(0, f"  outliers:     {sums['method']} sums of squared proximities")
        if what == "outliers":  # mislabels also runs an RF-GAP product (all leaves)
            products = sums["worker_bytes"]
    return Plan(
        title=f"{what}: {n:,} rows x {d} features",
        steps=[("input", source), ("forest", f"{trees} trees in {fit_tasks} tasks"),
               ("writes", ", ".join(str(p) for p in files.values() if p))],
        tasks=fit_tasks,
        tiles=0,
        disk=disk,
        free_bytes=estimates.free_space(location.parent(out)),
        worker_bytes=3 * 8 * n * d + products + 8 * n * (d + 4) * 2,
        cpu_seconds=cpu,
        threads=threads,
        where=where,
        notes=notes,
    )  # fmt: skip


def matrix_plan(what: str, source: str, n: int, m: int, d: int, tile_size: int,
                symmetric: bool, cells: int, connect: dict[str, Any],
                out: str) -> Plan:  # fmt: skip
    """The plan of a command that writes an ``n x m`` matrix tile by tile (``similarity``)."""
    where, threads = placement_of(cells, connect)
    tiles = TilePlan(n, m, tile_size, symmetric=symmetric)
    need = estimate_matrix(n, m, d, tile_size, symmetric)
    return Plan(
        title=f"{what}: {n:,} x {m:,} rows, {d} features",
        steps=[("input", source),
               ("matrix", f"{tiles.n_tasks:,} tiles of {tiles.chunks[0]} x {tiles.chunks[1]}"),
               ("store", str(out))],
        tasks=tiles.n_tasks,
        tiles=tiles.n_tasks,
        disk={"matrix (uncompressed)": need["disk_bytes"]},
        free_bytes=estimates.free_space(location.parent(out)),
        worker_bytes=need["memory_bytes"] + 3 * 4 * tiles.chunks[0] * tiles.chunks[1],
        cpu_seconds=need["cpu_seconds"],
        threads=threads,
        where=where,
    )  # fmt: skip


def temporary_store_bytes(what: str, n: int, d: int, trees: int,
                          components: int = 2) -> dict[str, int]:  # fmt: skip
    """The disk a forest command on a table read by partitions takes besides its outputs:
    the temporary run store (in dask's temporary directory, removed at the end) and the
    scratch arrays of ``mislabels`` (two classes; 8 bytes a row more per class above eight)
    and ``mds``."""
    need = {"temporary store (rows, leaves; removed after)":
            n * (4 * d + 8) + n * trees * (4 + 1 + 1)}  # fmt: skip
    if what == "mislabels":
        from distforest.apps.mislabels import scratch_bytes

        need["ranking scratch (removed after)"] = scratch_bytes(n, 2)
    if what == "mds":
        from distforest.apps.mds import scratch_bytes as mds_scratch_bytes

        need["MDS scratch (removed after)"] = mds_scratch_bytes(n, components, trees)
    return need


def model_fit_plan(what: str, source: str, n: int, d: int, cells: int, trees: int,
                   batch_size: int | None, cpu_seconds: float, disk: dict[str, int],
                   connect: dict[str, Any], out: str) -> Plan:  # fmt: skip
    """The plan of a command that fits a model of ``trees`` trees by batches and saves it
    (``simforest fit``, ``smerf fit``): its fit batches, the model on disk."""
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


def smerf_fit_cpu(trees: int, n: int) -> float:
    """Core-seconds of a SMERF fit on ``n`` rows (rough, :data:`SECONDS_PER`)."""
    return SECONDS_PER["smerf_fit"] * trees * n * n * math.log2(max(n, 2))


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


def cluster_plan(method: str, store: str, n: int, k: int | None, n_init: int, matrix_free: bool,
                 cells: int, connect: dict[str, Any], out: str) -> Plan:  # fmt: skip
    """The plan of ``distforest cluster``: no tiles nor fits; with ``--matrix-free`` one
    product task per batch of trees and iteration (noted, not counted)."""
    from distforest.jobs.estimates import estimate_kmeans

    where, threads = placement_of(cells if matrix_free else 0, connect)
    need = estimate_kmeans(n, k or 1, n_init if method == "kernel-kmeans" else 1, 100)
    source = "the stored trees (matrix-free)" if matrix_free else "the stored matrix"
    return Plan(
        title=f"cluster: {n:,} rows",
        steps=[("input", f"{store}: {source}"), ("method", method), ("writes", str(out))],
        tasks=0,
        tiles=0,
        disk={"labels": 16 * n},
        free_bytes=estimates.free_space(location.parent(out)),
        worker_bytes=need["memory_bytes"],
        cpu_seconds=need["cpu_seconds"],
        threads=threads,
        where=where,
        notes=[PRODUCTS_NOTE] if matrix_free else [],
    )  # fmt: skip
