"""The proximity tile phase alone, against the Zarr write floor of the same array.

Run by hand (never in CI)::

    .venv/bin/python benchmarks/bench_tiles.py [--n 20000] [--trees 100] \
        [--workdir /tmp/dftiles] [--repeat 2]

A forest is fitted once (``make_classification(n, 20, n_informative=10,
random_state=0)``, seed 0) and saved (leaves and in-bag counts); the fitted
store is kept in the work directory and reused by later runs with the same
n and T.  Then, on a LocalCluster with the project's defaults, it times:

- the tile phase: :func:`distforest.forests.tiles.write_proximity` for the
  original proximity, into a fresh copy of the fitted store (``--repeat``
  times, the fastest reported);
- the same tile phase in the driver process on one thread, without Dask
  (its CPU time: the tiles' cost without scheduler or worker overhead);
- one off-diagonal tile's parts on the driver (median of 5): reading both
  leaf blocks, the kernel, writing the tile, writing its mirror;
- the write floor: the benchmark's I/O floor
  (``bench_proximity.child_iofloor``) for an array with the same dtype,
  fill value and codecs as distforest's proximity, filled with synthetic
  tiles of the measured density and shared-leaf-count distribution.

Prints one JSON line with every number (and ``uptime`` before and after).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_proximity as bp
from _measure import child_result
from _measure import parser as make_parser


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def fitted_store(wd: Path, n: int, trees: int) -> Path:
    """The saved forest for (n, trees), fitted once and kept."""
    path = wd / f"fit_n{n}_t{trees}.zarr"
    if path.exists():
        return path
    import pandas as pd
    from sklearn.datasets import make_classification

    from distforest.forests.proximity_forest import ProximityForest
    from distforest.parallel.cluster import connect
    from distforest.parallel.execution import execution

    X, y = make_classification(n, bp.N_FEATURES, n_informative=10, random_state=0)
    table = pd.DataFrame(X, columns=[f"x{i}" for i in range(bp.N_FEATURES)])
    with connect() as client, execution(client=client):
        forest = ProximityForest(n_estimators=trees, random_state=0)
        forest.fit(table, y)
        forest.save(path, overwrite=True)
    return path


def _worker_cpu() -> float:
    from _measure import cpu_seconds

    return cpu_seconds()


def _fresh_copy(fitted: Path, run: Path) -> Any:
    """A fresh copy of the fitted store at ``run``, opened for writing."""
    from distforest.store.run_store import RunStore

    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(fitted, run)
    return RunStore.open(run, mode="r+")


def tile_phase(fitted: Path, run: Path, tile: int, trees: int) -> dict[str, Any]:
    """One timed tile phase (original proximity) on a fresh LocalCluster."""
    import dask
    from distributed import get_task_stream

    from distforest.forests import tiles
    from distforest.parallel.cluster import connect
    from distforest.parallel.execution import Runner

    rs = _fresh_copy(fitted, run)
    length = 1_000_000
    with (
        dask.config.set({"distributed.scheduler.dashboard.tasks.task-stream-length": length}),
        connect() as client,
    ):
        threads = sum(client.nthreads().values())
        client.run(lambda: __import__("distforest.forests.tiles"))  # imports off the clock
        cpu = client.run(_worker_cpu)
        with get_task_stream(client=client) as ts:
            t = time.perf_counter()
            tiles.write_proximity(
                Runner(client), rs, "original", tile, identity={"bench": 1},
                attrs={"n_trees": trees},
            )  # fmt: skip
            wall = time.perf_counter() - t
        cpu_after = client.run(_worker_cpu)
    summary = bp._task_stream_summary(ts.data, "proximity-tiles", wall, threads)
    workers_cpu = sum(cpu_after[w] - cpu[w] for w in cpu)
    return {"tiles_s": wall, "workers_cpu_s": workers_cpu, "tasks": summary, "threads": threads}


def in_process_phase(fitted: Path, run: Path, tile: int, trees: int) -> dict[str, float]:
    """The same tile phase in this process on one thread (no Dask): its CPU and wall time.

    What the tiles cost without any scheduler, task or worker overhead.
    """
    from distforest.forests import tiles
    from distforest.parallel.execution import Runner

    rs = _fresh_copy(fitted, run)
    cpu, wall = time.process_time(), time.perf_counter()
    tiles.write_proximity(
        Runner(None), rs, "original", tile, identity={"bench": 1}, attrs={"n_trees": trees}
    )
    return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}


def one_tile(run: Path, n: int, tile: int) -> dict[str, float]:
    """Parts of one off-diagonal tile task, timed on the driver (median of 5).

    The kernel includes sorting both blocks (a tile task sorts each block once
    per process, so amortised over many tiles it costs less than this).
    Times are this process's CPU time (``time.process_time``: zarr compresses on
    its own threads), which other processes on a busy machine inflate far less than
    wall-clock time.
    """
    import numpy as np

    from distforest.forests import tiles
    from distforest.kernels.transpose import transposed
    from distforest.store.run_store import read_rows, task_array

    path = str(run)
    rows_i, rows_j = slice(0, tile), slice(tile, min(2 * tile, n))
    arr = task_array(path, "proximity", "r+")  # opened as tile tasks open it
    counts = str(arr.dtype) if arr.dtype.kind in "iu" else None
    parts: dict[str, list[float]] = {k: [] for k in ("read_s", "kernel_s", "write_s", "mirror_s")}
    clock = time.process_time
    for _ in range(5):
        t = clock()
        block_i = {"leaves": read_rows(path, "leaves", rows_i)}
        block_j = {"leaves": read_rows(path, "leaves", rows_j)}
        parts["read_s"].append(clock() - t)
        t = clock()
        extra = () if counts is None else (counts,)  # float32 stores: schema_version 1
        values = np.asarray(tiles.compute_tile("original", block_i, block_j, *extra))
        parts["kernel_s"].append(clock() - t)
        t = clock()
        arr[rows_i, rows_j] = values
        parts["write_s"].append(clock() - t)
        t = clock()
        arr[rows_j, rows_i] = transposed(values)
        parts["mirror_s"].append(clock() - t)
    return {k: statistics.median(v) for k, v in parts.items()}


def main(argv: list[str] | None = None) -> None:
    ap = make_parser(__doc__)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--tile", type=int, default=2048)
    ap.add_argument("--workdir", default="/tmp/dftiles")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--procs", type=int, default=2, help="processes writing the floor")
    args = ap.parse_args(argv)
    wd = Path(args.workdir)
    wd.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"uptime_before": _uptime(), "n": args.n, "trees": args.trees}
    fitted = fitted_store(wd, args.n, args.trees)
    run = wd / "run.zarr"
    phases = [tile_phase(fitted, run, args.tile, args.trees) for _ in range(args.repeat)]
    out["tile_phase"] = min(phases, key=lambda p: p["tiles_s"])
    out["tile_phase_all_s"] = [p["tiles_s"] for p in phases]
    out["in_process"] = in_process_phase(fitted, run, args.tile, args.trees)
    out["one_tile"] = one_tile(run, args.n, args.tile)
    out["proximity_bytes"] = bp.du_bytes(run / "proximity")
    content = bp.measure_tiles(run, args.n, args.tile, args.trees)
    spec = {"density": content["density"], "k_probs": content["k_probs"],
            "trees": args.trees, "pool": 4}  # fmt: skip
    floor = wd / "floor.zarr"
    floors = []
    for _ in range(args.repeat):
        shutil.rmtree(floor, ignore_errors=True)
        res = subprocess.run(
            bp._self_cmd("iofloor", store=str(floor), n=args.n, tile=args.tile, procs=args.procs,
                         spec=spec),
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        floors.append(child_result(res.stdout))
    out["floor"] = min(floors, key=lambda f: f["floor_s"])
    out["floor_all_s"] = [f["floor_s"] for f in floors]
    out["floor_bytes"] = bp.du_bytes(floor)
    out["ratio"] = out["tile_phase"]["tiles_s"] / out["floor"]["floor_s"]
    if "cpu_s" in out["floor"]:
        out["cpu_ratio"] = out["tile_phase"]["workers_cpu_s"] / out["floor"]["cpu_s"]
    out["uptime_after"] = _uptime()
    shutil.rmtree(floor, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
