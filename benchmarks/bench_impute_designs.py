"""Column-aware imputation, design (a) against design (b), on the six sets of bench_impute.

Run by hand (never in CI), from the repository root, under the shared lock::

    flock /tmp/bench.lock .venv/bin/python benchmarks/bench_impute_designs.py \\
        [--sets Vehicle,Ionosphere] [--rates 10,20,30] [--seeds 1] [--first-seed 0] \\
        [--no-control]

- design (a): ``ProximityImputer()`` (the default: one forest of 50 trees per
  column with a missing cell, column after column), and the same with 17
  trees per column (about the tree count of (b) with groups of 3: a control
  at equal budget);
- design (b): ``multi_output_impute`` of ``benchmarks/multi_impute.py`` (one
  forest per iteration whose multi-output trees each predict a random group
  of ``k`` columns; ``r`` trees per column), at a few settings, and with
  ``k = 1`` as a control (one output per tree: what changes from (a) is only
  that all columns are updated together, and that categorical columns are
  one-hot regression outputs);
- the missForest-like ``IterativeImputer(ExtraTreesRegressor(50))`` and
  ``KNNImputer`` of ``bench_impute.py`` as references.

Same loaders, masks, scores and seeds as ``benchmarks/bench_impute.py``
(imported from it).  Every run appends its rows to
``benchmarks/results/impute_designs.json`` (replacing rows of the same set,
scenario, seed and method) and rewrites ``impute_designs.md`` from all of
them, so sets can be run in separate (shorter) processes.  A hand-written
``## Discussion`` at the end of the markdown file is kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _measure import DATA as SHARED_DATA  # noqa: E402
from _measure import RESULTS as RESULTS_DIR  # noqa: E402
from _measure import (  # noqa: E402
    driver_peak_bytes,
    machine_info,
    write_markdown,
)
from _measure import parser as make_parser  # noqa: E402
from bench_impute import (  # noqa: E402  (benchmarks/ is not a package)
    SETS,
    _load,
    _secs,
    distforest_imputer,
    load,
    masked,
    nrmse,
    pfc,
    sklearn_imputers,
    snap_to_levels,
    timed,
    versions,
)
from multi_impute import multi_output_impute  # noqa: E402

A = "(a) 50 trees/col"
A_SMALL = "(a) 17 trees/col"
MF = "missForest-like"
#: Design (b) settings: label -> (group size k, trees per column r, max_features).
B_SETTINGS = {
    "(b) k=2 r=50": (2, 50, 0.33),
    "(b) k=3 r=50": (3, 50, 0.33),
    "(b) k=3 r=100": (3, 100, 0.33),
}
B_CONTROL = "(b) k=1 r=50"
DISCUSSION = "## Discussion"


def design_b(seed: int, categorical: bool, k: int, r: int, max_features: float) -> Callable:
    def run(X: np.ndarray, y: np.ndarray) -> np.ndarray:
        cats = list(range(X.shape[1])) if categorical else None
        return multi_output_impute(X, y, cats, group_size=k, rounds=r,
                                   max_features=max_features, random_state=seed)  # fmt: skip

    return run


def methods(seed: int, categorical: bool, control: bool) -> dict[str, tuple[Callable, bool]]:
    """Name -> (function, takes the target)."""
    sk = sklearn_imputers(categorical)
    out: dict[str, tuple[Callable, bool]] = {
        "KNNImputer": (sk["KNNImputer"], False),
        MF: (sk["missForest-like"], False),
        A: (distforest_imputer(seed, categorical), True),
        A_SMALL: (distforest_imputer(seed, categorical, n_estimators=17), True),
    }
    for name, (k, r, mf) in B_SETTINGS.items():
        out[name] = (design_b(seed, categorical, k, r, mf), True)
    if control:
        out[B_CONTROL] = (design_b(seed, categorical, 1, 50, 0.33), True)
    return out


def run(args: argparse.Namespace, log: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    for ds in (s for s in SETS if s.name in args.sets.split(",")):
        X, y, _ = load(ds, args.data)
        score = pfc if ds.categorical else nrmse
        for rate in (int(r) / 100 for r in args.rates.split(",")):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                mask = masked(X, "MCAR", rate, seed)
                Xm = np.where(mask, np.nan, X)
                for name, (func, supervised) in methods(seed, ds.categorical,
                                                        not args.no_control).items():  # fmt: skip
                    F, seconds = timed(func, Xm, y) if supervised else timed(func, Xm)
                    if ds.categorical and not supervised:
                        F = snap_to_levels(F, Xm)
                    value = score(X, F, mask)
                    rows.append({"set": ds.name, "scenario": f"MCAR {rate:.0%}", "seed": seed,
                                 "method": name, "score": value, "seconds": seconds})  # fmt: skip
                    log(f"{ds.name:<20} MCAR {rate:.0%} seed {seed} {name:<20} {value:.4f} "
                        f"{seconds:7.1f} s")  # fmt: skip
    return rows


def table(res: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The side-by-side table, and per cell the mean score and time of every method."""
    order = [m for m in ["KNNImputer", MF, A, A_SMALL, *B_SETTINGS, B_CONTROL]
             if m in set(res["method"])]  # fmt: skip
    agg = res.groupby(["set", "scenario", "method"], sort=False).agg(
        score=("score", "mean"), seconds=("seconds", "mean"), seeds=("seed", "nunique")
    )
    lines = ["| set | missing | seeds | " + " | ".join(order) + " |",
             "|" + "---|" * (len(order) + 3)]  # fmt: skip
    for (name, scenario), block in agg.groupby(level=[0, 1], sort=False):
        block = block.droplevel([0, 1])
        best = block["score"].min()
        cells = []
        for m in order:
            if m not in block.index:
                cells.append("-")
                continue
            txt = f"{block.loc[m, 'score']:.3f} ({_secs(block.loc[m, 'seconds'])})"
            cells.append(f"**{txt}**" if block.loc[m, "score"] <= best + 1e-12 else txt)
        seeds = int(block["seeds"].max())
        lines.append(f"| {name} | {scenario} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines), agg.reset_index()


def summary(agg: pd.DataFrame) -> str:
    """Per design (b) setting and control: against (a) and the missForest-like imputer."""
    wide = agg.pivot_table(index=["set", "scenario"], columns="method", values="score")
    secs = agg.pivot_table(index=["set", "scenario"], columns="method", values="seconds")
    lines = ["| method | cells | error / (a) median (range) | cells <= (a) | cells <= "
             "missForest-like | time / (a) median | time / missForest-like median |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for m in [A, A_SMALL, *B_SETTINGS, B_CONTROL]:
        if m not in wide:
            continue
        ok = wide[m].notna()
        err = wide[m][ok] / wide[A][ok]
        t_a = secs[m][ok] / secs[A][ok]
        t_mf = secs[m][ok] / secs[MF][ok]
        lines.append(
            f"| {m} | {int(ok.sum())} | {err.median():.3f} ({err.min():.3f}-{err.max():.3f}) | "
            f"{int((wide[m][ok] <= wide[A][ok]).sum())} | "
            f"{int((wide[m][ok] <= wide[MF][ok]).sum())} | {t_a.median():.2f} | "
            f"{t_mf.median():.2f} |"
        )
    return "\n".join(lines)


def commit() -> str:
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "-uno"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return rev + (" (+ uncommitted changes)" if dirty else "")


def write(out: Path, runs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    res = pd.DataFrame(rows)
    text, agg = table(res)
    previous = out.read_text() if out.exists() else ""
    lines = [
        "# Column-aware imputation: design (a) against design (b)",
        "",
        "Issue 13, item 1.  Design (a): one forest per column with a missing cell "
        "(`distforest/apps/column_impute.py`, the default of `ProximityImputer()`).  Design (b): "
        "one forest per iteration whose multi-output trees each predict a random group of `k` "
        "columns, `r` trees per column (`benchmarks/multi_impute.py`, a prototype).  Same masks "
        "(MCAR, `bench_impute.py`'s seeds), scores (NRMSE; PFC on Soybean) and references as "
        "`imputation.md`.  Each cell: mean score over seeds (time of `fit_transform`).  "
        "**Bold**: best in the row.",
        "",
        "## Runs",
        "",
    ]
    for r in runs:
        lines.append(
            f"- {r['date']}: `{r['command']}`, commit {r['commit']}; load average at the start "
            f"{r['load'][0]}, at the end {r['load'][1]}; wall {r['wall'] / 60:.1f} min; peak RSS "
            f"{r['rss']:.2f} GB"
        )
    lines += [
        f"- Machine: {runs[-1]['machine']}",
        f"- Versions: {runs[-1]['versions']}",
        "- The machine is shared (2 cores): timings taken under load are drafts; ratios within "
        "a row are fairer than seconds.  Errors do not depend on the load.",
        "",
        "## Results",
        "",
        text,
        "",
        "## Summary over the cells",
        "",
        summary(agg),
        "",
    ]
    body = "\n".join(lines)
    if DISCUSSION in previous:
        body += "\n" + previous[previous.index(DISCUSSION) :]
    write_markdown(out, body)


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "impute_designs.md")
    parser.add_argument("--sets", default=",".join(s.name for s in SETS))
    parser.add_argument("--rates", default="20", help="MCAR rates in percent, e.g. 10,20,30")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first..first+seeds-1")
    parser.add_argument("--no-control", action="store_true", help="skip (b) with k=1")
    args = parser.parse_args(argv)
    store = args.out.with_suffix(".json")
    saved = json.loads(store.read_text()) if store.exists() else {"runs": [], "rows": []}
    load_start, start = os.getloadavg(), time.perf_counter()
    warm = np.random.default_rng(0).normal(size=(60, 4))
    warm[::7, 1] = np.nan
    distforest_imputer(0, False, n_estimators=4, iterations=1)(warm, None)  # numba, imports

    def log(line: str) -> None:
        print(line, flush=True)

    new = run(args, log)
    key = ("set", "scenario", "seed", "method")
    fresh = {tuple(r[k] for k in key) for r in new}
    rows = [r for r in saved["rows"] if tuple(r[k] for k in key) not in fresh] + new
    saved["runs"].append({
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
        "commit": commit(),
        "load": [_load(load_start), _load(os.getloadavg())],
        "wall": time.perf_counter() - start,
        "rss": driver_peak_bytes() / 1024**2,
        "machine": machine_info(),
        "versions": versions(),
    })  # fmt: skip
    saved["rows"] = rows
    store.write_text(json.dumps(saved, indent=1))
    write(args.out, saved["runs"], rows)
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
