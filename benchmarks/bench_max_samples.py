"""Accuracy cost of growing each tree on a subsample (``max_samples``), run by hand.

Spark (``subsamplingRate``), H2O (``sample_rate``) and scikit-learn
(``max_samples``) subsample rows per tree so that trees on millions of rows
stay small.  This script measures what it costs on a synthetic
classification set: test accuracy, fit time and nodes per tree for each
tree's sample size, the same forest otherwise (scikit-learn's
RandomForestClassifier, bootstrap, ``max_features="sqrt"``).

    python benchmarks/bench_max_samples.py --n 250000 --trees 25

Writes a Markdown table to ``benchmarks/results/max_samples.md`` (with
``--out``).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import parser as make_parser
from _measure import write_markdown


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--n", type=int, default=250_000, help="training rows")
    parser.add_argument("--trees", type=int, default=25)
    parser.add_argument("--sizes", default="all,100000,50000,20000,10000")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    X, y = make_classification(n_samples=args.n + 100_000, n_features=20, n_informative=10,
                               n_redundant=4, n_classes=3, flip_y=0.03, class_sep=0.8,
                               random_state=0)  # fmt: skip
    X_train, y_train, X_test, y_test = X[: args.n], y[: args.n], X[args.n :], y[args.n :]
    rows = []
    for size in args.sizes.split(","):
        m = None if size == "all" else int(size)
        rf = RandomForestClassifier(n_estimators=args.trees, max_samples=m, n_jobs=2,
                                    random_state=0)  # fmt: skip
        tick = time.perf_counter()
        rf.fit(X_train, y_train)
        seconds = time.perf_counter() - tick
        acc = float((rf.predict(X_test) == y_test).mean())
        nodes = float(np.mean([t.tree_.node_count for t in rf.estimators_]))
        rows.append((size, acc, seconds, nodes))
        print(f"{size:>8}  accuracy {acc:.4f}  fit {seconds:6.1f} s  nodes/tree {nodes:,.0f}",
              flush=True)  # fmt: skip
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()  # fmt: skip
        full = rows[0]
        lines = [
            "# Rows per tree (max_samples): accuracy cost",
            "",
            f"{dt.date.today()}, commit {commit}, `python benchmarks/bench_max_samples.py "
            f"--n {args.n} --trees {args.trees} --out {args.out}` (shared 2-core machine: "
            "times are indicative only).",
            "",
            f"Synthetic 3-class set, {args.n:,} training rows, 100,000 test rows, 20 features; "
            f"{args.trees} trees, bootstrap, sqrt features.",
            "",
            "| rows per tree | test accuracy | vs all rows | fit (s) | nodes per tree |",
            "|---:|---:|---:|---:|---:|",
        ]
        for size, acc, seconds, nodes in rows:
            label = f"{args.n:,} (all)" if size == "all" else f"{int(size):,}"
            lines.append(f"| {label} | {acc:.4f} | {acc - full[1]:+.4f} | {seconds:.1f} | "
                         f"{nodes:,.0f} |")  # fmt: skip
        write_markdown(Path(args.out), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
