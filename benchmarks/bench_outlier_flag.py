"""How many rows the outlier flag marks on clean data, before (score > 10) and after (fence).

Before: R's rule of thumb, a score above 10 (the score is R's ``outlier()``:
per class, raw = n / sum of squared proximities, then (raw - median) / MAD).
After: distforest's default flag (``outlier_flag``), Tukey's far-out fence
on a log scale, per class: ``u = log1p(score - min score)``, flagged when
``u > Q3(u) + 3 IQR(u)``.  The column "largest c, rows not planted" is the
fence factor at which the highest-scoring row not planted would be flagged,
``(max u - Q3) / IQR`` (on the clean tables: the margin of the factor 3).
Clean tables: Gaussian features (5 columns; 2 columns for "sharp boundary")
at 1,000, 10,000 and 100,000 rows,
with a class that follows the first feature, random labels, or none
(unsupervised); a row flagged there is a false positive.  The bundled tables
are real data (not known clean).  Planted: two Gaussian clusters (4 columns,
one a class, centres 6 apart) with 6 rows (3 of each class) moved into the other
class's cluster; the recall is how many of the 6 are flagged (the percentages
are of the other rows).  100 trees, seed 0, in process
(``outlier_flags``, the scores by chunks of rows as every command computes
them).

    python -m benchmarks outlier_flag [--sizes 1000 10000 100000]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import ROOT, parser, write_result

PLANTED = 6


def largest_clean_factor(scores: np.ndarray, codes: np.ndarray, clean: np.ndarray) -> float:
    """The fence factor at which the highest clean row of any class would be flagged."""
    largest = -np.inf
    for c in np.unique(codes):
        member = codes == c
        u = np.log1p(scores[member] - scores[member].min())
        q1, q3 = np.percentile(u, [25, 75])
        if q3 > q1 and clean[member].any():
            largest = max(largest, float((u[clean[member]].max() - q3) / (q3 - q1)))
    return largest


def tables(sizes: list[int]) -> list[tuple[str, np.ndarray, np.ndarray | None, int]]:
    """(name, X, y, planted rows at the start) of every table measured."""
    rng = np.random.default_rng(1)
    out: list[tuple[str, np.ndarray, np.ndarray | None, int]] = []
    for n in sizes:
        X = rng.normal(size=(n, 5))
        out.append((f"gaussian {n}x5, class from x0", X, (X[:, 0] > 0).astype(int), 0))
        out.append((f"gaussian {n}x5, random 3 labels", X, rng.integers(0, 3, n), 0))
        out.append((f"gaussian {n}x5, unsupervised", X, None, 0))
        X2 = rng.normal(size=(n, 2))
        out.append((f"gaussian {n}x2, sharp boundary", X2, (X2[:, 0] > 0).astype(int), 0))
    for name, drop in (("breast_cancer", ["Id"]), ("ionosphere", [])):
        table = pd.read_csv(ROOT / "distforest" / "data" / f"{name}.csv").drop(columns=drop)
        y = table.pop("Class").to_numpy()
        out.append((f"{name}.csv (bundled, not known clean)", table.to_numpy(float), y, 0))
    for n in sizes:
        y = np.arange(n) % 2
        X = rng.normal(size=(n, 4))
        X[:, 0] += np.where(y == 1, 3.0, -3.0)
        X[:PLANTED, 0] = np.where(y[:PLANTED] == 1, -3.0, 3.0) + rng.normal(size=PLANTED) * 0.3
        out.append((f"planted {PLANTED} in {n}x4, two clusters", X, y, PLANTED))
    return out


def main() -> None:
    from distforest import ProximityForest, execution
    from distforest.apps.outliers import outlier_flags

    cli = parser(__doc__)
    cli.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    args = cli.parse_args()
    rows = []
    for name, X, y, planted in tables(args.sizes):
        start = time.perf_counter()
        with execution("synchronous"):
            forest = ProximityForest(100, random_state=0).fit(X, y)
            found = outlier_flags(forest)
        seconds = time.perf_counter() - start
        scores, flags = found.scores, found.flags
        codes = np.zeros(len(X), dtype=int) if y is None else np.asarray(forest.y_)
        clean = np.arange(len(X)) >= planted
        quantiles = " / ".join(f"{v:.1f}" for v in np.percentile(scores[clean], [50, 99, 100]))
        largest = round(largest_clean_factor(scores, codes, clean), 2)
        rows.append({"table": name, "rows": len(X),
                     "score > 10 (%)": round(100 * float(np.mean(scores[clean] > 10)), 3),
                     "fence (%)": round(100 * float(flags[clean].mean()), 3),
                     "largest c, rows not planted": largest,
                     "planted flagged, score > 10":
                     f"{int(np.sum(scores[:planted] > 10))}/{planted}" if planted else "",
                     "planted flagged, fence":
                     f"{int(flags[:planted].sum())}/{planted}" if planted else "",
                     "score p50 / p99 / max": quantiles,
                     "seconds": round(seconds, 1)})  # fmt: skip
        print(rows[-1], flush=True)
    write_result("outlier_flag", rows, title="The outlier flag on clean data: before and after",
                 notes=__doc__.split("\n\n")[1], data={"sizes": args.sizes})  # fmt: skip


if __name__ == "__main__":
    main()
