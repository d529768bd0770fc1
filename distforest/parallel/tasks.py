"""Plan work up front and run it as Dask futures.

Everything random is planned in the driver before any task starts (one seed
per tree, from ``random_state``), so results do not depend on how many
workers there are or in which order tasks finish.
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from distributed import Client, Future, wait

from distforest.errors import ParameterError, StalledError

logger = logging.getLogger("distforest")

#: How often :func:`scatter` sends data again when a worker dies during it.
SCATTER_ATTEMPTS = 3

#: ``progress(done, total)`` is called after each finished task.
ProgressCallback = Callable[[int, int], None]


def plan_seeds(random_state: int | None, n: int) -> tuple[int, np.ndarray]:
    """One independent seed per tree, derived from ``random_state``.

    Parameters
    ----------
    random_state : int or None
        ``None`` draws fresh entropy; it is returned so the run can be
        repeated exactly.
    n : int
        Number of seeds.

    Returns
    -------
    entropy : int
        The root entropy actually used.
    seeds : ndarray of uint64, shape (n,)
    """
    root = np.random.SeedSequence(random_state)
    entropy = int(root.entropy)  # type: ignore[arg-type]  # an int: no pool given
    seeds = np.array(
        [child.generate_state(1, dtype=np.uint64)[0] for child in root.spawn(n)],
        dtype=np.uint64,
    )
    return entropy, seeds


def plan_batches(n_items: int, batch_size: int) -> list[slice]:
    """Split ``range(n_items)`` into consecutive slices of ``batch_size``."""
    return [slice(s, min(s + batch_size, n_items)) for s in range(0, n_items, batch_size)]


def default_batch_size(n_items: int, n_threads: int, per_thread: int = 4) -> int:
    """A batch size giving about ``per_thread`` batches for every worker thread."""
    return max(1, math.ceil(n_items / max(1, n_threads * per_thread)))


def total_threads(client: Client) -> int:
    """Number of worker threads in the cluster (at least 1)."""
    return max(1, sum(client.nthreads().values()))


def scatter(client: Client, value: Any) -> Future:
    """Send ``value`` to every worker once; tasks then take the future.

    Big arrays never become part of a task graph this way.  If a worker
    dies during the transfer, the scatter is tried again (up to
    :data:`SCATTER_ATTEMPTS` times).
    """
    from distributed.comm.core import CommClosedError

    for attempt in range(1, SCATTER_ATTEMPTS + 1):
        try:
            return client.scatter(value, broadcast=True, hash=False, direct=_direct(client))
        except (CommClosedError, OSError) as exc:
            # A worker died while receiving its copy; the others may have it,
            # but the call failed as a whole: send it again to who is alive.
            if attempt == SCATTER_ATTEMPTS:
                raise
            logger.warning("a worker was lost while data was sent to it (%s); sending again", exc)
            client.wait_for_workers(1, timeout=60)
    raise AssertionError("unreachable")  # pragma: no cover


def _direct(client: Client) -> bool | None:
    """Send scattered data straight to the workers when they are on this machine.

    Otherwise it goes through the scheduler, which for a LocalCluster lives
    in this very process: every big array would pass through (and swell)
    the driver's memory once more.  Remote clusters keep distributed's
    default (workers may not be reachable from the client).
    """
    address = str(getattr(client.scheduler, "address", ""))
    return True if ("127.0.0.1" in address or "inproc" in address) else None


def release_memory() -> None:
    """Give freed heap memory back to the OS (glibc), after big arrays are dropped."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def run_tasks(
    client: Client,
    func: Callable[..., Any],
    items: Sequence[Iterable[Any]],
    *,
    name: str,
    progress: ProgressCallback | None = None,
    retries: int = 2,
) -> Iterator[tuple[int, Any]]:
    """Submit ``func(*item)`` for every item and yield results as they finish.

    Parameters
    ----------
    client : distributed.Client
    func : callable
        A deterministic function, so that a retried task gives the same answer.
    items : sequence of argument tuples
        Futures among the arguments are resolved on the worker.
    name : str
        Prefix of the task keys (shown on the dashboard).
    progress : callable, optional
        ``progress(done, total)`` after every finished task.
    retries : int
        How often a task whose worker died is run again.

    Yields
    ------
    index, result
        The position of the item in ``items`` and the task's result, in
        completion order.
    """
    token = uuid.uuid4().hex[:8]
    futures = [
        client.submit(func, *args, key=f"{name}-{token}-{i}", retries=retries, pure=False)
        for i, args in enumerate(items)
    ]
    index = {f.key: i for i, f in enumerate(futures)}
    total = len(futures)
    if progress is not None:
        progress(0, total)
    watch = _Watchdog(client, name)
    try:
        done = 0
        for future in watch.completed(futures):
            result = future.result()
            future.release()
            done += 1
            if progress is not None:
                progress(done, total)
            yield index[future.key], result
    finally:
        for f in futures:
            f.cancel()


def _seconds(env: str, default: float) -> float:
    value = os.environ.get(env)
    try:
        return float(value) if value else default
    except ValueError:
        raise ParameterError(f"{env} must be a number of seconds, got {value!r}") from None


class _Watchdog:
    """Yields finished futures; gives up when the run stalls instead of waiting forever.

    No task finished for ``DISTFOREST_STALL_TIMEOUT`` seconds (default 3600),
    or no worker at all for ``DISTFOREST_NO_WORKER_TIMEOUT`` seconds (default
    120: nannies that stopped replacing killed workers): :class:`StalledError`.
    """

    POLL = 1.0

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self.stall = _seconds("DISTFOREST_STALL_TIMEOUT", 3600.0)
        self.no_workers = _seconds("DISTFOREST_NO_WORKER_TIMEOUT", 120.0)

    def completed(self, futures: Sequence[Future]) -> Iterator[Future]:
        pending = set(futures)
        last_progress = time.monotonic()
        workerless_since: float | None = None
        while pending:
            try:
                finished, _ = wait(list(pending), timeout=self.POLL, return_when="FIRST_COMPLETED")
            except TimeoutError:
                finished = set()
            now = time.monotonic()
            if finished:
                last_progress, workerless_since = now, None
                for future in sorted(finished, key=lambda f: str(f.key)):
                    pending.discard(future)
                    yield future
                continue
            if not self.client.scheduler_info().get("workers"):
                workerless_since = workerless_since or now
                if now - workerless_since > self.no_workers:
                    raise StalledError(
                        f"{self.name}: no worker left for {now - workerless_since:.0f} s with "
                        f"{len(pending)} task(s) waiting (workers keep dying?); the run stops "
                        "here and can be resumed by running it again (exit 75: try later)"
                    )
            else:
                workerless_since = None
            if now - last_progress > self.stall:
                raise StalledError(
                    f"{self.name}: no task finished for {now - last_progress:.0f} s "
                    f"(DISTFOREST_STALL_TIMEOUT={self.stall:g}) with {len(pending)} task(s) "
                    "waiting; the run stops here and can be resumed by running it again"
                )


def plan_tiles(n: int, tile: int, *, symmetric: bool) -> list[tuple[slice, slice]]:
    """Row-block pairs covering an ``n x n`` matrix in ``tile x tile`` chunks.

    With ``symmetric=True`` only the upper triangle (``i <= j``) is listed;
    each task then writes its tile and the mirrored one.
    """
    blocks = plan_batches(n, tile)
    return [
        (bi, bj)
        for a, bi in enumerate(blocks)
        for b, bj in enumerate(blocks)
        if not symmetric or a <= b
    ]
