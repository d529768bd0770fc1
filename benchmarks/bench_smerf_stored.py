"""Driver memory of a SMERF fit from a folder of Parquet parts against the in-memory fit.

Run by hand, never in CI, from the repository root on a committed tree::

    python benchmarks/bench_smerf_stored.py [--rows 6000] [--features 20] [--trees 20]

Writes nothing: prints, for each path, the fit's wall time, the driver's
traced Python peak during ``fit`` (tracemalloc; the ingest runs before it),
and the sizes of what the fitted model keeps on the driver (the forest's node
columns and leaf members) or in the store (leaves and in-bag counts).  A
2-worker LocalCluster (one thread each) runs both fits; D is a ``.npy`` file,
read once by each worker.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc

import numpy as np
import pandas as pd


def main() -> None:
    from distributed import Client, LocalCluster

    from distforest import execution
    from distforest.forests.smerf import SMERF
    from distforest.io.distances import load_distances
    from distforest.store.inputs import ingest

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--trees", type=int, default=20)
    args = parser.parse_args()
    n, d, trees = args.rows, args.features, args.trees
    rng = np.random.default_rng(0)
    X = np.round(rng.uniform(-1, 1, (n, d)), 6)
    g = X[:, 0] ** 2 + X[:, 1]
    work = tempfile.mkdtemp(prefix="bench-smerf-stored-")
    np.save(f"{work}/D.npy", ((g[:, None] - g[None, :]) ** 2 / 2).astype(np.float32))
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(d)])
    os.mkdir(f"{work}/parts")
    for k, cut in enumerate(np.array_split(np.arange(n), 5)):
        frame.iloc[cut].to_parquet(f"{work}/parts/p{k}.parquet")
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        dist = load_distances(f"{work}/D.npy", n=n)
        with execution(client), client.as_current():
            SMERF(n_estimators=2).fit(frame.iloc[:300], np.zeros((300, 300), np.float32))  # warm
            stored = ingest(f"{work}/parts", f"{work}/run.zarr", allow_missing=False,
                            dtype=np.float64)  # fmt: skip
            for label, data in (("from parts", stored), ("in memory", frame)):
                tracemalloc.start()
                start = time.perf_counter()
                model = SMERF(n_estimators=trees, random_state=0).fit(data, dist)
                seconds = time.perf_counter() - start
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                f = model.forest_
                nodes = sum(v.nbytes for v in f.nodes.values())
                rows = model.leaves_.nbytes + model.inbag_.nbytes
                print(f"{label}: {seconds:.1f} s, driver traced peak {peak / 1e6:.1f} MB; forest "
                      f"nodes {nodes / 1e6:.1f} MB, leaf members {f.leaf_members.nbytes / 1e6:.1f}"
                      f" MB, leaves+inbag {rows / 1e6:.2f} MB "
                      f"({type(model.leaves_).__name__})", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
