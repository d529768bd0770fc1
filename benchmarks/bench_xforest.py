"""X-Forest benchmark: the paper's clustering claims, build times, and the n = 50,000 scale run.

Run by hand (never in CI); writes ``benchmarks/results/xforest.json`` (each part
kept until it is run again) and ``benchmarks/results/xforest.md``::

    python benchmarks/bench_xforest.py                       # every part
    python benchmarks/bench_xforest.py --parts accuracy,sweeps
    python benchmarks/bench_xforest.py --parts scale --scale-sizes 25000,50000
    python benchmarks/bench_xforest.py --parts stored --input stored,memory --stored-rows 200000

(or ``python -m benchmarks xforest [options]``).

Parts:

- ``accuracy``: Wine, WDBC (breast cancer) and Iris from scikit-learn; kernel
  k-means, spectral clustering and DBSCAN on the X-Forest beta-similarity vs
  on a Euclidean similarity (Gaussian kernel, width = median pairwise
  distance), mean and standard deviation over 10 seeds.
- ``sweeps``: accuracy vs beta and vs X (and the standard RP tree) at 1280 trees.
- ``build``: tree-building time vs X and vs the number of trees, X-Forest vs the
  standard RP tree (the per-task work, one core, CPU seconds).
- ``scale``: dense beta-similarity of n rows and T = 200 trees written to Zarr
  by the estimator on a LocalCluster (2 workers), in its own process: wall time,
  peak RSS of the process tree; plus the tile kernel's pair-tree throughput.
- ``stored`` (only when named): the driver's memory of a fit by input kind
  (``--input``: a Parquet folder ingested into a run store, or read by pandas
  into memory); writes ``benchmarks/results/xforest_stored.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import (
    GB,
    RESULTS,
    Measure,
    emit,
    machine_info,
    package_versions,
    run_measured,
    write_markdown,
    write_result,
)
from _measure import parser as make_parser

HERE = Path(__file__).resolve().parent
JSON_PATH = RESULTS / "xforest.json"
MD_PATH = RESULTS / "xforest.md"
PARTS = ("accuracy", "sweeps", "build", "scale")
METHODS = ("kernel-kmeans", "spectral", "dbscan")


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


def datasets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine

    return {
        name: loader(return_X_y=True)
        for name, loader in (("wine", load_wine), ("wdbc", load_breast_cancer), ("iris", load_iris))
    }


def euclidean(X: np.ndarray, normalise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian-kernel similarity and Euclidean distance (on min-max normalised data)."""
    from scipy.spatial.distance import pdist, squareform

    if normalise:
        X = (X - X.min(0)) / np.where(np.ptp(X, 0) > 0, np.ptp(X, 0), 1.0)
    d = pdist(X)
    sigma = float(np.median(d))
    D = squareform(d)
    return np.exp(-(D**2) / (2 * sigma**2)), D


def cluster_scores(S: np.ndarray, D: np.ndarray, y: np.ndarray, seed: int) -> dict[str, float]:
    """Accuracy of the three methods; DBSCAN at its best eps on a quantile grid (see notes)."""
    from distforest.apps import clustering as C

    k = len(np.unique(y))
    out = {
        "kernel-kmeans": C.clustering_accuracy(
            y, C.kernel_kmeans(S, k, n_init=10, random_state=seed)[0]
        ),
        "spectral": C.clustering_accuracy(y, C.spectral(S, k, random_state=seed)),
    }
    off = D[np.triu_indices_from(D, 1)]
    best = 0.0
    for q in np.linspace(0.005, 0.3, 30):
        eps = float(np.quantile(off, q))
        if eps <= 0:
            continue
        from sklearn.cluster import DBSCAN

        labels = DBSCAN(eps=eps, min_samples=5, metric="precomputed").fit_predict(D)
        best = max(best, C.clustering_accuracy(y, labels))
    out["dbscan"] = best
    return out


def beta_distance(S: np.ndarray) -> np.ndarray:
    return np.sqrt(np.maximum(2.0 - 2.0 * S.astype(np.float64), 0.0))


def _forest(client: Any, X: np.ndarray, seed: int, trees: int, x: int | str, beta: float = 0.9):
    from distforest.forests.xforest import XForest

    mode = "standard" if x == "standard" else "x"
    n_dir = 2 if x == "standard" else int(x)
    return XForest(
        trees,
        n_directions=n_dir,
        leaf_size=10,
        beta=beta,
        mode=mode,
        random_state=seed,
        client=client,
    ).fit(X)


def part_accuracy(client: Any, seeds: int, trees: int) -> dict[str, Any]:
    rows = []
    for name, (X, y) in datasets().items():
        S_e, D_e = euclidean(X)
        S_r, D_r = euclidean(X, normalise=False)
        per: dict[str, dict[str, list[float]]] = {"beta": {}, "euclidean": {}, "raw": {}}
        for seed in range(seeds):
            S = _forest(client, X, seed, trees, 2).similarity().values.astype(np.float64)
            pairs = (
                ("beta", (S, beta_distance(S))),
                ("euclidean", (S_e, D_e)),
                ("raw", (S_r, D_r)),
            )
            for sim, (Sm, Dm) in pairs:
                for method, acc in cluster_scores(Sm, Dm, y, seed).items():
                    per[sim].setdefault(method, []).append(acc)
        for method in METHODS:
            b, e, r = per["beta"][method], per["euclidean"][method], per["raw"][method]
            rows.append(
                {
                    "dataset": name,
                    "n": len(y),
                    "p": X.shape[1],
                    "method": method,
                    "beta_mean": statistics.mean(b),
                    "beta_sd": statistics.pstdev(b),
                    "euclid_mean": statistics.mean(e),
                    "euclid_sd": statistics.pstdev(e),
                    "raw_mean": statistics.mean(r),
                }
            )
        print(f"  accuracy {name} done", flush=True)
    return {"rows": rows, "seeds": seeds, "trees": trees}


def part_sweeps(client: Any, seeds: int, trees: int) -> dict[str, Any]:
    from distforest.kernels import betasim

    betas = (0.0, 0.5, 0.7, 0.9, 0.95)
    xs: tuple[int | str, ...] = (1, 2, 4, 8, 16, "standard")
    beta_rows, x_rows = [], []
    for name, (X, y) in datasets().items():
        acc_b: dict[float, dict[str, list[float]]] = {b: {} for b in betas}
        acc_x: dict[Any, dict[str, list[float]]] = {x: {} for x in xs}
        for seed in range(seeds):
            for x in xs:
                forest = _forest(client, X, seed, trees, x)
                codes, depth = forest.codes_, forest.depth_
                for beta in betas if x == 2 else (0.9,):
                    S = betasim.similarity_block(codes, depth, codes, depth, beta).astype(float)
                    scores = cluster_scores(S, beta_distance(S), y, seed)
                    for method, acc in scores.items():
                        if x == 2:
                            acc_b[beta].setdefault(method, []).append(acc)
                        if beta == 0.9:
                            acc_x[x].setdefault(method, []).append(acc)
        for beta in betas:
            beta_rows.append(
                {
                    "dataset": name,
                    "beta": beta,
                    **{m: statistics.mean(acc_b[beta][m]) for m in METHODS},
                }
            )
        for x in xs:
            x_rows.append(
                {"dataset": name, "x": str(x), **{m: statistics.mean(acc_x[x][m]) for m in METHODS}}
            )
        print(f"  sweeps {name} done", flush=True)
    return {"beta_rows": beta_rows, "x_rows": x_rows, "seeds": seeds, "trees": trees}


def _build_seconds(X: np.ndarray, trees: int, x: int | str, repeats: int = 2) -> float:
    """CPU seconds of ``grow_batch`` (one task's work) for ``trees`` trees, best of repeats."""
    from distforest.kernels import rptrees

    Xn = (X - X.min(0)) / np.where(np.ptp(X, 0) > 0, np.ptp(X, 0), 1.0)
    seeds = np.arange(trees, dtype=np.uint64) + 1
    standard = x == "standard"
    best = np.inf
    for _ in range(repeats):
        t0 = time.process_time()
        for start in range(0, trees, 40):  # tasks of 40 trees, as on a cluster
            rptrees.grow_batch(
                Xn, seeds[start : start + 40], 2 if standard else int(x), 10, standard
            )
        best = min(best, time.process_time() - t0)
    return float(best)


def part_build(client: Any) -> dict[str, Any]:
    from sklearn.datasets import make_blobs

    from distforest.kernels import rptrees

    rptrees.warm_up()
    # one BLAS thread, as in a Dask worker (distributed sets OPENBLAS_NUM_THREADS=1 there)
    from threadpoolctl import threadpool_limits

    limits = threadpool_limits(1)
    wdbc = datasets()["wdbc"][0]
    synthetic = make_blobs(20_000, n_features=50, centers=5, random_state=0)[0]
    data = {"wdbc (569 x 30)": wdbc, "blobs (20,000 x 50)": synthetic}
    x_rows, t_rows = [], []
    for name, X in data.items():
        for x in (1, 2, 4, 8, 16, "standard"):
            x_rows.append({"data": name, "x": str(x), "seconds": _build_seconds(X, 1280, x)})
        for trees in (160, 320, 640, 1280):
            t2 = _build_seconds(X, trees, 2)
            ts = _build_seconds(X, trees, "standard")
            t_rows.append({"data": name, "trees": trees, "x2": t2, "standard": ts})
        print(f"  build {name} done", flush=True)
    limits.restore_original_limits()
    fit = {}
    for x in (2, "standard"):
        t0 = time.perf_counter()
        _forest(client, synthetic, 0, 1280, x)
        fit[str(x)] = time.perf_counter() - t0
    return {"x_rows": x_rows, "tree_rows": t_rows, "fit_wall": fit}


def tile_throughput(n_rows: int = 2048, trees: int = 200, repeats: int = 3) -> dict[str, float]:
    """Pair-tree evaluations per CPU second of the tile kernel on one 2048 x 2048 tile."""
    from sklearn.datasets import make_blobs

    from distforest.kernels import betasim, rptrees

    X = make_blobs(2 * n_rows, n_features=20, centers=5, random_state=0)[0]
    Xn = (X - X.min(0)) / np.ptp(X, 0)
    batch = rptrees.grow_batch(Xn, np.arange(trees, dtype=np.uint64) + 1, 2, 10, False)
    a, b = slice(0, n_rows), slice(n_rows, 2 * n_rows)
    args = (batch.codes[a], batch.depth[a], batch.codes[b], batch.depth[b], 0.9)
    betasim.similarity_block(*args)
    cpu, wall = [], []
    for _ in range(repeats):
        t0, w0 = time.process_time(), time.perf_counter()
        betasim.similarity_block(*args)
        cpu.append(time.process_time() - t0)
        wall.append(time.perf_counter() - w0)
    pairs = n_rows * n_rows * trees
    return {
        "pair_trees": pairs,
        "trees": trees,
        "cpu_s": min(cpu),
        "wall_s": min(wall),
        "per_cpu_second": pairs / min(cpu),
        "max_depth": int(batch.depth.max()),
    }


def scale_child(n: int, trees: int, workdir: Path) -> None:
    """Runs in its own process (measured by the parent): fit + tiles to Zarr."""
    from distributed import Client, LocalCluster

    from distforest.forests.xforest import XForest

    X = np.load(workdir / f"blobs_{n}.npy")
    store = workdir / f"xforest_{n}.zarr"
    t0 = time.perf_counter()
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        t1 = time.perf_counter()
        forest = XForest(
            trees, n_directions=2, leaf_size=10, beta=0.9, random_state=0, client=client
        ).fit(X)
        t2 = time.perf_counter()
        S = forest.similarity(store=store, overwrite=True)
        t3 = time.perf_counter()
        check = S.isel(sample_i=slice(0, 3), sample_j=slice(0, 3)).values
    tile = forest.params_["tile_size"]
    blocks = -(-n // tile)
    computed = sum(
        min(tile, n - i * tile) * min(tile, n - j * tile)
        for i in range(blocks)
        for j in range(i, blocks)
    )
    result = {
        "cluster_start_s": t1 - t0,
        "fit_s": t2 - t1,
        "tiles_s": t3 - t2,
        "pairs_computed": computed,
        "max_depth": int(forest.depth_.max()),
        "n_tiles": blocks * (blocks + 1) // 2,
        "diag": np.diag(check).tolist(),
    }
    emit(result)


def part_scale(sizes: list[int], trees: int, workdir: Path) -> dict[str, Any]:
    from sklearn.datasets import make_blobs

    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in sizes:
        np.save(
            workdir / f"blobs_{n}.npy", make_blobs(n, n_features=20, centers=5, random_state=0)[0]
        )
        load_before = _load()
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child-scale",
            str(n),
            "--scale-trees",
            str(trees),
            "--workdir",
            str(workdir),
        ]
        run = run_measured(cmd, HERE.parent, f"xforest-scale-{n}")
        store = workdir / f"xforest_{n}.zarr"
        size = subprocess.run(["du", "-sb", str(store)], capture_output=True, text=True)
        child = run.get("child", {})
        rows.append(
            {
                "n": n,
                "trees": trees,
                "returncode": run["returncode"],
                "wall_s": run["wall_s"],
                "peak_rss_tree_bytes": run["peak_rss_tree_bytes"],
                "max_rss_single_bytes": run.get("max_rss_single_bytes"),
                "foreign_load": run["foreign_load"],
                "load_before": load_before,
                "load_after": _load(),
                "store_bytes": int(size.stdout.split()[0] or 0),
                "child": child,
                "cmd": " ".join(cmd[1:]),
            }
        )
        shutil.rmtree(store, ignore_errors=True)
    return {"rows": rows, "kernel": tile_throughput(trees=trees)}


# -- report ------------------------------------------------------------------------------


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def render(results: dict[str, Any]) -> str:
    lines = ["# X-Forest benchmark", ""]
    meta = results.get("meta", {})
    m = meta.get("machine", {})
    lines += [
        f"- Machine: {m.get('cpu_model')}, {m.get('cores')} cores, "
        f"{m.get('mem_total_bytes', 0) / 2**30:.1f} GiB RAM, Python {m.get('python')}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items()),
        "- Each part below gives its date, command and the machine's load average; the "
        "machine (2 cores) was shared with other engineers' test runs, so absolute times "
        "are inflated and ratios measured in one run are what to read.",
        "",
    ]
    part = results.get("accuracy")
    if part:
        lines += [
            f"## Clustering accuracy: beta-similarity vs Euclidean ({part['seeds']} seeds)",
            "",
            _stamp(part),
            "",
            f"X-Forest: {part['trees']} trees, X = 2, tau = 10, beta = 0.9, min-max "
            "normalised.  Euclidean: Gaussian kernel exp(-d^2 / (2 sigma^2)) on min-max "
            "normalised data, sigma = the median pairwise distance (median heuristic, no "
            "tuning).  Kernel k-means: 10 restarts (k-means++ in feature space), lowest "
            "objective kept.  Spectral: scikit-learn, affinity = the similarity.  DBSCAN: "
            "distance sqrt(2 - 2S) for beta (Euclidean distance for the baseline), "
            "min_samples = 5, **eps tuned on the labels**: the best accuracy over eps at 30 "
            "quantiles (0.5%-30%) of the pairwise distances, the same protocol for both.  "
            "*Euclidean, raw features*: the same baseline without the min-max scaling "
            "(sigma again the median distance); X-Forest always normalises (the paper's default).  "
            "Accuracy: Hungarian matching of clusters to classes, noise counts as wrong.  "
            "Mean (sd) over seeds, in %.",
            "",
            "| data | n x p | method | beta-similarity | Euclidean | difference | Euclidean, "
            "raw features | difference |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in part["rows"]:
            lines.append(
                f"| {r['dataset']} | {r['n']} x {r['p']} | {r['method']} | "
                f"{_pct(r['beta_mean'])} ({_pct(r['beta_sd'])}) | "
                f"{_pct(r['euclid_mean'])} ({_pct(r['euclid_sd'])}) | "
                f"{100 * (r['beta_mean'] - r['euclid_mean']):+.1f} | "
                + (
                    f"{_pct(r['raw_mean'])} | {100 * (r['beta_mean'] - r['raw_mean']):+.1f} |"
                    if "raw_mean" in r
                    else "- | - |"
                )
            )
        lines.append("")
    part = results.get("sweeps")
    if part:
        lines += [
            f"## Accuracy vs beta and vs X ({part['trees']} trees, mean of "
            f"{part['seeds']} seeds, %)",
            "",
            _stamp(part),
            "",
            "beta sweep at X = 2; X sweep at beta = 0.9 (`standard`: a fresh direction "
            "per node).  DBSCAN eps tuned as above.",
            "",
            "| data | beta | kernel k-means | spectral | DBSCAN (tuned) |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in part["beta_rows"]:
            lines.append(
                f"| {r['dataset']} | {r['beta']} | "
                + " | ".join(_pct(r[mm]) for mm in METHODS)
                + " |"
            )
        lines += [
            "",
            "| data | X | kernel k-means | spectral | DBSCAN (tuned) |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in part["x_rows"]:
            lines.append(
                f"| {r['dataset']} | {r['x']} | " + " | ".join(_pct(r[mm]) for mm in METHODS) + " |"
            )
        lines.append("")
    part = results.get("build")
    if part:
        lines += [
            "## Tree-building time: X-Forest vs the standard RP tree",
            "",
            _stamp(part),
            "",
            "CPU seconds of the per-task work (`rptrees.grow_batch` in tasks of 40 trees, "
            "normalisation excluded), one core and one BLAS thread (as in a Dask worker), best of "
            "2.  X-Forest projects all X "
            "directions of a batch in one matrix product; the standard tree projects each "
            "node's points on its own direction.",
            "",
            "| data | X | seconds (1280 trees) | standard / this |",
            "|---|---:|---:|---:|",
        ]
        std = {r["data"]: r["seconds"] for r in part["x_rows"] if r["x"] == "standard"}
        for r in part["x_rows"]:
            lines.append(
                f"| {r['data']} | {r['x']} | {r['seconds']:.2f} | "
                f"{std[r['data']] / r['seconds']:.2f}x |"
            )
        lines += [
            "",
            "| data | trees | X = 2 | standard | standard / X = 2 |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in part["tree_rows"]:
            lines.append(
                f"| {r['data']} | {r['trees']} | {r['x2']:.2f} s | "
                f"{r['standard']:.2f} s | {r['standard'] / r['x2']:.2f}x |"
            )
        fw = part["fit_wall"]
        lines += [
            "",
            f"End to end, `XForest.fit` of 1280 trees on the 20,000 x 50 blobs on a "
            f"2-worker LocalCluster (wall, Dask overhead included): X = 2 {fw['2']:.1f} s, "
            f"standard {fw['standard']:.1f} s ({fw['standard'] / fw['2']:.2f}x).",
            "",
        ]
    part = results.get("scale")
    if part:
        k = part["kernel"]
        lines += [
            "## Scale: dense beta-similarity to Zarr",
            "",
            _stamp(part),
            "",
            "Data: `make_blobs(n, 20 features, 5 centres, random_state=0)`; "
            f"T = {k['trees']}, X = 2, "
            "tau = 10, beta = 0.9, 2048 x 2048 tiles (float32, zarr's default zstd), one "
            "task per upper-triangle tile writing the tile and its mirror.  The estimator "
            "runs in its own process with a 2-worker LocalCluster; peak RSS is the summed "
            "RSS of the whole process tree (driver + workers), sampled every 0.2 s.",
            "",
            "| n | wall | fit | tiles | tile tasks | pair-trees / s / core (tile phase) | "
            "peak RSS (tree) | max single process | store on disk | load before / after "
            "| other load |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
        ]
        for r in part["rows"]:
            c = r["child"]
            rate = c.get("pairs_computed", 0) * r["trees"] / max(c.get("tiles_s", 1e-9), 1e-9) / 2
            lines.append(
                f"| {r['n']:,} | {r['wall_s']:.1f} s | {c.get('fit_s', float('nan')):.1f} s | "
                f"{c.get('tiles_s', float('nan')):.1f} s | {c.get('n_tiles')} | {rate:.2e} | "
                f"{r['peak_rss_tree_bytes'] / GB:.2f} GB | "
                f"{(r['max_rss_single_bytes'] or 0) / GB:.2f} GB | {r['store_bytes'] / GB:.1f} GB |"
                f" {r['load_before']} / {r['load_after']} | {100 * r['foreign_load']:.0f}% |"
            )
        lines += [
            "",
            f"Tile kernel alone (one 2048 x 2048 tile, T = {k['trees']}, max depth "
            f"{k['max_depth']}, single thread): {k['pair_trees']:.3g} pair-tree evaluations "
            f"in {k['cpu_s']:.2f} CPU s ({k['wall_s']:.2f} s wall) = "
            f"**{k['per_cpu_second']:.2e} pair-tree evaluations per CPU second** "
            "(target 1e9 per second per core).  The tile-phase rate in the table divides all "
            "computed pairs (upper triangle incl. diagonal tiles) x T by the tile phase's "
            "wall time and 2 cores, so it includes reading codes, zstd compression and "
            "writing two chunks per task.",
            "",
        ]
        lines += [f"Commands: `{r['cmd']}`" for r in part["rows"]] + [""]
    return "\n".join(lines)


def part_stored(inputs: list[str], rows: int, features: int, trees: int, workdir: Path
                ) -> list[dict[str, Any]]:  # fmt: skip
    """X-Forest fitted from a Parquet folder (``stored``) or in memory: the driver's memory.

    Each input kind runs in its own process with a LocalCluster of two
    single-thread workers: ``memory`` reads the folder with pandas, fits and
    saves the forest to a store; ``stored`` ingests the folder into a run store
    and fits from it (the trees, rows' arrays and nodes written by the tasks).
    Reported: the read (or ingest) and fit seconds, the driver's peak RSS
    during the fit and the process tree's.
    """
    import pandas as pd

    folder = workdir / "stored" / "parts"
    shutil.rmtree(folder.parent, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, features)).astype(np.float32)
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(features)])
    for k, cut in enumerate(np.array_split(np.arange(rows), 8)):
        frame.iloc[cut].to_parquet(folder / f"part-{k}.parquet", index=False)
    del X, frame
    out = []
    for kind in inputs:
        cmd = [sys.executable, __file__, "--child-stored", kind, "--stored-trees", str(trees),
               "--workdir", str(workdir)]  # fmt: skip
        r = run_measured(cmd, workdir, f"stored-{kind}")
        if r["returncode"] != 0:
            raise SystemExit(f"the {kind} fit failed:\n{r['stderr_tail']}")
        child = r["child"]
        out.append({"input": kind, "rows": rows, "features": features, "trees": trees,
                    "read_s": round(child["read_s"], 1), "fit_s": round(child["fit_s"], 1),
                    "driver_peak_fit_mb": round(child["driver_peak_fit_bytes"] / 1e6),
                    "driver_peak_mb": round(r["max_rss_single_bytes"] / 1e6)
                    if "max_rss_single_bytes" in r else None,
                    "tree_peak_mb": round(r["peak_rss_tree_bytes"] / 1e6)})  # fmt: skip
    return out


def stored_child(kind: str, trees: int, workdir: Path) -> None:
    """One input kind of :func:`part_stored`, in this process."""
    import pandas as pd
    from distributed import Client, LocalCluster

    from distforest import execution
    from distforest.forests.xforest import XForest
    from distforest.store.inputs import ingest

    folder, work = workdir / "stored" / "parts", workdir / "stored"
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
        execution(client=client),
        Measure(f"xforest {kind}") as m,
    ):
        with m.phase("read") as read:
            table: object = (ingest(str(folder), str(work / "run.zarr"), overwrite=True)
                             if kind == "stored" else pd.read_parquet(folder))  # fmt: skip
        with m.phase("fit") as fit:
            forest = XForest(n_estimators=trees, random_state=0).fit(table)
            if kind == "memory":
                forest.save(str(work / "memory.zarr"))
    emit(
        {
            "read_s": read["wall_s"],
            "fit_s": fit["wall_s"],
            "driver_peak_fit_bytes": fit["peak_rss_driver_bytes"],
            "phases": m.result["phases"],
        }
    )


def _stamp(part: dict[str, Any]) -> str:
    return (
        f"Run {part['date']} at commit {part.get('git', '?')} (took {part['seconds']:.0f} s); "
        f"load average before {part['load_before']}, after {part['load_after']}; "
        f"command `{part['command']}`."
    )


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"of {', '.join(PARTS)} and stored (not run by default)",
    )
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--sweep-seeds", type=int, default=3)
    parser.add_argument("--trees", type=int, default=1280)
    parser.add_argument("--scale-sizes", default="25000,50000")
    parser.add_argument("--scale-trees", type=int, default=200)
    parser.add_argument("--workdir", default="/tmp/xforest_bench")
    parser.add_argument(
        "--input",
        default="stored,memory",
        help="stored: the input kinds to fit from, of stored (a Parquet folder "
        "ingested into a run store) and memory (pandas reads the folder)",
    )
    parser.add_argument("--stored-rows", type=int, default=200_000)
    parser.add_argument("--stored-features", type=int, default=10)
    parser.add_argument("--stored-trees", type=int, default=50)
    parser.add_argument("--child-scale", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-stored", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    if args.child_scale:
        scale_child(args.child_scale, args.scale_trees, workdir)
        return
    if args.child_stored:
        stored_child(args.child_stored, args.stored_trees, workdir)
        return
    if "stored" in args.parts.split(","):
        kinds = [k for k in args.input.split(",") if k]
        if not kinds or set(kinds) - {"stored", "memory"}:
            parser.error(f"--input {args.input!r}: give stored, memory or stored,memory")
        workdir.mkdir(parents=True, exist_ok=True)
        rows = part_stored(kinds, args.stored_rows, args.stored_features, args.stored_trees,
                           workdir)  # fmt: skip
        write_result(
            "xforest_stored",
            rows,
            title="X-Forest: the driver's memory by input kind",
            notes=inspect.cleandoc(part_stored.__doc__ or "").split("\n\n", 1)[1],
        )
        args.parts = ",".join(p for p in args.parts.split(",") if p != "stored")
        if not args.parts:
            return
    results = json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else {}
    results["meta"] = {"machine": machine_info(), "versions": package_versions()}
    command = "python benchmarks/bench_xforest.py " + " ".join(argv or sys.argv[1:])
    parts = [p for p in args.parts.split(",") if p]
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        for name in parts:
            print(f"part {name} ...", flush=True)
            stamp = {
                "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "load_before": _load(),
                "command": command,
                "git": package_versions().get("distforest git", "?"),
            }
            t0 = time.perf_counter()
            if name == "accuracy":
                out = part_accuracy(client, args.seeds, args.trees)
            elif name == "sweeps":
                out = part_sweeps(client, args.sweep_seeds, args.trees)
            elif name == "build":
                out = part_build(client)
            elif name == "scale":
                sizes = [int(s) for s in args.scale_sizes.split(",")]
                out = part_scale(sizes, args.scale_trees, workdir)
            else:
                raise SystemExit(f"unknown part {name!r}; choose from {PARTS}")
            results[name] = {
                **out,
                **stamp,
                "seconds": time.perf_counter() - t0,
                "load_after": _load(),
            }
            RESULTS.mkdir(exist_ok=True)
            JSON_PATH.write_text(json.dumps(results, indent=1, default=float))
            write_markdown(MD_PATH, render(results))
            print(f"part {name} done in {results[name]['seconds']:.0f} s", flush=True)
    print(f"wrote {MD_PATH}")


if __name__ == "__main__":
    main()
