"""The LocalCluster distforest starts: loopback, TLS made for the run, no HTTP when off.

Also the two checks that keep a local cluster from being started where it
cannot work:

- :func:`check_main_guard`: a script run without an
  ``if __name__ == "__main__":`` guard would have every spawned worker
  re-run the script (and start a cluster of its own); this is found before
  any process starts, from the calling line, and reported in one line;
- :func:`in_child_process`: inside a joblib worker or any other child
  process distforest does not start clusters (the caller runs in-process).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any

from distforest.errors import ClusterError, ParameterError

__all__ = [
    "GUARD_FIX",
    "check_main_guard",
    "in_child_process",
    "in_dask_task",
    "local_kwargs",
    "start_local",
]

logger = logging.getLogger(__name__)

#: Worker preload of every local cluster: imports begun as a worker starts.
PRELOAD = "distforest.parallel.preload"

#: distforest's own keys of kind ``local`` (the others are LocalCluster's).
OWN_KEYS = ("dashboard", "silence_logs")

GUARD_FIX = (
    'put the code that starts distforest under `if __name__ == "__main__":` '
    "(local workers are started with spawn and re-import the script)"
)


def in_child_process() -> bool:
    """Whether this is a child process (a joblib/loky or multiprocessing worker)."""
    return multiprocessing.parent_process() is not None


def in_dask_task() -> bool:
    """Whether this code runs inside a task of a Dask worker.

    Such as a fit sent by ``joblib.parallel_backend("dask")`` (``GridSearchCV``
    under Dask), or any ``client.submit`` of user code that calls distforest.
    """
    if "distributed" not in sys.modules:  # no worker can run here: skip the import
        return False
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


@functools.cache
def _guarded_lines(path: str) -> tuple[tuple[int, int], ...]:
    """Line ranges of the ``if __name__ == "__main__":`` blocks of a script."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return ()
    ranges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            ranges.append((node.lineno, node.end_lineno or node.lineno))
    return tuple(ranges)


def _main_module_frame() -> FrameType | None:
    frame = sys._getframe(1)
    found = None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") in (
            "__main__",
            "__mp_main__",
        ):
            found = frame
        frame = frame.f_back  # type: ignore[assignment]
    return found


def check_main_guard() -> None:
    """Refuse to start local workers from unguarded top-level code of a script.

    Raises
    ------
    ClusterError
        In one line with the fix, when the call comes from top-level code of
        the ``__main__`` script outside an ``if __name__ == "__main__":``
        block, or from a spawned process re-importing that script.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ClusterError(
            f"a spawned process re-ran the script that starts distforest: {GUARD_FIX}"
        )
    frame = _main_module_frame()
    path = frame.f_code.co_filename if frame is not None else ""
    if frame is None or not path.endswith(".py"):
        return  # notebooks, the interactive prompt, python -c
    line = frame.f_lineno
    if not any(start <= line <= end for start, end in _guarded_lines(path)):
        raise ClusterError(
            f"{path}, line {line} starts a local Dask cluster from top-level code: {GUARD_FIX}."
        )


def local_kwargs(opts: Mapping[str, Any]) -> dict[str, Any]:
    """LocalCluster keywords: the file's, over distforest's safe defaults."""
    import logging as _logging

    dashboard = opts["dashboard"]
    kwargs: dict[str, Any] = {
        "processes": True,
        "host": "127.0.0.1",
        # TLS with credentials made for this run: another local user cannot connect
        # to the scheduler or the workers (and so cannot run code as this user).
        "security": True,
        "dashboard_address": dashboard if isinstance(dashboard, str) else "127.0.0.1:0",
        "silence_logs": (
            getattr(_logging, opts["silence_logs"]) if opts["silence_logs"] else False
        ),
    }
    kwargs.update({k: v for k, v in opts.items() if k not in OWN_KEYS})
    # workers begin the imports every task needs as they start (see parallel/preload.py)
    user_preload = kwargs.get("preload") or []
    kwargs["preload"] = [
        *([user_preload] if isinstance(user_preload, str) else user_preload),
        PRELOAD,
    ]
    kwargs["scheduler_kwargs"] = {
        **kwargs.get("scheduler_kwargs", {}),
        "dashboard": bool(dashboard),
    }
    if not dashboard and "worker_class" not in kwargs and kwargs.get("processes", True):
        from distforest.parallel.preload import NannyWithoutHTTP

        # workers would otherwise serve HTTP (health, metrics) to any local user
        kwargs["worker_class"] = NannyWithoutHTTP
    if kwargs.get("memory_limit") == "auto":
        del kwargs["memory_limit"]  # LocalCluster then shares memory between the workers
    return kwargs


@functools.cache
def _classes() -> tuple[Any, Any]:
    """A LocalCluster whose scheduler starts no HTTP server when the dashboard is off."""
    from distributed import LocalCluster, Scheduler

    class SchedulerWithoutHTTP(Scheduler):
        """dask's Scheduler, minus its HTTP server (dashboard and /info pages)."""

        def start_http_server(self, *args: Any, **kwargs: Any) -> None:
            return None

    class DistforestLocalCluster(LocalCluster):
        """LocalCluster that binds no HTTP port for a scheduler without dashboard."""

        async def _start(self) -> None:
            if not self.scheduler_spec["options"].get("dashboard", True):
                self.scheduler_spec = {**self.scheduler_spec, "cls": SchedulerWithoutHTTP}
            await super()._start()

    return DistforestLocalCluster, SchedulerWithoutHTTP


#: Local worker processes per CPU beyond which more only slow the work down (each is
#: a Python process with its own copy of the libraries and of the data it is sent).
MAX_WORKERS_PER_CPU = 4


def check_local_size(opts: Mapping[str, Any]) -> None:
    """Refuse, before starting anything, more local workers than the machine can use."""
    n = opts.get("n_workers")
    cpus = os.cpu_count() or 1
    limit = max(MAX_WORKERS_PER_CPU * cpus, 8)
    if isinstance(n, int) and n > limit:
        raise ParameterError(
            f"{n:,} local workers on a machine with {cpus} CPU(s): at most {limit} "
            f"({MAX_WORKERS_PER_CPU} per CPU) can do any good; give fewer workers, or run on "
            "a cluster (--cluster FILE.yaml) for more"
        )


def start_local(opts: Mapping[str, Any], attempts: int = 2) -> Any:
    """Start the LocalCluster of a ``local`` config, once more if a worker died starting.

    A worker process killed during start-up (the OOM killer, an operator)
    makes the whole start fail; a nightly run should not fail for that.
    """
    check_main_guard()
    check_local_size(opts)
    cls, _ = _classes()
    kwargs = local_kwargs(opts)
    for attempt in range(1, attempts + 1):
        try:
            with _sigint_ignored():
                return cls(**kwargs)
        except Exception as exc:
            if "bootstrapping phase" in _chain_text(exc):
                raise ClusterError(f"local workers failed to start: {GUARD_FIX}.") from None
            if attempt == attempts:
                raise
            logger.warning("the local cluster failed to start (%s); trying again", exc)
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while a LocalCluster starts its workers, then restore the handler.

    The worker processes started meanwhile keep ignoring it (an ignored signal
    stays ignored across ``fork`` and ``exec``, and Python then installs no
    handler of its own).  Ctrl-C in a terminal signals the whole process group:
    this way it interrupts distforest, which closes the cluster and exits 130
    with one line, instead of printing every worker's traceback.  A Ctrl-C
    during the few seconds of start-up is lost (press it again).  Workers
    started later to replace a dead one do not ignore it.  Only in the main
    thread (the only one that may set handlers).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _chain_text(exc: BaseException | None) -> str:
    parts = []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return " ".join(parts)
