"""Mislabel detection: precision at 5 % after flipping 5 % of the labels.

Run by hand::

    python benchmarks/bench_mislabels.py [--seeds 3] [--trees 200]

On real classification sets from ``../shared/data``, 5 % of the rows get a
wrong label (drawn uniformly among the other classes, fixed seeds); a forest
is fitted on the noisy labels and the rows are ranked by
:func:`distforest.apps.mislabels.mislabel_scores`.  Precision at 5 % is the
share of flipped rows among the top 5 % of the ranking (chance level: 0.05).
The outlier weight of the combined score is varied to show what the outlier
score adds to the out-of-bag vote.  Writes ``benchmarks/results/mislabels.md``.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DATA as SHARED_DATA
from _measure import RESULTS as RESULTS_DIR
from _measure import (
    machine_info,
    package_versions,
    write_markdown,
)
from _measure import parser as make_parser

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED_DATA
SETS = [
    ("BreastCancer", "Class", ["Id"]),
    ("Vehicle", "Class", []),
    ("Satellite", "classes", []),
    ("Soybean", "Class", []),
]
WEIGHTS = [0.0, 0.02, 0.1, 0.25, 1.0]


def main() -> None:
    from distributed import Client, LocalCluster

    from distforest import ProximityForest, load_table
    from distforest.apps.mislabels import OUTLIER_WEIGHT, mislabel_scores

    parser = make_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trees", type=int, default=200)
    args = parser.parse_args()
    rows = []
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                     dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        for name, target, drop in SETS:
            table = load_table(DATA / f"{name}.csv", target=target, drop=drop)
            classes = np.unique(table.y)
            precisions = np.zeros((args.seeds, len(WEIGHTS)))
            for seed in range(args.seeds):
                y = np.asarray(table.y).copy()
                rng = np.random.default_rng(seed)
                flipped = rng.choice(len(y), size=round(0.05 * len(y)), replace=False)
                for i in flipped:
                    y[i] = rng.choice(classes[classes != y[i]])
                forest = ProximityForest(args.trees, random_state=seed).set_execution(client)
                forest.fit(table.X, y)
                for k, weight in enumerate(WEIGHTS):
                    ranking = mislabel_scores(forest, outlier_weight=weight)
                    top = ranking["row"].to_numpy()[: len(flipped)]
                    precisions[seed, k] = np.isin(top, flipped).mean()
                print(name, seed, np.round(precisions[seed], 3), flush=True)
            rows.append((name, len(table.y), len(classes), precisions))
    m = machine_info()
    lines = [
        "# Mislabel detection: precision at 5 % with 5 % of the labels flipped",
        "",
        f"- Date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- Machine: {m['cpu_model']}, {m['cores']} cores, {m['mem_total_bytes'] / 2**30:.1f} GiB",
        f"- Command: `python benchmarks/bench_mislabels.py --seeds {args.seeds} "
        f"--trees {args.trees}`",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in package_versions().items()),
        "",
        f"Random forest of {args.trees} trees fitted on the noisy labels; mean (min-max) "
        f"over {args.seeds} seeds.  Chance level is 0.05.  The default outlier weight is "
        f"{OUTLIER_WEIGHT:g}.",
        "",
        "| set | rows | classes | " + " | ".join(f"outlier weight {w:g}" for w in WEIGHTS) + " |",
        "|---|---:|---:|" + "---:|" * len(WEIGHTS),
    ]
    for name, n, k, p in rows:
        cells = [f"{p[:, j].mean():.3f} ({p[:, j].min():.2f}-{p[:, j].max():.2f})"
                 for j in range(len(WEIGHTS))]  # fmt: skip
        lines.append(f"| {name} | {n} | {k} | " + " | ".join(cells) + " |")
    means = np.mean([p.mean(axis=0) for *_, p in rows], axis=0)
    lines.append("| mean | | | " + " | ".join(f"{v:.3f}" for v in means) + " |")
    out = RESULTS_DIR / "mislabels.md"
    write_markdown(out, "\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
