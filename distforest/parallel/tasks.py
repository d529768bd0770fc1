"""Plan work up front and run it as Dask futures.

Everything random is planned in the driver before any task starts (one seed
per tree, from ``random_state``), so results do not depend on how many
workers there are or in which order tasks finish.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

import numpy as np

from distforest import settings
from distforest.errors import StalledError

if TYPE_CHECKING:  # imported where a client is used: in-process runs do without it
    from distributed import Client, Future

logger = logging.getLogger("distforest")

#: How often :func:`scatter` sends data again when a worker dies during it.
SCATTER_ATTEMPTS = 3

#: How often tasks cancelled with their lost data are sent again (with the data) by
#: :func:`run_tasks` before the run stops.
RESEND_ATTEMPTS = 3

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


def plan_shrinking_batches(n_items: int, n_threads: int, largest: int) -> list[slice]:
    """Consecutive slices of ``range(n_items)`` that shrink towards the end.

    Each batch takes the remaining items divided by twice the number of
    threads (at most ``largest``, at least one), so the first tasks are big
    (little per-task overhead) and the last ones small: the workers run out
    of work at nearly the same moment instead of one thread finishing a whole
    batch while the others wait.  Dask hands out tasks in the order they were
    submitted, so the big ones run first.

    Parameters
    ----------
    n_items : int
    n_threads : int
        Worker threads that will run the batches.
    largest : int
        Upper bound of a batch (e.g. :func:`default_batch_size`).

    Returns
    -------
    list of slice
    """
    batches, start = [], 0
    while start < n_items:
        size = min(largest, max(1, math.ceil((n_items - start) / (2 * max(1, n_threads)))))
        batches.append(slice(start, start + size))
        start += size
    return batches


def plan_tree_batches(
    n_trees: int, n_threads: int, batch_size: int | None, most: int | None = None
) -> list[slice]:
    """The batches of a forest's fit: ``batch_size`` trees each, or shrinking ones if None,
    of at most ``most`` trees (:func:`most_trees_a_task`) then.

    Which trees share a task never changes a tree (each grows from its own
    seed), only how evenly the workers are kept busy and how much a task holds.
    """
    if batch_size is not None:
        return plan_batches(n_trees, batch_size)
    largest = default_batch_size(n_trees, n_threads)
    if most is not None:
        largest = max(1, min(largest, most))
    return plan_shrinking_batches(n_trees, n_threads, largest)


def most_trees_a_task(n_rows: int, bytes_per_row_tree: float) -> int:
    """The most trees a fit task grows on ``n_rows`` rows so that what it holds per row and
    tree (``bytes_per_row_tree``) stays within the ``distforest.fit-task-bytes`` setting
    (at least one tree)."""
    budget = float(settings.get("fit-task-bytes"))
    return max(1, int(budget // max(1.0, n_rows * float(bytes_per_row_tree))))


def total_threads(client: Client) -> int:
    """Number of worker threads in the cluster (at least 1)."""
    return max(1, sum(client.nthreads().values()))


def scatter(client: Client, value: Any) -> Future:
    """Send ``value`` to every worker once; tasks then take the future.

    Big arrays never become part of a task graph this way.  If a worker
    dies during the transfer, the scatter is tried again (up to
    :data:`SCATTER_ATTEMPTS` times).  With no worker at all for
    the ``distforest.no-worker-timeout`` setting's seconds: :class:`StalledError` (exit 75).
    """
    from distributed.comm.core import CommClosedError

    patience = float(settings.get("no-worker-timeout"))
    stalled = StalledError(
        f"no worker left to send the data to for {patience:g} s (workers keep dying?); the "
        "run stops here and can be resumed by running it again (exit 75: try later)"
    )
    nbytes = int(getattr(value, "nbytes", 0) or 0)
    deadline = patience + nbytes / 10e6  # 10 MB/s per copy: far slower than any real link
    for attempt in range(1, SCATTER_ATTEMPTS + 1):
        try:
            # An overall deadline too: a worker killed during the broadcast was seen to
            # make the scheduler's replication retry the dead worker for ever.
            return client.sync(
                client._scatter, value, broadcast=True, hash=False, direct=_direct(client),
                timeout=patience, callback_timeout=deadline,
            )  # fmt: skip
        except TimeoutError:  # "No valid workers found" (a TimeoutError is an OSError too)
            raise stalled from None
        except (CommClosedError, OSError) as exc:
            # A worker died while receiving its copy; the others may have it,
            # but the call failed as a whole: send it again to who is alive.
            if attempt == SCATTER_ATTEMPTS:
                raise
            logger.warning("a worker was lost while data was sent to it (%s); sending again", exc)
            try:
                client.wait_for_workers(1, timeout=patience)
            except TimeoutError:
                raise stalled from None
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
    """Give freed heap memory back to the OS (glibc), after big arrays are dropped.

    No ``gc.collect()`` first: a dropped forest holds no reference cycle (a full
    collection after each of rfImpute's forests found 0-7 objects), and the collection
    walks every object of the process: 0.1 s in a driver, 0.2-0.3 s in a test process.
    """
    import ctypes

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
    resend: Callable[[Future], Future] | None = None,
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
    resend : callable, optional
        ``resend(future) -> future``: sends again data shared with the workers
        (an argument future) whose every holder died.  dask then cancels the
        tasks that need it; with ``resend`` they are submitted again with the
        new copy (up to :data:`RESEND_ATTEMPTS` times), without it the run
        stops with :class:`StalledError`.

    Yields
    ------
    index, result
        The position of the item in ``items`` and the task's result, in
        completion order.
    """
    from distforest.parallel.local_cluster import in_dask_task

    if in_dask_task():  # a client given inside a Dask task: free the thread while waiting
        from distributed import rejoin, secede

        secede()
        try:
            yield from _run_tasks(client, func, items, name, progress, retries, resend)
        finally:
            rejoin()
        return
    yield from _run_tasks(client, func, items, name, progress, retries, resend)


def _run_tasks(
    client: Client,
    func: Callable[..., Any],
    items: Sequence[Iterable[Any]],
    name: str,
    progress: ProgressCallback | None,
    retries: int,
    resend: Callable[[Future], Future] | None,
) -> Iterator[tuple[int, Any]]:
    """:func:`run_tasks` itself (the caller has seceded if it runs in a Dask task)."""
    token = uuid.uuid4().hex[:8]
    todo = {i: tuple(args) for i, args in enumerate(items)}
    total, done, round_ = len(todo), 0, 0
    if progress is not None:
        progress(0, total)
    from distributed import Future

    watch = _Watchdog(client, name)
    futures: dict[str, Future] = {}
    try:
        while todo:
            futures = {
                f"{name}-{token}-{round_}-{i}": client.submit(
                    func, *args, key=f"{name}-{token}-{round_}-{i}", retries=retries, pure=False
                )
                for i, args in todo.items()
            }
            index = {key: int(key.rsplit("-", 1)[1]) for key in futures}
            try:
                for future in watch.completed(list(futures.values())):
                    result = _result(future, name)
                    future.release()
                    i = index[str(future.key)]
                    del todo[i]
                    done += 1
                    if progress is not None:
                        progress(done, total)
                    yield i, result
            except CancelledError:  # data they needed died with all its workers
                if resend is None or round_ == RESEND_ATTEMPTS:
                    raise watch.lost(len(todo)) from None
                round_ += 1
                logger.warning(
                    "%s: the workers holding data sent to %d task(s) died; sending it again "
                    "(%d of %d)", name, len(todo), round_, RESEND_ATTEMPTS,
                )  # fmt: skip
                for f in futures.values():
                    f.cancel()
                todo = {
                    i: tuple(resend(a) if isinstance(a, Future) else a for a in args)
                    for i, args in todo.items()
                }
    finally:
        for f in futures.values():
            f.cancel()


def _result(future: Future, name: str) -> Any:
    """The result of a finished task; workers that kept dying under it: StalledError."""
    from distributed import KilledWorker

    try:
        return future.result()
    except KilledWorker as exc:  # the task's workers died again and again
        raise StalledError(
            f"{name}: the workers running one task died more than "
            f"{_allowed_failures()} times ({exc}); the machine may be short of memory, "
            "or workers are being killed. The run stops here and can be resumed by running it "
            "again (exit 75: try later, perhaps with fewer threads or more memory per worker)"
        ) from None


def _allowed_failures() -> int:
    """How many worker deaths a task survives before dask gives up on it."""
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures", 3))


class _Watchdog:
    """Yields finished futures; gives up when the run stalls instead of waiting forever.

    No task finished for ``distforest.stall-timeout`` seconds (default 3600), or
    no worker at all for ``distforest.no-worker-timeout`` seconds (default 120:
    nannies that stopped replacing killed workers; see :mod:`distforest.settings`):
    :class:`StalledError`.
    """

    POLL = 1.0  # seconds without a finished task between checks of the workers
    TICK = 0.1  # seconds at most between looks for finished tasks (a finished task wakes it)

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self.stall = float(settings.get("stall-timeout"))
        self.no_workers = float(settings.get("no-worker-timeout"))

    def lost(self, waiting: int) -> StalledError:
        """The error when tasks were cancelled because the data sent to them was lost."""
        return StalledError(
            f"{self.name}: the workers holding the data sent to the tasks all died (killed, or "
            f"out of memory?), so dask cancelled {waiting} task(s); the run stops here and can "
            "be resumed by running it again (exit 75: try later, perhaps with more memory per "
            "worker)"
        )

    def completed(self, futures: Sequence[Future]) -> Iterator[Future]:
        """Yield ``futures`` as they finish (a batch at a time, in key order).

        One :class:`distributed.as_completed` follows every future; this loop
        only polls it.  (Calling ``distributed.wait(pending,
        return_when="FIRST_COMPLETED")`` once per finished task instead costs
        a waiter per pending future per call: quadratic in the number of
        tasks, gigabytes of driver memory for thousands of tiles.)
        """
        from distributed import as_completed

        watched = as_completed(futures, loop=self.client.loop)  # not the default client's
        last_progress = last_check = time.monotonic()
        workerless_since: float | None = None
        while not watched.is_empty():
            if watched.has_ready():
                # cancelled futures come out too: their result() raises
                # CancelledError (data they needed died with its workers),
                # which run_tasks handles by sending the data again
                last_progress, workerless_since = time.monotonic(), None
                yield from sorted(watched.next_batch(block=False), key=lambda f: str(f.key))
                continue
            # wait for a task to finish (distributed's own as_completed iterator waits on
            # the same condition, which each finished future notifies), at most TICK
            with watched.thread_condition:
                if not watched.has_ready():
                    watched.thread_condition.wait(timeout=self.TICK)
            now = time.monotonic()
            if now - max(last_progress, last_check) < self.POLL:
                continue
            last_check = now
            if not self.client.scheduler_info().get("workers"):
                workerless_since = workerless_since or now
                if now - workerless_since > self.no_workers:
                    raise StalledError(
                        f"{self.name}: no worker left for {now - workerless_since:.0f} s with "
                        f"{watched.count()} task(s) waiting (workers keep dying?); the run stops "
                        "here and can be resumed by running it again (exit 75: try later)"
                    )
            else:
                workerless_since = None
            if now - last_progress > self.stall:
                raise StalledError(
                    f"{self.name}: no task finished for {now - last_progress:.0f} s "
                    f"({settings.source('stall-timeout')}={self.stall:g}) with "
                    f"{watched.count()} task(s) "
                    "waiting; the run stops here and can be resumed by running it again"
                )


@contextlib.contextmanager
def watch_workers(client: Client) -> Iterator[None]:
    """Guard dask's own computations in a block (readers, ``da.store``, ``dask.compute``).

    :func:`run_tasks` watches its futures itself; a computation dask submits
    (``client.get``) would wait for ever on a cluster with no worker left.  A
    thread of this block looks at the workers every second: with none for the
    ``distforest.no-worker-timeout`` setting's seconds (plus two, so that
    :func:`run_tasks` stops first when it is the one waiting), it cancels the
    futures made in the block, and the block raises :class:`StalledError`
    (exit 75) instead of the cancellation.  Futures made before the block (a
    user's) are left alone.
    """
    from distributed import Future

    patience = float(settings.get("no-worker-timeout")) + 2 * _Watchdog.POLL
    before = set(client.futures)
    stop = threading.Event()
    tripped: list[float] = []

    def watch() -> None:
        since: float | None = None
        while not stop.wait(_Watchdog.POLL):
            try:
                workers = client.scheduler_info().get("workers")
            except Exception:  # the client is closing: nothing left to guard
                return
            now = time.monotonic()
            since = None if workers else since or now
            if since is not None and now - since > patience:
                tripped.append(now - since)
                mine: list[Future] = [Future(key, client) for key in set(client.futures) - before]
                client.cancel(mine)
                return

    thread = threading.Thread(target=watch, name="distforest-worker-watch", daemon=True)
    thread.start()
    try:
        yield
    except Exception as exc:
        if tripped and not isinstance(exc, StalledError):
            raise StalledError(
                f"no worker left for {tripped[0]:.0f} s while dask computed (workers keep "
                "dying?); the run stops here and can be resumed by running it again (exit "
                "75: try later)"
            ) from exc
        raise
    finally:
        stop.set()
        # a call to a dying scheduler may hang: the thread is a daemon, not waited for long
        thread.join(timeout=2 * _Watchdog.POLL)
