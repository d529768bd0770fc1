"""Peak RSS of a command, per process and summed over its process tree (psutil, every 0.2 s).

Run by hand around one command (a ``distforest`` CLI call and its Dask
workers), e.g.::

    python -m benchmarks rss_by_process --out /tmp/rss.json -- \\
        distforest -q impute data.parquet --target y --out imputed.parquet

Prints (and writes with ``--out``) the wall time, the exit code, the peak of
the summed RSS of the tree with the time it happened, and each process's own
peak with its role: ``driver`` (the command itself), ``worker`` (a Dask
worker process), ``nanny`` or ``other``.  The measuring is
:func:`_measure.run_measured`'s, as for every benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import GB, parser, run_measured


def sample(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` and follow the RSS of it and its descendants until it ends: the fields of
    :func:`_measure.run_measured` (the one result format), without the command's stdout."""
    with tempfile.TemporaryDirectory() as scratch:
        r = run_measured(cmd, Path.cwd(), "rss", stderr_path=Path(scratch) / "stderr.txt")
    r.pop("stdout", None)
    return r


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--out", type=Path, help="also write the summary here (JSON)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("give the command to measure after --")
    result = sample(cmd)
    per = ", ".join(f"{r['role']} {r['peak_bytes'] / GB:.2f}" for r in result["processes"][:6])
    print(f"exit {result['returncode']}, wall {result['wall_s']:.1f} s, peak tree "
          f"{result['peak_rss_tree_bytes'] / GB:.2f} GB at {result['peak_rss_tree_at_s']:.0f} s; "
          f"per process (GB): {per}", file=sys.stderr)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
