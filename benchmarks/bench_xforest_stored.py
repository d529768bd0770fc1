"""X-Forest fitted from a Parquet folder (the run store) vs in memory: the driver's memory.

Run by hand (never in CI); prints a Markdown table to paste into
``benchmarks/results/xforest_stored.md``::

    python benchmarks/bench_xforest_stored.py --rows 200000 --trees 50

Each side runs in its own process with a LocalCluster of two single-thread
workers: ``memory`` reads the folder with pandas, fits and saves the forest to
a store; ``store`` ingests the folder into a run store and fits from it (the
trees, rows' arrays and nodes written by the tasks).  Reported: the driver's
peak RSS before the fit and at the end (``ru_maxrss``), and the fit's seconds.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _side(mode: str, folder: str, work: str, trees: int) -> dict[str, float]:
    import pandas as pd
    from distributed import Client, LocalCluster

    from distforest import execution
    from distforest.forests.xforest import XForest
    from distforest.store.inputs import ingest

    def rss() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
        execution(client=client),
    ):
        start = time.perf_counter()
        table: object = (
            ingest(folder, f"{work}/run.zarr") if mode == "store" else pd.read_parquet(folder)
        )
        read = time.perf_counter() - start
        before = rss()
        start = time.perf_counter()
        forest = XForest(n_estimators=trees, random_state=0).fit(table)
        if mode == "memory":
            forest.save(f"{work}/memory.zarr")
        fit = time.perf_counter() - start
    return {"read_s": round(read, 1), "fit_s": round(fit, 1), "rss_before_mb": round(before),
            "rss_peak_mb": round(rss())}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--trees", type=int, default=50)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(_side(args.side, args.folder, args.work, args.trees)))
        return
    import numpy as np
    import pandas as pd

    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "parts"
        folder.mkdir()
        rng = np.random.default_rng(0)
        X = rng.standard_normal((args.rows, args.features)).astype(np.float32)
        frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(args.features)])
        for k, cut in enumerate(np.array_split(np.arange(args.rows), 8)):
            frame.iloc[cut].to_parquet(folder / f"part-{k}.parquet", index=False)
        del X, frame
        print(f"{args.rows:,} x {args.features} Parquet folder (8 parts), {args.trees} trees\n")
        print("| path | read/ingest s | fit s | driver RSS before fit MB | driver peak MB |")
        print("|---|---|---|---|---|")
        for side in ("memory", "store"):
            out = subprocess.run(
                [sys.executable, __file__, "--side", side, "--folder", str(folder),
                 "--work", work, "--trees", str(args.trees)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {side} | {r['read_s']} | {r['fit_s']} | {r['rss_before_mb']} | "
                  f"{r['rss_peak_mb']} |")  # fmt: skip


if __name__ == "__main__":
    main()
