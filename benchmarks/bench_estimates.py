"""How far off the dry run's time estimate is: the plan's time against measured runs (by hand).

For each run measured on a quiet machine in ``benchmarks/results/`` (the case
list below names the file and the row), this script makes the same input and
runs the same command with ``--dry-run``, reads the plan's ``time:`` line and
reports the ratio estimate / measured wall time.  Dry runs read only the
input's size, so the whole script takes about a minute (the 10,000,000-row
case needs the Parquet folder of ``bench_out_of_core.py --data DIR``; it is
skipped when that folder is missing).

    python benchmarks/bench_estimates.py --out benchmarks/results/estimates.md
"""

from __future__ import annotations

import argparse
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

_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}


def estimated_seconds(plan_text: str) -> float:
    """The wall time of a printed plan's ``time:`` line, in seconds."""
    match = re.search(r"time:\s+about ([\d,.]+) (s|min|h) on", plan_text)
    if match is None:
        raise ValueError(f"no time line in the plan:\n{plan_text}")
    return float(match.group(1).replace(",", "")) * _UNITS[match.group(2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="Markdown result file")
    parser.add_argument("--big-data", type=Path, default=Path("/tmp/oocdata/10000000/parts"),
                        help="the 10,000,000-row folder of bench_out_of_core.py")  # fmt: skip
    args = parser.parse_args()
    import bench_proximity

    rows_out = []
    with tempfile.TemporaryDirectory(prefix="df-estimates-") as tmp:
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
        args.out.write_text("\n".join(head + rows_out) + "\n")


if __name__ == "__main__":
    main()
