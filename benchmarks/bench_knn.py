"""Benchmark k-NN: accuracy by measure on real data, and top-k neighbour throughput.

Run by hand (never in CI)::

    .venv/bin/python benchmarks/bench_knn.py [--part accuracy|topk|all]
        [--sizes 100000,1000000] [--cap-minutes 20] [--brute-fraction-1m 0.01]

**Accuracy**: 5-fold stratified CV (shuffled, seed 0) of ``KNNClassifier``
(k = 5, majority vote) on the classification sets of ``../shared/data``, with
Euclidean and cosine (features z-scored on each training fold), RF proximity,
RF-GAP and X-Forest beta-similarity (100 trees, seed 0, on a 2-worker
LocalCluster).  Rows with a missing value are dropped (a measure cannot use
them); identifier columns are dropped.

**Top-k**: the k = 10 nearest neighbours of every row among the others, on
``n`` rows of 3 standard-normal features (seed 0), each method in its own
process under ``/usr/bin/time -v`` with the RSS of the whole process tree
sampled (``_measure.run_measured``): distforest's k-d tree path and brute
tiled path on a 2-worker LocalCluster, scikit-learn ``NearestNeighbors``
(kd_tree and brute, ``n_jobs=2``).  A method whose full run would exceed the
cap is run on a fraction of the queries (against all n rows) and extrapolated
linearly in the number of queries (the cost per query is constant).

Results: ``benchmarks/results/knn.md`` (and ``knn.json``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DATA as SHARED_DATA
from _measure import RESULTS as RESULTS_DIR
from _measure import (
    emit,
    machine_info,
    package_versions,
    run_measured,
    write_markdown,
)
from _measure import parser as make_parser

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = SHARED_DATA
RESULTS_MD = RESULTS_DIR / "knn.md"
RESULTS_JSON = RESULTS_DIR / "knn.json"
K = 10
N_FEATURES = 3

#: file, target column, columns to drop
DATASETS = [
    ("Ionosphere.csv", "Class", ()),
    ("BreastCancer.csv", "Class", ("Id",)),
    ("PimaIndiansDiabetes.csv", "diabetes", ()),
    ("Vehicle.csv", "Class", ()),
    ("Soybean.csv", "Class", ()),
    ("DNA.csv", "Class", ()),
    ("Satellite.csv", "classes", ()),
]
METRICS = ["euclidean", "cosine", "rf-proximity", "rfgap", "beta"]


def loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# -- accuracy ---------------------------------------------------------------------


def accuracy(args: argparse.Namespace, save: Any) -> list[dict[str, Any]]:
    from distributed import Client, LocalCluster
    from sklearn.model_selection import StratifiedKFold

    from distforest.apps.knn import KNNClassifier
    from distforest.io import load_table

    rows = []
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                     dashboard_address=None) as cluster,
        Client(cluster),
    ):  # fmt: skip
        for name, target, drop in DATASETS:
            table = load_table(DATA / name, target=target, drop=drop, na_values=("NA",))
            complete = ~np.isnan(table.X).any(axis=1)
            X, y = table.X[complete], table.y[complete]
            folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
            for metric in METRICS:
                forest = metric in ("rf-proximity", "rfgap", "beta")
                model = KNNClassifier(
                    n_neighbors=5,
                    metric=metric,
                    normalize=None if forest else "zscore",
                    n_estimators=args.trees,
                    random_state=0,
                )
                scores, start, error = [], time.perf_counter(), None
                try:
                    for train, test in folds:
                        model.fit(X[train], y[train])
                        scores.append(float((model.predict(X[test]) == y[test]).mean()))
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"[:200]
                row = {
                    "dataset": name.removesuffix(".csv"),
                    "n": int(X.shape[0]),
                    "dropped_rows": int((~complete).sum()),
                    "d": int(X.shape[1]),
                    "metric": metric,
                    "mean": float(np.mean(scores)) if scores and not error else None,
                    "std": float(np.std(scores)) if scores and not error else None,
                    "seconds": time.perf_counter() - start,
                    "error": error,
                    "load": loadavg(),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
            save(rows)
    return rows


# -- top-k --------------------------------------------------------------------------


def make_points(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, N_FEATURES))


def child(method: str, n: int, fraction: float, out: str) -> None:
    """Run one top-k method in this process and print its timings."""
    X = make_points(n)
    n_queries = max(1, round(n * fraction))
    Q = X[:n_queries]
    result: dict[str, Any] = {"method": method, "n": n, "n_queries": n_queries}
    if method.startswith("sklearn"):
        from sklearn.neighbors import NearestNeighbors

        algorithm = method.split("-", 1)[1]
        t0 = time.perf_counter()
        nn = NearestNeighbors(n_neighbors=K + 1, algorithm=algorithm, n_jobs=2).fit(X)
        result["build_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, idx = nn.kneighbors(Q)
        result["search_s"] = time.perf_counter() - t0
        idx = idx[:, 1:]  # drop the row itself (no duplicate points in this data)
    else:
        from distributed import Client, LocalCluster

        from distforest.forests.measures import parse_metric
        from distforest.forests.neighbors import search

        algorithm = method.split("-", 1)[1]
        t0 = time.perf_counter()
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                         dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):  # fmt: skip
            result["cluster_start_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            client.run(importlib.import_module, "distforest.forests.pairwise")
            result["worker_import_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            found = search(Q, X, K, measure=parse_metric("euclidean"), algorithm=algorithm,
                           exclude_self=True, client=client)  # fmt: skip
            result["search_s"] = time.perf_counter() - t0
        idx = found.indices
    np.save(out, idx)
    emit(result)


def topk(args: argparse.Namespace, workdir: Path, save: Any) -> list[dict[str, Any]]:
    rows = []
    cap = args.cap_minutes * 60
    for n in [int(s) for s in args.sizes.split(",")]:
        reference = None
        for method in ("distforest-kd_tree", "sklearn-kd_tree", "distforest-brute",
                       "sklearn-brute"):  # fmt: skip
            fraction = 1.0
            if method.endswith("brute") and n >= 1_000_000:
                fraction = args.brute_fraction_1m
            out = workdir / f"{method}-{n}.npy"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", method,
                   "--n", str(n), "--fraction", str(fraction), "--out", str(out)]  # fmt: skip
            load_before = loadavg()
            r = run_measured(cmd, workdir, f"{method}-{n}", timeout=cap)
            child_result = r.get("child", {})
            row = {
                "n": n,
                "method": method,
                "fraction": fraction,
                "wall_s": r.get("wall_s"),
                "peak_rss_tree_gb": r["peak_rss_tree_bytes"] / 1e9,
                "foreign_load": r["foreign_load"],
                "loadavg_before": load_before,
                "timed_out": r["timed_out"],
                "returncode": r["returncode"],
                **child_result,
            }
            if child_result and out.exists():
                idx = np.load(out)
                if reference is None and fraction == 1.0:
                    reference = idx
                    row["agrees_with"] = "(reference)"
                elif reference is not None:
                    m = idx.shape[0]
                    same = np.sort(idx, axis=1) == np.sort(reference[:m], axis=1)
                    row["same_neighbour_sets"] = float(same.all(axis=1).mean())
                out.unlink()
                if fraction < 1.0:
                    row["search_s_extrapolated"] = child_result["search_s"] / fraction
            rows.append(row)
            print(json.dumps(row), flush=True)
            save(rows)
    return rows


# -- report ---------------------------------------------------------------------------


def _f(x: Any, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def _run_lines(part: str, meta: dict[str, Any] | None) -> list[str]:
    if not meta:
        return []
    m = meta["machine"]
    return [
        f"Run of the {part} part:",
        "",
        f"- Date: {meta['date']}",
        f"- Machine: {m['cpu_model']}, {m['cores']} cores ({m['usable_cores']} usable), "
        f"{m['mem_total_bytes'] / 2**30:.1f} GiB RAM, Python {m['python']}",
        f"- Command: `{meta['command']}`",
        f"- Load average (1/5/15 min) at start: {meta['load_start']}; at end: "
        f"{meta.get('load_end', 'still running')}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
    ]


def _history_lines(history: list[dict[str, Any]]) -> list[str]:
    """Earlier top-k runs (kept by :func:`main` when the part is run again), newest first."""
    lines = []
    for run in reversed(history):
        meta, rows = run["meta"], run["rows"]
        git = meta["versions"].get("distforest git", "?")
        cells = "; ".join(
            f"{r['n']:,} {r['method']} "
            f"{_f(r.get('search_s_extrapolated', r.get('search_s')))} s"
            f"{' (extrapolated)' if 'search_s_extrapolated' in r else ''}"
            f" (other load {r['foreign_load']:.0%})"
            for r in rows
        )
        lines.append(f"- {meta['date']}, distforest git {git}: {cells}")
    if not lines:
        return []
    return ["", "### Earlier runs of the top-k part (search, all n queries)", "", *lines]


def render(
    metas: dict[str, Any],
    acc: list[dict],
    top: list[dict],
    history: list[dict[str, Any]] | None = None,
) -> str:
    lines = [
        "# k-NN benchmark: accuracy by measure, top-k neighbour throughput",
        "",
        *_run_lines("accuracy", metas.get("accuracy")),
        *_run_lines("top-k", metas.get("topk")),
        "The machine is shared with two other developers' jobs; the load columns say how "
        "busy it was. Compare ratios within one table, not absolute times.",
        "",
    ]
    if acc:
        lines += [
            "## Accuracy (5-fold stratified CV, k = 5, majority vote)",
            "",
            "Euclidean and cosine on z-scored features (scaler fitted on each training fold); "
            "RF proximity and RF-GAP from a supervised 100-tree forest fitted on the training "
            "fold; beta from a 100-tree X-Forest (unsupervised). Rows with a missing value "
            "dropped. Mean (std) accuracy.",
            "",
            "| dataset | n | d | " + " | ".join(METRICS) + " |",
            "|---|---:|---:|" + "---:|" * len(METRICS),
        ]
        for name in dict.fromkeys(r["dataset"] for r in acc):
            rs = {r["metric"]: r for r in acc if r["dataset"] == name}
            first = next(iter(rs.values()))
            cells = []
            for metric in METRICS:
                r = rs.get(metric)
                if r is None:
                    cells.append("-")
                elif r["error"]:
                    cells.append("error")
                else:
                    cells.append(f"{r['mean']:.3f} ({r['std']:.3f})")
            dropped = f" ({first['dropped_rows']} dropped)" if first["dropped_rows"] else ""
            lines.append(f"| {name} | {first['n']}{dropped} | {first['d']} | "
                         + " | ".join(cells) + " |")  # fmt: skip
        errors = [r for r in acc if r["error"]]
        if errors:
            lines += ["", "Errors:"] + [f"- {r['dataset']} / {r['metric']}: {r['error']}"
                                       for r in errors]  # fmt: skip
        lines += [
            "",
            "Seconds per dataset and metric (5 folds, fit + predict): "
            + "; ".join(f"{r['dataset']}/{r['metric']} {r['seconds']:.0f}" for r in acc),
        ]
    if top:
        lines += [
            "",
            f"## Top-k neighbours (k = {K}, every row among the others, {N_FEATURES} "
            "standard-normal features)",
            "",
            "| n | method | queries run | search | search, all n queries | process wall | "
            "peak RSS (tree) | same neighbour sets as distforest kd | other load | "
            "load avg before |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in top:
            full = r.get("search_s_extrapolated", r.get("search_s"))
            extra = " (extrapolated)" if "search_s_extrapolated" in r else ""
            status = "timed out" if r["timed_out"] else ("" if r["returncode"] == 0 else "failed")
            same = r.get("same_neighbour_sets")
            lines.append(
                f"| {r['n']:,} | {r['method']} {status} | {r.get('n_queries', '-'):,} | "
                f"{_f(r.get('search_s'))} s | {_f(full)} s{extra} | {_f(r['wall_s'])} s | "
                f"{r['peak_rss_tree_gb']:.2f} GB | "
                f"{'-' if same is None else f'{same:.4f}'} | {r['foreign_load']:.0%} | "
                f"{r['loadavg_before']} |"
            )
        lines += [
            "",
            "*search*: the neighbour search alone (sklearn: `kneighbors`; distforest: "
            "`search` on a running 2-worker LocalCluster, including sending the data and "
            "building the tree on each worker). *process wall*: the whole process (imports, "
            "data generation, cluster start). *other load*: CPU used by processes outside the "
            "measured process tree during the run, as a share of the machine.",
        ]
    lines += _history_lines(history or [])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--part", choices=["accuracy", "topk", "all"], default="all")
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--cap-minutes", type=float, default=20.0)
    parser.add_argument("--brute-fraction-1m", type=float, default=0.01)
    parser.add_argument("--child")
    parser.add_argument("--n", type=int)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.n, args.fraction, args.out)
        return
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": package_versions(),
        "command": "python benchmarks/bench_knn.py " + " ".join(argv or sys.argv[1:]),
        "load_start": loadavg(),
    }
    state = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    state.setdefault("meta", {})
    parts = ["topk", "accuracy"] if args.part == "all" else [args.part]
    if "topk" in parts and state.get("topk") and "topk" in state["meta"]:
        # keep the previous top-k run (the last three) for comparison
        earlier = {"meta": state["meta"]["topk"], "rows": state["topk"]}
        state["history"] = [*state.get("history", []), earlier][-3:]

    def save(part: str) -> Any:
        def _save(rows: list[dict[str, Any]]) -> None:
            state[part] = rows
            state["meta"][part] = meta
            RESULTS_MD.parent.mkdir(parents=True, exist_ok=True)
            RESULTS_JSON.write_text(json.dumps(state, indent=1))
            write_markdown(
                RESULTS_MD,
                render(
                    state["meta"],
                    state.get("accuracy", []),
                    state.get("topk", []),
                    state.get("history"),
                ),
            )

        return _save

    for part in parts:
        if part == "topk":
            workdir = Path(tempfile.mkdtemp(prefix="dfknn-"))
            try:
                rows = topk(args, workdir, save("topk"))
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        else:
            rows = accuracy(args, save("accuracy"))
        meta["load_end"] = loadavg()
        save(part)(rows)
    print(f"wrote {RESULTS_MD}")


if __name__ == "__main__":
    main()
