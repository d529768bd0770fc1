"""Benchmark a nightly score-new-rows pipeline against a large saved model (run by hand).

Goal (issue 26): "a nightly score-new-rows pipeline on 100,000 new rows
against a 1,000,000-row model completes without recomputing the model's
proximities"::

    .venv/bin/python benchmarks/bench_nightly_score.py \
        [--n-model 1000000] [--n-new 100000] [--trees 100] [--workdir /tmp/dfbench-score]

Each step in its own subprocess, wall time and the peak summed RSS of the
whole process tree (the driver and any Dask workers) measured
(``benchmarks/_measure.py``):

1. ``data``: ``make_classification(n_model + n_new, 20, n_informative=10,
   n_classes=3, random_state=0)``; the first ``n_model`` rows with target
   ``y`` to ``train.parquet``, the rest (2% of the cells of f0, f5 and f9
   blanked, an ``id`` column) to ``new.parquet``.
2. ``model``: what a proximity run does before its matrix:
   ``ProximityForest(n_estimators=T, random_state=0)`` (default
   ``max_samples``: n bootstrap rows per tree up to 500,000 rows, 200,000
   above) fitted on ``train.parquet``, saved to ``model.zarr`` and marked
   complete.  No proximity matrix is written (at n = 10^6 it would be 10^12
   cells).
3. ``score``: ``python -m distforest -q run nightly.yaml``, the scoring
   pipeline (``model: model.zarr``, ``score`` with all three columns,
   ``impute`` with RF-GAP), end to end.  Checked afterwards: every file of
   ``model.zarr`` unchanged (sha256), the run store's stages exactly
   ``score`` and ``impute`` (no ``fit``, no ``tiles``), one output row per
   new row, no missing cell left.
4. ``phases``: the same code path in one process, timed phase by phase, with
   the peak RSS of the process tree per phase (sampled every 0.1 s).

No phase can hold an ``n x n`` or ``n_new x n_train`` matrix: predictions
route the new rows, weighted sums are per-tree leaf sums, the outlier sums
of squares come from sparse leaf-member rows; the peak RSS is compared with
what one dense ``n_new x n_train`` float32 matrix would take.

Results: ``benchmarks/results/nightly_score.md`` and ``.json``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import RESULTS as RESULTS_DIR
from _measure import (
    Measure,
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
RESULTS_MD = RESULTS_DIR / "nightly_score.md"
RESULTS_JSON = RESULTS_DIR / "nightly_score.json"
GB = 1e9
MISSING_COLUMNS = ("f0", "f5", "f9")


def _self_cmd(child: str, **kwargs: Any) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", child,
            "--child-args", json.dumps(kwargs)]  # fmt: skip


# -- children -------------------------------------------------------------------------


def child_data(work: str, n_model: int, n_new: int) -> None:
    import numpy as np
    import pandas as pd
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=n_model + n_new, n_features=20, n_informative=10,
                               n_classes=3, random_state=0)  # fmt: skip
    names = [f"f{j}" for j in range(20)]
    train = pd.DataFrame(X[:n_model], columns=names).assign(y=y[:n_model])
    train.to_parquet(Path(work) / "train.parquet", index=False)
    new = pd.DataFrame(X[n_model:], columns=names)
    rng = np.random.default_rng(1)
    for column in MISSING_COLUMNS:
        new.loc[rng.random(n_new) < 0.02, column] = np.nan
    new.insert(0, "id", [f"r{i:07d}" for i in range(n_new)])
    new.assign(y=y[n_model:]).to_parquet(Path(work) / "new.parquet", index=False)
    emit({"missing_cells": int(new[list(MISSING_COLUMNS)].isna().sum().sum())})


def child_model(work: str, trees: int) -> None:
    from distforest import ProximityForest
    from distforest.io import load_table

    tick = time.perf_counter()
    table = load_table(str(Path(work) / "train.parquet"), target="y")
    read = time.perf_counter() - tick
    forest = ProximityForest(n_estimators=trees, random_state=0).fit(table)
    fit = time.perf_counter() - tick - read
    rs = forest.save(Path(work) / "model.zarr", overwrite=True, attrs={"job": "bench"})
    rs.mark_complete()
    emit({"read_s": read, "fit_s": fit, "save_s": time.perf_counter() - tick - read - fit,
           "nodes": int(forest.node_counts_.sum())})  # fmt: skip


def child_phases(work: str) -> None:
    from distforest.apps.outliers import outlier_scores_new_rows
    from distforest.apps.scoring import impute_rows, new_rows_table, training_features
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.parallel.placement import place

    phases: dict[str, dict[str, float]] = {}
    model = str(Path(work) / "model.zarr")
    with Measure("phases") as m, contextlib.ExitStack() as stack:
        with m.phase("load model"):
            forest = ProximityForest.load(model)
        with m.phase("read new rows"):
            table = new_rows_table(forest, str(Path(work) / "new.parquet"), id_column="id")
        # where the pipeline runs it: placement by the model's size (a LocalCluster when large)
        with m.phase("start cluster") as starting:
            where = stack.enter_context(place(forest._fitted_cells() + int(table.X.size), {}))
        if where.client is None:
            starting["name"] = "placement (in process)"
        with m.phase("predict"):
            predicted = forest.predict(table)
        with m.phase("proximity-weighted prediction"):
            forest.predict_proximity(table, "rfgap")
        with m.phase("outlier scores (training reference + new rows)"):
            outlier_scores_new_rows(forest, table, labels=predicted)
        with m.phase("read training features"):
            X_train = training_features(model, forest)
        with m.phase("impute"):
            impute_rows(forest, table, X_train, method="rfgap")
    for record in m.result["phases"]:
        phases[record["name"]] = {
            "seconds": round(record["wall_s"], 2),
            "peak_rss_gb": round(record["peak_rss_tree_bytes"] / GB, 3),
        }
        print(f"  {record['name']}: {phases[record['name']]}", flush=True)
    emit({"phases": phases})


CHILDREN = {"data": child_data, "model": child_model, "phases": child_phases}


# -- driver ---------------------------------------------------------------------------


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(path)).encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _pipeline(work: Path) -> Path:
    text = f"""\
name: nightly_score_bench
model: {work / "model.zarr"}
input: {{path: {work / "new.parquet"}, id: id}}
score: {{out: scores.csv, method: rfgap, proximity_prediction: true, outliers: true}}
impute: {{out: imputed.csv, proximity: rfgap}}
output: {{dir: {work / "night"}, store: scores.zarr, overwrite: true}}
"""
    path = work / "nightly.yaml"
    path.write_text(text)
    return path


def _checks(work: Path, before: str, n_new: int) -> dict[str, Any]:
    import pandas as pd

    from distforest.store.run_store import RunStore

    run = RunStore.open(work / "night" / "scores.zarr")
    scores = pd.read_csv(work / "night" / "scores.csv")
    imputed = pd.read_csv(work / "night" / "imputed.csv")
    truth = pd.read_parquet(work / "new.parquet", columns=["y"])["y"].to_numpy()
    return {
        "model_store_unchanged": _digest(work / "model.zarr") == before,
        "stages": sorted(run.attrs.get("stages", {})),
        "complete": run.is_complete,
        "score_rows": len(scores),
        "imputed_rows": len(imputed),
        "missing_left": int(imputed.isna().sum().sum()),
        "ids_kept": bool(scores["id"].tolist() == [f"r{i:07d}" for i in range(n_new)]),
        "accuracy": float((scores["predicted"].to_numpy() == truth).mean()),
        "cells_imputed": run.attrs["stages"]["impute"].get("cells_imputed"),
    }


def _summary(run: dict[str, Any]) -> dict[str, Any]:
    return {k: run.get(k) for k in ("returncode", "wall_s", "peak_rss_tree_bytes", "user_s",
                                    "sys_s", "foreign_load", "child")}  # fmt: skip


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--n-model", type=int, default=1_000_000)
    parser.add_argument("--n-new", type=int, default=100_000)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--workdir", default="/tmp/dfbench-score")
    parser.add_argument(
        "--draft",
        action="store_true",
        help="mark the results as a DRAFT (not the goal's size or machine)",
    )
    parser.add_argument("--reuse", action="store_true",
                        help="keep the tables and model of the last run of the same sizes "
                        "in --workdir (and their figures); score again")  # fmt: skip
    parser.add_argument("--child", choices=sorted(CHILDREN))
    parser.add_argument("--child-args", default="{}")
    args = parser.parse_args()
    if args.child:
        CHILDREN[args.child](**json.loads(args.child_args))
        return
    work = Path(args.workdir)
    env_cmd = " ".join(sys.argv)
    runs: dict[str, Any] = {}
    previous = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    same = {k: previous.get(k) for k in ("n_model", "n_new", "trees")} == {
        "n_model": args.n_model, "n_new": args.n_new, "trees": args.trees}  # fmt: skip
    if args.reuse and same and (work / "model.zarr").is_dir():
        # the tables and the model of the last run of the same size: their figures kept
        runs["data"], runs["model"] = previous["runs"]["data"], previous["runs"]["model"]
        shutil.rmtree(work / "night", ignore_errors=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        runs["data"] = run_measured(_self_cmd("data", work=str(work), n_model=args.n_model,
                                              n_new=args.n_new), work, "data")  # fmt: skip
        runs["model"] = run_measured(_self_cmd("model", work=str(work), trees=args.trees),
                                     work, "model")  # fmt: skip
    before = _digest(work / "model.zarr")
    pipeline = _pipeline(work)
    runs["score"] = run_measured([sys.executable, "-m", "distforest", "-q", "run",
                                  str(pipeline)], work, "score")  # fmt: skip
    checks = _checks(work, before, args.n_new) if runs["score"]["returncode"] == 0 else {}
    runs["phases"] = run_measured(_self_cmd("phases", work=str(work)), work, "phases")
    dense_bytes = 4 * args.n_model * args.n_new
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": env_cmd,
        "draft": args.draft,
        "n_model": args.n_model,
        "n_new": args.n_new,
        "trees": args.trees,
        "machine": machine_info(),
        "versions": package_versions(),
        "runs": {k: _summary(v) for k, v in runs.items()},
        "checks": checks,
        "dense_cross_matrix_bytes": dense_bytes,
    }
    RESULTS_JSON.write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(RESULTS_MD, _markdown(result))
    print(RESULTS_MD.read_text())


def _markdown(r: dict[str, Any]) -> str:
    runs, checks = r["runs"], r["checks"]
    title = "# Nightly scoring: new rows against a saved model"
    lines = [title + (" (DRAFT)" if r["draft"] else ""), ""]
    if r["draft"]:
        lines += [
            f"**DRAFT**: {r['n_new']:,} new rows against a {r['n_model']:,}-row model, on a "
            "shared machine; not the goal's size (100,000 against 1,000,000). Re-run at full "
            "size on a quiet machine:",
            "`python benchmarks/bench_nightly_score.py --n-model 1000000 --n-new 100000`.",
            "",
        ]
    v = r["versions"]
    lines += [
        f"- Date: {r['date']}; command: `{r['command']}`",
        f"- distforest {v.get('distforest git', v.get('distforest'))}, numpy {v['numpy']}, "
        f"dask {v['dask']}, numba {v['numba']}",
        machine_line(r["machine"]),
        f"- Data: make_classification, 20 features (10 informative), 3 classes; "
        f"{r['trees']} trees, default max_samples; 2% of the new rows' cells of "
        f"{', '.join(MISSING_COLUMNS)} blanked.",
        "",
        "| step | wall (s) | peak RSS, process tree (GB) | other load |",
        "|---|---:|---:|---:|",
    ]
    for name, label in (("data", "make the tables"), ("model", "fit and save the model"),
                        ("score", "**`distforest run nightly.yaml`** (score + impute)"),
                        ("phases", "the same, phase by phase in one process")):  # fmt: skip
        run = runs[name]
        wall = run.get("wall_s") or 0.0
        rss = (run.get("peak_rss_tree_bytes") or 0) / GB
        lines.append(f"| {label} | {wall:.1f} | {rss:.2f} | {run.get('foreign_load') or 0:.0%} |")
    model = runs["model"].get("child") or {}
    if model:
        lines += ["", f"Model: read {model['read_s']:.1f} s, fit {model['fit_s']:.1f} s, save "
                  f"{model['save_s']:.1f} s, {model['nodes']:,} nodes."]  # fmt: skip
    phases = (runs["phases"].get("child") or {}).get("phases", {})
    if phases:
        lines += ["", "| phase (one process, placed as the pipeline) | s | peak RSS, tree (GB) |",
                  "|---|---:|---:|"]  # fmt: skip
        lines += [f"| {k} | {p['seconds']:.1f} | {p['peak_rss_gb']:.2f} |"
                  for k, p in phases.items()]  # fmt: skip
    peak = max((runs[k].get("peak_rss_tree_bytes") or 0) for k in ("score", "phases"))
    lines += [
        "",
        "Checks after the pipeline run: " + ", ".join(f"{k} = {v}" for k, v in checks.items()),
        "",
        f"One dense `n_new x n_train` float32 matrix would take "
        f"{r['dense_cross_matrix_bytes'] / GB:,.1f} GB; the scoring's peak RSS (whole process "
        f"tree) was {peak / GB:.2f} GB.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
