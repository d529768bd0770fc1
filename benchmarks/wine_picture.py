"""The README's X-Forest picture: Wine beta-similarity ordered by kernel k-means cluster.

Writes ``docs/xforest_wine_by_cluster.png`` and ``benchmarks/results/wine_picture.md``
(accuracy and ARI of the clusters against the cultivars, with the date, the
machine and the commit).  Run by hand on a committed tree::

    .venv/bin/python benchmarks/wine_picture.py
"""

from __future__ import annotations

import datetime as _dt
import subprocess
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
from _measure import machine_info  # noqa: E402

PARAMS = {"n_estimators": 1280, "n_directions": 2, "leaf_size": 10, "beta": 0.9, "random_state": 0}


def main() -> None:
    X, y = load_wine(return_X_y=True)
    with distforest.execution("synchronous"):
        S = XForest(**PARAMS).fit(X).similarity()
    labels, _ = clustering.kernel_kmeans(S, k=3, n_init=10, random_state=0)
    result = clustering.scores(y, labels)
    order = np.argsort(labels, kind="stable")
    codes = np.unique(labels, return_inverse=True)[1]
    picture = ROOT / "docs" / "xforest_wine_by_cluster.png"
    plot_matrix(S, picture, labels=codes, class_names=[f"cluster {c}" for c in range(3)],
                title="Wine: X-Forest beta-similarity by cluster")  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "distforest"],
                           capture_output=True, text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    machine = machine_info()
    lines = [
        "# README picture: Wine beta-similarity by kernel k-means cluster",
        "",
        f"- Date: {_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')}",
        f"- Machine: {machine['cores']} cores, {machine['mem_total_bytes'] / 2**30:.1f} GiB, "
        f"{machine['cpu_model']} (accuracy does not depend on load; no times are reported)",
        "- Command: `.venv/bin/python benchmarks/wine_picture.py`",
        f"- Commit: {commit}{' (uncommitted changes in distforest/)' if dirty else ''}",
        f"- X-Forest: {PARAMS}; kernel k-means k=3, n_init=10, random_state=0",
        "",
        "| rows | accuracy (Hungarian) | ARI | NMI |",
        "|---:|---:|---:|---:|",
        f"| {len(y)} | {result['accuracy']:.3f} | {result['ari']:.3f} | {result['nmi']:.3f} |",
        "",
        f"Rows in cluster order: first {order[:5].tolist()} ... (picture: `{picture.name}`)",
    ]
    out = ROOT / "benchmarks" / "results" / "wine_picture.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
