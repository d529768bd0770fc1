"""Refined forest (leaf_bound): time, co-leaf events, neighbour quality beside today's forest.

Run by hand (never in CI)::

    python -m benchmarks refine [--rows 100000,1000000] [--forests none,auto] [--trees 100]
        [--phase-trees 100 --phase-samples 50000]
        [--k 50] [--quality-rows 200000] [--quality-seeds 1] [--work /tmp/dfbench-refine]

Data: ``bench_out_of_core.py``'s generator (``make_data``): N rows x 20 float
features, 20 % of three columns missing, a 3-class target ``label``, as a
40-part Parquet folder.

1. *Time* (``--rows``; each forest of ``--forests``): ``python -m distforest
   proximity FOLDER --target label --top-k K --trees T --leaf-bound F`` end to
   end under ``/usr/bin/time -v`` with the process tree's RSS sampled
   (``_measure.run_measured``); then, from the store, the co-leaf events per row
   and tree (``sum over leaves of pop^2 / n``, the neighbours' work) and the
   largest leaf.  ``none`` is the forest grown on the 200,000-row sample alone
   (today's default), ``auto`` the refined one.
2. *Quality* (``--quality-rows``, ``--quality-seeds`` seeds): in this process,
   10 % of the observed cells of every feature blanked, the forests fitted on
   that table with trees on a fifth of the rows (``max_samples=0.2``: leaves as
   crowded as the 200,000-row sample makes them at 1,000,000 rows), then the
   top-K neighbours (Breiman's proximity) of every row: the share of a row's K
   neighbours of its class, and the NRMSE (RMSE over the column's standard
   deviation, mean over the 20 columns) of each blanked cell imputed as the
   proximity-weighted mean of its neighbours' observed values.

Results: ``results/refine.json`` and ``results/refine.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _measure import GB, Measure, parser, run_measured, write_result  # noqa: E402
from bench_out_of_core import make_data  # noqa: E402

ROOT = HERE.parent
BLANK_SHARE = 0.10


def arguments() -> Any:
    p = parser(__doc__)
    p.add_argument("--rows", default="100000,1000000", help="Row counts of the timed runs.")
    p.add_argument("--forests", default="none,auto", help="--leaf-bound values to compare.")
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--max-samples", type=float, default=None,
                   help="Per-unit runs: trees on this share of the rows (default: the forest's "
                        "own, 200,000 rows above 500,000); 0.2 at 100,000 rows crowds the leaves "
                        "as 200,000 rows do at 1,000,000.")  # fmt: skip
    p.add_argument("--quality-rows", type=int, default=200_000, help="0: no quality runs.")
    p.add_argument("--quality-seeds", type=int, default=1)
    p.add_argument("--first-seed", type=int, default=0, help="Seed of the first quality run.")
    p.add_argument("--work", default=None, help="Scratch folder (default: a temporary one).")
    p.add_argument("--unit-trees", type=int, default=0,
                   help="Instead of the CLI runs: fit this many trees in this process (one "
                        "thread) and time the fit and the neighbours by CPU seconds, per tree "
                        "(a loaded machine inflates wall time, less CPU time).")  # fmt: skip
    p.add_argument("--phase-trees", type=int, default=0,
                   help="Instead of the CLI runs: grow this many trees on --rows (one "
                        "thread, 10 %% of cells blanked, seeds --first-seed..) and time each "
                        "phase by CPU seconds (the sample's tree, the routing of every row, the "
                        "refinement, the neighbours) with the neighbours' quality; the forest "
                        "as grown and each refined one share their trees' tops.")  # fmt: skip
    p.add_argument("--phase-samples", default="",
                   help="With --phase-trees: rows per tree of extra refined forests "
                        "(comma-separated; each grows its own tops); --max-samples: the "
                        "first pair's.")  # fmt: skip
    return p.parse_args()


def co_leaf_events(store: Path) -> dict[str, float]:
    """Events per row and tree (``sum_l pop_l^2 / n``, mean over trees) and the largest leaf."""
    from distforest.store.run_store import RunStore

    return _events(RunStore.open(store).array("leaves"))


def _events(leaves: Any) -> dict[str, float]:
    import numpy as np

    n, trees = leaves.shape
    events, largest = 0.0, 0
    for start in range(0, trees, 10):
        block = np.asarray(leaves[:, start : start + 10])
        for t in range(block.shape[1]):
            pop = np.bincount(block[:, t])
            events += float((pop.astype(np.float64) ** 2).sum()) / n
            largest = max(largest, int(pop.max()))
    return {"events_per_row_tree": events / trees, "largest_leaf": largest}


def timed(rows: int, forest: str, args: Any, work: Path) -> dict[str, Any]:
    """One end-to-end CLI run and the co-leaf events of its forest."""
    folder = work / f"data-{rows}"
    if not (folder / "parts").exists():
        shutil.rmtree(folder, ignore_errors=True)
        make_data(rows, folder)
    out = work / f"run-{rows}-{forest}.zarr"
    shutil.rmtree(out, ignore_errors=True)  # (a complete store of the same job is not rerun)
    (work / "report.json").unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "distforest", "proximity", str(folder / "parts"),
           "--target", "label", "--top-k", str(args.k), "--trees", str(args.trees),
           "--leaf-bound", forest, "--out", str(out), "--overwrite"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = run_measured(cmd, ROOT, f"{rows}-{forest}", env=env)
    row: dict[str, Any] = {
        "rows": rows, "forest": forest, "ok": run.get("returncode", 0) == 0,
        "wall_s": round(run["wall_s"], 1),
        "peak_tree_GB": round(run.get("peak_rss_tree_bytes", 0) / GB, 2),
        "foreign_cpu_s": round(run.get("foreign_cpu_s", 0.0), 1),
    }  # fmt: skip
    procs = run.get("processes", [])
    driver = [p["peak_bytes"] for p in procs if p.get("role") == "driver"]
    workers = [p["peak_bytes"] for p in procs if p.get("role") == "worker"
               and "resource_tracker" not in p.get("command", "")]  # fmt: skip
    row["peak_driver_GB"] = round(max(driver, default=0) / GB, 2)
    row["peak_worker_GB"] = round(max(workers, default=0) / GB, 2)
    report = out.parent / "report.json"
    if report.exists():
        stages = json.loads(report.read_text()).get("stages") or {}
        for name in ("fit", "neighbors"):
            if isinstance(stages.get(name), dict) and "seconds" in stages[name]:
                row[f"{name}_s"] = round(stages[name]["seconds"], 1)
    if out.exists():
        row.update({k: round(v, 2) for k, v in co_leaf_events(out).items()})
    return row


def per_unit(rows: int, forest: str, args: Any, work: Path) -> dict[str, Any]:
    """CPU seconds of the fit and the neighbours of ``--unit-trees`` trees, in this process."""
    import pandas as pd

    import distforest
    from distforest import ProximityForest

    folder = work / f"data-{rows}"
    if not (folder / "table.parquet").exists():
        shutil.rmtree(folder, ignore_errors=True)
        make_data(rows, folder)
    df = pd.read_parquet(folder / "table.parquet")
    y = df.pop("label").to_numpy()
    bound = None if forest == "none" else (forest if forest == "auto" else int(forest))
    with Measure(f"unit-{forest}") as m, distforest.execution(client="synchronous"):
        with m.phase("fit"):
            f = ProximityForest(args.unit_trees, leaf_bound=bound, random_state=0,
                                max_samples=args.max_samples).fit(df, y)  # fmt: skip
        with m.phase("neighbors"):
            f.proximity_neighbors(args.k, "original")
    phases = {p["name"]: p for p in m.result["phases"]}
    T = args.unit_trees
    events = _events(f.leaves_)
    return {
        "rows": rows, "max_samples": args.max_samples, "forest": forest, "trees": T,
        "leaf_bound_": f.leaf_bound_,
        "fit_cpu_s_per_tree": round(phases["fit"]["cpu_s"] / T, 2),
        "neighbors_cpu_s_per_tree": round(phases["neighbors"]["cpu_s"] / T, 2),
        "fit_wall_s": round(phases["fit"]["wall_s"], 1),
        "neighbors_wall_s": round(phases["neighbors"]["wall_s"], 1),
        "neighbors_cpu_us_per_event": round(
            1e6 * phases["neighbors"]["cpu_s"] / (events["events_per_row_tree"] * rows * T), 3),
        **{k: round(v, 2) for k, v in events.items()},
        "nodes_per_tree": int(f.node_counts_.mean()),
        "foreign_cpu_s": round(m.result.get("foreign_cpu_s", 0.0), 1),
    }  # fmt: skip


def _blanked(rows: int, seed: int, work: Path) -> tuple[Any, Any, Any, Any]:
    """The quality runs' table: features with 10 % of observed cells blanked, the truth,
    the blanked cells and the class labels."""
    import numpy as np
    import pandas as pd

    folder = work / f"quality-{rows}-{seed}"
    if not (folder / "table.parquet").exists():
        shutil.rmtree(folder, ignore_errors=True)
        make_data(rows, folder, seed=seed)
    df = pd.read_parquet(folder / "table.parquet")
    y = df.pop("label").to_numpy()
    truth = df.to_numpy(dtype=np.float64)
    rng = np.random.default_rng(1000 + seed)
    blank = (rng.random(truth.shape) < BLANK_SHARE) & ~np.isnan(truth)
    return np.where(blank, np.nan, truth), truth, blank, y


def _scores(idx: Any, prox: Any, X: Any, truth: Any, blank: Any, y: Any) -> dict[str, float]:
    """Class agreement of the neighbours and NRMSE of the blanked cells imputed from them."""
    import numpy as np

    prox = prox.astype(np.float64)
    agree = float((y[idx] == y[:, None]).mean())
    nrmse = []
    for j in range(X.shape[1]):
        rows_j = np.flatnonzero(blank[:, j])
        values = X[:, j][idx[rows_j]]
        weights = np.where(np.isnan(values), 0.0, prox[rows_j])
        with np.errstate(invalid="ignore", divide="ignore"):
            est = np.nansum(values * weights, axis=1) / weights.sum(axis=1)
        est = np.where(np.isfinite(est), est, np.nanmean(X[:, j]))  # no neighbour value
        err = est - truth[rows_j, j]
        nrmse.append(float(np.sqrt(np.mean(err**2)) / np.nanstd(truth[:, j])))
    return {"class_agreement": round(agree, 4), "impute_nrmse": round(float(np.mean(nrmse)), 4)}


def phases(rows: int, seed: int, args: Any, work: Path) -> list[dict[str, Any]]:
    """CPU seconds per tree of each phase of the fit, the neighbours', and their quality:
    the forest as grown beside the refined one of the same tops (and refined forests
    whose tops grow on ``--phase-samples`` rows)."""
    import time

    import numpy as np

    from distforest.forests import proximity_neighbors as pn
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.forests.refine import AUTO_LEAF_BOUND, refine_grown, refine_rule
    from distforest.kernels.trees import TreeBatch, grow_tree, tree_input
    from distforest.kernels.trees import _flatten as flatten
    from distforest.parallel.execution import Runner

    X, truth, blank, labels = _blanked(rows, seed, work)
    classes, y = np.unique(labels, return_inverse=True)
    y = y.astype(np.int64)
    Xf = tree_input(X)
    T = args.phase_trees
    seeds = np.arange(1, T + 1, dtype=np.uint64) + np.uint64(1000 * seed)
    runner = Runner(None, 1)
    out = []
    samples = [args.max_samples] + [int(s) for s in args.phase_samples.split(",") if s]
    for number, sample in enumerate(samples):
        forest = ProximityForest(T, max_samples=sample)
        tp = ProximityForest._tree_params(forest._validated(), "classification",
                                          list(range(len(classes))), rows)  # fmt: skip
        rule, _ = refine_rule(AUTO_LEAF_BOUND, tp, rows, X.shape[1])
        assert rule is not None
        cpu = {"grow": 0.0, "route": 0.0, "refine": 0.0}
        warm = grow_tree(Xf[:2000], y[:2000], 0, tp)[1]  # the kernels compiled, untimed
        refine_grown(TreeBatch(warm.apply(Xf[:2000])[:, None].astype(np.int32),
                               np.ones((2000, 1), np.uint8), np.array([warm.tree_.node_count]),
                               flatten(warm, tp), np.zeros((1, 1))), Xf[:2000], y[:2000],
                     seeds[:1], rule)  # fmt: skip
        grown = np.empty((rows, T), dtype=np.int32)
        refined = np.empty((rows, T), dtype=np.int32)
        inbag = np.empty((rows, T), dtype=np.uint8)
        inbag_refined = np.empty((rows, T), dtype=np.uint8)
        for t, tree_seed in enumerate(seeds):
            c0 = time.process_time()
            counts, tree = grow_tree(Xf, y, int(tree_seed), tp)
            c1 = time.process_time()
            leaves = tree.apply(Xf, check_input=False).astype(np.int32)
            c2 = time.process_time()
            nodes = flatten(tree, tp)
            size = np.array([len(nodes["feature"])])
            batch = TreeBatch(leaves[:, None].copy(), counts[:, None].copy(), size, nodes,
                              np.zeros((1, 1)))  # fmt: skip
            done = refine_grown(batch, Xf, y, seeds[t : t + 1], rule)
            c3 = time.process_time()
            cpu["grow"] += c1 - c0
            cpu["route"] += c2 - c1
            cpu["refine"] += c3 - c2
            grown[:, t], inbag[:, t] = leaves, counts
            refined[:, t], inbag_refined[:, t] = done.leaves[:, 0], done.inbag[:, 0]
        forests = [("refined", refined, inbag_refined)]
        if number == 0:  # the forest as grown: its tops are the first refined forest's
            forests.insert(0, ("as grown", grown, inbag))
        for name, leaves_, inbag_ in forests:
            c0 = time.process_time()
            idx, prox = pn.compute_neighbors(runner, leaves_, inbag_, "original", args.k)
            neighbors = time.process_time() - c0
            drawn = tp.max_samples if isinstance(tp.max_samples, int) else round(
                (tp.max_samples or 1.0) * rows)  # fmt: skip
            row = {
                "rows": rows, "seed": seed, "trees": T, "rows_a_tree": drawn, "forest": name,
                "grow_cpu_s_per_tree": round(cpu["grow"] / T, 3),
                "route_cpu_s_per_tree": round(cpu["route"] / T, 3),
                "refine_cpu_s_per_tree": round(cpu["refine"] / T, 3) if name != "as grown"
                else 0.0,
                "neighbors_cpu_s_per_tree": round(neighbors / T, 3),
                **{k: round(v, 2) for k, v in _events(leaves_).items()},
                **_scores(idx, prox, X, truth, blank, classes[y]),
            }  # fmt: skip
            row["total_cpu_s_per_tree"] = round(
                row["grow_cpu_s_per_tree"] + row["route_cpu_s_per_tree"]
                + row["refine_cpu_s_per_tree"] + row["neighbors_cpu_s_per_tree"], 3)  # fmt: skip
            print(row, flush=True)
            out.append(row)
    runner.close()
    return out


def quality(rows: int, seed: int, forest: str, args: Any, work: Path) -> dict[str, Any]:
    """Class agreement of the K neighbours and NRMSE of imputing blanked cells from them."""
    import distforest
    from distforest import ProximityForest

    X, truth, blank, y = _blanked(rows, seed, work)
    bound = None if forest == "none" else (forest if forest == "auto" else int(forest))
    with Measure(f"quality-{forest}") as m, distforest.execution(client="synchronous"):
        with m.phase("fit"):
            f = ProximityForest(args.trees, max_samples=0.2, leaf_bound=bound,
                                random_state=seed).fit(X, y)  # fmt: skip
        with m.phase("neighbors"):
            ds = f.proximity_neighbors(args.k, "original")
    scores = _scores(ds["index"].values, ds["proximity"].values, X, truth, blank, y)
    phases = {p["name"]: round(p["wall_s"], 1) for p in m.result["phases"]}
    return {
        "rows": rows, "seed": seed, "forest": forest, "leaf_bound_": f.leaf_bound_,
        **scores, "fit_s": phases["fit"], "neighbors_s": phases["neighbors"],
    }  # fmt: skip


def main() -> None:
    args = arguments()
    work = Path(args.work or tempfile.mkdtemp(prefix="dfbench-refine-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.phase_trees:
        first = args.first_seed
        found = [row for rows in (int(r) for r in args.rows.split(",") if r)
                 for s in range(first, first + args.quality_seeds)
                 for row in phases(rows, s, args, work)]  # fmt: skip
        write_result("refine-phases", found, title="Refined forest: CPU by phase and quality")
        return
    forests = args.forests.split(",")
    run = per_unit if args.unit_trees else timed
    timing = []
    for rows in [int(r) for r in args.rows.split(",") if r]:
        for forest in forests:
            timing.append(run(rows, forest, args, work))
            print(timing[-1], flush=True)
    first = args.first_seed
    seeds = range(first, first + args.quality_seeds) if args.quality_rows else range(0)
    scores = [quality(args.quality_rows, s, f, args, work) for s in seeds for f in forests]
    for row in scores:
        print(row, flush=True)
    notes = "## Quality\n\n" + _table(scores) if scores else ""
    write_result("refine", timing, title="Refined forest (leaf_bound)", notes=notes,
                 data={"quality": scores})  # fmt: skip


def _table(rows: list[dict[str, Any]]) -> str:
    from _measure import markdown_table

    return markdown_table(rows)


if __name__ == "__main__":
    main()
