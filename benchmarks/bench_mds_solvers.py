"""MDS on small data: the block Lanczos by row chunks (this tree) against another solver.

Usage (from the repository root)::

    python -m benchmarks mds_solvers --rows N --other OTHER_MDS_PY [--tmp DIR]

``--other``: a file defining ``mds(forest, k, dissimilarity=...)`` (the
ARPACK solver of ``distforest/apps/mds.py`` before this change, e.g. from
``git show 1bc6a2d:distforest/apps/mds.py``).  Fits one forest of ``--rows`` rows on
the numpy array and one from a store of the same CSV (10 trees, in this
process), times each solver (after a warm run) and prints whether the
in-memory and stored runs of this tree give the same bytes and how far the
other solver's coordinates are.
"""

import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from distforest import ProximityForest, execution
from distforest.apps.mds import mds
from distforest.store.inputs import ingest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import parser as make_parser


def timed(solver, forest, dissimilarity):
    """The coordinates, eigenvalues and seconds of ``solver`` (run once before, untimed)."""
    solver(forest, 3, dissimilarity=dissimilarity)
    start = time.perf_counter()
    coordinates, values = solver(forest, 3, dissimilarity=dissimilarity)
    return coordinates, values, time.perf_counter() - start


def main(tmp: str, n: int, other_file: str) -> None:
    spec = importlib.util.spec_from_file_location("other_mds", other_file)
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 5))
    label = (X[:, 0] + rng.standard_normal(n) > 0).astype(int) + (X[:, 1] > 1)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(5)])
    frame["label"] = np.array(["a", "b", "c"])[label]
    frame.to_csv(f"{tmp}/t.csv", index=False)
    with execution("synchronous"):
        held = ProximityForest(n_estimators=10, random_state=0).fit(
            frame.drop(columns="label"), frame["label"]
        )
        source = ingest(f"{tmp}/t.csv", f"{tmp}/run.zarr", target="label")
        stored = ProximityForest(n_estimators=10, random_state=0).fit(source)
        for dissimilarity in ("sqrt", "linear"):
            a, av, ta = timed(mds, held, dissimilarity)
            o, ov, to = timed(other.mds, held, dissimilarity)
            b, bv = mds(stored, 3, dissimilarity=dissimilarity)
            same = a.tobytes() == b.tobytes() and av.tobytes() == bv.tobytes()
            print(f"{n} {dissimilarity} block-lanczos {ta:.3f}s other {to:.3f}s "
                  f"memory==store bytes {same} "
                  f"max|diff|/scale {np.abs(a - o).max() / np.abs(o).max():.2e} "
                  f"eigenvalues rel {np.abs((av - ov) / ov).max():.2e}")  # fmt: skip


if __name__ == "__main__":
    options = make_parser(__doc__)
    options.add_argument("--rows", type=int, default=600, help="rows of the table")
    options.add_argument("--other", required=True, help="a file defining the other mds()")
    options.add_argument("--tmp", default=None, help="folder for the CSV and store")
    args = options.parse_args()
    main(args.tmp or tempfile.mkdtemp(prefix="mds-solvers-"), args.rows, args.other)
