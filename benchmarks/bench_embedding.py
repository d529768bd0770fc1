"""The README's embedding from the proximity graph, at full size (run by hand).

Issue 24 asks for a README example that embeds 1,000,000 rows from their
proximity graph.  This script times that example on a neighbours store
written by ``distforest proximity DATA --top-k K`` (or writes one first):

1. ``python -m distforest -q proximity DATA --target y --trees 100 --seed 0
   --top-k 50 --out STORE`` (skipped with ``--store``);
2. in a fresh process, the README's lines: the stored neighbours as a CSR
   graph (``neighbors_to_csr``), symmetrised with ``graph.maximum(graph.T)``,
   then ``SpectralEmbedding(n_components=2, affinity="precomputed",
   eigen_solver=SOLVER, random_state=0)``.

Each step's wall time and peak RSS (its whole process tree) are recorded; as
a sanity check of the embedding, a 5-nearest-neighbour vote on the 2-D
coordinates of a 20,000-row sample predicts the class of another 20,000
(3-fold cross-validation; the chance level is reported next to it).

Usage::

    python benchmarks/bench_embedding.py --data /tmp/dfbench-nb/n1000000/data.parquet \\
        --out benchmarks/results/embedding.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import (  # noqa: E402
    GB,
    machine_info,
    machine_line,
    run_measured,
    write_markdown,
)
from _measure import parser as make_parser  # noqa: E402

SAMPLE = 20_000


def embed(store: str, solver: str, out: str) -> None:
    """The README's embedding (a child process): writes timings and the check to ``out``."""
    import numpy as np
    import xarray as xr
    from sklearn.manifold import SpectralEmbedding
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    from distforest.forests.proximity_neighbors import neighbors_to_csr

    tick = time.perf_counter()
    ds = xr.open_zarr(store)
    nb = xr.Dataset({"index": ds["neighbors_index"], "proximity": ds["neighbors_proximity"]})
    graph = neighbors_to_csr(nb.load())
    affinity = graph.maximum(graph.T)
    graph_s = time.perf_counter() - tick
    tick = time.perf_counter()
    xy = SpectralEmbedding(
        n_components=2, affinity="precomputed", eigen_solver=solver, random_state=0
    ).fit_transform(affinity)
    embed_s = time.perf_counter() - tick
    y = ds["target"].values if "target" in ds else None
    check = None
    if y is not None:
        rows = np.random.default_rng(0).choice(len(xy), size=min(SAMPLE, len(xy)), replace=False)
        accuracy = cross_val_score(KNeighborsClassifier(5), xy[rows], y[rows], cv=3).mean()
        chance = np.bincount(np.unique(y[rows], return_inverse=True)[1]).max() / rows.size
        check = {"knn_accuracy": float(accuracy), "chance": float(chance)}
    Path(out).write_text(json.dumps({
        "n": int(graph.shape[0]), "graph_nnz": int(affinity.nnz), "graph_s": graph_s,
        "embed_s": embed_s, "finite": bool(np.isfinite(xy).all()), "check": check,
    }))  # fmt: skip


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--data", type=Path, help="a Parquet table with target column y")
    parser.add_argument("--store", type=Path, help="an existing neighbours store (skips step 1)")
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--solver", default="lobpcg")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--out", type=Path, default=None, help="Markdown result file")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        embed(*args.child)
        return
    if args.store is None and args.data is None:
        parser.error("give --data (to write the neighbours) or --store")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                            capture_output=True).stdout.strip()  # fmt: skip
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench-embed-") as tmp:
        work = Path(tmp)
        store = args.store
        if store is None:
            store = work / "nb.zarr"
            cmd = [sys.executable, "-m", "distforest", "-q", "proximity", str(args.data),
                   "--target", "y", "--trees", str(args.trees), "--seed", "0", "--top-k",
                   str(args.k), "--out", str(store)]  # fmt: skip
            r = run_measured(cmd, work, "neighbours", timeout=args.timeout)
            lines.append(f"| neighbours (`distforest proximity --top-k {args.k}`) | "
                         f"{r['wall_s']:.1f} | {r['peak_rss_tree_bytes'] / GB:.2f} | "
                         f"{r['foreign_load']:.0%} |")  # fmt: skip
        result = work / "embed.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(store),
               args.solver, str(result)]  # fmt: skip
        r = run_measured(cmd, work, "embedding", timeout=args.timeout)
        child = json.loads(result.read_text()) if result.exists() else {}
        status = (
            ""
            if r["returncode"] == 0
            else f" (exit {r['returncode']}{', timed out' if r['timed_out'] else ''})"
        )
        lines.append(f"| embedding (`SpectralEmbedding`, {args.solver}){status} | "
                     f"{r['wall_s']:.1f} | {r['peak_rss_tree_bytes'] / GB:.2f} | "
                     f"{r['foreign_load']:.0%} |")  # fmt: skip
    m = machine_info()
    text = [
        "# Embedding from the proximity graph (the README's example at full size)",
        "",
        f"- Date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        machine_line(m),
        f"- Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`",
        f"- distforest git {commit}",
        "",
        "| step | wall (s) | peak RSS (tree, GB) | other load |",
        "|---|---:|---:|---:|",
        *lines,
        "",
    ]
    if child:
        text.append(
            f"Graph: {child['n']:,} rows, {child['graph_nnz']:,} non-zeros after symmetrising "
            f"(read and built in {child['graph_s']:.1f} s); embedding {child['embed_s']:.1f} s; "
            f"all coordinates finite: {child['finite']}."
        )
        if child.get("check"):
            c = child["check"]
            text.append(
                f"Check: a 5-NN vote on the 2-D coordinates of {SAMPLE:,} sampled rows predicts "
                f"their class with accuracy {c['knn_accuracy']:.3f} (3-fold; the largest class "
                f"is {c['chance']:.3f} of the sample)."
            )
    report = "\n".join(text) + "\n"
    print(report)
    if args.out:
        write_markdown(args.out, report)


if __name__ == "__main__":
    main()
