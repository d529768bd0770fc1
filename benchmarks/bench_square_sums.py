"""Both methods of the outlier scores' sums of squared proximities, timed, run by hand.

Calibrates ``SECONDS_PER_COLEAF``, ``SECONDS_PER_PAIR_ROW`` and ``COLEAF_SKEW`` of
:mod:`distforest.forests.square_sums`: fits a forest in this process on the first
``--n`` rows of a Parquet table, counts the co-leaf events exactly (sum over trees of
the squared leaf populations) next to the estimate from the nodes, and times the
leaf-mate walk and the tree-pair sums (in this process, on its threads), checking
that both give the same floats.

    python benchmarks/bench_square_sums.py /tmp/oocdata/1000000/table.parquet \\
        --target label --n 200000 --max-samples 0.2 --trees 30
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from distforest import ProximityForest, execution
from distforest.forests import square_sums as ss

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import parser as make_parser
from _measure import write_result


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("table")
    parser.add_argument("--target", default="label")
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--max-samples", type=float, default=None)
    parser.add_argument("--trees", type=int, default=100)
    args = parser.parse_args()
    X = pd.read_parquet(args.table).iloc[: args.n]
    y = X.pop(args.target)
    with execution(client="synchronous"):
        forest = ProximityForest(
            n_estimators=args.trees, max_samples=args.max_samples, random_state=0
        ).fit_leaves(X, y)
        codes = np.asarray(forest.y_)
        leaves = np.asarray(forest.leaves_)
        events = sum(float((np.bincount(leaves[:, t]) ** 2).sum()) for t in range(args.trees))
        estimate = ss.coleaf_events(args.n, forest.node_counts_)
        start = time.perf_counter()
        pairs = ss.square_sums(forest, codes, method="tree-pairs")
        t_pairs = time.perf_counter() - start
        start = time.perf_counter()
        walk = ss.square_sums(forest, codes, method="leaf-mates")
        t_walk = time.perf_counter() - start
    assert np.array_equal(pairs, walk)
    rows = ss.pair_rows(args.n, args.trees)
    n = len(codes)
    rows = ss.pair_rows(n, args.trees)
    chosen = ss.choose_method(n, forest.node_counts_)
    row = {"rows": n, "trees": args.trees, "max_samples": args.max_samples,
           "co-leaf events": events, "estimate": estimate, "true/estimate": events / estimate,
           "tree-pairs s": t_pairs, "s a pair row": t_pairs / rows, "leaf-mates s": t_walk,
           "s an event": t_walk / events, "chosen": chosen}  # fmt: skip
    _, md = write_result("square_sums", [row], title="Sums of squared proximities: both methods",
                         notes=f"Skew counted in the estimate: {ss.COLEAF_SKEW}.")  # fmt: skip
    print(md.read_text())


if __name__ == "__main__":
    main()
