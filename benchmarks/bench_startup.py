"""Start-up times of the command line, this tree against an older commit (run by hand).

Measures, in fresh processes, ``distforest --help``, ``distforest proximity
--help``, ``import distforest.cli.main`` and a proximity run on the bundled
699-row breast-cancer data (100 trees, default options, a new store each
time), for the working tree ("after") and, with ``--base REF``, for the
package as it was at ``REF`` ("before", extracted with ``git archive`` and put
first on ``PYTHONPATH``; same interpreter and libraries).  The two are run
alternately, ``--repeat`` times each after one untimed warm-up run (which
also fills numba's cache); the table gives medians of wall time and of CPU
time (user + system of the process and its children).  Writes
``benchmarks/results/startup.md``.

The machine is shared: the load average before and after is reported, and
CPU time is less sensitive to other processes than wall time.

Usage::

    .venv/bin/python benchmarks/bench_startup.py --base 5fff184
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _measure import RESULTS as RESULTS_DIR  # noqa: E402
from _measure import (  # noqa: E402
    machine_info,
    run_timed,
    write_markdown,
)
from _measure import parser as make_parser  # noqa: E402

DATA = ROOT / "distforest" / "data" / "breast_cancer.csv"
DISTFOREST = Path(sys.executable).parent / "distforest"  # the console script of this venv


def commands(scratch: Path) -> dict[str, list[str]]:
    """What is timed: label -> argv (``{out}`` is replaced by a new store path)."""
    return {
        "distforest --help": [str(DISTFOREST), "--help"],
        "distforest proximity --help": [str(DISTFOREST), "proximity", "--help"],
        "python -c 'import distforest.cli.main'": [
            sys.executable, "-c", "import distforest.cli.main",
        ],
        "distforest -q proximity breast_cancer.csv --target Class --out STORE": [
            str(DISTFOREST), "-q", "proximity", str(DATA), "--target", "Class", "--out", "{out}",
        ],
    }  # fmt: skip


def run_once(argv: list[str], pythonpath: Path, scratch: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, children included) of one run."""
    out = scratch / f"p-{time.monotonic_ns()}.zarr"
    argv = [a.replace("{out}", str(out)) for a in argv]
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "PYTHONWARNINGS": "ignore"}
    _, wall, cpu = run_timed(argv, env=env, cwd=scratch, check=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    return wall, cpu


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def extract(ref: str, into: Path) -> Path:
    """The ``distforest`` package as it was at ``ref``, under ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "distforest"],
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--base", help="commit to compare with (e.g. the branch point)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "startup.md")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        scratch = Path(tmp)
        variants = {"after": ROOT}
        if args.base:
            (scratch / "base").mkdir()
            variants = {"before": extract(args.base, scratch / "base"), **variants}
        todo = commands(scratch)
        load_start = os.getloadavg()
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for label, argv in todo.items():
            for path in variants.values():
                run_once(argv, path, scratch)  # warm-up: disk cache, numba's cache
            for rep in range(args.repeat):
                for variant, path in variants.items():
                    wall, cpu = run_once(argv, path, scratch)
                    times.setdefault((label, variant), []).append((wall, cpu))
                    print(f"{label} [{variant}] run {rep + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU",
                          flush=True)  # fmt: skip
        load_end = os.getloadavg()

    machine = machine_info()
    head = git("rev-parse", "--short", "HEAD") + (
        " (+ uncommitted changes)" if git("status", "--porcelain") else ""
    )
    lines = [
        "# Start-up times (issue 14 item 3)",
        "",
        f"- Date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- Machine: {machine['usable_cores']} cores ({machine['cpu_model']}), "
        f"{machine['mem_total_bytes'] / 2**30:.1f} GiB memory, Python {machine['python']}; "
        "shared with other sessions: load average (1, 5, 15 min) "
        f"{' / '.join(f'{x:.1f}' for x in load_start)} at the start, "
        f"{' / '.join(f'{x:.1f}' for x in load_end)} at the end",
        f"- Commit measured (after): {head}"
        + (f"; before: {args.base} (its `distforest/` first on PYTHONPATH)" if args.base else ""),
        f"- Command: `.venv/bin/python benchmarks/bench_startup.py"
        f"{' --base ' + args.base if args.base else ''} --repeat {args.repeat}`",
        f"- Each line: median of {args.repeat} runs after one untimed warm-up, before and after "
        "alternating; CPU is user + system time of the process and its children (workers).",
        "",
        "| command | before wall (s) | after wall (s) | after / before | before CPU (s) "
        "| after CPU (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label in todo:
        med = {}
        for variant in variants:
            runs = times[(label, variant)]
            med[variant] = (statistics.median(w for w, _ in runs),
                            statistics.median(c for _, c in runs))  # fmt: skip
        after = med["after"]
        before = med.get("before")
        cells = (
            [f"{before[0]:.2f}", f"{after[0]:.2f}", f"{after[0] / before[0]:.2f}",
             f"{before[1]:.2f}", f"{after[1]:.2f}"]
            if before else ["-", f"{after[0]:.2f}", "-", "-", f"{after[1]:.2f}"]
        )  # fmt: skip
        lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
    lines += ["", "All runs (wall s / CPU s):", ""]
    for (label, variant), runs in times.items():
        text = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in runs)
        lines.append(f"- `{label}` [{variant}]: {text}")
    write_markdown(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
