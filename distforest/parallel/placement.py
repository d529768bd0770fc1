"""Where work runs: one decision for every command and every estimator.

The rule, :func:`runs_in_process`:

- a named cluster is always used: a ``client``, a ``scheduler`` address or a
  cluster file (from ``distforest.execution(...)``, ``set_execution(...)`` or
  a command's ``--scheduler``/``--cluster``), a size of the default
  LocalCluster (``--workers``, ``--threads``, ``--memory-limit``), an explicit
  ``client="synchronous"``, or a default ``distributed`` client (one made in a
  notebook);
- otherwise an input of at most :func:`in_process_cells` cells runs in this
  process, on one thread per core: starting a LocalCluster (seconds) would
  take longer than the work (the ``distforest.in-process-cells`` setting);
- a larger input starts a LocalCluster for the call (in a child process such
  as a joblib worker, the tasks run in that process instead: see
  :func:`distforest.parallel.cluster.use_client`).

The tasks are the same wherever they run, and so are the results.

*Cells* count what a call reads: rows x features of a table, plus n x m of a
matrix given as input (similarities, distances).  A fitted model's later
calls (tiles, products) count the cells of its training input.

Estimators go through :func:`runner` (via ``DaskEstimator._runner``), the
module functions ``pairwise`` and ``top_k_neighbors`` too; commands through
:func:`place`, which also starts or reaches the cluster and watches it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from distforest.parallel import tasks
from distforest.parallel.execution import (
    SYNCHRONOUS,
    Execution,
    Progress,
    Runner,
    current_execution,
    in_process,
    use_execution,
)

logger = logging.getLogger("distforest")


def in_process_cells() -> int:
    """The threshold in force: the ``distforest.in-process-cells`` setting
    (:mod:`distforest.settings`, default 2,000,000 in ``distforest.yaml``): inputs of at
    most this many cells run in this process when no cluster is named, because starting
    a LocalCluster (seconds) would take longer than the work."""
    from distforest import settings

    return int(settings.get("in-process-cells"))


def in_process_threads() -> int:
    """Threads of an in-process run: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cluster_named(exe: Execution | None = None, options: Mapping[str, Any] | None = None) -> bool:
    """Whether the caller said where to run.

    Parameters
    ----------
    exe : Execution, optional
        For a Python call (default: the current execution): a ``client`` (or
        ``"synchronous"``), ``scheduler`` or ``cluster`` names one; so does a
        default ``distributed`` client.
    options : mapping, optional
        For a command: its cluster options (keywords of
        :func:`distforest.parallel.cluster.connect`); any value that is not
        None names a cluster.  A command is its own process: its options are
        the whole story, and ``exe`` is not consulted.
    """
    if options is not None:
        return any(v is not None for v in options.values())
    exe = current_execution() if exe is None else exe
    if exe.client is not None or exe.scheduler is not None or exe.cluster is not None:
        return True
    import sys

    if "distributed" not in sys.modules:  # no client can exist: skip importing it (0.5 s)
        return False
    from distributed import get_client

    try:
        get_client()
    except ValueError:
        return False
    return True


def runs_in_process(
    cells: int, exe: Execution | None = None, options: Mapping[str, Any] | None = None
) -> bool:
    """The one decision: does a call on ``cells`` input cells run in this process?

    Yes when no cluster is named (:func:`cluster_named` of ``exe`` or, for a
    command, of its ``options``) and ``cells`` is at most :func:`in_process_cells`.
    """
    return not cluster_named(exe, options) and cells <= in_process_cells()


def cells_of(*inputs: Any) -> int:
    """Cells of arrays, tables or sequences: the product of each shape, summed (None: 0)."""
    total = 0
    for x in inputs:
        if x is None:
            continue
        shape = getattr(x, "shape", None)
        if shape is None:  # a Table, or a plain sequence of objects
            inner = getattr(x, "X", None)
            shape = getattr(inner, "shape", None) or (len(x),)
        size = 1
        for dim in shape:
            size *= int(dim)
        total += size
    return total


@contextlib.contextmanager
def runner(cells: int, exe: Execution | None = None) -> Iterator[Runner]:
    """The :class:`Runner` of one call on ``cells`` input cells, placed by :func:`runs_in_process`.

    In process: on :func:`in_process_threads` threads, and nested calls inside
    the block run here too.  Else: on the named cluster, or on a LocalCluster
    started for the block (:meth:`Execution.runner`).
    """
    exe = current_execution() if exe is None else exe
    if runs_in_process(cells, exe):
        with in_process(exe, in_process_threads()) as here:
            yield here
        return
    with exe.runner() as there:
        yield there


@dataclass(frozen=True)
class Placement:
    """Where a command's block runs (from :func:`place`).

    Attributes
    ----------
    client : distributed.Client or None
        None: in this process.
    monitor : RunMonitor or None
        Watches the cluster's tasks and memory (``place(watch=True)`` on a cluster).
    threads : int
        Threads of this process (in process) or of the cluster's workers.
    """

    client: Any
    monitor: Any
    threads: int

    @property
    def in_process(self) -> bool:
        """Whether the block runs in this process."""
        return self.client is None


@contextlib.contextmanager
def place(
    cells: int,
    options: Mapping[str, Any],
    *,
    progress: Progress | None = None,
    watch: bool = False,
) -> Iterator[Placement]:
    """Run a command's block where :func:`runs_in_process` says, for ``cells`` input cells.

    Parameters
    ----------
    cells : int
        Input cells of the command (see :func:`cells_of`).
    options : mapping
        The command's cluster options, as keywords of
        :func:`distforest.parallel.cluster.connect` (``scheduler``,
        ``cluster``, ``n_workers``, ...; None: not given).
    progress : callable, optional
        ``progress(stage, done, total)`` of every estimator call in the block.
    watch : bool, default False
        On a cluster: watch it with a :class:`~distforest.parallel.monitor.RunMonitor`
        (for a run's report) and forward the workers' ``distforest`` log lines.

    Yields
    ------
    Placement
        Inside the block the current execution is this placement: estimators
        and functions called without their own execution run there.
    """
    if runs_in_process(cells, options=options):
        threads = in_process_threads()
        logger.info("small input (%d cells): running in this process on %d threads", cells,
                    threads)  # fmt: skip
        with in_process(Execution(progress=progress), threads):
            yield Placement(None, None, threads)
        return
    from distforest.parallel import cluster  # distributed: only for a cluster

    with contextlib.ExitStack() as stack:
        client = stack.enter_context(cluster.connect(**options))
        monitor = None
        if watch:
            from distforest.parallel.monitor import RunMonitor

            monitor = stack.enter_context(RunMonitor(client))
            client.forward_logging("distforest")
        threads = sum(client.nthreads().values())
        logger.info("cluster: %d workers, %d threads", len(client.nthreads()), threads)
        stack.enter_context(use_execution(Execution(client, progress=progress)))
        stack.enter_context(tasks.watch_workers(client))  # dask's own computations too
        yield Placement(client, monitor, threads)


__all__ = [
    "SYNCHRONOUS",
    "Placement",
    "cells_of",
    "cluster_named",
    "in_process_cells",
    "in_process_threads",
    "place",
    "runner",
    "runs_in_process",
]
