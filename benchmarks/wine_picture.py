"""The README's X-Forest picture: Wine beta-similarity ordered by kernel k-means cluster.

Writes ``docs/xforest_wine_by_cluster.png`` (``--picture``) and
``benchmarks/results/wine_picture.{json,md}``
(accuracy and ARI of the clusters against the cultivars, with the date, the
machine and the commit).  Run by hand on a committed tree::

    python -m benchmarks wine_picture
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_wine

import distforest
from distforest import XForest
from distforest.apps import clustering
from distforest.apps.plots import plot_matrix

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _measure import parser as make_parser  # noqa: E402
from _measure import write_result  # noqa: E402

PARAMS = {"n_estimators": 1280, "n_directions": 2, "leaf_size": 10, "beta": 0.9, "random_state": 0}


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--trees", type=int, default=PARAMS["n_estimators"])
    parser.add_argument(
        "--picture", type=Path, default=ROOT / "docs" / "xforest_wine_by_cluster.png"
    )
    args = parser.parse_args(argv)
    params = {**PARAMS, "n_estimators": args.trees}
    X, y = load_wine(return_X_y=True)
    with distforest.execution("synchronous"):
        S = XForest(**params).fit(X).similarity()
    labels, _ = clustering.kernel_kmeans(S, k=3, n_init=10, random_state=0)
    result = clustering.scores(y, labels)
    order = np.argsort(labels, kind="stable")
    codes = np.unique(labels, return_inverse=True)[1]
    picture = args.picture
    plot_matrix(S, picture, labels=codes, class_names=[f"cluster {c}" for c in range(3)],
                title="Wine: X-Forest beta-similarity by cluster")  # fmt: skip
    rows = [{"rows": len(y), "accuracy (Hungarian)": round(result["accuracy"], 3),
             "ARI": round(result["ari"], 3), "NMI": round(result["nmi"], 3)}]  # fmt: skip
    notes = (
        f"X-Forest: {params}; kernel k-means k=3, n_init=10, random_state=0 (accuracy "
        "does not depend on load; no times are reported).\n\n"
        f"Rows in cluster order: first {order[:5].tolist()} ... (picture: `{picture.name}`)"
    )
    _, md = write_result(
        "wine_picture",
        rows,
        notes=notes,
        title="README picture: Wine beta-similarity by kernel k-means cluster",
    )
    print(md.read_text())


if __name__ == "__main__":
    main()
