"""ProximityForest's predictions against scikit-learn's RandomForestClassifier on six UCI sets.

Run by hand (never in CI), from the repository root::

    .venv/bin/python benchmarks/bench_predict.py [--data ../shared/data] [--seeds 5] \\
        [--trees 100] [--out benchmarks/results/predict.md]

For each set of the imputation benchmark (Vehicle, Satellite, Ionosphere,
PimaIndiansDiabetes, BreastCancer, Soybean; real NAs kept: both forests route
missing values) and each seed ``s``: one stratified split (70 % fit, 30 %
held out, ``random_state=s``), then ``ProximityForest(task="classification",
random_state=s)`` and ``RandomForestClassifier(oob_score=True,
random_state=s)`` with the same parameters (``--trees`` trees, ``sqrt``
features, bootstrap, leaves of one row).  Reported: held-out accuracy and
``oob_score_``, means over the seeds, and their gaps.  A second
``RandomForestClassifier`` (``random_state=s + 1000``) gives the gap between
two runs of scikit-learn itself: the noise the first gap is to be read
against.  ProximityForest runs in this process (``execution("synchronous")``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _measure import DATA as SHARED_DATA  # noqa: E402
from _measure import RESULTS as RESULTS_DIR  # noqa: E402
from _measure import parser as make_parser  # noqa: E402
from _measure import write_markdown  # noqa: E402

sys.path.insert(0, str(HERE.parent))

from bench_impute import SETS, load  # noqa: E402

from distforest import ProximityForest, execution  # noqa: E402


def one_set(X: np.ndarray, y: np.ndarray, seeds: int, trees: int) -> dict[str, list[float]]:
    """Accuracy and OOB score of both forests (and a second scikit-learn run) per seed."""
    got: dict[str, list[float]] = {k: [] for k in ("pf", "rf", "rf2", "pf_oob", "rf_oob", "s")}
    for seed in range(seeds):
        Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
        start = time.perf_counter()
        with execution("synchronous"):
            pf = ProximityForest(trees, task="classification", random_state=seed).fit(Xa, ya)
            got["pf"].append(100 * pf.score(Xb, yb))
        got["pf_oob"].append(100 * pf.oob_score_)
        got["s"].append(time.perf_counter() - start)
        rf = RandomForestClassifier(trees, oob_score=True, random_state=seed).fit(Xa, ya)
        got["rf"].append(100 * rf.score(Xb, yb))
        got["rf_oob"].append(100 * rf.oob_score_)
        rf2 = RandomForestClassifier(trees, random_state=seed + 1000).fit(Xa, ya)
        got["rf2"].append(100 * rf2.score(Xb, yb))
    return got


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "predict.md")
    args = parser.parse_args()
    rows, raw = [], {}
    for ds in SETS:
        X, y, _ = load(ds, args.data)
        got = one_set(X, y, args.seeds, args.trees)
        raw[ds.name] = got
        m = {k: float(np.mean(v)) for k, v in got.items()}
        rows.append((ds.name, X.shape, m))
        print(ds.name, {k: round(v, 2) for k, v in m.items()}, flush=True)
    lines = [
        "# ProximityForest.predict and oob_score_ against RandomForestClassifier",
        "",
        f"`python benchmarks/bench_predict.py --seeds {args.seeds} --trees {args.trees}`: "
        f"{args.trees} trees, means over {args.seeds} seeds, 30 % held out (stratified). "
        "Accuracy in percent; gap = ProximityForest - RandomForestClassifier; "
        "noise = a second RandomForestClassifier (another seed) - the first.",
        "",
        "| set | n x d | accuracy PF | accuracy RF | gap | noise | OOB PF | OOB RF | OOB gap "
        "| PF fit+predict s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, shape, m in rows:
        lines.append(
            f"| {name} | {shape[0]} x {shape[1]} | {m['pf']:.2f} | {m['rf']:.2f} | "
            f"{m['pf'] - m['rf']:+.2f} | {m['rf2'] - m['rf']:+.2f} | {m['pf_oob']:.2f} | "
            f"{m['rf_oob']:.2f} | {m['pf_oob'] - m['rf_oob']:+.2f} | {m['s']:.1f} |"
        )
    gaps = [m["pf"] - m["rf"] for _, _, m in rows]
    oob = [m["pf_oob"] - m["rf_oob"] for _, _, m in rows]
    lines += [
        "",
        f"Mean gap over the six sets: accuracy {np.mean(gaps):+.2f}, largest |gap| "
        f"{np.max(np.abs(gaps)):.2f}; OOB {np.mean(oob):+.2f}, largest |gap| "
        f"{np.max(np.abs(oob)):.2f}.",
        "",
    ]
    write_markdown(args.out, "\n".join(lines))
    args.out.with_suffix(".json").write_text(json.dumps(raw, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
