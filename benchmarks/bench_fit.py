"""ProximityForest.fit against scikit-learn's RandomForestClassifier.fit (issue 14 item 1).

Run by hand, never in CI::

    python benchmarks/bench_fit.py --sizes 20000,100000 --repeats 3

Data: ``make_classification(n, 20, n_informative=10, random_state=0)`` in
memory (float64 X, as a user would pass it).  One process holds both sides:

- scikit-learn: ``RandomForestClassifier(n_estimators=T, n_jobs=2,
  random_state=0).fit(X, y)`` (threads in this process);
- distforest: ``ProximityForest(n_estimators=T, random_state=0)
  .set_execution(client).fit(X, y)`` on a ``LocalCluster(n_workers=2,
  threads_per_worker=1)`` started once before any timing.  The first fit
  on the fresh workers is reported on its own (*cold*: the workers import
  scikit-learn then); the repeats are *warm*.

The two are run alternately, ``--repeats`` times each, and the median is
reported with the load average seen before each run (the machine is shared).
For each distforest fit the Dask task stream gives the time split: from the
call to the first task start (validation, seeds, scatter of X, submission),
the tasks' compute, the idle worker time between and after them, and from
the last task end to the return (result transfer and driver-side assembly).

Writes ``benchmarks/results/fit_speed.md`` (and ``.json``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _measure import machine_info, machine_line, package_versions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import RESULTS as RESULTS_DIR
from _measure import parser as make_parser
from _measure import write_markdown

HERE = Path(__file__).resolve().parent
RESULTS = RESULTS_DIR


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def stream_split(records: list[dict[str, Any]], t_call: float, t_return: float) -> dict[str, Any]:
    """Where one fit's wall time went, from the Dask task stream (times in epoch seconds)."""
    spans = []
    transfer = 0.0
    for rec in records:
        if not str(rec["key"]).startswith("fit-trees"):
            continue
        for ss in rec["startstops"]:
            if ss["action"] == "compute":
                spans.append((ss["start"], ss["stop"], rec["worker"]))
            elif ss["action"] == "transfer":
                transfer += ss["stop"] - ss["start"]
    if not spans:
        return {}
    first = min(s for s, _, _ in spans)
    last = max(e for _, e, _ in spans)
    compute = sum(e - s for s, e, _ in spans)
    workers = len({w for _, _, w in spans})
    wall = t_return - t_call
    return {
        "tasks": len(spans),
        "to_first_task_s": first - t_call,
        "compute_s": compute,
        "mean_task_s": compute / len(spans),
        "tasks_span_s": last - first,
        "idle_in_span_s": (last - first) * workers - compute,
        "after_last_task_s": t_return - last,
        "utilisation": compute / (wall * workers),
    }


def _cpu() -> float:
    """CPU seconds (user + system) of this process so far."""
    return time.process_time()


def fit_sklearn(X: Any, y: Any, trees: int) -> dict[str, float]:
    from sklearn.ensemble import RandomForestClassifier

    cpu = _cpu()
    t = time.perf_counter()
    RandomForestClassifier(n_estimators=trees, n_jobs=2, random_state=0).fit(X, y)
    return {"wall_s": time.perf_counter() - t, "cpu_s": _cpu() - cpu}


def fit_distforest(client: Any, X: Any, y: Any, trees: int) -> dict[str, Any]:
    """One fit; ``cpu_s`` sums the driver (client and scheduler) and the worker processes."""
    from distributed import get_task_stream

    from distforest import ProximityForest

    forest = ProximityForest(n_estimators=trees, random_state=0).set_execution(client)
    workers = sum(client.run(_cpu).values())
    with get_task_stream(client=client) as ts:
        cpu = _cpu()
        t_call = time.time()
        t = time.perf_counter()
        forest.fit(X, y)
        wall = time.perf_counter() - t
        t_return = time.time()
        cpu = _cpu() - cpu
    cpu += sum(client.run(_cpu).values()) - workers
    return {"wall_s": wall, "cpu_s": cpu, **stream_split(ts.data, t_call, t_return)}


def bench_size(n: int, trees: int, repeats: int) -> dict[str, Any]:
    from distributed import Client, LocalCluster
    from sklearn.datasets import make_classification

    X, y = make_classification(n, 20, n_informative=10, random_state=0)
    out: dict[str, Any] = {"n": n, "trees": trees, "sklearn": [], "distforest": []}
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        out["cold"] = {"load": load(), **fit_distforest(client, X, y, trees)}
        _show(n, "distforest cold", out["cold"])
        for r in range(repeats):
            out["sklearn"].append({"load": load(), **fit_sklearn(X, y, trees)})
            _show(n, f"[{r}] sklearn", out["sklearn"][-1])
            out["distforest"].append({"load": load(), **fit_distforest(client, X, y, trees)})
            _show(n, f"[{r}] distforest", out["distforest"][-1])
    return summarise(out)


def summarise(out: dict[str, Any]) -> dict[str, Any]:
    """Medians and ratios of one size's runs."""
    for side in ("sklearn", "distforest"):
        out[f"{side}_median_s"] = statistics.median(r["wall_s"] for r in out[side])
        out[f"{side}_median_cpu_s"] = statistics.median(r["cpu_s"] for r in out[side])
    out["ratio"] = out["distforest_median_s"] / out["sklearn_median_s"]
    out["pair_ratio"] = statistics.median(
        d["wall_s"] / k["wall_s"] for k, d in zip(out["sklearn"], out["distforest"], strict=True)
    )
    out["ratio_cold"] = out["cold"]["wall_s"] / out["sklearn_median_s"]
    return out


def merge(paths: list[str]) -> list[dict[str, Any]]:
    """The runs of several saved JSON files, joined by size (the median cold fit)."""
    by_n: dict[int, dict[str, Any]] = {}
    colds: dict[int, list[dict[str, Any]]] = {}
    for path in paths:
        for r in json.loads(Path(path).read_text())["results"]:
            if r["n"] not in by_n:
                by_n[r["n"]] = {**r, "sklearn": [], "distforest": []}
            by_n[r["n"]]["sklearn"] += r["sklearn"]
            by_n[r["n"]]["distforest"] += r["distforest"]
            colds.setdefault(r["n"], []).append(r["cold"])
    for n, runs in colds.items():
        by_n[n]["cold"] = sorted(runs, key=lambda c: c["wall_s"])[(len(runs) - 1) // 2]
    return [summarise(by_n[n]) for n in sorted(by_n)]


def _show(n: int, label: str, run: dict[str, Any]) -> None:
    extra = {k: round(v, 3) for k, v in run.items() if k not in ("wall_s", "cpu_s", "load")}
    print(
        f"n={n} {label}: {run['wall_s']:.2f} s wall, {run['cpu_s']:.2f} s CPU "
        f"(load {run['load']:.2f}) {extra or ''}",
        flush=True,
    )


def _f(x: float) -> str:
    return f"{x:.2f}"


#: Header of the summary table (this code's runs, and each baseline's).
_SUMMARY_HEADER = [
    "| n | sklearn (median) | distforest warm (median) | ratio | pair ratio | distforest cold "
    "| ratio cold | CPU sklearn | CPU distforest | load avg (min-max) |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]


def _summary_row(r: dict[str, Any]) -> str:
    loads = [x["load"] for x in r["sklearn"] + r["distforest"]] + [r["cold"]["load"]]
    return (
        f"| {r['n']:,} | {_f(r['sklearn_median_s'])} s | {_f(r['distforest_median_s'])} s "
        f"| {r['ratio']:.2f}x | {r['pair_ratio']:.2f}x | {_f(r['cold']['wall_s'])} s "
        f"| {r['ratio_cold']:.2f}x "
        f"| {_f(r['sklearn_median_cpu_s'])} s | {_f(r['distforest_median_cpu_s'])} s "
        f"| {min(loads):.1f}-{max(loads):.1f} |"
    )


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Fit speed: ProximityForest.fit vs RandomForestClassifier.fit",
        "",
        f"- Date: {meta['date']}",
        machine_line(meta["machine"]) + " (shared with other sessions: see the load column)",
        f"- Command: `{meta['command']}` (distforest from `{meta['distforest_source']}`)",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "Data: `make_classification(n, 20, n_informative=10, random_state=0)` in memory "
        f"(float64); T = {results[0]['trees']} trees, seed 0.  scikit-learn: "
        "`RandomForestClassifier(n_estimators=T, n_jobs=2, random_state=0).fit(X, y)`; "
        "distforest: `ProximityForest(n_estimators=T, random_state=0).set_execution(client)"
        ".fit(X, y)` on a running `LocalCluster(n_workers=2, threads_per_worker=1)`.  Run "
        "alternately in one process; medians of the repeats.  *cold* is the first "
        "distforest fit on fresh workers (they import scikit-learn during it).",
        "",
        *_SUMMARY_HEADER,
        *[_summary_row(r) for r in results],
    ]
    for title, base in meta.get("baselines", {}).items():
        lines += ["", f"### {title}", "", *_SUMMARY_HEADER]
        lines += [_summary_row(r) for r in base]
    lines += [
        "",
        "## Where a distforest fit's time goes (Dask task stream, median run)",
        "",
        "| n | run | wall | to first task | tasks | mean task | task compute | idle workers "
        "in span | after last task | utilisation |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        runs = sorted(r["distforest"], key=lambda x: x["wall_s"])
        for label, x in (("cold", r["cold"]), ("warm", runs[len(runs) // 2])):
            if "tasks" not in x:
                continue
            lines.append(
                f"| {r['n']:,} | {label} | {_f(x['wall_s'])} s | {_f(x['to_first_task_s'])} s "
                f"| {x['tasks']} | {_f(x['mean_task_s'])} s | {_f(x['compute_s'])} s "
                f"| {_f(x['idle_in_span_s'])} s | {_f(x['after_last_task_s'])} s "
                f"| {x['utilisation']:.0%} |"
            )
    lines += [
        "",
        "*to first task*: from the call to the first task's start (validation, seeds, "
        "scatter of X, submission); *idle workers in span*: worker-seconds without a fit "
        "task between the first start and the last end; *after last task*: result "
        "transfer and assembly on the driver; *utilisation* = task compute / (wall x 2 "
        "workers).  *pair ratio*: median over the repeats of distforest / the sklearn fit run "
        "just before it (less sensitive to the load drifting).  *CPU*: user + system "
        "seconds of the whole fit (sklearn: its process; distforest: the driver, which hosts "
        "the scheduler, plus both worker processes).",
        "",
        "## All runs",
        "",
    ]
    for r in results:
        sk = ", ".join(f"{x['wall_s']:.2f} (load {x['load']:.1f})" for x in r["sklearn"])
        df = ", ".join(f"{x['wall_s']:.2f} (load {x['load']:.1f})" for x in r["distforest"])
        lines.append(f"- n = {r['n']:,}: wall seconds (load average before the run):")
        lines.append(f"  sklearn {sk}; distforest {df}")
    for note in meta.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--sizes", default="20000", help="comma-separated row counts")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "fit_speed"), help="path without suffix")
    parser.add_argument("--note", action="append", default=[], help="a paragraph to add")
    parser.add_argument(
        "--merge", nargs="+", metavar="JSON", help="render saved runs (joined by size) instead"
    )
    parser.add_argument(
        "--baseline",
        nargs=2,
        action="append",
        default=[],
        metavar=("TITLE", "JSONS"),
        help="a table of saved runs of other code (comma-separated JSON files) under TITLE",
    )
    args = parser.parse_args(argv)
    if args.merge:
        results = merge(args.merge)
        meta = json.loads(Path(args.merge[0]).read_text())["meta"]
        meta["command"] += f" (runs of {len(args.merge)} such commands joined)"
    else:
        results = [bench_size(int(s), args.trees, args.repeats) for s in args.sizes.split(",")]
        import distforest

        meta = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "distforest_source": str(Path(distforest.__file__).parent),
            "machine": machine_info(),
            "versions": package_versions(),
            "command": "python benchmarks/bench_fit.py " + " ".join(argv or sys.argv[1:]),
        }
    meta["notes"] = args.note
    meta["baselines"] = {title: merge(files.split(",")) for title, files in args.baseline}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    write_markdown(Path(args.out + ".md"), render(results, meta))
    print(render(results, meta))


if __name__ == "__main__":
    main()
