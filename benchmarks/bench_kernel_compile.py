"""Numba compilations of a cold cache: each kernel, its signatures, their CPU; vs a base.

In a fresh process with an empty ``NUMBA_CACHE_DIR`` (a new install, a
fresh clone's test run), runs the tiny fit of every forest kind
(:func:`distforest.forests.warm.tiny_fits`: proximity forests with their three
matrices, neighbours and new rows, a refined top-k forest, X-Forest, both
SimForests, SMERF) and records each ``numba:compile`` event: the kernel, its
argument types and the CPU seconds of that compilation alone (nested
compilations of called kernels are charged to those).  ``--base REF`` runs
the same fits on the package as it was at ``REF`` (extracted with ``git
archive`` and put first on ``PYTHONPATH``); the fits' code is this tree's.
``--warm`` then also runs :func:`~distforest.forests.warm.warm_kernels`
(every kernel module's warm-up) in the same process and reports its CPU
apart (the other columns are the fits' alone).  Writes
``benchmarks/results/kernel_compile.{json,md}``.

Usage::

    python -m benchmarks kernel_compile --base 5542da5 --repeat 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _measure import child_result, emit, machine_load, write_result  # noqa: E402
from _measure import parser as make_parser  # noqa: E402
from bench_startup import extract  # noqa: E402

WARM = ROOT / "distforest" / "forests" / "warm.py"


def child(warm: bool) -> None:
    """In this fresh process: the fits, with every compilation recorded; emit the result."""
    from numba.core import event

    records: list[tuple[str, str, float]] = []
    stack: list[list[float]] = []

    class Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            stack.append([time.process_time(), 0.0])

        def on_end(self, ev: Any) -> None:
            start, nested = stack.pop()
            spent = time.process_time() - start
            if stack:
                stack[-1][1] += spent
            func = ev.data["dispatcher"].py_func
            records.append((f"{func.__module__}.{func.__qualname__}", str(ev.data["args"]),
                            spent - nested))  # fmt: skip

    event.register("numba:compile", Listener())
    spec = importlib.util.spec_from_file_location("distforest_warm", WARM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    start = time.process_time()
    with tempfile.TemporaryDirectory() as folder:
        module.tiny_fits(folder)
    fits_cpu = time.process_time() - start
    warm_cpu = None
    fits_records = list(records)
    if warm:
        start = time.process_time()
        module.warm_kernels()
        warm_cpu = time.process_time() - start
    kernels: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for name, args, cpu in fits_records:
        if name.startswith("distforest."):
            kernels[name].append((args, round(cpu, 3)))
    emit({
        "fits_cpu_s": fits_cpu, "warm_cpu_s": warm_cpu,
        "compile_cpu_s": sum(r[2] for r in fits_records),
        "kernel_compile_cpu_s": sum(c for sigs in kernels.values() for _, c in sigs),
        "kernels": len(kernels), "signatures": sum(map(len, kernels.values())),
        "by_kernel": kernels,
    })  # fmt: skip


def run(pythonpath: Path, warm: bool) -> dict[str, Any]:
    """One cold run in a child process with ``pythonpath`` first and an empty cache."""
    with tempfile.TemporaryDirectory(prefix="bench-numba-cache-") as cache:
        env = {**os.environ, "PYTHONPATH": str(pythonpath), "NUMBA_CACHE_DIR": cache}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child"]
        if warm:
            cmd.append("--warm")
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result = child_result(out.stdout)
    assert result is not None, out.stderr[-2000:]
    return result


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--base", help="commit to compare with (e.g. the branch point)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warm", action="store_true", help="also time warm_kernels()")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.warm)
        return
    rows, runs = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-kernel-compile-") as tmp:
        trees = {"this tree": ROOT}
        if args.base:
            trees = {f"base {args.base}": extract(args.base, Path(tmp)), **trees}
        for _ in range(args.repeat):  # alternate, so that both see the same load
            for label, path in trees.items():
                runs.setdefault(label, []).append(run(path, args.warm and label == "this tree"))
    for label, results in runs.items():
        med = {key: statistics.median(r[key] for r in results)
               for key in ("fits_cpu_s", "compile_cpu_s", "kernel_compile_cpu_s")}  # fmt: skip
        last = results[-1]
        rows.append({"code": label, "runs": len(results),
                     **{k: round(v, 1) for k, v in med.items()}, "kernels": last["kernels"],
                     "signatures": last["signatures"], "warm_cpu_s": last["warm_cpu_s"],
                     })  # fmt: skip
    notes = ["CPU seconds of one process (medians of the runs); the load: "
             f"{json.dumps(machine_load())}.", "",
             "Kernels compiled more than once (last run):", ""]  # fmt: skip
    for label, results in runs.items():
        for name, sigs in sorted(results[-1]["by_kernel"].items()):
            if len(sigs) > 1:
                notes.append(f"- {label}: `{name}` {len(sigs)} signatures, "
                             f"{sum(c for _, c in sigs):.2f} CPU s")  # fmt: skip
    write_result("kernel_compile", rows, title="Numba compilations of a cold cache",
                 notes="\n".join(notes), data=runs)  # fmt: skip


if __name__ == "__main__":
    main()
