"""The one measuring module of the benchmarks: every script measures and reports through it.

What it measures
    * a command in its own process (:func:`run_measured`): wall time, CPU,
      ``/usr/bin/time -v``'s peak RSS of the command, the peak RSS of each
      process of its tree (the CLI, its Dask nannies and workers) and the peak
      of their sum, the CPU other processes used meanwhile;
    * a block of Python in this process (:class:`Measure`): wall time, the
      driver's peak RSS, the per-process and whole-tree peaks of this process
      and its children (a LocalCluster's workers), and named phases, each with
      its wall time and tree peak;
    * the machine (:func:`machine_info`, :func:`machine_load`) and the code
      (:func:`package_versions`, :func:`commit`).

What it writes
    :func:`write_result` writes ``NAME.json`` and ``NAME.md`` in
    :data:`RESULTS`: the date, the machine, the exact command, the commit, the
    load and one table of rows (the JSON holds every field, the Markdown the
    chosen columns), then the script's own notes.

:func:`parser` is every script's argument parser (the options common to all
are ``--results``).  ``python -m benchmarks`` lists and runs the scripts.

Only this module samples memory (psutil) or reads ``getrusage``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Where results are written: ``$DISTFOREST_BENCH_RESULTS`` or benchmarks/results.
RESULTS_ENV = "DISTFOREST_BENCH_RESULTS"
RESULTS = Path(os.environ.get(RESULTS_ENV) or HERE / "results")
#: The UCI tables some scripts read: ``$DISTFOREST_DATA`` or ``shared/data`` beside the checkout.
DATA = Path(os.environ.get("DISTFOREST_DATA") or ROOT.parent / "shared" / "data")
TIME_BIN = "/usr/bin/time"
SAMPLE_EVERY = 0.2
RESULT_PREFIX = "BENCH-RESULT "
GB = 1e9
MB = 2**20


# -- memory of a process tree ------------------------------------------------------------


def role(cmdline: Sequence[str], parent_is_root: bool, is_root: bool) -> str:
    """What a process of a measured tree is: driver, worker, nanny or other."""
    text = " ".join(cmdline)
    if is_root:
        return "driver"
    if "spawn_main" in text or "multiprocessing" in text:
        return "worker"
    if "nanny" in text.lower():
        return "nanny"
    return "driver" if parent_is_root else "other"


class ProcessSampler(threading.Thread):
    """Sample the RSS of a process tree every :data:`SAMPLE_EVERY` seconds.

    Parameters
    ----------
    pid
        The tree's root (default: this process).
    include_root
        Count the root itself (``False`` for a ``/usr/bin/time`` wrapper: its
        direct child is then the ``driver``).

    Attributes
    ----------
    peak_tree_bytes, peak_tree_at_s
        The largest summed RSS of the tree and when it was seen (s from start).
    processes
        ``pid -> {"pid", "role", "command", "peak_bytes", "cpu_s"}``.
    """

    def __init__(self, pid: int | None = None, include_root: bool = True) -> None:
        super().__init__(daemon=True)
        self.pid = os.getpid() if pid is None else pid
        self.include_root = include_root
        self.stop = threading.Event()
        self.peak_tree_bytes = 0
        self.peak_tree_at_s = 0.0
        self.peak_procs = 0
        self.samples = 0
        self.processes: dict[int, dict[str, Any]] = {}
        self._cpu0: dict[int, float] = {}
        self._window_peak = 0
        self._window_root = 0
        self._lock = threading.Lock()
        self.t0 = time.perf_counter()

    def sample(self) -> int:
        """Take one sample now; return the tree's summed RSS (bytes)."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = root.children(recursive=True)
        except psutil.NoSuchProcess:
            return 0
        if self.include_root:
            procs = [root, *procs]
        total, count, root_rss = 0, 0, 0
        for p in procs:
            try:
                with p.oneshot():
                    rss = p.memory_info().rss
                    times = p.cpu_times()
                    if p.pid not in self.processes:
                        parent = p.ppid()
                        self.processes[p.pid] = {
                            "pid": p.pid,
                            "role": role(
                                p.cmdline(),
                                parent == self.pid and not self.include_root,
                                p.pid == self.pid and self.include_root,
                            ),
                            "command": " ".join(p.cmdline())[:200],
                            "peak_bytes": 0,
                            "cpu_s": 0.0,
                        }
                        self._cpu0[p.pid] = times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            record = self.processes[p.pid]
            record["peak_bytes"] = max(record["peak_bytes"], rss)
            record["cpu_s"] = times.user + times.system - self._cpu0[p.pid]
            total += rss
            count += 1
            if p.pid == self.pid:
                root_rss = rss
        with self._lock:
            self.samples += 1
            self._window_peak = max(self._window_peak, total)
            self._window_root = max(self._window_root, root_rss)
            if total > self.peak_tree_bytes:
                self.peak_tree_bytes = total
                self.peak_tree_at_s = time.perf_counter() - self.t0
            self.peak_procs = max(self.peak_procs, count)
        return total

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(SAMPLE_EVERY)

    def take_peak(self) -> int:
        """The tree's peak since the last call (a phase's peak); starts a new window."""
        return self.take_peaks()[0]

    def take_peaks(self) -> tuple[int, int]:
        """The tree's and the root's peaks since the last call; starts a new window."""
        now = self.sample()
        with self._lock:
            peaks = (max(self._window_peak, now), self._window_root)
            self._window_peak, self._window_root = now, 0
        return peaks

    def finish(self) -> None:
        """Stop sampling (after one last sample)."""
        self.stop.set()
        if self.is_alive():
            self.join()
        self.sample()

    def tree_cpu_s(self) -> float:
        """CPU seconds the sampled processes used while sampled."""
        return sum(r["cpu_s"] for r in self.processes.values())

    def per_process(self) -> list[dict[str, Any]]:
        """Every process seen, largest peak first."""
        return sorted(self.processes.values(), key=lambda r: -r["peak_bytes"])

    def summary(self) -> dict[str, Any]:
        """The peaks as one JSON-ready dict."""
        return {
            "peak_rss_tree_bytes": self.peak_tree_bytes,
            "peak_rss_tree_at_s": self.peak_tree_at_s,
            "peak_procs": self.peak_procs,
            "rss_samples": self.samples,
            "processes": self.per_process(),
        }


def descendants(pid: int | None = None) -> list[Any]:
    """The live descendants of ``pid`` (default: this process) as ``psutil.Process``."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def dask_workers(pid: int | None = None) -> list[Any]:
    """The Dask worker processes among the descendants of ``pid`` (``psutil.Process``):
    what a benchmark that kills a worker chooses from (not multiprocessing's helpers)."""
    import psutil

    out = []
    for p in descendants(pid):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in cmd and "resource_tracker" not in cmd:
            out.append(p)
    return out


def tree_rss_now(pid: int | None = None) -> int:
    """The summed RSS of a process and its descendants, now (bytes): one sample."""
    return ProcessSampler(pid).sample()


def driver_peak_bytes() -> int:
    """This process's own peak RSS since it started (bytes; the kernel's high-water mark)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def children_peak_bytes() -> int:
    """The largest peak RSS of this process's waited-for children (bytes)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def cpu_seconds(children: bool = False) -> float:
    """User + system CPU seconds of this process (or of its waited-for children)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_timed(
    argv: Sequence[str], **kwargs: Any
) -> tuple[subprocess.CompletedProcess, float, float]:
    """``subprocess.run(argv, **kwargs)``, its wall seconds and its CPU seconds (children too)."""
    before = cpu_seconds(children=True)
    start = time.perf_counter()
    done = subprocess.run(list(argv), **kwargs)
    wall = time.perf_counter() - start
    return done, wall, cpu_seconds(children=True) - before


# -- the machine's load ----------------------------------------------------------------


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


def machine_load() -> dict[str, float]:
    """The load averages (1, 5, 15 min) and the number of CPUs."""
    one, five, fifteen = os.getloadavg()
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "cpus": os.cpu_count() or 1}


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


def _foreign(busy_s: float, ours_s: float, wall_s: float, label: str) -> dict[str, float]:
    foreign = max(0.0, busy_s - ours_s)
    share = foreign / max(wall_s, 1e-9) / (os.cpu_count() or 1)
    if share > 0.05:
        print(f"  [{label}] WARNING: other processes used {share:.0%} of the CPUs during this run",
              flush=True)  # fmt: skip
    return {"system_busy_cpu_s": busy_s, "foreign_cpu_s": foreign, "foreign_load": share}


# -- measuring a block of Python in this process -------------------------------------------


class Measure:
    """Measure a block of this process: wall time, memory (driver, processes, tree), phases.

    Examples
    --------
    >>> with Measure("fit") as m:                      # doctest: +SKIP
    ...     with m.phase("ingest"):
    ...         ingest(...)
    ...     with m.phase("fit"):
    ...         forest.fit(...)
    >>> m.result["phases"][1]["wall_s"]                # doctest: +SKIP

    Each phase records its wall time and the peaks (sampled every
    :data:`SAMPLE_EVERY` s) of this process (``peak_rss_driver_bytes``) and of
    its tree (``peak_rss_tree_bytes``); the whole block adds the kernel's
    high-water mark of this process (``driver_peak_bytes``, since it started).
    """

    def __init__(self, label: str = "run") -> None:
        self.label = label
        self.result: dict[str, Any] = {"label": label, "phases": []}
        self._sampler: ProcessSampler | None = None

    def __enter__(self) -> Measure:
        self.result["load_start"] = machine_load()
        self._busy0 = _busy_cpu_s()
        self._sampler = ProcessSampler()
        self._sampler.start()
        self._sampler.take_peak()
        self._t0 = time.perf_counter()
        return self

    @contextmanager
    def phase(self, name: str) -> Iterator[dict[str, Any]]:
        """Time one named phase: wall, CPU of the tree, peak RSS of this process and the tree."""
        assert self._sampler is not None, "use phase() inside `with Measure(...)`"
        self._sampler.take_peaks()
        record: dict[str, Any] = {"name": name}
        cpu0 = self._sampler.tree_cpu_s()
        start = time.perf_counter()
        try:
            yield record
        finally:
            record["wall_s"] = time.perf_counter() - start
            tree, driver = self._sampler.take_peaks()
            record["peak_rss_tree_bytes"], record["peak_rss_driver_bytes"] = tree, driver
            record["cpu_s"] = self._sampler.tree_cpu_s() - cpu0
            self.result["phases"].append(record)

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t0
        assert self._sampler is not None
        self._sampler.finish()
        busy = _busy_cpu_s() - self._busy0
        self.result.update(
            wall_s=wall,
            driver_peak_bytes=driver_peak_bytes(),
            load_end=machine_load(),
            **self._sampler.summary(),
            **_foreign(busy, self._sampler.tree_cpu_s(), wall, self.label),
        )


def measured(label: str, fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """Call ``fn(*args, **kwargs)`` under :class:`Measure`; return its value and the measure."""
    with Measure(label) as m:
        value = fn(*args, **kwargs)
    return value, m.result


def emit(result: dict[str, Any]) -> None:
    """Print a child's result as the one line :func:`run_measured` reads back."""
    print(RESULT_PREFIX + json.dumps(result, default=str), flush=True)


def child_result(stdout: str | None) -> dict[str, Any] | None:
    """The result a child printed with :func:`emit` (its last such line), or None."""
    found = None
    for line in (stdout or "").splitlines():
        if line.startswith(RESULT_PREFIX):
            found = json.loads(line[len(RESULT_PREFIX) :])
    return found


# -- measuring a command in its own process ------------------------------------------------


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


def run_measured(
    cmd: list[str],
    cwd: Path,
    label: str,
    max_wait: float = 0.0,
    timeout: float | None = None,
    stderr_path: Path | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``cmd`` under ``/usr/bin/time -v`` while sampling its process tree's RSS.

    Returns wall and CPU time, the command's own peak RSS
    (``max_rss_single_bytes``, from ``time -v``), the tree's summed peak
    (``peak_rss_tree_bytes``), each process's peak (``processes``, the command
    itself as ``driver``), the CPU that processes outside the tree used
    meanwhile (``foreign_cpu_s``), the load before and after, and the
    ``BENCH-RESULT`` line the command printed (``child``, see :func:`emit`).
    With ``stderr_path`` the command's stderr goes to that file as it runs.
    Without ``/usr/bin/time`` the command runs bare (no CPU times).
    """
    fd, name = tempfile.mkstemp(prefix=f"{label}.", suffix=".time.txt")
    os.close(fd)
    time_file = Path(name)
    wrapped = Path(TIME_BIN).exists()
    full = [TIME_BIN, "-v", "-o", str(time_file), *cmd] if wrapped else list(cmd)
    waited = wait_for_quiet(max_wait) if max_wait > 0 else 0.0
    print(f"  [{label}] {shlex.join(cmd)}", flush=True)
    load_start = machine_load()
    busy0 = _busy_cpu_s()
    start = time.perf_counter()
    err: Any = open(stderr_path, "w") if stderr_path else subprocess.PIPE
    proc = subprocess.Popen(full, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    sampler = ProcessSampler(proc.pid, include_root=not wrapped)
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
        "wall_s_perf": wall,
        "load_start": load_start,
        "load_end": machine_load(),
        **sampler.summary(),
        "stdout": stdout,
        "stderr_tail": stderr[-3000:],
    }
    if wrapped and time_file.exists():
        result.update(_parse_time_v(time_file.read_text()))
    time_file.unlink(missing_ok=True)
    result.setdefault("wall_s", wall)
    ours = result.get("user_s", 0.0) + result.get("sys_s", 0.0) or sampler.tree_cpu_s()
    result.update(_foreign(busy, ours, wall, label))
    if (child := child_result(stdout)) is not None:
        result["child"] = child
    if proc.returncode != 0:
        print(f"  [{label}] FAILED (exit {proc.returncode}):\n{stderr[-3000:]}", flush=True)
    else:
        print(
            f"  [{label}] {result['wall_s']:.1f} s, peak RSS (tree) "
            f"{sampler.peak_tree_bytes / GB:.2f} GB",
            flush=True,
        )
    return result


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


# -- the machine and the code ------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, kernel and Python of this machine."""
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


def commit() -> str:
    """The checkout's short commit, with ``+`` when distforest/ has uncommitted changes."""
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run([*git, "status", "--porcelain", "distforest"], capture_output=True,
                               text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (+ uncommitted changes)" if dirty else "")


def package_versions() -> dict[str, str]:
    """Versions of distforest and the libraries it measures, and the commit."""
    from importlib.metadata import PackageNotFoundError, version

    names = ["distforest", "numpy", "scikit-learn", "numba", "zarr", "numcodecs", "dask",
             "distributed", "xarray", "pandas", "pyarrow", "psutil"]  # fmt: skip
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    out["distforest git"] = commit()
    return out


# -- one result format ---------------------------------------------------------------------


def the_command() -> str:
    """The exact command that is running (as ``python -m benchmarks`` or the script)."""
    return os.environ.get("DISTFOREST_BENCH_COMMAND") or shlex.join([sys.executable, *sys.argv])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A Markdown table of ``rows`` (the keys of the first row, or ``columns``)."""
    if not rows:
        return "(no rows)\n"
    cols = list(columns) if columns else list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def header(title: str, command: str | None = None) -> dict[str, Any]:
    """The facts every result starts with: date, machine, command, commit, versions, load."""
    return {
        "title": title,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(),
        "command": command or the_command(),
        "commit": commit(),
        "versions": package_versions(),
        "load": machine_load(),
    }


def header_markdown(head: dict[str, Any]) -> str:
    """The header of :func:`header` as Markdown lines."""
    load = head["load"]
    return "\n".join([
        f"# {head['title']}",
        "",
        f"- Date: {head['date']}",
        machine_line(head["machine"]),
        f"- Command: `{head['command']}`",
        f"- Commit: {head['commit']}",
        f"- Load when written: {load['load_1m']:.2f} {load['load_5m']:.2f} "
        f"{load['load_15m']:.2f} (1, 5, 15 min) on {load['cpus']} CPUs",
        "",
    ])  # fmt: skip


def write_result(
    name: str,
    rows: Sequence[dict[str, Any]],
    *,
    title: str | None = None,
    columns: Sequence[str] | None = None,
    notes: str = "",
    data: Any = None,
    command: str | None = None,
    results: Path | None = None,
) -> tuple[Path, Path]:
    """Write ``NAME.json`` and ``NAME.md`` (header, table of ``rows``, ``notes``).

    ``data`` is anything else worth keeping (JSON only).  Returns the two paths.
    """
    folder = Path(results or os.environ.get(RESULTS_ENV) or RESULTS)
    folder.mkdir(parents=True, exist_ok=True)
    head = header(title or name, command)
    js, md = folder / f"{name}.json", folder / f"{name}.md"
    js.write_text(json.dumps({**head, "rows": list(rows), "data": data}, indent=1, default=str)
                  + "\n")  # fmt: skip
    text = header_markdown(head) + "\n" + markdown_table(rows, columns)
    md.write_text(text + ("\n" + notes.strip() + "\n" if notes.strip() else ""))
    return js, md


def write_markdown(path: Path | str, body: str, *, title: str | None = None,
                   command: str | None = None, data: Any = None) -> Path:  # fmt: skip
    """Write a script's own Markdown report with the common header, and its JSON twin.

    For reports whose tables a script lays out itself: the header (date,
    machine, command, commit, load) goes under the body's ``# `` title line
    (or ``title``); with ``data``, ``PATH.json`` keeps the header and ``data``.
    A bare file name is taken in :data:`RESULTS`.
    """
    path = Path(path)
    if not path.is_absolute() and path.parent == Path("."):
        path = Path(os.environ.get(RESULTS_ENV) or RESULTS) / path
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = body.strip().splitlines()
    if title is None and lines and lines[0].startswith("# "):
        title, lines = lines[0][2:], lines[1:]
    head = header(title or path.stem, command)
    path.write_text(header_markdown(head) + "\n".join(lines).strip("\n") + "\n")
    if data is not None:
        path.with_suffix(".json").write_text(
            json.dumps({**head, "data": data}, indent=1, default=str) + "\n"
        )
    return path


# -- arguments -----------------------------------------------------------------------------


def parser(doc: str | None, **kwargs: Any) -> argparse.ArgumentParser:
    """Every benchmark's argument parser: described by the first line of the script's docstring.

    Results go to :data:`RESULTS`; ``python -m benchmarks --results DIR NAME``
    (or ``$DISTFOREST_BENCH_RESULTS``) sends them elsewhere, child processes
    included.
    """
    text = (doc or "").strip()
    kwargs.setdefault("description", text.splitlines()[0] if text else None)
    kwargs.setdefault("epilog", "Run as: python -m benchmarks NAME [options]; results in "
                      f"${RESULTS_ENV} or benchmarks/results.")  # fmt: skip
    return argparse.ArgumentParser(**kwargs)
