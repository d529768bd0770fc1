"""Benchmark ``distforest proximity`` against scikit-learn + numpy and the Zarr I/O floor.

Run by hand (never in CI)::

    .venv/bin/python benchmarks/bench_proximity.py \
        [--sizes 5000,20000,100000] [--trees 100] [--workdir /tmp/dfbench] \
        [--skip-sklearn-above 20000]

For every n, on the same data (``make_classification(n, 20, n_informative=10,
random_state=0)`` saved as Parquet, target column ``y``), in this order and
each in its own subprocess:

1. ``distforest proximity data.parquet --target y --trees T --seed 0 --out
   prox.zarr --overwrite --quiet`` under ``/usr/bin/time -v``, while this
   script samples the summed RSS of the whole process tree (CLI + Dask
   workers + helpers) with psutil every 0.2 s.  The store's size (du) and the
   density and value distribution of its proximity tiles are then measured.
2. A phase profile (same code path as the CLI, timed step by step):
   LocalCluster start, ``ProximityForest.fit``, ``save`` and the tile phase,
   with the Dask task stream (worker utilisation, tile tasks per second) and
   a driver-side timing of one tile task's parts (read leaves, kernel, write).
3. The I/O floor: writing an n x n Zarr v3 array stored exactly as
   distforest stores the proximity (same dtype, fill value and codecs, from
   :func:`distforest.store.schema.matrix_encoding`: uint8 counts of trees
   with LZ4 + bit-shuffle for T < 255; it was float32 + zstd before
   schema_version 2), chunks (tile, tile), tile by tile, with synthetic
   tiles that have the measured density and value distribution (see
   :func:`synthetic_tiles`), by as many processes as the cluster has workers.
4. The usual scikit-learn recipe: ``RandomForestClassifier(n_jobs=2)``,
   ``apply()`` and a dense float64 n x n numpy accumulator, when it fits in
   memory.

Results go to ``benchmarks/results/proximity.md`` (and the raw numbers to
``proximity.json`` next to it), rewritten after every size.  Big outputs are
deleted after each size.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import RESULTS as RESULTS_DIR
from _measure import (
    TIME_BIN,
    emit,
    machine_info,
    package_versions,
    run_measured,
    write_markdown,
)
from _measure import parser as make_parser

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS_MD = RESULTS_DIR / "proximity.md"
RESULTS_JSON = RESULTS_DIR / "proximity.json"
N_FEATURES = 20
GB = 1e9
#: Goals (issue 14): n = 20k no slower than forestgeom end to end; n = 100k within
#: 1.5x of (fit + I/O floor) with a peak RSS under 2 GB; n = 200k completes.
TARGET_PEER_N = 20_000
TARGET_BIG_N, TARGET_RSS_GB, TARGET_FLOOR_RATIO = 100_000, 2.0, 1.5
TARGET_HUGE_N = 200_000
#: The forestgeom release measured side by side (PyPI, in the peers' own venv).
FORESTGEOM_VERSION = "0.4.0"


# ---------------------------------------------------------------------------
# Measuring a subprocess
# ---------------------------------------------------------------------------


def measured(cmd: list[str], cwd: Path, label: str, args: argparse.Namespace) -> dict[str, Any]:
    """``run_measured``, repeated (up to ``--attempts``) while other load spoils it.

    Keeps the attempt with the least CPU used by other processes.
    """
    best: dict[str, Any] | None = None
    for attempt in range(1, args.attempts + 1):
        run = run_measured(cmd, cwd, label, args.quiet_wait)
        run["attempt"] = attempt
        if best is None or (run["returncode"] == 0 and run["foreign_load"] < best["foreign_load"]):
            best = run
        if run["returncode"] != 0 or run["foreign_load"] <= args.max_other_load:
            break
        if attempt < args.attempts:
            print(f"  [{label}] repeating: the machine was busy", flush=True)
    assert best is not None
    return best


def _self_cmd(child: str, python: str | None = None, **kwargs: Any) -> list[str]:
    return [
        python or sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        child,
        "--child-args",
        json.dumps(kwargs),
    ]


# ---------------------------------------------------------------------------
# Child: the scikit-learn + numpy recipe
# ---------------------------------------------------------------------------


def _fit_random_forest(data: str, trees: int, seed: int) -> tuple[dict[str, float], Any, Any, Any]:
    """Import, read the Parquet data and fit the peers' scikit-learn forest, timed.

    Returns the times so far (``t0``, ``imports_s``, ``load_s``, ``fit_s``), the fitted
    forest, the features and the target.
    """
    t0 = time.perf_counter()
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier

    t_import = time.perf_counter()
    df = pd.read_parquet(data)
    y = df.pop("y").to_numpy()
    X = df.to_numpy()
    t_load = time.perf_counter()
    rf = RandomForestClassifier(n_estimators=trees, n_jobs=2, random_state=seed).fit(X, y)
    t_fit = time.perf_counter()
    times = {"imports_s": t_import - t0, "load_s": t_load - t_import, "fit_s": t_fit - t_load}
    return times, rf, X, y


def child_sklearn(data: str, trees: int, seed: int) -> None:
    import numpy as np

    times, rf, X, _ = _fit_random_forest(data, trees, seed)
    n = X.shape[0]
    t_fit = time.perf_counter()
    leaves = rf.apply(X)
    t_apply = time.perf_counter()
    prox = np.zeros((n, n))
    for t in range(trees):
        prox += leaves[:, t][:, None] == leaves[:, t][None, :]
    prox /= trees
    t_prox = time.perf_counter()
    emit(
        {
            **times,
            "apply_s": t_apply - t_fit,
            "proximity_s": t_prox - t_apply,
            "density": float(np.count_nonzero(prox) - n) / (n * n - n),
            "dtype": str(prox.dtype),
        }
    )


# ---------------------------------------------------------------------------
# Child: forestgeom (sparse proximity in RAM), run in the peer's own environment
# ---------------------------------------------------------------------------


def child_forestgeom(data: str, trees: int, seed: int) -> None:
    """forestgeom's recipe: fit the scikit-learn forest, then ``Proximity(rf)``.

    Runs under the peer environment's Python (``--peer-python``), which has
    forestgeom and its dependencies but not distforest.
    """
    t0 = time.perf_counter()
    import numpy as np
    from forestgeom import Proximity
    from forestgeom import __version__ as fg_version

    t_import = time.perf_counter() - t0
    times, rf, X, y = _fit_random_forest(data, trees, seed)
    n = X.shape[0]
    t_fit = time.perf_counter()
    prox = Proximity(rf).fit(X, y).transform(X)  # rf is fitted: not refitted
    t_prox = time.perf_counter()
    diag = prox.diagonal()
    emit(
        {
            **times,
            "imports_s": times["imports_s"] + t_import,
            "proximity_s": t_prox - t_fit,
            "density": float(prox.nnz - np.count_nonzero(diag)) / (n * n - n),
            "format": type(prox).__name__,
            "dtype": str(prox.dtype),
            "matrix_bytes": int(prox.data.nbytes + prox.indices.nbytes + prox.indptr.nbytes),
            "forestgeom_version": fg_version,
        }
    )


def peer_python(args: argparse.Namespace) -> str:
    """The Python of the peers' own environment, created on first use.

    forestgeom is a peer, not a distforest dependency: it goes in
    ``<workdir>/peer-env`` (or the environment given with ``--peer-python``).
    """
    if args.peer_python:
        return str(args.peer_python)
    env = Path(args.workdir) / "peer-env"
    python = env / "bin" / "python"
    if not python.exists():
        print(f"creating the peers' environment in {env}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"forestgeom=={FORESTGEOM_VERSION}",
             "pandas", "pyarrow", "psutil"],
            check=True,
        )  # fmt: skip
    return str(python)


# ---------------------------------------------------------------------------
# Child: phase profile of the distforest pipeline
# ---------------------------------------------------------------------------


def _task_stream_summary(
    records: list[dict[str, Any]], prefix: str, wall: float, threads: int
) -> dict[str, Any]:
    compute, transfer, other, count = 0.0, 0.0, 0.0, 0
    for rec in records:
        key = rec["key"] if isinstance(rec["key"], str) else str(rec["key"])
        if not key.startswith(prefix):
            continue
        count += 1
        for ss in rec["startstops"]:
            d = ss["stop"] - ss["start"]
            if ss["action"] == "compute":
                compute += d
            elif ss["action"] == "transfer":
                transfer += d
            else:
                other += d
    return {
        "tasks": count,
        "compute_s": compute,
        "transfer_s": transfer,
        "other_s": other,
        "mean_compute_s": compute / count if count else 0.0,
        "utilisation": compute / (wall * threads) if wall > 0 else 0.0,
    }


def _time_one_tile(store: str, scratch: str, n: int, tile: int) -> dict[str, Any]:
    """Time the parts of one off-diagonal tile task on the driver (median of 3)."""
    import statistics

    import zarr

    from distforest.forests.tiles import compute_tile
    from distforest.kernels.transpose import transposed
    from distforest.store.run_store import read_rows

    trees = zarr.open_array(store, path="leaves", mode="r").shape[1]
    enc = _create_like_proximity(scratch, n, tile, trees)
    counts = enc.dtype if enc.is_counts else None
    j0 = tile if n > tile else 0
    rows_i, rows_j = slice(0, min(tile, n)), slice(j0, min(j0 + tile, n))
    parts: dict[str, list[float]] = {
        "read_s": [],
        "kernel_s": [],
        "write_s": [],
        "write_mirror_s": [],
    }
    for _ in range(3):
        t = time.perf_counter()
        li = read_rows(store, "leaves", rows_i)
        lj = read_rows(store, "leaves", rows_j)
        parts["read_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        block = compute_tile("original", {"leaves": li}, {"leaves": lj}, counts)
        parts["kernel_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        zarr.open_array(scratch, mode="r+")[rows_i, rows_j] = block
        parts["write_s"].append(time.perf_counter() - t)
        t = time.perf_counter()
        zarr.open_array(scratch, mode="r+")[rows_j, rows_i] = transposed(block)
        parts["write_mirror_s"].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in parts.items()}


def child_profile(data: str, trees: int, seed: int, store: str, tiles: bool) -> None:
    t0 = time.perf_counter()
    import dask

    from distforest.forests.proximity_forest import ProximityForest
    from distforest.io import load_table
    from distforest.parallel.cluster import connect

    t_import = time.perf_counter()
    out: dict[str, Any] = {"imports_s": t_import - t0}
    table = load_table(data, target="y")
    out["load_s"] = time.perf_counter() - t_import
    length = 1_000_000
    with dask.config.set(
        {
            "distributed.scheduler.dashboard.status.task-stream-length": length,
            "distributed.scheduler.dashboard.tasks.task-stream-length": length,
        }
    ):
        t = time.perf_counter()
        with connect() as client:
            from distributed import get_task_stream

            out["cluster_start_s"] = time.perf_counter() - t
            threads = sum(client.nthreads().values())
            out["threads"] = threads
            forest = ProximityForest(n_estimators=trees, random_state=seed).set_execution(client)
            with get_task_stream(client=client) as ts:
                t = time.perf_counter()
                forest.fit(table)
                out["fit_s"] = time.perf_counter() - t
            out["fit_tasks"] = _task_stream_summary(ts.data, "fit-trees", out["fit_s"], threads)
            if tiles:
                t = time.perf_counter()
                forest.save(store, overwrite=True)
                out["save_s"] = time.perf_counter() - t
                with get_task_stream(client=client) as ts:
                    t = time.perf_counter()
                    forest.proximity(store=store)
                    out["tiles_s"] = time.perf_counter() - t
                out["tile_tasks"] = _task_stream_summary(
                    ts.data, "proximity-tiles", out["tiles_s"], threads
                )
            t = time.perf_counter()
        out["cluster_close_s"] = time.perf_counter() - t
    if tiles:
        scratch = str(Path(store).with_name("one_tile_scratch.zarr"))
        out["one_tile"] = _time_one_tile(store, scratch, table.n_samples, forest.tile_size)
        shutil.rmtree(scratch, ignore_errors=True)
    emit(out)


# ---------------------------------------------------------------------------
# Child: the I/O floor
# ---------------------------------------------------------------------------


def _create_like_proximity(path: str, n: int, tile: int, trees: int) -> Any:
    """A new n x n array stored as distforest stores the proximity; returns its encoding."""
    import zarr

    from distforest.store.schema import matrix_encoding

    enc = matrix_encoding("proximity", n_trees=trees)
    arr = zarr.create_array(
        store=path,
        shape=(n, n),
        chunks=(tile, tile),
        dtype=enc.dtype,
        fill_value=enc.fill_value,
        compressors=enc.compressors or "auto",
        zarr_format=3,
        overwrite=True,
    )
    arr.attrs.update(enc.attrs())
    return enc


def synthetic_tiles(
    tile: int,
    density: float,
    k_probs: list[float],
    trees: int,
    count: int,
    seed: int,
    dtype: str = "float32",
) -> list[Any]:
    """``count`` tiles like off-diagonal proximity tiles, plus one diagonal tile.

    Every cell is non-zero with probability ``density`` (independently, so the
    non-zeros sit at uniformly random positions, as they do in a proximity
    matrix of shuffled rows); a non-zero cell holds ``k / trees`` (float
    ``dtype``) or ``k`` itself (integer ``dtype``: stored counts) with ``k``
    drawn from ``k_probs`` (the measured distribution of shared-leaf counts
    ``k = 1..trees``).  The last tile has 1.0 (``trees``) on its diagonal.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    ks = np.arange(1, trees + 1, dtype=np.float64)
    probs = np.asarray(k_probs, dtype=np.float64)
    probs /= probs.sum()
    counts = np.dtype(dtype).kind in "iu"
    scale = 1.0 if counts else float(trees)
    tiles = []
    for i in range(count + 1):
        mask = rng.random((tile, tile)) < density
        values = np.zeros((tile, tile), dtype=dtype)
        values[mask] = (rng.choice(ks, size=int(mask.sum()), p=probs) / scale).astype(dtype)
        if i == count:
            np.fill_diagonal(values, trees if counts else 1.0)
        tiles.append(values)
    return tiles


def _floor_worker(
    path: str,
    n: int,
    tile: int,
    blocks: list[tuple[int, int]],
    spec: dict[str, Any],
    seed: int,
    barrier: Any,
    queue: Any,
) -> None:
    import zarr

    # written as distforest writes: without zarr's per-chunk "equals the fill value?" check
    arr = zarr.open_array(path, mode="r+").with_config({"write_empty_chunks": True})
    pool = synthetic_tiles(
        tile, spec["density"], spec["k_probs"], spec["trees"], spec["pool"], seed, str(arr.dtype)
    )
    barrier.wait()
    start = time.time()
    cpu = time.process_time()
    raw = 0
    for a, b in blocks:
        ri = slice(a * tile, min((a + 1) * tile, n))
        rj = slice(b * tile, min((b + 1) * tile, n))
        src = pool[-1] if a == b else pool[(7 * a + b) % (len(pool) - 1)]
        block = src[: ri.stop - ri.start, : rj.stop - rj.start]
        arr[ri, rj] = block
        raw += block.nbytes
    queue.put((start, time.time(), raw, time.process_time() - cpu))


def child_iofloor(store: str, n: int, tile: int, procs: int, spec: dict[str, Any]) -> None:
    import multiprocessing as mp

    import zarr

    _create_like_proximity(store, n, tile, spec["trees"])
    arr = zarr.open_array(store, mode="r")
    codecs = {"serializer": str(arr.serializer), "compressors": [str(c) for c in arr.compressors]}
    nb = math.ceil(n / tile)
    blocks = [(a, b) for a in range(nb) for b in range(nb)]
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(procs), ctx.Queue()
    workers = [
        ctx.Process(
            target=_floor_worker,
            args=(store, n, tile, blocks[w::procs], spec, 1000 + w, barrier, queue),
        )
        for w in range(procs)
    ]
    for w in workers:
        w.start()
    times = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    emit(
        {
            "floor_s": max(t[1] for t in times) - min(t[0] for t in times),
            "per_process_s": [t[1] - t[0] for t in times],
            "tiles": len(blocks),
            "raw_bytes": sum(t[2] for t in times),
            "cpu_s": sum(t[3] for t in times),
            "dtype": str(arr.dtype),
            "fill_value": str(arr.fill_value),
            "codecs": codecs,
            "procs": procs,
        }
    )


# ---------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------


def du_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    res = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
    return int(res.stdout.split()[0]) * 1024


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def make_data(n: int, path: Path) -> None:
    import pandas as pd
    from sklearn.datasets import make_classification

    X, y = make_classification(n, N_FEATURES, n_informative=10, random_state=0)
    df = pd.DataFrame(X, columns=[f"x{i}" for i in range(N_FEATURES)])
    df["y"] = y
    df.to_parquet(path)


def measure_tiles(store: Path, n: int, tile: int, trees: int, max_tiles: int = 8) -> dict:
    """Density and shared-leaf-count distribution of off-diagonal proximity tiles."""
    import numpy as np
    import zarr

    from distforest.io.matrices import decode

    arr = zarr.open_array(str(store), path="proximity", mode="r")
    attrs = dict(arr.attrs)
    nb = math.ceil(n / tile)
    pairs = [(a, b) for a in range(nb) for b in range(a + 1, nb)]
    step = max(1, len(pairs) // max_tiles)
    pairs = pairs[::step][:max_tiles] or [(0, 0)]
    counts = np.zeros(trees + 1, dtype=np.int64)
    cells = 0
    for a, b in pairs:
        block = arr[a * tile : min((a + 1) * tile, n), b * tile : min((b + 1) * tile, n)]
        block = decode(block, attrs)
        if a == b:
            block = block[~np.eye(block.shape[0], dtype=bool)]
        k = np.rint(np.asarray(block, dtype=np.float64) * trees).astype(np.int64).ravel()
        counts += np.bincount(k, minlength=trees + 1)[: trees + 1]
        cells += k.size
    nonzero = int(counts[1:].sum())
    diag = decode(arr[0 : min(tile, n), 0 : min(tile, n)], attrs)
    return {
        "tiles_sampled": len(pairs),
        "density": nonzero / cells,
        "k_probs": (counts[1:] / max(1, nonzero)).tolist(),
        "mean_nonzero_value": float((np.arange(1, trees + 1) * counts[1:]).sum())
        / max(1, nonzero)
        / trees,
        "diagonal_all_ones": bool(np.all(np.diagonal(diag) == 1.0)),
        "nan_in_first_tile": bool(np.isnan(diag).any()),
    }


def sklearn_need_bytes(n: int, trees: int) -> int:
    # float64 accumulator + bool temporary of the comparison + leaves and data.
    return n * n * 8 + n * n + n * trees * 8 + n * N_FEATURES * 8 * 2


def store_need_bytes(n: int) -> int:
    # Compressed proximity is ~10% of raw at n=20k; allow 35% (two stores never coexist).
    return int(n * n * 4 * 0.35) + 200 * 10**6


def bench_size(n: int, args: argparse.Namespace, machine: dict[str, Any]) -> dict[str, Any]:
    wd = Path(args.workdir) / f"n{n}"
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    res: dict[str, Any] = {"n": n, "trees": args.trees}
    data = wd / "data.parquet"
    print(f"n={n}: generating data", flush=True)
    make_data(n, data)
    free = free_bytes(wd)
    res["free_disk_before_bytes"] = free
    if free < store_need_bytes(n):
        res["skipped"] = (
            f"not enough disk: {free / GB:.0f} GB free, ~{store_need_bytes(n) / GB:.0f} GB needed"
        )
        print("  " + res["skipped"], flush=True)
        shutil.rmtree(wd, ignore_errors=True)
        return res

    # 1. The CLI, end to end.
    store = wd / "prox.zarr"
    # --quiet is an option of the command group, so it goes before the subcommand.
    cli = [
        args.distforest,
        "--quiet",
        "proximity",
        "data.parquet",
        "--target",
        "y",
        "--trees",
        str(args.trees),
        "--seed",
        "0",
        "--out",
        "prox.zarr",
        "--overwrite",
    ]
    res["distforest"] = measured(cli, wd, "distforest", args)
    if res["distforest"]["returncode"] == 0:
        res["store_bytes"] = du_bytes(store)
        res["proximity_array_bytes"] = du_bytes(store / "proximity")
        res["content"] = measure_tiles(store, n, args.tile, args.trees)
        print(
            f"  store {res['store_bytes'] / GB:.2f} GB on disk, tile density "
            f"{res['content']['density']:.4f}",
            flush=True,
        )
    shutil.rmtree(store, ignore_errors=True)

    # 2. Phase profile (fit time, and the tile phase in detail).
    pstore = wd / "profile.zarr"
    res["profile"] = measured(
        _self_cmd(
            "profile",
            data=str(data),
            trees=args.trees,
            seed=0,
            store=str(pstore),
            tiles=not args.fit_only_profile,
        ),
        wd,
        "profile",
        args,
    )
    shutil.rmtree(pstore, ignore_errors=True)

    # 3. The I/O floor, with the content measured in step 1.
    content = res.get("content")
    if content is None:
        content = {"density": 0.1, "k_probs": [1.0] + [0.0] * (args.trees - 1)}
        res["content_assumed"] = True
    spec = {
        "density": content["density"],
        "k_probs": content["k_probs"],
        "trees": args.trees,
        "pool": 4,
    }
    fstore = wd / "floor.zarr"
    res["floor"] = measured(
        _self_cmd(
            "iofloor", store=str(fstore), n=n, tile=args.tile, procs=args.io_procs, spec=spec
        ),
        wd,
        "iofloor",
        args,
    )
    res["floor_store_bytes"] = du_bytes(fstore)
    shutil.rmtree(fstore, ignore_errors=True)

    # 4. scikit-learn + numpy, when it fits.
    need = sklearn_need_bytes(n, args.trees)
    res["sklearn_need_bytes"] = need
    if n > args.skip_sklearn_above:
        res["sklearn_skipped"] = (
            f"skipped: needs ~{need / GB:.0f} GB "
            f"(n > --skip-sklearn-above {args.skip_sklearn_above})"
        )
    elif need > 0.85 * machine["mem_available_bytes"]:
        res["sklearn_skipped"] = (
            f"skipped: needs ~{need / GB:.0f} GB, "
            f"{machine['mem_available_bytes'] / GB:.0f} GB available"
        )
    else:
        res["sklearn"] = measured(
            _self_cmd("sklearn", data=str(data), trees=args.trees, seed=0),
            wd,
            "sklearn",
            args,
        )
    if "sklearn_skipped" in res:
        print("  sklearn " + res["sklearn_skipped"], flush=True)

    # 5. forestgeom (sparse matrix in RAM), in its own environment.
    if n > args.skip_forestgeom_above:
        res["forestgeom_skipped"] = (
            f"skipped (n > --skip-forestgeom-above {args.skip_forestgeom_above})"
        )
    elif not args.no_forestgeom:
        res["forestgeom"] = measured(
            _self_cmd("forestgeom", python=args.peer_python, data=str(data), trees=args.trees,
                      seed=0),
            wd,
            "forestgeom",
            args,
        )  # fmt: skip
    shutil.rmtree(wd, ignore_errors=True)
    return res


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / GB:.2f} GB"


def derived(r: dict[str, Any]) -> dict[str, Any]:
    """Headline numbers of one size (None where not measured)."""
    d: dict[str, Any] = {}
    df = r.get("distforest", {})
    ok = df.get("returncode") == 0
    d["df_wall"] = df.get("wall_s") if ok else None
    d["df_rss"] = df.get("peak_rss_tree_bytes") if ok else None
    d["df_rss_single"] = df.get("max_rss_single_bytes") if ok else None
    prof = r.get("profile", {}).get("child", {})
    d["fit"] = prof.get("fit_s")
    d["cluster_start"] = prof.get("cluster_start_s")
    fl = r.get("floor", {}).get("child", {})
    d["floor"] = fl.get("floor_s")
    sk = r.get("sklearn", {})
    sk_ok = sk.get("returncode") == 0
    d["sk_wall"] = sk.get("wall_s") if sk_ok else None
    d["sk_rss"] = sk.get("peak_rss_tree_bytes") if sk_ok else None
    d["speedup"] = d["sk_wall"] / d["df_wall"] if d["sk_wall"] and d["df_wall"] else None
    fg = r.get("forestgeom", {})
    fg_ok = fg.get("returncode") == 0
    d["fg_wall"] = fg.get("wall_s") if fg_ok else None
    d["fg_rss"] = fg.get("peak_rss_tree_bytes") if fg_ok else None
    d["vs_fg"] = d["fg_wall"] / d["df_wall"] if d["fg_wall"] and d["df_wall"] else None
    if d["df_wall"] and d["fit"] is not None and d["floor"] is not None:
        d["floor_ratio"] = d["df_wall"] / (d["fit"] + d["floor"])
    else:
        d["floor_ratio"] = None
    return d


def foreign_load(r: dict[str, Any]) -> float:
    runs = (r.get(k, {}) for k in ("distforest", "profile", "floor", "sklearn", "forestgeom"))
    return max((run.get("foreign_load", 0.0) for run in runs), default=0.0)


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("**met**" if ok else "**missed**")


def _runs_lines(results: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """One line per earlier run whose rows were kept (``--append``)."""
    runs: dict[str, list[int]] = {}
    labels: dict[str, dict[str, Any]] = {}
    for r in results:
        run = r.get("run")
        if run and run["date"] != meta["date"]:
            runs.setdefault(run["date"], []).append(r["n"])
            labels[run["date"]] = run
    return [
        f"- Rows n = {', '.join(f'{n:,}' for n in ns)} come from an earlier run: "
        f"{date}, `{labels[date]['command']}`, distforest git {labels[date]['distforest']}"
        for date, ns in runs.items()
    ]


def _peer_rows(
    results: list[dict[str, Any]], peer: str, more: Callable[[dict[str, Any]], list[str]]
) -> list[str]:
    """Table rows of one peer's timed steps: imports, load, fit, then ``more(child)``."""
    rows = []
    for r in results:
        c = r.get(peer, {}).get("child")
        if c:
            cells = [_s(c["imports_s"]), _s(c["load_s"]), _s(c["fit_s"]), *more(c)]
            rows.append(f"| {r['n']:,} | " + " | ".join(cells) + " |")
    return rows


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    m = meta["machine"]
    lines = [
        "# Proximity benchmark: distforest vs forestgeom vs scikit-learn + numpy vs the Zarr "
        "I/O floor",
        "",
        f"- Date: {meta['date']}",
        f"- Machine: {m['cpu_model']}, {m['cores']} cores ({m['usable_cores']} usable), "
        f"{m['mem_total_bytes'] / 2**30:.1f} GiB RAM (MemTotal), Linux {m['kernel']}, "
        f"Python {m['python']}",
        f"- Free disk in workdir at start: {meta['free_disk'] / GB:.0f} GB ({meta['workdir']})",
        f"- Command: `{meta['command']}`",
        *_runs_lines(results, meta),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "Data: `make_classification(n, 20, n_informative=10, random_state=0)` as Parquet "
        f"(target column `y`); T = {meta['trees']} trees, seed 0.  Times are wall-clock "
        "seconds of the whole process (`/usr/bin/time -v`, Python start-up and cluster "
        "start included).  *Peak RSS (tree)* is the largest sum of RSS over the process "
        "tree (CLI + Dask worker processes + helpers), sampled with psutil every 0.2 s "
        "(shared pages such as libraries count once per process, so this over-counts "
        "a little); *max single* is `/usr/bin/time`'s maximum RSS of the largest single "
        "process.",
        "",
        "## Results",
        "",
        "| n | distforest wall | peak RSS (tree) | max single | forestgeom wall | forestgeom "
        "peak RSS | forestgeom / distforest | sklearn recipe wall | sklearn peak RSS | speedup "
        "| fit | I/O floor | wall / (fit + floor) | store on disk | floor store | other load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "skipped" in r:
            lines.append(f"| {r['n']:,} | {r['skipped']} |" + " |" * 15)
            continue
        d = derived(r)
        sk = r.get("sklearn_skipped") or _s(d["sk_wall"])
        sk_rss = "-" if "sklearn_skipped" in r else _gb(d["sk_rss"])
        fg = "skipped" if "forestgeom_skipped" in r else _s(d["fg_wall"])
        lines.append(
            f"| {r['n']:,} | {_s(d['df_wall'])} | {_gb(d['df_rss'])} | {_gb(d['df_rss_single'])} "
            f"| {fg} | {_gb(d['fg_rss'])} | "
            + ("-" if d["vs_fg"] is None else f"{d['vs_fg']:.2f}")
            + f" | {sk} | {sk_rss} | "
            + ("-" if d["speedup"] is None else f"{d['speedup']:.1f}x")
            + f" | {_s(d['fit'])} | {_s(d['floor'])} | "
            + ("-" if d["floor_ratio"] is None else f"{d['floor_ratio']:.2f}")
            + f" | {_gb(r.get('store_bytes'))} | {_gb(r.get('floor_store_bytes'))} "
            f"| {foreign_load(r):.0%} |"
        )
    lines += [
        "",
        "*forestgeom / distforest* = forestgeom wall / distforest wall (above 1: distforest "
        "is faster).  *speedup* = sklearn recipe wall / distforest wall.  "
        "*fit* = `ProximityForest.fit` alone on an already running LocalCluster (from the "
        "phase profile, a separate run).  "
        "*store on disk* = `du` of the whole distforest store (proximity + leaves + inbag + "
        "forest); *floor store* = `du` of the I/O-floor array.  *other load* = the largest "
        "share of the CPUs used by processes outside the measured process tree during any "
        "of this size's runs (system busy time minus the tree's user + sys time); above a "
        "few per cent the machine was not quiet and the times are inflated.  Every run "
        "starts only once the CPUs have been idle for a few seconds, and is repeated (up to "
        "`--attempts` times) when other processes used more than `--max-other-load` of the "
        "CPUs during it; the least disturbed attempt is reported.",
        "",
        "## Targets",
        "",
    ]
    by_n = {r["n"]: r for r in results if "skipped" not in r}
    r20 = by_n.get(TARGET_PEER_N)
    d20 = derived(r20) if r20 else None
    vs = d20["vs_fg"] if d20 else None
    lines.append(
        f"- n = {TARGET_PEER_N:,}: end to end no slower than forestgeom's sparse in-RAM "
        "result: "
        + (
            "not measured"
            if vs is None
            else f"{d20['df_wall']:.1f} s vs {d20['fg_wall']:.1f} s, {_verdict(vs >= 1.0)}"
        )
    )
    rb = by_n.get(TARGET_BIG_N)
    db = derived(rb) if rb else None
    fr = db["floor_ratio"] if db else None
    lines.append(
        f"- n = {TARGET_BIG_N:,}: total time within {TARGET_FLOOR_RATIO}x of (fit + I/O "
        "floor): "
        + (
            "not measured"
            if fr is None
            else f"{db['df_wall']:.1f} s / ({db['fit']:.1f} + {db['floor']:.1f}) s = {fr:.2f}, "
            f"{_verdict(fr <= TARGET_FLOOR_RATIO)}"
        )
    )
    rss = db["df_rss"] if db else None
    lines.append(
        f"- n = {TARGET_BIG_N:,}: peak RSS under {TARGET_RSS_GB:.0f} GB: "
        + (
            "not measured"
            if rss is None
            else f"{rss / GB:.2f} GB summed over the process tree, "
            f"{_verdict(rss < TARGET_RSS_GB * GB)}"
            + ("" if db["fg_rss"] is None else f" (forestgeom: {db['fg_rss'] / GB:.2f} GB)")
        )
    )
    rh = by_n.get(TARGET_HUGE_N)
    dh = derived(rh) if rh else None
    lines.append(
        f"- n = {TARGET_HUGE_N:,}: completes: "
        + (
            "not measured"
            if not dh or dh["df_wall"] is None
            else f"{dh['df_wall']:.1f} s, {_gb(rh.get('store_bytes'))} on disk, peak RSS "
            f"{_gb(dh['df_rss'])}, **met**"
        )
    )
    lines += ["", "## Where the time goes (phase profile, separate run of the same code path)", ""]
    lines += [
        "| n | imports | load | cluster start | fit | fit-task utilisation | save | tiles | "
        "tile tasks | tiles/s | tile-task utilisation | mean tile task | one tile: read / "
        "kernel / write / write mirror | cluster close |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        p = r.get("profile", {}).get("child")
        if not p:
            continue
        ft = p.get("fit_tasks", {})
        tt = p.get("tile_tasks", {})
        one = p.get("one_tile")
        tiles_s = p.get("tiles_s")
        rate = tt.get("tasks", 0) / tiles_s if tiles_s else None
        lines.append(
            f"| {r['n']:,} | {_s(p.get('imports_s'))} | {_s(p.get('load_s'))} "
            f"| {_s(p.get('cluster_start_s'))} | {_s(p.get('fit_s'))} "
            f"| {ft.get('utilisation', 0):.0%} | {_s(p.get('save_s'))} | {_s(tiles_s)} "
            f"| {tt.get('tasks', '-')} | "
            + ("-" if rate is None else f"{rate:.1f}")
            + f" | {tt.get('utilisation', 0):.0%} | "
            + (f"{tt['mean_compute_s']:.3f} s" if tt else "-")
            + " | "
            + (
                "-"
                if not one
                else " / ".join(
                    f"{one[k]:.3f}" for k in ("read_s", "kernel_s", "write_s", "write_mirror_s")
                )
                + " s"
            )
            + f" | {_s(p.get('cluster_close_s'))} |"
        )
    lines += [
        "",
        "*utilisation* = summed task compute time (Dask task stream) / (phase wall x "
        "worker threads).  *one tile* = one off-diagonal tile task's parts timed on the "
        "driver after the run (median of 3): read both leaf blocks from the store, the "
        "numba kernel, write the tile, write its transpose.",
        "",
        "| n | sklearn: imports | load | fit (n_jobs=2) | apply | dense proximity loop |",
        "|---:|---:|---:|---:|---:|---:|",
        *_peer_rows(results, "sklearn", lambda c: [_s(c["apply_s"]), _s(c["proximity_s"])]),
        "",
        "| n | forestgeom: imports | load | fit (n_jobs=2) | Proximity(rf).fit(X, y).transform(X) "
        "| sparse matrix in RAM | density |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        *_peer_rows(
            results,
            "forestgeom",
            lambda c: [
                _s(c["proximity_s"]),
                f"{_gb(c['matrix_bytes'])} ({c['format']}, {c['dtype']})",
                f"{c['density']:.4f}",
            ],
        ),
    ]
    lines += ["", "## What the I/O floor wrote", ""]
    for r in results:
        fl = r.get("floor", {}).get("child")
        if not fl:
            continue
        c = r.get("content", {})
        lines.append(
            f"- n = {r['n']:,}: a new {fl.get('dtype', 'float32')} {r['n']:,} x {r['n']:,} "
            f"Zarr v3 array stored as distforest stores the proximity, chunks "
            f"{meta['tile']} x {meta['tile']}, fill value {fl.get('fill_value', 'NaN')} (so "
            f"every chunk is written, as in distforest), codecs {fl['codecs']['serializer']} + "
            f"{', '.join(fl['codecs']['compressors'])}; {fl['tiles']} chunks "
            f"({fl['raw_bytes'] / GB:.1f} GB raw) written once each, one `arr[rows, cols] = "
            f"tile` per chunk (zarr's `write_empty_chunks=True`: no fill-value check, as "
            f"distforest writes), split round-robin over {fl['procs']} spawned processes that "
            "open the array once and start together (barrier); time = first start to last "
            "end (tile generation excluded).  Content: each process cycles through 4 "
            "synthetic off-diagonal tiles in which each cell is non-zero with probability "
            f"{c.get('density', float('nan')):.4f} and a non-zero holds k/T (stored as k for "
            "integer types), k drawn from "
            "the distribution of shared-leaf counts, both measured on "
            f"{c.get('tiles_sampled', 0)} off-diagonal tiles of the distforest store "
            f"(mean non-zero value {c.get('mean_nonzero_value', float('nan')):.3f}); "
            "diagonal chunks use one such tile with 1.0 on its diagonal."
            + (" (Content assumed: the distforest run failed.)" if r.get("content_assumed") else "")
        )
    lines += ["", "## Notes", ""]
    lines += [
        "- The sklearn recipe: `RandomForestClassifier(n_estimators=T, n_jobs=2, "
        "random_state=0).fit(X, y)`, `leaves = rf.apply(X)`, `prox = np.zeros((n, n))` "
        "(float64), `prox += leaves[:, t][:, None] == leaves[:, t][None, :]` for every "
        "tree, `prox /= T`.  It keeps the matrix in RAM and writes nothing, so it is "
        "favoured against distforest, which writes a Zarr store.  Its memory need is "
        "9 n^2 bytes (float64 accumulator + bool temporary).",
        "- forestgeom (PyPI, in the benchmark's own virtual environment, never a distforest "
        "dependency): the same `RandomForestClassifier(n_estimators=T, n_jobs=2, "
        "random_state=0).fit(X, y)`, then `Proximity(rf).fit(X, y).transform(X)` (its "
        "default `weight_scheme='uniform'`: Breiman's proximity), a scipy sparse matrix in "
        "RAM; nothing is written to disk.",
        "- distforest runs with its defaults: LocalCluster with one single-threaded "
        "worker process per core, 2048 x 2048 tiles, one task per upper-triangle tile "
        "(writing the tile and its mirror).",
        "- Matrix density (non-zero off-diagonal fraction) measured in the stores: "
        + ", ".join(
            f"n = {r['n']:,}: {r['content']['density']:.4f}" for r in results if r.get("content")
        )
        + "; sklearn's dense matrix: "
        + ", ".join(
            f"n = {r['n']:,}: {r['sklearn']['child']['density']:.4f}"
            for r in results
            if r.get("sklearn", {}).get("child")
        )
        + ".",
    ]
    lines += ["", "## Limits", "", *limits(results), ""]
    return "\n".join(lines)


def limits(results: list[dict[str, Any]]) -> list[str]:
    """Data-driven remarks on where the time goes, per size."""
    out = []
    for r in results:
        p = r.get("profile", {}).get("child")
        d = derived(r) if "skipped" not in r else None
        if not p or not d or not d["df_wall"]:
            continue
        wall = d["df_wall"]
        fixed = (
            p.get("imports_s", 0)
            + p.get("load_s", 0)
            + p.get("cluster_start_s", 0)
            + p.get("cluster_close_s", 0)
        )
        parts = [
            f"start-up (imports, load, cluster start/stop) {fixed:.1f} s",
            f"fit {p['fit_s']:.1f} s",
        ]
        if "tiles_s" in p:
            parts += [f"save {p['save_s']:.1f} s", f"tiles {p['tiles_s']:.1f} s"]
        line = f"- n = {r['n']:,}: CLI wall {wall:.1f} s; profile phases: " + ", ".join(parts)
        if "tiles_s" in p and d["floor"]:
            line += (
                f".  The tile phase is {p['tiles_s'] / d['floor']:.1f}x the I/O floor "
                f"({d['floor']:.1f} s)"
            )
            one = p.get("one_tile")
            if one:
                io = one["read_s"] + one["write_s"] + one["write_mirror_s"]
                line += (
                    f"; per tile task {one['kernel_s']:.3f} s kernel vs {io:.3f} s "
                    "store I/O (read + 2 writes incl. compression)"
                )
        line += "."
        cli, floor = r.get("distforest", {}), r.get("floor", {})
        tt, ft = p.get("tile_tasks"), p.get("fit_tasks")
        if tt and ft and "user_s" in cli and "user_s" in floor:
            floor_cpu = floor["user_s"] + floor["sys_s"]
            line += (
                f"  CPU budget (everything here is CPU-bound on "
                f"{p.get('threads', '?')} worker threads): the CLI used "
                f"{cli['user_s']:.0f} s user + {cli['sys_s']:.0f} s sys CPU; fit tasks "
                f"computed {ft['compute_s']:.0f} s and tile tasks {tt['compute_s']:.0f} s "
                f"({tt['mean_compute_s'] * 1000:.0f} ms a task, two chunks each), while the "
                f"I/O floor run used {floor_cpu:.0f} s CPU ({floor['sys_s']:.0f} s sys; "
                "whole run, process start-up and tile generation included) for the same "
                "chunks: the floor is mostly compression."
            )
        out.append(line)
    return out or ["- (no profile data)"]


def _run_label(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "date": meta["date"],
        "command": meta["command"],
        "distforest": meta["versions"].get("distforest git", ""),
    }


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument(
        "--sizes",
        default="5000,20000,100000",
        help="comma-separated n values [default: %(default)s]",
    )
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--workdir", default="/tmp/dfbench")
    parser.add_argument("--skip-sklearn-above", type=int, default=20_000)
    parser.add_argument(
        "--io-procs",
        type=int,
        default=None,
        help="processes writing the I/O floor [default: usable CPUs, "
        "like distforest's default workers]",
    )
    parser.add_argument(
        "--fit-only-profile",
        action="store_true",
        help="profile only the fit (not save and tiles): faster",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=900,
        help="before each measured run, wait up to this many seconds for other processes "
        "to leave the CPUs idle [default: %(default)s]",
    )
    parser.add_argument(
        "--max-other-load",
        type=float,
        default=0.05,
        help="repeat a run when other processes used more than this share of the CPUs "
        "during it [default: %(default)s]",
    )
    parser.add_argument(
        "--attempts", type=int, default=3, help="runs at most per measurement [default: 3]"
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help=f"keep the sizes already in {RESULTS_JSON.name} (a size measured again "
        "replaces its old row); each row records the run it came from",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help=f"only rewrite {RESULTS_MD.name} from {RESULTS_JSON.name} (no runs)",
    )
    parser.add_argument(
        "--no-forestgeom", action="store_true", help="do not run forestgeom side by side"
    )
    parser.add_argument(
        "--skip-forestgeom-above",
        type=int,
        default=100_000,
        help="run forestgeom only up to this n (it keeps the sparse matrix in RAM) "
        "[default: %(default)s]",
    )
    parser.add_argument(
        "--peer-python",
        help="Python of an environment with forestgeom [default: one made in <workdir>/peer-env]",
    )
    parser.add_argument("--tile", type=int, default=2048, help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-args", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        kwargs = json.loads(args.child_args)
        children = {
            "sklearn": child_sklearn,
            "forestgeom": child_forestgeom,
            "profile": child_profile,
            "iofloor": child_iofloor,
        }
        children[args.child](**kwargs)
        return

    if args.render_only:
        saved = json.loads(RESULTS_JSON.read_text())
        write_markdown(RESULTS_MD, render(saved["results"], saved["meta"]))
        print(f"wrote {RESULTS_MD}", flush=True)
        return

    if not Path(TIME_BIN).exists():
        sys.exit(f"{TIME_BIN} is missing: apt-get update && apt-get install -y time")
    exe_dir = Path(sys.executable).parent
    args.distforest = (
        str(exe_dir / "distforest")
        if (exe_dir / "distforest").exists()
        else shutil.which("distforest")
    )
    if not args.distforest:
        sys.exit("the distforest command is not on PATH; install the package first")
    machine = machine_info()
    if not args.no_forestgeom:
        args.peer_python = peer_python(args)
    args.io_procs = args.io_procs or machine["usable_cores"]
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    meta = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine,
        "versions": package_versions(),
        "command": " ".join(
            [
                Path(sys.executable).name,
                "benchmarks/bench_proximity.py",
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
        "free_disk": free_bytes(Path(args.workdir)),
        "workdir": args.workdir,
        "trees": args.trees,
        "tile": args.tile,
    }
    print(f"free disk in {args.workdir}: {meta['free_disk'] / GB:.0f} GB", flush=True)
    earlier: list[dict[str, Any]] = []
    if args.append and RESULTS_JSON.exists():
        saved = json.loads(RESULTS_JSON.read_text())
        earlier = [r for r in saved["results"] if r["n"] not in sizes]
        for r in earlier:
            r.setdefault("run", _run_label(saved["meta"]))
    measured_now: list[dict[str, Any]] = []
    RESULTS_MD.parent.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        res = bench_size(n, args, machine)
        res["run"] = _run_label(meta)
        measured_now.append(res)
        results = sorted([*earlier, *measured_now], key=lambda r: r["n"])
        write_markdown(RESULTS_MD, render(results, meta))
        RESULTS_JSON.write_text(
            json.dumps({"meta": meta, "results": results}, indent=1, default=str)
        )
    print(f"wrote {RESULTS_MD}", flush=True)


if __name__ == "__main__":
    main()
