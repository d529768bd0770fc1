"""How many rows the outlier flag marks on clean data: today's rule and a candidate.

Today's flag is R's rule of thumb, a score above 10 (the score is R's
``outlier()``: per class, raw = n / sum of squared proximities, then
(raw - median) / MAD).  The candidate is Tukey's far-out fence on a log scale,
per class: ``u = log(1 + score - min(score))``, flagged when
``u > Q3(u) + 3 IQR(u)``.  Clean tables: Gaussian features (5 and 20 columns,
1,000 and 4,000 rows) with a target that follows the features, random labels,
or none (unsupervised), and the bundled tables.  100 trees, seed 0, in process.
A row flagged on a clean synthetic table is a false positive.

    python -m benchmarks outlier_flag
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import ROOT, parser, write_result


def far_out(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The candidate flag: Tukey's far-out fence on a log scale, per class."""
    flags = np.zeros(len(scores), dtype=bool)
    for c in np.unique(labels):
        members = labels == c
        u = np.log1p(scores[members] - scores[members].min())
        q1, q3 = np.percentile(u, [25, 75])
        flags[members] = u > q3 + 3 * (q3 - q1)
    return flags


def tables(seed: int) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[str, np.ndarray, np.ndarray | None]] = []
    for n in (1000, 4000):
        for d in (5, 20):
            X = rng.normal(size=(n, d))
            out.append((f"gaussian {n}x{d}, target from x0", X, (X[:, 0] > 0).astype(int)))
            out.append((f"gaussian {n}x{d}, random 3 labels", X, rng.integers(0, 3, n)))
            out.append((f"gaussian {n}x{d}, unsupervised", X, None))
    for name, drop in (("breast_cancer", ["Id"]), ("ionosphere", [])):
        table = pd.read_csv(ROOT / "distforest" / "data" / f"{name}.csv").drop(columns=drop)
        y = table.pop("Class").to_numpy()
        out.append((f"{name}.csv (bundled, not known clean)", table.to_numpy(float), y))
    return out


def main() -> None:
    from distforest import ProximityForest, execution
    from distforest.apps.outliers import outlier_scores

    parser(__doc__).parse_args()
    rows = []
    for name, X, y in tables(1):
        with execution("synchronous"):
            forest = ProximityForest(100, random_state=0).fit(X, y)
        scores = outlier_scores(forest)
        labels = np.zeros(len(X), dtype=int) if y is None else np.asarray(y)
        fence = 100 * float(far_out(scores, labels).mean())
        quantiles = " / ".join(f"{v:.1f}" for v in np.percentile(scores, [50, 90, 99]))
        rows.append({"table": name, "rows": len(X),
                     "flagged, score > 10 (%)": round(100 * float(np.mean(scores > 10)), 2),
                     "flagged, log far-out fence (%)": round(fence, 2),
                     "score p50 / p90 / p99": quantiles})  # fmt: skip
        print(rows[-1], flush=True)
    write_result("outlier_flag", rows, title="The outlier flag on clean data (before)",
                 notes=__doc__.split("\n\n")[1])  # fmt: skip


if __name__ == "__main__":
    main()
