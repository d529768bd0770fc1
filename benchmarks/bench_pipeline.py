"""Load test of the nightly pipeline: a worker killed mid-run vs a clean run (issue 6).

Run by hand (never in CI; it needs a quiet machine)::

    python benchmarks/bench_pipeline.py [--n 100000] [--trees 100] [--workdir /tmp/dfpipe]

Data: ``make_classification(n, 20, n_informative=8, n_redundant=4,
random_state=0)`` with 10 % of the feature cells removed at random (seed 1),
as Parquet.  The pipeline is ``pipelines/nightly_impute.yaml``'s shape
(Breiman proximity tiles to Zarr, rfImpute, outlier scores) pointed at that
table.  Each scenario is a ``distforest run`` in its own process with its own
LocalCluster of 2 worker processes (1 thread each):

- ``clean``: nothing happens;
- ``worker killed in fit``: one worker process is SIGKILLed as soon as the
  run's log says the trees are being fitted;
- ``worker killed in tiles``: one worker process is SIGKILLed when 30 % of
  the proximity tiles are written.

The nanny restarts the killed worker and the scheduler re-runs its tasks.
Reported: wall time, overhead against the clean run, retries counted by the
run's own report, and whether the proximity matrix and the imputed table are
bit-identical to the clean run's.  Results: ``benchmarks/results/pipeline.md``
and ``pipeline.json``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import (
    GB,
    dask_workers,
    machine_info,
    package_versions,
    run_measured,
    write_markdown,
)
from _measure import RESULTS as RESULTS_DIR
from _measure import parser as make_parser

ROOT = Path(__file__).resolve().parents[1]
RESULTS = RESULTS_DIR
SCENARIOS = ("clean", "worker killed in fit", "worker killed in tiles")


def make_data(n: int, workdir: Path) -> Path:
    import pandas as pd
    from sklearn.datasets import make_classification

    X, y = make_classification(n, 20, n_informative=8, n_redundant=4, random_state=0)
    names = [f"x{k}" for k in range(20)]
    frame = pd.DataFrame(X.astype(np.float32), columns=names)
    frame[names] = frame[names].mask(np.random.default_rng(1).random(X.shape) < 0.1)
    frame["y"] = y
    path = workdir / f"nightly_{n}.parquet"
    frame.to_parquet(path)
    return path


def write_pipeline(data: Path, out: Path, trees: int, path: Path) -> Path:
    path.write_text(
        "name: nightly_bench\n"
        f"input: {{path: {data}, target: y}}\n"
        f"forest: {{n_estimators: {trees}, random_state: 0, tile_size: 2048}}\n"
        "proximity: {method: original}\n"
        "impute: {out: imputed.parquet, iterations: 3}\n"
        "outliers: {out: outliers.csv}\n"
        f"output: {{dir: {out}, store: run.zarr}}\n",
    )
    return path


class Killer(threading.Thread):
    """SIGKILL one Dask worker process of the run when ``ready()`` says so."""

    def __init__(self, parent_pid: int, ready: Any) -> None:
        super().__init__(daemon=True)
        self.parent_pid = parent_pid
        self.ready = ready
        self.stop = threading.Event()
        self.killed_at: float | None = None
        self.start_time = time.perf_counter()

    def workers(self) -> list[Any]:
        return dask_workers(self.parent_pid)

    def run(self) -> None:
        while not self.stop.is_set():
            workers = self.workers()
            if len(workers) >= 2 and self.ready(workers):
                victim = workers[0]
                victim.send_signal(signal.SIGKILL)
                self.killed_at = time.perf_counter() - self.start_time
                print(f"  killed worker pid {victim.pid} at {self.killed_at:.1f} s", flush=True)
                return
            time.sleep(0.2)


def tiles_done(store: Path) -> tuple[int, int]:
    import zarr

    try:
        done = zarr.open_array(str(store), path="done/proximity", mode="r")[...]
    except Exception:
        return 0, 1
    return int(done.sum()), int(np.triu(np.ones_like(done)).sum())


def digest(path: Path) -> str:
    import zarr

    h = hashlib.sha256()
    if path.suffix == ".zarr":  # row block by row block: never the n x n matrix
        from distforest.io.matrices import decode

        arr = zarr.open_array(str(path), path="proximity", mode="r")
        attrs, step = dict(arr.attrs), arr.chunks[0]
        for start in range(0, arr.shape[0], step):  # decoded: the same digest for either layout
            h.update(decode(arr[start : start + step], attrs).tobytes())
    else:
        import pandas as pd

        h.update(pd.read_parquet(path).to_numpy().tobytes())
    return h.hexdigest()[:16]


def scenario(name: str, pipeline: Path, out: Path, wd: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    distforest = str(Path(sys.executable).with_name("distforest"))
    cmd = [distforest, "run", str(pipeline)]
    log = wd / f"{out.name}.log"
    killer = None
    if name != "clean":
        store = out / "run.zarr"

        def ready(workers: list[Any]) -> bool:
            if name.endswith("fit"):  # the log says the trees are being fitted
                text = log.read_text() if log.exists() else ""
                return "fitting" in text and "tiles" not in text
            done, total = tiles_done(store)
            return done >= 0.3 * total

        import os

        killer = Killer(os.getpid(), ready)
        killer.start()
    run = run_measured(cmd, wd, name.replace(" ", "_"), stderr_path=log)
    if killer is not None:
        killer.stop.set()
        killer.join()
        run["killed_at_s"] = killer.killed_at
    run["scenario"] = name
    report = out / "report.json"
    if report.exists():
        rep = json.loads(report.read_text())
        run["retries"] = rep.get("retries")
        run["tasks"] = rep.get("tasks")
        run["stages"] = rep.get("seconds_per_stage")
    if run["returncode"] == 0:
        run["proximity_digest"] = digest(out / "run.zarr")
        run["imputed_digest"] = digest(out / "imputed.parquet")
    return run


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dfpipe"))
    args = parser.parse_args(argv)
    wd = args.workdir
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    data = make_data(args.n, wd)
    runs = []
    for name in SCENARIOS:
        out = wd / name.replace(" ", "_")
        pipeline = write_pipeline(data, out, args.trees, wd / f"{out.name}.yaml")
        runs.append(scenario(name, pipeline, out, wd))
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python " + " ".join(["benchmarks/bench_pipeline.py", *sys.argv[1:]]),
        "machine": machine_info(),
        "versions": package_versions(),
        "n": args.n,
        "trees": args.trees,
    }
    for r in runs:
        r.pop("rss_samples", None)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "pipeline.json").write_text(
        json.dumps({"meta": meta, "runs": runs}, indent=2, default=str)
    )
    write_markdown((RESULTS / "pipeline.md"), render(meta, runs))
    print((RESULTS / "pipeline.md").read_text())
    shutil.rmtree(wd, ignore_errors=True)


def render(meta: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    m = meta["machine"]
    clean = runs[0]
    lines = [
        "# Nightly pipeline under a worker failure",
        "",
        f"- Date: {meta['date']}",
        f"- Machine: {m['cpu_model']}, {m['cores']} cores, "
        f"{m['mem_total_bytes'] / 2**30:.1f} GiB RAM, Python {m['python']}",
        f"- Command: `{meta['command']}`",
        f"- Data: {meta['n']:,} x 20 (10% of cells missing); {meta['trees']} trees; "
        "proximity tiles of 2048, rfImpute (3 iterations), outlier scores",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "| scenario | exit | wall | overhead vs clean | killed at | retried tasks | "
        "peak RSS (CLI + workers) | proximity = clean | imputed = clean | other load |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in runs:
        overhead = (r["wall_s"] / clean["wall_s"] - 1) if r is not clean else 0.0
        killed = f"{r['killed_at_s']:.1f} s" if r.get("killed_at_s") else "-"
        same_p = r.get("proximity_digest") == clean.get("proximity_digest")
        same_i = r.get("imputed_digest") == clean.get("imputed_digest")
        lines.append(
            f"| {r['scenario']} | {r['returncode']} | {r['wall_s']:.1f} s | {overhead:+.0%} | "
            f"{killed} | {r.get('retries', '?')} | {r['peak_rss_tree_bytes'] / GB:.2f} GB | "
            f"{'yes' if same_p else 'NO'} | {'yes' if same_i else 'NO'} | "
            f"{r['foreign_load']:.0%} |"
        )
    lines += [
        "",
        "*overhead*: wall time / clean wall time - 1.  *retried tasks*: extra attempts counted "
        "by the run's scheduler plugin (report.json).  *= clean*: SHA-256 of the proximity "
        "array / the imputed table equals the clean run's.  *other load*: CPU used by "
        "processes outside the measured tree (the machine should be quiet).",
    ]
    for r in runs:
        if r.get("stages"):
            stages = ", ".join(f"{k} {v:.1f} s" for k, v in r["stages"].items() if v is not None)
            lines.append(f"- {r['scenario']}: {stages}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
