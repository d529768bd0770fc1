"""Measuring helpers shared by the benchmark scripts (run by hand, never in CI).

A command runs in its own process under ``/usr/bin/time -v`` while a thread
samples the summed RSS of its whole process tree (the CLI and its Dask
worker processes); CPU used by other processes during the run is reported,
because a busy machine spoils the timings.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TIME_BIN = "/usr/bin/time"
SAMPLE_EVERY = 0.2
RESULT_PREFIX = "BENCH-RESULT "
GB = 1e9


class TreeSampler(threading.Thread):
    """Sample the summed RSS of every descendant of ``pid`` every 0.2 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.stop = threading.Event()
        self.peak_sum = 0
        self.peak_procs = 0
        self.peak_at = 0.0
        self.samples = 0
        self.t0 = time.perf_counter()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self.stop.is_set():
            try:
                procs = root.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            total, count = 0, 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                    count += 1
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self.samples += 1
            if total > self.peak_sum:
                self.peak_sum = total
                self.peak_at = time.perf_counter() - self.t0
            self.peak_procs = max(self.peak_procs, count)
            self.stop.wait(SAMPLE_EVERY)


def _parse_time_v(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    m = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text)
    if m:
        h, mnt, s = m.groups()
        out["wall_s"] = int(h or 0) * 3600 + int(mnt) * 60 + float(s)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        out["max_rss_single_bytes"] = int(m.group(1)) * 1024
    for key, pattern in (
        ("user_s", r"User time \(seconds\): ([\d.]+)"),
        ("sys_s", r"System time \(seconds\): ([\d.]+)"),
        ("cpu_percent", r"Percent of CPU this job got: (\d+)%"),
    ):
        m = re.search(pattern, text)
        if m:
            out[key] = float(m.group(1))
    return out


def _busy_cpu_s() -> float:
    import psutil

    t = psutil.cpu_times()
    return (
        sum(t)
        - t.idle
        - getattr(t, "iowait", 0.0)
        - getattr(t, "guest", 0.0)
        - getattr(t, "guest_nice", 0.0)
    )


def wait_for_quiet(max_wait: float, threshold: float = 0.10) -> float:
    """Wait until other processes use under ``threshold`` of the CPUs; return the wait."""
    import psutil

    start = time.perf_counter()
    quiet_checks = 0
    told = False
    while time.perf_counter() - start < max_wait:
        busy = psutil.cpu_percent(interval=2.0) / 100
        quiet_checks = quiet_checks + 1 if busy < threshold else 0
        if quiet_checks >= 2:
            break
        if busy >= threshold and not told:
            print(f"  waiting for the machine to be quiet ({busy:.0%} busy) ...", flush=True)
            told = True
    return time.perf_counter() - start


def run_measured(
    cmd: list[str],
    cwd: Path,
    label: str,
    max_wait: float = 0.0,
    timeout: float | None = None,
    stderr_path: Path | None = None,
) -> dict[str, Any]:
    """Run ``cmd`` under ``/usr/bin/time -v`` while sampling the process tree's RSS.

    Also measures the CPU time used by processes outside the tree during the
    run (``foreign_cpu_s``): other work on the machine makes the numbers
    unreliable.  With ``stderr_path`` the command's stderr goes to that file
    as it runs (so another thread can follow its log lines).
    """
    time_file = cwd / f"{label}.time.txt"
    full = [TIME_BIN, "-v", "-o", str(time_file), *cmd]
    waited = wait_for_quiet(max_wait) if max_wait > 0 else 0.0
    print(f"  [{label}] {' '.join(cmd)}", flush=True)
    busy0 = _busy_cpu_s()
    start = time.perf_counter()
    err = open(stderr_path, "w") if stderr_path else subprocess.PIPE
    proc = subprocess.Popen(full, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_tree(proc.pid)
        stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    busy = _busy_cpu_s() - busy0
    if stderr_path:
        err.close()
        stderr = Path(stderr_path).read_text()
    sampler.stop.set()
    sampler.join()
    result: dict[str, Any] = {
        "cmd": cmd,
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "waited_for_quiet_s": waited,
        "system_busy_cpu_s": busy,
        "wall_s_perf": wall,
        "peak_rss_tree_bytes": sampler.peak_sum,
        "peak_rss_tree_at_s": sampler.peak_at,
        "peak_procs": sampler.peak_procs,
        "rss_samples": sampler.samples,
        "stdout": stdout,
        "stderr_tail": stderr[-3000:],
    }
    if time_file.exists():
        result.update(_parse_time_v(time_file.read_text()))
    result.setdefault("wall_s", wall)
    ours = result.get("user_s", 0.0) + result.get("sys_s", 0.0)
    result["foreign_cpu_s"] = max(0.0, busy - ours)
    result["foreign_load"] = result["foreign_cpu_s"] / wall / (os.cpu_count() or 1)
    if result["foreign_load"] > 0.05:
        print(
            f"  [{label}] WARNING: other processes used {result['foreign_load']:.0%} of the "
            "CPUs during this run",
            flush=True,
        )
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result["child"] = json.loads(line[len(RESULT_PREFIX) :])
    if proc.returncode != 0:
        print(f"  [{label}] FAILED (exit {proc.returncode}):\n{stderr[-3000:]}", flush=True)
    else:
        print(
            f"  [{label}] {result['wall_s']:.1f} s, peak RSS (tree) {sampler.peak_sum / GB:.2f} GB",
            flush=True,
        )
    return result


def machine_info() -> dict[str, Any]:
    mem = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        mem[key] = int(value.split()[0]) * 1024
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "mem_total_bytes": mem.get("MemTotal", 0),
        "mem_available_bytes": mem.get("MemAvailable", 0),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def machine_line(m: dict[str, Any]) -> str:
    """One Markdown line naming the machine of :func:`machine_info`."""
    return (
        f"- Machine: {m['cpu_model']}, {m['cores']} cores ({m['usable_cores']} usable), "
        f"{m['mem_total_bytes'] / 2**30:.1f} GiB RAM (MemTotal), Linux {m['kernel']}, "
        f"Python {m['python']}"
    )


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    names = [
        "distforest",
        "numpy",
        "scikit-learn",
        "numba",
        "zarr",
        "numcodecs",
        "dask",
        "distributed",
        "xarray",
        "pandas",
        "pyarrow",
        "psutil",
    ]
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "distforest"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        out["distforest git"] = commit + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for p in [*root.children(recursive=True), root]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
