"""Helpers to run the CLI in its own process and kill parts of it, as an operator or the
OOM killer would: used by ``tests/test_kill_loop.py`` and ``benchmarks/bench_faults.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
BC = ROOT / "distforest" / "data" / "breast_cancer.csv"


def write_pipeline(directory: Path, *, trees: int = 200, tile: int = 16, extra: str = "") -> Path:
    """A proximity pipeline on the bundled breast-cancer data, output in ``directory/out``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "p.yaml"
    path.write_text(
        f"name: killed\ninput: {{path: {BC}, target: Class, drop: [Id]}}\n"
        f"forest: {{n_estimators: {trees}, random_state: 5, tile_size: {tile}}}\n"
        f"{extra}output: {{dir: {directory / 'out'}, store: run.zarr}}\n"
    )
    return path


def start(args: list[str], logs: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """``python -m distforest ARGS`` in a new session, this worktree first on the path.

    Its output goes to ``logs.stdout`` and ``logs.stderr`` (files: a pipe nobody
    reads while the loop runs could fill up and stall the run).
    """
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    # workers started as a user's run starts them (spawn, distributed's default), not forked
    # from a server as tests/conftest.py has the test suite's clusters do: the loop finds
    # them by spawn's command line
    full.pop("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD", None)
    with open(f"{logs}.stdout", "w") as out, open(f"{logs}.stderr", "w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "distforest", *args], env=full, cwd=ROOT,
            stdout=out, stderr=err, start_new_session=True,
        )  # fmt: skip


def finish(proc: subprocess.Popen, logs: Path, timeout: float) -> tuple[int | None, str, str]:
    """Wait for ``proc`` (killed with its group after ``timeout`` s: code None); its output."""
    try:
        code: int | None = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    return code, Path(f"{logs}.stdout").read_text(), Path(f"{logs}.stderr").read_text()


def stages(store: Path) -> dict[str, object]:
    """The stages a run recorded in its store so far ({} before the store exists)."""
    try:
        meta = json.loads((store / "zarr.json").read_text())
    except (OSError, ValueError):
        return {}
    from distforest.io.attrs import decode_attrs

    return dict(decode_attrs(meta.get("attributes", {})).get("stages") or {})


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen, timeout: float) -> bool:
    """Poll ``condition`` every 0.05 s while ``proc`` runs; False if it never held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if condition():
            return True
        time.sleep(0.05)
    return False


def workers(pid: int) -> list[psutil.Process]:
    """The Dask worker processes below ``pid`` (started by spawn; not its resource tracker)."""
    found = []
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    for child in children:
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # gone, or a zombie
            pass
    return found


@dataclass
class KillLoop:
    """What a kill loop did: how many processes it killed, and how the run ended."""

    kills: int = 0
    seconds: float = 0.0
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    killed_pids: list[int] = field(default_factory=list)

    @property
    def last_line(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def kill_loop(proc: subprocess.Popen, logs: Path, every: float, timeout: float) -> KillLoop:
    """SIGKILL every worker process of ``proc`` every ``every`` seconds until ``proc`` ends.

    The nannies live in the CLI's own process and start new workers; the loop
    kills those too, as long as the run goes on (at most ``timeout`` seconds,
    then the run itself is killed and ``returncode`` is None).
    """
    out = KillLoop()
    start_at = time.monotonic()
    while proc.poll() is None and time.monotonic() - start_at < timeout:
        for child in workers(proc.pid):
            try:
                child.send_signal(signal.SIGKILL)
                out.kills += 1
                out.killed_pids.append(child.pid)
            except psutil.NoSuchProcess:
                pass
        time.sleep(every)
    out.returncode, out.stdout, out.stderr = finish(proc, logs, 0.1)
    out.seconds = time.monotonic() - start_at
    return out
