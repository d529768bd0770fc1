"""How far off the dry run's time estimate is: the plan's time against measured runs (by hand).

For each run measured on a quiet machine in ``benchmarks/results/`` (the case
list below names the file and the row), this script makes the same input and
runs the same command with ``--dry-run``, reads the plan's ``time:`` line and
reports the ratio estimate / measured wall time.  Dry runs read only the
input's size, so the whole script takes about a minute (the 10,000,000-row
case needs the Parquet folder of ``bench_out_of_core.py --data DIR``; it is
skipped when that folder is missing).

With ``--measure`` it runs the other commands (impute, outliers, knn fit,
simforest fit, xforest, smerf fit) for real at a few sizes, each under about
two minutes on 2 cores, and appends their estimate / measured table to
``--out`` (``--tiny``: 200 rows only, to check the script).

    python benchmarks/bench_estimates.py --out benchmarks/results/estimates.md
    python benchmarks/bench_estimates.py --measure --out benchmarks/results/estimates.md
"""

from __future__ import annotations

import datetime as dt
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _measure import parser as make_parser  # noqa: E402
from _measure import write_markdown  # noqa: E402

#: (name, rows, command after ``distforest``, measured wall seconds, where it was measured).
#: ``{data}`` is the bench_proximity data file of ``rows`` rows, ``{out}`` a fresh folder.
CASES = [
    ("proximity --top-k 50, 100 trees", 20_000,
     "proximity {data} --target y --trees 100 --seed 0 --top-k 50 --out {out}/nb.zarr",
     5.6, "proximity_neighbors.md (a87869b)"),
    ("proximity --top-k 50, 100 trees", 100_000,
     "proximity {data} --target y --trees 100 --seed 0 --top-k 50 --out {out}/nb.zarr",
     23.9, "proximity_neighbors.md (a87869b)"),
    ("proximity --top-k 50, 100 trees", 1_000_000,
     "proximity {data} --target y --trees 100 --seed 0 --top-k 50 --out {out}/nb.zarr",
     343.1, "proximity_neighbors.md (a87869b)"),
    ("proximity (dense), 100 trees", 20_000,
     "proximity {data} --target y --trees 100 --seed 0 --out {out}/p.zarr",
     6.0, "object_storage.md, local disk (7dd7a22)"),
    ("proximity (dense), 100 trees", 100_000,
     "proximity {data} --target y --trees 100 --seed 0 --out {out}/p.zarr",
     36.6, "proximity.md (2026-11-24)"),
    ("run neighbours_10m.yaml (20 trees, top-k 50)", 10_000_000,
     "run " + str(HERE / "neighbours_10m.yaml") + " --set output.dir={out}",
     945.0, "proximity_neighbors.md, 10,000,000 rows (9c32a99)"),
]  # fmt: skip

#: Commands other than proximity, run for real (``--measure``) at sizes each under about
#: two minutes on a 2-core machine: (name, command after ``distforest``, row counts).
#: ``{csv}`` is a table of ``rows`` rows (12 features, 5 % of two columns missing, class
#: column ``y``), ``{full}`` drops the two columns with holes (for the commands that
#: refuse missing values), ``{D}`` its n x n euclidean distances, ``{out}`` a fresh folder.
MEASURED = [
    ("impute (column, 35 trees a column)", "impute {csv} --target y --out {out}/i.csv",
     (2_000, 20_000)),
    ("outliers, 100 trees", "outliers {csv} --target y --out {out}/o.csv",
     (2_000, 20_000, 100_000)),
    ("knn fit --metric rf-proximity, 100 trees",
     "knn fit {csv} --target y --metric rf-proximity --out {out}/k.zarr", (2_000, 20_000)),
    ("simforest fit (rbf), 100 trees", "simforest fit {csv} --target y {full} --out {out}/s.zarr",
     (1_000, 5_000)),
    ("xforest (default 1,000 trees)", "xforest {csv} --drop y {full} --out {out}/x.zarr",
     (1_000, 3_000)),
    ("smerf fit, 100 trees", "smerf fit {csv} --drop y {full} --distances {D} --out {out}/m.zarr",
     (500, 2_000)),
]  # fmt: skip
#: ``--tiny``: every command of :data:`MEASURED` at this size only (to check the script).
TINY = 200

_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}


def estimated_seconds(plan_text: str) -> float:
    """The wall time of a printed plan's ``time:`` line, in seconds."""
    match = re.search(r"time:\s+about ([\d,.]+) (s|min|h) on", plan_text)
    if match is None:
        raise ValueError(f"no time line in the plan:\n{plan_text}")
    return float(match.group(1).replace(",", "")) * _UNITS[match.group(2)]


def make_table(rows: int, path: Path, distances: Path | None = None) -> None:
    """A CSV of ``rows`` rows: 12 features (5 % of two of them missing) and a class ``y``;
    with ``distances``, the rows' n x n euclidean distances (of the filled features)."""
    import numpy as np
    import pandas as pd
    from sklearn.datasets import make_classification

    X, y = make_classification(rows, 12, n_informative=6, random_state=0)
    if distances is not None:
        np.save(distances, np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)).astype(np.float32))
    holes = np.random.default_rng(0).random((rows, 2)) < 0.05
    X[:, :2][holes] = np.nan
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(12)]).assign(y=y)
    frame.to_csv(path, index=False)


def timed(argv: list[str]) -> tuple[float, str]:
    """Wall seconds of ``distforest ARGV`` in a fresh process, and what it printed."""
    import time

    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "distforest", *argv], capture_output=True,
                          text=True, check=False)  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): distforest {' '.join(argv)}\n"
                         f"{done.stdout}{done.stderr}")  # fmt: skip
    return seconds, done.stdout


def measure_commands(tmp: Path, tiny: bool) -> list[str]:
    """Each command of :data:`MEASURED`: its dry run's estimate next to a real run's wall time.

    The dry run's own wall time (start-up, imports, reading the input: what the
    estimate leaves out) is subtracted from the run's to give the computing the
    estimate stands for.
    """
    lines = []
    for name, command, sizes in MEASURED:
        for rows in (TINY,) if tiny else sizes:
            csv, D = tmp / f"t_{rows}.csv", tmp / f"d_{rows}.npy"
            if not csv.exists():
                make_table(rows, csv, D if rows <= 5_000 else None)
            out = Path(tempfile.mkdtemp(dir=tmp))
            argv = command.format(csv=csv, D=D, out=out, full="--drop x0 --drop x1").split()
            dry_seconds, plan = timed([*argv, "--dry-run"])
            estimate = estimated_seconds(plan)
            wall, _ = timed(["-q", *argv])
            work = max(wall - dry_seconds, 0.01)
            lines.append(
                f"| {name} | {rows:,} | {estimate:,.3f} | {wall:,.1f} | {dry_seconds:,.1f} | "
                f"{estimate / work:.2f} |"
            )
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--out", type=Path, default=None, help="Markdown result file")
    parser.add_argument("--big-data", type=Path, default=Path("/tmp/oocdata/10000000/parts"),
                        help="the 10,000,000-row folder of bench_out_of_core.py")  # fmt: skip
    parser.add_argument("--measure", action="store_true",
                        help="also run impute, outliers, knn fit, simforest fit, xforest and "
                             "smerf fit for real (a quiet machine: about 15 min) and append "
                             "their table to --out")  # fmt: skip
    parser.add_argument(
        "--tiny", action="store_true", help=f"with --measure: only {TINY} rows, to check the script"
    )
    args = parser.parse_args()
    import bench_proximity

    rows_out = []
    with tempfile.TemporaryDirectory(prefix="df-estimates-") as tmp:
        if args.measure:
            measured_rows = measure_commands(Path(tmp), args.tiny)
            if args.out:
                _append(args.out, measured_rows)
            return
        for name, rows, command, measured, where in CASES:
            if rows == 10_000_000 and not args.big_data.exists():
                print(f"skipped {name}: {args.big_data} is missing", flush=True)
                continue
            data = Path(tmp) / f"data_{rows}.parquet"
            if rows < 10_000_000 and not data.exists():
                bench_proximity.make_data(rows, data)
            out = Path(tempfile.mkdtemp(dir=tmp))
            argv = [*command.format(data=data, out=out).split(), "--dry-run"]
            done = subprocess.run([sys.executable, "-m", "distforest", *argv],
                                  capture_output=True, text=True, check=False)  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(f"dry run failed: {' '.join(argv)}\n{done.stderr}")
            estimate = estimated_seconds(done.stdout)
            rows_out.append(
                f"| {name} | {rows:,} | {estimate:,.1f} | {measured:,.1f} | "
                f"{estimate / measured:.2f} | {where} |"
            )
            print(rows_out[-1], flush=True)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=ROOT, check=False).stdout.strip()  # fmt: skip
        head = [
            "# The dry run's time estimate against measured runs",
            "",
            f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit}, "
            f"{platform.node()}. Command: `python benchmarks/bench_estimates.py "
            f"{' '.join(sys.argv[1:])}`",
            "",
            "Estimate: the plan's `time:` line (computing over the threads, start-up not "
            "counted). Measured: the end-to-end wall time of the same command in the named "
            "results file (start-up included).",
            "",
            "| command | rows | estimate (s) | measured (s) | estimate / measured | measured in |",
            "|---|---:|---:|---:|---:|---|",
        ]
        write_markdown(args.out, "\n".join(head + rows_out) + "\n")


def _append(path: Path, rows: list[str]) -> None:
    """Append the table of the ``--measure`` runs to ``path``."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT, check=False).stdout.strip()  # fmt: skip
    head = [
        "",
        "## Other commands, run for real",
        "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, commit {commit}, {platform.node()}. "
        f"Command: `python benchmarks/bench_estimates.py {' '.join(sys.argv[1:])}`",
        "",
        "Estimate: the dry run's `time:` line. Wall: the real run, a fresh process. Dry run: "
        "the dry run's own wall time (start-up, imports, reading the input), subtracted from "
        "the wall time for the ratio estimate / (wall - dry run).",
        "",
        "| command | rows | estimate (s) | wall (s) | dry run (s) | estimate / (wall - dry run) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    with path.open("a") as f:
        f.write("\n".join(head + rows) + "\n")


if __name__ == "__main__":
    main()
