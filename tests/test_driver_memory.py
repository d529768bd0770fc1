"""The driver's memory does not hold the table: a 2,000,000 x 10 Parquet folder, measured.

Runs ``tests/driver_memory.py`` in a subprocess (a LocalCluster of two worker
processes) and reads the driver's own peak RSS (``resource.getrusage``; the
workers are other processes).  Measured on the 2-core machine at 2026-11-26:
the partitioned path peaked at 654 MB (276 MB of it is importing distforest,
dask and scikit-learn), the in-memory path (pandas reads the folder,
load_table encodes it in the driver) at 1,135 MB.  The driver also compiles
numba kernels when their cache is cold (a fresh clone: 933-1,182 MB, the
compiler's memory, not the table's), so a small untimed run warms the cache
first (with an empty numba cache the measured run then peaked at 656 MB).  The
bound sits between.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent

#: Driver peak RSS allowed (MB): above the partitioned path, below the in-memory one.
BOUND_MB = 1_050


def test_driver_peak_rss_below_bound(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n, parts = 2_000_000, 10
    folder = tmp_path / "data"
    folder.mkdir()
    for k in range(parts):
        X = rng.standard_normal((n // parts, 10))
        df = pd.DataFrame(X, columns=[f"x{j}" for j in range(10)])
        df["label"] = np.where(X[:, 0] + X[:, 1] > 0, "a", "b")
        df.to_parquet(folder / f"part-{k}.parquet", index=False)
        del X, df
    # a clean environment: in a full run (a fresh clone, two pytest workers) the measured
    # driver once peaked at 1,081-1,216 MB with the pytest worker's environment and at
    # 656 MB alone (the cause was not found), so nothing of it is passed on.  The kernels
    # come from the user's numba cache (`make test` fills it first; an earlier test may
    # leave NUMBA_CACHE_DIR pointing at a cache that is gone); the small run loads them, or
    # compiles them into it, so that the measured run compiles nothing.
    kept = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT", "XDG_CACHE_HOME")
    env = {k: os.environ[k] for k in kept if k in os.environ}
    env.update(PYTHONPATH=str(HERE.parent))
    small = tmp_path / "small"
    small.mkdir()
    for k in range(2):  # the same kinds of columns, 2,000 rows: compiles what the run uses
        pd.read_parquet(folder / f"part-{k}.parquet").head(1000).to_parquet(
            small / f"part-{k}.parquet", index=False
        )
    for source, store in ((small, "warm.zarr"), (folder, "s.zarr")):
        run = subprocess.run(
            [sys.executable, str(HERE / "driver_memory.py"), str(source), str(tmp_path / store),
             "partitions"],
            capture_output=True, text=True, env=env, timeout=600, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["peak_mb"] < BOUND_MB, result
