"""SimForest at scale (issue 11, item 8): a cheap callable at 10k / 100k, a stored 50k matrix.

Run by hand from the repository root, on a committed tree (it takes a while)::

    python benchmarks/bench_simforest_scale.py [--sizes 10000,100000] [--trees 100]
        [--workers 2] [--layout-n 10000] [--layout-trees 3] [--stored-n 50000]
        [--stored-trees 100] [--workdir /tmp/dfsimscale] [--skip callable,layouts,stored]

Data: ``points(n)``, 3 Gaussian classes in 5 dimensions (centres drawn with
standard deviation 1.5, unit spread: the classes overlap, so trees are deep
and far from pure at the root); similarity RBF ``exp(-0.2 |x - y|^2)``.

Stages, each a child process measured by ``_measure.run_measured`` (wall
time, peak summed RSS of the process tree: driver + Dask workers):

- ``callable n``: ``SimilarityForestClassifier(n_estimators=trees).fit(X, y,
  similarity=rbf)`` on a LocalCluster of ``workers`` processes x 1 thread
  (the cluster is started and warmed up before the clock starts); plus one
  tree grown in the driver process alone (``client="synchronous"``);
- ``layouts``: the same matrix at ``layout_n`` written in several Zarr chunk
  layouts, a few trees grown in one process from each, bytes read counted as
  the process's ``rchar`` (``/proc/self/io``: bytes returned by read calls,
  page cache hits included, so independent of what the OS had cached);
- ``write``: the ``stored_n`` x ``stored_n`` float32 matrix written as Zarr,
  row block by row block (never whole in memory), chunks ``(1, n)``, no
  compression;
- ``stored``: the input check of ``fit`` alone, then ``fit(path, y)`` with
  ``stored_trees`` trees on the LocalCluster; bytes read by the workers (sum
  of their ``rchar`` and ``read_bytes`` deltas) and by the driver.

Writes ``benchmarks/results/simforest_scale.json`` and ``simforest_scale.md``
(the reading at its end is kept from the previous file, written by hand).
The work directory (with the 10 GB matrix) is deleted at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import (
    GB,
    emit,
    machine_info,
    machine_line,
    package_versions,
    run_measured,
    tree_rss_now,
    write_markdown,
)
from _measure import RESULTS as RESULTS_DIR
from _measure import parser as make_parser

ROOT = Path(__file__).resolve().parents[1]
RESULTS = RESULTS_DIR
GAMMA = 0.2
N_FEATURES = 5
N_CLASSES = 3
#: Rows written per block of the stored matrix.
WRITE_ROWS = 256
#: The hand-written reading at the end of the result file starts with this heading.
READING = "## Reading"


def points(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points of 3 overlapping Gaussian classes in 5-D and their labels."""
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=1.5, size=(N_CLASSES, N_FEATURES))
    y = rng.integers(0, N_CLASSES, size=n)
    return centres[y] + rng.normal(size=(n, N_FEATURES)), y


def rbf(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cheap vectorised similarity: ``exp(-GAMMA |a - b|^2)``, shape (len(a), len(b))."""
    d = ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)
    return np.exp(-GAMMA * d)


def proc_io() -> dict[str, int]:
    """``rchar`` and ``read_bytes`` of this process."""
    out = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        key, value = line.split(":")
        if key in ("rchar", "read_bytes"):
            out[key] = int(value)
    return out


def tree_stats(trees: list[Any], n: int) -> dict[str, Any]:
    evals = np.array([t.n_evaluations for t in trees], dtype=float)
    leaves = np.array([int((t.left < 0).sum()) for t in trees])
    depth = np.array([int(t.depth.max()) for t in trees])
    return {
        "evaluations_per_tree": float(evals.mean()),
        "evaluations_over_n_log2_n": float(evals.mean() / (n * math.log2(n))),
        "nodes_per_tree": float(np.mean([t.n_nodes for t in trees])),
        "leaves_per_tree": float(leaves.mean()),
        "depth_mean": float(depth.mean()),
        "depth_max": int(depth.max()),
    }


def report(result: dict[str, Any]) -> None:
    emit(result)


def start_cluster(workers: int) -> Any:
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
    )
    return Client(cluster)


def warm_up(client: Any) -> None:
    """Compile the numba kernels in every worker before the clock starts."""
    from distforest import SimilarityForestClassifier

    X, y = points(300)
    forest = SimilarityForestClassifier(n_estimators=2 * len(client.nthreads()), batch_size=1)
    forest.set_execution(client).fit(X, y, similarity=rbf)


# ----------------------------------------------------------------------------- children
def child_callable(n: int, trees: int, workers: int) -> None:
    from distforest import SimilarityForestClassifier

    X, y = points(n)
    one = SimilarityForestClassifier(n_estimators=1, random_state=0).set_execution("synchronous")
    one.fit(X[:300], y[:300], similarity=rbf)  # compile in this process
    t0 = time.perf_counter()
    one.fit(X, y, similarity=rbf)
    one_tree_s = time.perf_counter() - t0
    client = start_cluster(workers)
    warm_up(client)
    forest = SimilarityForestClassifier(n_estimators=trees, random_state=0)
    t0 = time.perf_counter()
    forest.set_execution(client).fit(X, y, similarity=rbf)
    fit_s = time.perf_counter() - t0
    client.close()
    report({
        "n": n, "trees": trees, "workers": workers, "fit_s": fit_s,
        "seconds_per_tree_on_cluster": fit_s * workers / trees,
        "one_tree_in_process_s": one_tree_s,
        "one_tree_in_process_evaluations": one.n_similarity_evaluations_,
        **tree_stats(forest.trees_, n),
    })  # fmt: skip


def write_matrix(path: Path, n: int, **layout: Any) -> float:
    """The RBF matrix of ``points(n)`` as float32 Zarr, row block by row block; seconds."""
    import zarr

    X, _ = points(n)
    t0 = time.perf_counter()
    arr = zarr.create_array(
        str(path), shape=(n, n), dtype="float32", fill_value=float("nan"), overwrite=True,
        **layout,
    )  # fmt: skip
    rows = layout.get("shards", layout["chunks"])[0]
    rows = rows * max(1, WRITE_ROWS // rows)
    for s in range(0, n, rows):
        arr[s : s + rows] = rbf(X[s : s + rows], X).astype(np.float32)
    return time.perf_counter() - t0


LAYOUTS: dict[str, dict[str, Any]] = {
    "rows (1, n)": {"chunks": "rows", "compressors": None},
    "rows (1, n), zstd": {"chunks": "rows"},
    "tiles (64, 4096)": {"chunks": (64, 4096), "compressors": None},
    "sharded (64, n) of (1, 1024)": {"shards": "rows64", "chunks": (1, 1024), "compressors": None},
}


def _layout(spec: dict[str, Any], n: int) -> dict[str, Any]:
    out = dict(spec)
    if out["chunks"] == "rows":
        out["chunks"] = (1, n)
    if out.get("shards") == "rows64":
        inner = out["chunks"][1]
        out["shards"] = (64, -(-n // inner) * inner)
    return out


def child_layouts(n: int, trees: int, workdir: Path, scale_to: int) -> None:
    import zarr

    from distforest import settings
    from distforest.io.matrices import CoordinateReader

    ROW_CACHE_BYTES = int(settings.get("row-cache-bytes"))
    from distforest.kernels.simfetch import CountingFetch, fetch_rows
    from distforest.kernels.simtrees import grow_tree

    _, y = points(n)
    grow_tree(fetch_rows(np.eye(50)), y[:50], 0)  # compile
    # the row cache holds the same share of the rows as it would at n = scale_to
    scaled = int(ROW_CACHE_BYTES * (n / scale_to) ** 2)
    out = []
    for name, spec in LAYOUTS.items():
        path = workdir / f"layout_{n}.zarr"
        layout = _layout(spec, n)
        write_s = write_matrix(path, n, **layout)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        caches = [("default", ROW_CACHE_BYTES), (f"scaled to n={scale_to}", scaled), ("off", 0)]
        if "shards" in layout or layout["chunks"][1] < n:
            caches = caches[:1]
        for cache_name, cache_bytes in caches:
            reader = CoordinateReader(zarr.open_array(str(path), mode="r"), cache_bytes=cache_bytes)
            fetch = CountingFetch(fetch_rows(reader))
            io0, t0 = proc_io(), time.perf_counter()
            grown = [grow_tree(fetch, y, s) for s in range(trees)]
            seconds = time.perf_counter() - t0
            io1 = proc_io()
            row = {
                "layout": name, "chunks": str(layout["chunks"]),
                "shards": str(layout.get("shards")), "row_cache": cache_name,
                "write_s": write_s, "bytes_on_disk": size, "matrix_bytes": 4 * n * n,
                "seconds_per_tree": seconds / trees,
                "rchar_per_tree": (io1["rchar"] - io0["rchar"]) / trees,
                "fetch_calls_per_tree": fetch.calls / trees,
                "values_per_tree": fetch.evaluations / trees,
                "rows_read_per_tree": reader.rows_read / trees, **tree_stats(grown, n),
            }  # fmt: skip
            print(row, flush=True)
            out.append(row)
        shutil.rmtree(path)
    report({"n": n, "trees": trees, "layouts": out})


def child_write(n: int, path: Path) -> None:
    write_s = write_matrix(path, n, chunks=(1, n), compressors=None)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    report({"n": n, "write_s": write_s, "bytes_on_disk": size, "matrix_bytes": 4 * n * n})


def child_stored(n: int, trees: int, workers: int, path: Path) -> None:
    from distforest import SimilarityForestClassifier
    from distforest.io.matrices import check_entries, load_matrix

    _, y = points(n)
    io0, t0 = proc_io(), time.perf_counter()
    check_entries(load_matrix(str(path)), "S", square=True)
    check_s = time.perf_counter() - t0
    check_io = {k: v - io0[k] for k, v in proc_io().items()}
    client = start_cluster(workers)
    warm_up(client)
    idle_rss = tree_rss_now()
    w0 = client.run(proc_io)
    io0, t0 = proc_io(), time.perf_counter()
    forest = SimilarityForestClassifier(n_estimators=trees, random_state=0)
    forest.set_execution(client).fit(str(path), y)
    fit_s = time.perf_counter() - t0
    driver = {k: v - io0[k] for k, v in proc_io().items()}
    w1 = client.run(proc_io)
    client.close()
    workers_io = {k: sum(w1[a][k] - w0[a][k] for a in w1) for k in ("rchar", "read_bytes")}
    report({
        "n": n, "trees": trees, "workers": workers, "check_s": check_s, "check_io": check_io,
        "fit_s": fit_s, "trees_s": fit_s - check_s, "driver_io": driver, "workers_io": workers_io,
        "matrix_bytes": 4 * n * n, "row_bytes": 4 * n, "idle_rss": idle_rss,
        "rows_read_per_tree": workers_io["rchar"] / (4 * n) / trees, **tree_stats(forest.trees_, n),
    })  # fmt: skip


# ----------------------------------------------------------------------------- driver
def stage(name: str, argv: list[str], workdir: Path) -> dict[str, Any]:
    load0 = os.getloadavg()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    run = run_measured([sys.executable, __file__, *argv], workdir, name.replace(" ", "_"))
    run.update(stage=name, date=started, load_before=load0, load_after=os.getloadavg(),
               commit=package_versions().get("distforest git", "?"))  # fmt: skip
    return run


def main(argv: list[str] | None = None) -> None:
    ap = make_parser(__doc__)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--layout-n", type=int, default=10_000)
    ap.add_argument("--layout-trees", type=int, default=3)
    ap.add_argument("--stored-n", type=int, default=50_000)
    ap.add_argument("--stored-trees", type=int, default=100)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/dfsimscale"))
    ap.add_argument(
        "--matrix", type=Path, help="an existing matrix from the write stage (kept; skips it)"
    )
    ap.add_argument("--skip", default="", help="comma-separated: callable, layouts, stored")
    ap.add_argument("--render", action="store_true", help="only rewrite the .md from the .json")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.render:
        saved = json.loads((RESULTS / "simforest_scale.json").read_text())
        write_report(saved["meta"], saved["runs"])
        return
    if args.child:
        kind, *rest = args.child
        if kind == "callable":
            child_callable(int(rest[0]), int(rest[1]), int(rest[2]))
        elif kind == "layouts":
            child_layouts(int(rest[0]), int(rest[1]), Path(rest[2]), int(rest[3]))
        elif kind == "write":
            child_write(int(rest[0]), Path(rest[1]))
        else:
            child_stored(int(rest[0]), int(rest[1]), int(rest[2]), Path(rest[3]))
        return
    wd = args.workdir
    wd.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    runs: list[dict[str, Any]] = []
    w = str(args.workers)
    if "callable" not in skip:
        for n in map(int, args.sizes.split(",")):
            runs.append(stage(f"callable n={n}", ["--child", "callable", str(n),
                                                  str(args.trees), w], wd))  # fmt: skip
    if "layouts" not in skip:
        runs.append(stage(f"layouts n={args.layout_n}", [
            "--child", "layouts", str(args.layout_n), str(args.layout_trees), str(wd),
            str(args.stored_n)], wd))  # fmt: skip
    if "stored" not in skip:
        path = args.matrix or wd / f"S_{args.stored_n}.zarr"
        n = str(args.stored_n)
        if args.matrix is None:
            runs.append(stage(f"write n={n}", ["--child", "write", n, str(path)], wd))
        runs.append(stage(f"stored n={n}", ["--child", "stored", n, str(args.stored_trees), w,
                                            str(path)], wd))  # fmt: skip
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", Path(__file__).relative_to(ROOT).as_posix(), *sys.argv[1:]]),
        "machine": machine_info(),
        "versions": package_versions(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    out = RESULTS / "simforest_scale.json"
    previous = json.loads(out.read_text())["runs"] if out.exists() else []
    done = {r["stage"] for r in runs}
    runs = [r for r in previous if r["stage"] not in done] + runs
    out.write_text(json.dumps({"meta": meta, "runs": runs}, indent=2, default=str))
    write_report(meta, runs)
    shutil.rmtree(wd, ignore_errors=True)


def write_report(meta: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """The tables, followed by the hand-written reading of the previous file (kept)."""
    md = RESULTS / "simforest_scale.md"
    reading = ""
    if md.exists() and READING in md.read_text():
        reading = md.read_text()[md.read_text().index(READING) :]
    write_markdown(md, render(meta, runs) + ("\n" + reading if reading else ""))
    print(md.read_text())


# ----------------------------------------------------------------------------- report
def _gb(b: float) -> str:
    return f"{b / GB:.2f}"


def _count(x: float) -> str:
    return f"{x:,.0f}" if x else "-"


def _cpu(r: dict[str, Any]) -> float:
    """CPU seconds of the whole process tree (``/usr/bin/time``: user + sys)."""
    return float(r.get("user_s", 0.0) + r.get("sys_s", 0.0))


def _run_line(r: dict[str, Any]) -> str:
    la, lb = r["load_before"], r["load_after"]
    return (
        f"- `{r['stage']}`: {r['date']}, commit {r['commit']}, load average before "
        f"{la[0]:.2f}/{la[1]:.2f}, after {lb[0]:.2f}/{lb[1]:.2f}, foreign CPU "
        f"{r.get('foreign_load', 0):.0%}, wall {r['wall_s']:.0f} s, CPU (user+sys) "
        f"{_cpu(r):.0f} s, exit {r['returncode']}"
    )


def render(meta: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    ok = {r["stage"]: r for r in runs if r.get("child")}
    lines = [
        "# SimForest at scale (issue 11, item 8)",
        "",
        "Generated by `benchmarks/bench_simforest_scale.py` (method in its docstring); the",
        "reading at the end is written by hand.",
        "",
        f"- Command: `{meta['command']}`",
        machine_line(meta["machine"]),
        "- Runs (the machine is shared with other sessions: timings under load are **drafts**;",
        "  RSS, bytes read, evaluations and tree shapes do not depend on load):",
        *[_run_line(r) for r in runs],
        "",
        "## 1. Cheap callable, LocalCluster (processes x 1 thread)",
        "",
        "| n | trees | workers | fit s | s per tree (x workers) | one tree in process s | "
        "CPU s of the stage / trees (with start-up, warm-up, the tree in process) | "
        "evaluations per tree | / n log2 n | nodes | leaves | depth mean / max | "
        "peak RSS GB (tree) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        c = r.get("child")
        if not r["stage"].startswith("callable") or not c:
            continue
        lines.append(
            f"| {c['n']:,} | {c['trees']} | {c['workers']} | {c['fit_s']:.1f} | "
            f"{c['seconds_per_tree_on_cluster']:.2f} | {c['one_tree_in_process_s']:.2f} | "
            f"{_cpu(r) / c['trees']:.2f} | {c['evaluations_per_tree']:,.0f} | "
            f"{c['evaluations_over_n_log2_n']:.2f} | "
            f"{c['nodes_per_tree']:,.0f} | {c['leaves_per_tree']:,.0f} | "
            f"{c['depth_mean']:.1f} / {c['depth_max']} | {_gb(r['peak_rss_tree_bytes'])} |"
        )
    lay = next((r["child"] for r in runs if r["stage"].startswith("layouts") and r.get("child")),
               None)  # fmt: skip
    if lay:
        lines += [
            "",
            f"## 2. Chunk layouts, n = {lay['n']:,}, {lay['trees']} trees in one process",
            "",
            "Bytes read = the process's `rchar` while growing (page-cache hits included); "
            "rows read are counted by the row cache (- where it does not apply).",
            "",
            "| layout | row cache | on disk GB | write s | s per tree | MB read per tree | "
            "read / matrix per tree | rows read per tree | values per tree |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for x in lay["layouts"]:
            lines.append(
                f"| {x['layout']} | {x['row_cache']} | {_gb(x['bytes_on_disk'])} | "
                f"{x['write_s']:.1f} | {x['seconds_per_tree']:.2f} | "
                f"{x['rchar_per_tree'] / 1e6:,.1f} | "
                f"{x['rchar_per_tree'] / x['matrix_bytes']:.3f} | "
                f"{_count(x['rows_read_per_tree'])} | {x['values_per_tree']:,.0f} |"
            )
    write = next((r for r in ok if r.startswith("write")), None)
    stored = next((r for r in ok if r.startswith("stored")), None)
    if write and stored:
        wr, st = ok[write]["child"], ok[stored]
        c = st["child"]
        rc, rb = c["workers_io"]["rchar"], c["workers_io"]["read_bytes"]
        lines += [
            "",
            f"## 3. Stored float32 matrix, n = {c['n']:,}, chunks (1, n), no compression",
            "",
            f"- written in {wr['write_s']:.0f} s ({_gb(wr['bytes_on_disk'])} GB on disk, "
            f"matrix {_gb(wr['matrix_bytes'])} GB), peak RSS of the writer "
            f"{_gb(ok[write]['peak_rss_tree_bytes'])} GB",
            f"- input check of `fit` alone (reads the matrix once, block by block): "
            f"{c['check_s']:.0f} s, {_gb(c['check_io']['rchar'])} GB read",
            f"- RSS of the driver + cluster (nannies, scheduler, workers) warmed up, before the "
            f"fit: {_gb(c['idle_rss'])} GB",
            f"- CPU of the whole stage (check, cluster, fit; user + sys of driver and workers): "
            f"{_cpu(st):.0f} s",
            "",
            "| trees | workers | fit s (with the check) | trees s | s per tree (x workers) | "
            "workers read GB (rchar) | / matrix | from disk GB (read_bytes) | "
            "rows read per tree | rows the splits need per tree (2 per split) | "
            "evaluations per tree | / n log2 n | nodes | depth max | peak RSS GB (tree) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            f"| {c['trees']} | {c['workers']} | {c['fit_s']:.0f} | {c['trees_s']:.0f} | "
            f"{c['trees_s'] * c['workers'] / c['trees']:.2f} | {_gb(rc)} | "
            f"{rc / c['matrix_bytes']:.2f} | {_gb(rb)} | {c['rows_read_per_tree']:,.0f} | "
            f"{2 * (c['nodes_per_tree'] - c['leaves_per_tree']):,.0f} | "
            f"{c['evaluations_per_tree']:,.0f} | {c['evaluations_over_n_log2_n']:.2f} | "
            f"{c['nodes_per_tree']:,.0f} | {c['depth_max']} | "
            f"{_gb(st['peak_rss_tree_bytes'])} |",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
