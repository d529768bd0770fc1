"""Imputing from the run's stored proximity matrix vs the column mode, on the bundled data.

Run by hand (never in CI)::

    .venv/bin/python benchmarks/bench_impute_from_matrix.py [--seeds 5] [--rate 0.1]

For each bundled table (breast cancer, ionosphere) and seed, ``--rate`` of
the observed feature cells are blanked at random (the target kept), and the
same proximity pipeline (100 trees, ``random_state`` = seed) is run with
``python -m distforest -q run`` twice:

- ``impute: {out: ..., from: proximity}``: one pass over the Breiman
  proximity matrix the run stored (a forest fitted on the table with its
  blanks, routed by the trees' missing-value branches);
- ``impute: {out: ...}``: the default column mode (one forest per column,
  iterated; its own forests, not the run's matrix).

Error on the blanked cells: NRMSE ``sqrt(mean((imputed - true)^2) / var(true))``
over all blanked numeric cells (missForest's measure), and the wall time of
each run (the whole pipeline: fit, matrix, imputation).  Results:
``benchmarks/results/impute_from_matrix.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import RESULTS as RESULTS_DIR
from _measure import (
    machine_info,
    machine_line,
    package_versions,
    write_markdown,
)
from _measure import parser as make_parser

ROOT = Path(__file__).resolve().parent.parent
RESULTS = RESULTS_DIR / "impute_from_matrix.md"
DATA = {
    "breast_cancer": ("Class", ["Id"], ["?"]),
    "ionosphere": ("Class", [], []),
}
MODES = {"from proximity matrix": {"from": "proximity"}, "column mode (default)": {}}


def _blank(frame: pd.DataFrame, features: list[str], rate: float, seed: int) -> np.ndarray:
    """Blank ``rate`` of the observed numeric feature cells; returns the mask."""
    rng = np.random.default_rng(seed)
    values = frame[features].to_numpy(dtype=np.float64)
    mask = (rng.random(values.shape) < rate) & ~np.isnan(values)
    for j, column in enumerate(features):
        frame.loc[mask[:, j], column] = np.nan
    return mask


def _run(work: Path, data: Path, target: str, drop: list[str], impute: dict, seed: int,
         label: str) -> tuple[pd.DataFrame, float, float]:  # fmt: skip
    spec = {
        "name": label,
        "input": {"path": str(data), "target": target, "drop": drop},
        "forest": {"n_estimators": 100, "random_state": seed, "tile_size": 512},
        "proximity": {"method": "original"},
        "impute": {"out": "imputed.csv", **impute},
        "output": {"dir": str(work / label), "store": "run.zarr", "overwrite": True},
    }
    path = work / f"{label}.yaml"
    path.write_text(yaml.safe_dump(spec))
    tick = time.perf_counter()
    subprocess.run([sys.executable, "-m", "distforest", "-q", "run", str(path)], check=True,
                   cwd=ROOT, capture_output=True)  # fmt: skip
    seconds = time.perf_counter() - tick
    stages = json.loads((work / label / "report.json").read_text())["stages"]
    return pd.read_csv(work / label / "imputed.csv"), seconds, float(stages["impute"]["seconds"])


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--workdir", default="/tmp/dfbench-impute-matrix")
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, (target, drop, na) in DATA.items():
        source = ROOT / "distforest" / "data" / f"{name}.csv"
        original = pd.read_csv(source, na_values=na)
        features = [c for c in original.columns if c != target and c not in drop]
        numeric = [c for c in features if pd.api.types.is_numeric_dtype(original[c])]
        for seed in range(args.seeds):
            frame = original.copy()
            mask = _blank(frame, numeric, args.rate, seed)
            data = work / f"{name}_{seed}.csv"
            frame.to_csv(data, index=False)
            truth = original[numeric].to_numpy(dtype=np.float64)[mask]
            for mode, impute in MODES.items():
                label = f"{name}_{seed}_{'matrix' if impute else 'column'}"
                imputed, seconds, stage = _run(work, data, target, drop, impute, seed, label)
                got = imputed[numeric].to_numpy(dtype=np.float64)[mask]
                nrmse = float(np.sqrt(np.mean((got - truth) ** 2) / np.var(truth)))
                rows.append((name, seed, mode, nrmse, seconds, stage, int(mask.sum())))
                print(f"{name} seed {seed} {mode}: NRMSE {nrmse:.4f}, {seconds:.1f} s "
                      f"(impute stage {stage:.2f} s)", flush=True)  # fmt: skip
    table = pd.DataFrame(rows, columns=["data", "seed", "mode", "nrmse", "seconds", "stage",
                                        "cells"])  # fmt: skip
    summary = table.groupby(["data", "mode"], sort=False).agg(
        nrmse=("nrmse", "mean"), nrmse_sd=("nrmse", "std"), seconds=("seconds", "mean"),
        stage=("stage", "mean"), cells=("cells", "mean"))  # fmt: skip
    v = package_versions()
    lines = [
        "# Imputing from the run's stored proximity matrix vs the column mode",
        "",
        f"- Date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}; command: "
        f"`python benchmarks/bench_impute_from_matrix.py --seeds {args.seeds} --rate {args.rate}`",
        f"- distforest {v.get('distforest git', v.get('distforest'))}",
        machine_line(machine_info()),
        f"- {args.rate:.0%} of the observed numeric feature cells blanked at random per seed "
        f"(seeds 0..{args.seeds - 1}); 100 trees, Breiman's proximity; NRMSE on the blanked "
        "cells (lower is better); seconds: the whole pipeline run (start-up, fit, matrix, "
        "imputation, report) and its impute stage alone, on a machine shared with other jobs.",
        "",
        "| data | mode | NRMSE (mean ± sd) | s per run | s impute stage | blanked cells |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (data, mode), r in summary.iterrows():
        lines.append(f"| {data} | {mode} | {r.nrmse:.4f} ± {r.nrmse_sd:.4f} | {r.seconds:.1f} "
                     f"| {r.stage:.2f} | {r.cells:.0f} |")  # fmt: skip
    lines += ["", "Per seed:", "", "| data | seed | mode | NRMSE | s per run | s impute stage |",
              "|---|---:|---|---:|---:|---:|"]  # fmt: skip
    lines += [f"| {r.data} | {r.seed} | {r.mode} | {r.nrmse:.4f} | {r.seconds:.1f} | "
              f"{r.stage:.2f} |" for r in table.itertuples()]  # fmt: skip
    write_markdown(RESULTS, "\n".join(lines) + "\n")
    print(RESULTS.read_text())


if __name__ == "__main__":
    main()
