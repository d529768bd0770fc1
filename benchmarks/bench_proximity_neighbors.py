"""Benchmark ``distforest proximity --top-k`` (exact top-k neighbours, no n x n matrix).

Run by hand (never in CI)::

    .venv/bin/python benchmarks/bench_proximity_neighbors.py \
        [--sizes 20000,100000,1000000] [--trees 100] [--k 50] [--workdir /tmp/dfbench-nb] \
        [--peer-python /tmp/dfbench/peer-env/bin/python] [--forestgeom-max-n 100000]

For every n, on the data of ``bench_proximity.py`` (``make_classification(n, 20,
n_informative=10, random_state=0)`` as Parquet, target ``y``), each in its own
subprocess:

1. ``python -m distforest proximity data.parquet --target y --trees T --seed 0
   --top-k K --out nb.zarr --overwrite`` under ``/usr/bin/time -v`` while the
   summed RSS of the whole process tree (CLI + Dask workers) is sampled
   (``benchmarks/_measure.py``): wall time and peak RSS end to end.
2. A phase profile of the same steps, placed as the command places them (in
   process up to ``distforest.in-process-cells`` input cells, 100,000 x 20
   included; else on a LocalCluster): fit, save, the neighbours stage
   (``write_forest_neighbors``; its numba warm-up timed apart) and, for
   n <= --check-max-n, an exactness check of all three methods against the top
   k of the dense matrix, computed block by block from the same leaves (the
   tile functions of the dense path).
3. forestgeom's exact sparse proximity matrix in RAM (``bench_proximity.py``'s
   child, in the peers' own environment), for n <= --forestgeom-max-n.

Results: ``benchmarks/results/proximity_neighbors.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import RESULTS as RESULTS_DIR
from _measure import (
    child_result,
    emit,
    machine_info,
    machine_line,
    package_versions,
    run_measured,
    write_markdown,
)
from _measure import parser as make_parser

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS_MD = RESULTS_DIR / "proximity_neighbors.md"
RESULTS_JSON = RESULTS_DIR / "proximity_neighbors.json"
GB = 1e9
#: Goals (issue 24).
GOAL_RATIO_N, GOAL_RATIO, GOAL_RSS_GB = 100_000, 0.35, 1.5
GOAL_HUGE_N, GOAL_HUGE_S, GOAL_HUGE_RSS_GB = 1_000_000, 600.0, 4.0


def _parse(run: dict[str, Any]) -> dict[str, Any]:
    return child_result(run.get("stdout")) or {}


def _self_cmd(child: str, **kwargs: Any) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", child,
            "--child-args", json.dumps(kwargs)]  # fmt: skip


# -- children -------------------------------------------------------------------


def _dense_oracle_check(leaves: Any, inbag: Any, k: int, runner: Any) -> dict[str, Any]:
    """Each method's neighbours against the top k of dense row blocks (the tile functions)."""
    import numpy as np

    from distforest.forests import proximity_neighbors as pn
    from distforest.forests.tiles import arrays_tile, leaf_mass

    n = leaves.shape[0]
    arrays = {"leaves": leaves, "inbag": inbag, "leaf_mass": leaf_mass(leaves, inbag)}
    out = {}
    for method in ("original", "oob", "rfgap"):
        t = time.perf_counter()
        found, values = pn.compute_neighbors(runner, leaves, inbag, method, k)
        took = time.perf_counter() - t
        same = True
        for start in range(0, n, 1000):
            rows = slice(start, min(start + 1000, n))
            block = arrays_tile(arrays, method, rows, slice(0, n))
            for a in range(block.shape[0]):
                i = start + a
                cols = np.delete(np.arange(n), i)
                order = np.lexsort((cols, -block[a, cols]))[:k]
                same &= bool(np.array_equal(found[i], cols[order]))
                same &= bool(np.array_equal(values[i].view(np.uint32),
                                            block[a, cols[order]].view(np.uint32)))  # fmt: skip
        out[method] = {"exact": same, "in_memory_s": took}
    return out


def child_profile(data: str, trees: int, k: int, seed: int, store: str, check: bool) -> None:
    """The command's steps, timed one by one, placed as the command places them (in this
    process up to ``distforest.in-process-cells`` input cells, else on a LocalCluster)."""
    t0 = time.perf_counter()
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.forests.proximity_neighbors import write_forest_neighbors
    from distforest.io import load_table
    from distforest.kernels import coleaf
    from distforest.parallel.placement import place, runner

    out: dict[str, Any] = {"imports_s": time.perf_counter() - t0}
    t = time.perf_counter()
    table = load_table(data, target="y")
    out["load_s"] = time.perf_counter() - t
    cells = table.n_samples * table.n_features
    t = time.perf_counter()
    with place(cells, {}) as where:
        out["cluster_start_s"] = time.perf_counter() - t
        out["threads"] = where.threads
        out["placement"] = "in process" if where.in_process else "LocalCluster"
        forest = ProximityForest(n_estimators=trees, random_state=seed)
        t = time.perf_counter()
        forest.fit(table)
        out["fit_s"] = time.perf_counter() - t
        t = time.perf_counter()
        rs = forest.save(store, overwrite=True)
        out["save_s"] = time.perf_counter() - t
        t = time.perf_counter()
        coleaf.warm_up()  # (part of the neighbours stage: timed apart)
        out["numba_warm_up_s"] = time.perf_counter() - t
        stats = write_forest_neighbors(forest, rs, "original", k)
        out["neighbors_s"] = time.perf_counter() - t
        out["neighbor_blocks"] = stats["blocks"]
        if check:
            with runner(cells) as run:
                out["exact"] = _dense_oracle_check(forest.leaves_, forest.inbag_, k, run)
        t = time.perf_counter()
    out["cluster_close_s"] = time.perf_counter() - t
    emit(out)


# -- driver -----------------------------------------------------------------------


def bench_size(n: int, args: argparse.Namespace) -> dict[str, Any]:
    import bench_proximity

    work = Path(args.workdir) / f"n{n}"
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data.parquet"
    if not data.exists():
        bench_proximity.make_data(n, data)
    result: dict[str, Any] = {"n": n, "trees": args.trees, "k": args.k}
    store = work / "nb.zarr"
    cmd = [sys.executable, "-m", "distforest", "-q", "proximity", str(data), "--target", "y",
           "--trees", str(args.trees), "--seed", "0", "--top-k", str(args.k), "--out",
           str(store), "--overwrite"]  # fmt: skip
    run = run_measured(cmd, work, "distforest", args.quiet_wait)
    result["distforest"] = {key: run.get(key) for key in (
        "returncode", "wall_s", "user_s", "sys_s", "peak_rss_tree_bytes", "max_rss_bytes",
        "foreign_load", "stderr_tail")}  # fmt: skip
    shutil.rmtree(store, ignore_errors=True)
    prof = run_measured(
        _self_cmd("profile", data=str(data), trees=args.trees, k=args.k, seed=0,
                  store=str(work / "profile.zarr"), check=n <= args.check_max_n),
        work, "profile", args.quiet_wait,
    )  # fmt: skip
    result["profile"] = _parse(prof)
    result["profile"]["returncode"] = prof["returncode"]
    if prof["returncode"]:
        result["profile"]["stderr_tail"] = prof.get("stderr_tail")
    shutil.rmtree(work / "profile.zarr", ignore_errors=True)
    if args.peer_python and n <= args.forestgeom_max_n:
        peer = run_measured(
            [args.peer_python, str(HERE / "bench_proximity.py"), "--child", "forestgeom",
             "--child-args", json.dumps({"data": str(data), "trees": args.trees, "seed": 0})],
            work, "forestgeom", args.quiet_wait,
        )  # fmt: skip
        result["forestgeom"] = {
            "wall_s": peer.get("wall_s"),
            "peak_rss_tree_bytes": peer.get("peak_rss_tree_bytes"),
            "returncode": peer["returncode"],
            **_parse(peer),
        }
    return result


def _gb(x: float | None) -> str:
    return "-" if x is None else f"{x / GB:.2f} GB"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Top-k proximity neighbours: `distforest proximity --top-k` vs forestgeom",
        "",
        *([f"**{meta['note']}**", ""] if meta.get("note") else []),
        f"- Date: {meta['date']}",
        meta["machine"],
        f"- Command: `{meta['command']}`",
        f"- distforest git {meta['commit']}; versions: {meta['versions']}",
        "",
        "Data: `make_classification(n, 20, n_informative=10, random_state=0)` as Parquet "
        "(target `y`), T trees, seed 0, k neighbours a row (self excluded), Breiman's "
        "proximity.  *wall* and *peak RSS (tree)* are the whole CLI process tree's "
        "(`/usr/bin/time -v`, RSS summed over the processes every 0.2 s).  forestgeom: "
        "`RandomForestClassifier(n_jobs=2)` then `Proximity(rf).fit(X, y).transform(X)`, an exact "
        "sparse matrix in RAM, in its own environment (as in `bench_proximity.py`).",
        "",
        "| n | T | k | distforest wall | peak RSS (tree) | fit | neighbours stage | "
        "forestgeom wall | forestgeom peak RSS | distforest / forestgeom | other load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        d, p, f = r["distforest"], r.get("profile", {}), r.get("forestgeom", {})
        ratio = (f"{d['wall_s'] / f['wall_s']:.2f}" if f.get("wall_s") and d.get("wall_s")
                 else "-")  # fmt: skip
        lines.append(
            f"| {r['n']:,} | {r['trees']} | {r['k']} | {_s(d.get('wall_s'))} | "
            f"{_gb(d.get('peak_rss_tree_bytes'))} | {_s(p.get('fit_s'))} | "
            f"{_s(p.get('neighbors_s'))} | {_s(f.get('wall_s'))} | "
            f"{_gb(f.get('peak_rss_tree_bytes'))} | {ratio} | {d.get('foreign_load', 0):.0%} |"
        )
    lines += ["", "## Exactness (the top k of the dense matrix, all rows, bit for bit)", ""]
    for r in results:
        exact = r.get("profile", {}).get("exact")
        if exact:
            lines.append(f"- n = {r['n']:,}: " + ", ".join(
                f"{m} {'equal' if v['exact'] else 'DIFFERENT'} (in memory {v['in_memory_s']:.1f} s)"
                for m, v in exact.items()))  # fmt: skip
    lines += ["", "## Phases (profile run: the command's steps, placed as the command places "
              "them)", "",
              "| n | placement | imports | load | cluster start | fit | save | neighbours "
              "(numba warm-up) | blocks |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in results:
        p = r.get("profile", {})
        lines.append(
            f"| {r['n']:,} | {p.get('placement', '-')} | {_s(p.get('imports_s'))} | "
            f"{_s(p.get('load_s'))} | {_s(p.get('cluster_start_s'))} | {_s(p.get('fit_s'))} | "
            f"{_s(p.get('save_s'))} | {_s(p.get('neighbors_s'))} "
            f"({_s(p.get('numba_warm_up_s'))}) | {p.get('neighbor_blocks', '-')} |"
        )
    lines += ["", "## Goals", ""]
    for r in results:
        d, f = r["distforest"], r.get("forestgeom", {})
        if r["n"] == GOAL_RATIO_N and f.get("wall_s"):
            ratio = d["wall_s"] / f["wall_s"]
            rss = d["peak_rss_tree_bytes"] / GB
            met_wall = "met" if ratio <= GOAL_RATIO else "NOT met"
            met_rss = "met" if rss < GOAL_RSS_GB else "NOT met"
            lines.append(
                f"- n = 100,000: wall {ratio:.2f}x forestgeom's (goal <= {GOAL_RATIO}): "
                f"{met_wall}; peak RSS {rss:.2f} GB (goal < {GOAL_RSS_GB}): {met_rss}"
            )
        if r["n"] == GOAL_HUGE_N and d.get("wall_s"):
            rss = d["peak_rss_tree_bytes"] / GB
            ok = d["wall_s"] < GOAL_HUGE_S and rss < GOAL_HUGE_RSS_GB and not d["returncode"]
            lines.append(f"- n = 1,000,000: {d['wall_s']:.0f} s, peak RSS {rss:.2f} GB (goal < "
                         f"600 s and < 4 GB): {'met' if ok else 'NOT met'}")  # fmt: skip
    if not any(line.startswith("- n =") for line in lines[-3:]):
        lines.append("- not measured here (the goal sizes were not run)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--sizes", default="20000,100000,1000000")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--workdir", default="/tmp/dfbench-nb")
    parser.add_argument("--peer-python", help="Python of an environment with forestgeom")
    parser.add_argument("--forestgeom-max-n", type=int, default=100_000)
    parser.add_argument("--check-max-n", type=int, default=20_000,
                        help="check exactness against the dense matrix up to this n")  # fmt: skip
    parser.add_argument("--quiet-wait", type=float, default=0.0)
    parser.add_argument("--note", default="", help="a line printed at the top of the results")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-args", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        {"profile": child_profile}[args.child](**json.loads(args.child_args))
        return
    os.environ["PYTHONPATH"] = str(ROOT)  # this checkout's distforest in every subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_line(machine_info()),
        "command": "python benchmarks/bench_proximity_neighbors.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit + (" (with uncommitted changes)" if dirty else ""),
        "versions": ", ".join(f"{k} {v}" for k, v in package_versions().items()),
        "note": args.note,
    }
    results = []
    for n in (int(s) for s in args.sizes.split(",") if s.strip()):
        print(f"n = {n:,}", flush=True)
        results.append(bench_size(n, args))
        RESULTS_JSON.write_text(json.dumps({"meta": meta, "results": results}, indent=1,
                                           default=str))  # fmt: skip
        write_markdown(RESULTS_MD, render(results, meta))
    print(f"wrote {RESULTS_MD}", flush=True)


if __name__ == "__main__":
    main()
