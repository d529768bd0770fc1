"""Peak RSS of a command, per process and summed over its process tree (psutil, every 0.2 s).

Run by hand around one command (a ``distforest`` CLI call and its Dask
workers), e.g.::

    python benchmarks/rss_by_process.py --out /tmp/rss.json -- \\
        distforest -q impute data.parquet --target y --out imputed.parquet

Prints (and writes with ``--out``) the wall time, the exit code, the peak of
the summed RSS of the tree with the time it happened, and each process's own
peak with its role: ``driver`` (the command itself), ``worker`` (a Dask
worker process), ``nanny`` or ``other``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SAMPLE_EVERY = 0.2
GB = 1e9


def role(cmdline: list[str], root: int, pid: int) -> str:
    """What a process of the tree is, from its command line."""
    text = " ".join(cmdline)
    if pid == root:
        return "driver"
    if "spawn_main" in text or "multiprocessing" in text:
        return "worker"
    if "nanny" in text.lower():
        return "nanny"
    return "other"


def sample(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` and follow the RSS of it and its descendants until it ends."""
    import psutil

    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    root = psutil.Process(proc.pid)
    peaks: dict[int, dict[str, Any]] = {}
    peak_sum, peak_at = 0, 0.0
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        total = 0
        for p in procs:
            try:
                rss = p.memory_info().rss
                if p.pid not in peaks:
                    peaks[p.pid] = {"role": role(p.cmdline(), proc.pid, p.pid), "peak_bytes": 0}
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            total += rss
            peaks[p.pid]["peak_bytes"] = max(peaks[p.pid]["peak_bytes"], rss)
        if total > peak_sum:
            peak_sum, peak_at = total, time.perf_counter() - start
        time.sleep(SAMPLE_EVERY)
    return {
        "command": cmd,
        "returncode": proc.wait(),
        "wall_s": time.perf_counter() - start,
        "peak_tree_bytes": peak_sum,
        "peak_tree_at_s": peak_at,
        "processes": sorted(peaks.values(), key=lambda r: -r["peak_bytes"]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the summary here (JSON)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the command to measure after --")
    result = sample(cmd)
    per = ", ".join(f"{r['role']} {r['peak_bytes'] / GB:.2f}" for r in result["processes"][:6])
    print(f"exit {result['returncode']}, wall {result['wall_s']:.1f} s, peak tree "
          f"{result['peak_tree_bytes'] / GB:.2f} GB at {result['peak_tree_at_s']:.0f} s; "
          f"per process (GB): {per}", file=sys.stderr)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
