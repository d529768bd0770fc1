"""Where and how work runs, kept apart from what an estimator computes.

An estimator holds plain parameters only (so :func:`sklearn.base.clone` and
``check_estimator`` work).  The cluster it runs on, and the callback that
reports progress, come from an :class:`Execution`:

- ``with distforest.execution(client=c): forest.fit(X)`` sets it for a block
  (every estimator called inside, including clones made by scikit-learn's
  model selection, runs on ``c``);
- ``forest.set_execution(client=c)`` sets it for one estimator object (not
  copied by ``clone``: clones use the surrounding execution);
- otherwise the current default ``distributed`` client is used; with none,
  a small input runs in this process on threads and a larger one starts a
  LocalCluster for the duration of a call (the one rule, and its threshold,
  are in :mod:`distforest.parallel.placement`); in a child process (a joblib
  worker of ``GridSearchCV(n_jobs=2)``) the tasks run in that process.

``client="synchronous"`` runs the same tasks one after another in this
process (no cluster at all).

A :class:`Runner` is the one executor every stage uses: it shares large
arrays with the workers and runs a function over a list of argument tuples,
yielding results as they finish.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from distforest.errors import ParameterError
from distforest.parallel import tasks
from distforest.parallel.cluster import use_client

#: ``progress(stage, done, total)`` after every finished task of a stage.
Progress = Callable[[str, int, int], None]

#: ``client=SYNCHRONOUS`` runs every task in this process (on ``Execution.threads`` threads).
SYNCHRONOUS = "synchronous"


@dataclass(frozen=True)
class Execution:
    """Where tasks run and whom to tell about progress.

    Parameters
    ----------
    client : distributed.Client, "synchronous" or None
        The cluster to use; ``"synchronous"`` runs tasks in this process.
    scheduler : str or None
        Address of an existing Dask scheduler, e.g. ``"tcp://host:8786"``.
    cluster : str, Path or None
        A cluster YAML file (see ``cluster_configs/``).
    progress : callable or None
        ``progress(stage, done, total)`` after every finished task.
    threads : int, default 1
        With ``client="synchronous"``: run up to this many tasks at once on
        threads of this process (1: one after another).  Results do not depend
        on it.

    With none of ``client``, ``scheduler``, ``cluster``: the current default
    ``distributed`` client, else in this process or on a LocalCluster for
    the duration of a call, by the input's size
    (:func:`distforest.parallel.placement.runner`).
    """

    client: Any = None
    scheduler: str | None = None
    cluster: str | Path | None = None
    progress: Progress | None = None
    threads: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.client, str) and self.client != SYNCHRONOUS:
            raise ParameterError(
                f"client must be a distributed.Client, None or {SYNCHRONOUS!r}, "
                f"got {self.client!r}; to reach a scheduler by address use scheduler=..."
            )

    def stage(self, stage: str) -> tasks.ProgressCallback | None:
        """A ``(done, total)`` callback reporting ``stage``, or None."""
        progress = self.progress
        if progress is None:
            return None
        return lambda done, total: progress(stage, done, total)

    @contextlib.contextmanager
    def runner(self) -> Iterator[Runner]:
        """Connect (or start a cluster) for a block and yield its :class:`Runner`.

        Inside the block this execution, bound to the client it got, is the
        current one: nested estimator calls reuse the same cluster.
        """
        if self.client == SYNCHRONOUS:
            runner = Runner(None, self.threads)
            try:
                with use_execution(self):
                    yield runner
            finally:
                runner.close()
            return
        with use_client(self.client, scheduler=self.scheduler, cluster=self.cluster) as client:
            bound = replace(
                self, client=SYNCHRONOUS if client is None else client, scheduler=None, cluster=None
            )
            with use_execution(bound), _dask_current(client):
                yield Runner(client)


_CURRENT: ContextVar[Execution | None] = ContextVar("distforest_execution", default=None)


def current_execution() -> Execution:
    """The execution set by the innermost :func:`execution` block (or the default one)."""
    return _CURRENT.get() or Execution()


@contextlib.contextmanager
def use_execution(exe: Execution) -> Iterator[Execution]:
    """Make ``exe`` the current execution for a block."""
    token = _CURRENT.set(exe)
    try:
        yield exe
    finally:
        _CURRENT.reset(token)


def execution(
    client: Any = None,
    *,
    scheduler: str | None = None,
    cluster: str | Path | None = None,
    progress: Progress | None = None,
) -> contextlib.AbstractContextManager[Execution]:
    """Run every distforest call of a ``with`` block on a given cluster.

    Parameters
    ----------
    client : distributed.Client, "synchronous" or None
    scheduler : str, optional
        Address of an existing scheduler.
    cluster : str or Path, optional
        A cluster YAML file.
    progress : callable, optional
        ``progress(stage, done, total)``.

    Examples
    --------
    >>> from distributed import Client                      # doctest: +SKIP
    >>> with Client() as c, distforest.execution(client=c):  # doctest: +SKIP
    ...     GridSearchCV(KNNClassifier(), grid).fit(X, y)
    """
    return _execution_block(Execution(client, scheduler, cluster, progress))


@contextlib.contextmanager
def _execution_block(exe: Execution) -> Iterator[Execution]:
    """``exe`` current for a block; a client given is also dask's current one (see
    :meth:`Execution.runner`)."""
    with use_execution(exe), _dask_current(exe.client):
        yield exe


@contextlib.contextmanager
def _dask_current(client: Any) -> Iterator[None]:
    """For a distributed client, ``client.as_current()``: dask's own computations in the
    block (readers, ``da.store``) go to it even when it is not the default client, and are
    guarded against a cluster without workers (:func:`~distforest.parallel.tasks.watch_workers`).
    A scheduler function set in dask's config (a wrapper of the user's) is kept.  (Not
    ``dask.config.set(scheduler=client.get)``: dask's config is sent to every worker
    process started later, and a bound method there stops a nanny from restarting one.)"""
    import dask

    as_current = getattr(client, "as_current", None)
    if as_current is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        if not callable(dask.config.get("scheduler", None)):
            stack.enter_context(as_current())
        stack.enter_context(tasks.watch_workers(client))
        yield


class Runner:
    """Runs task functions on a Dask client, or in this process when it has none.

    Parameters
    ----------
    client : distributed.Client or None
        None: every task runs here, in order (``client="synchronous"``).
    threads : int, default 1
        Without a client: run up to this many tasks at once on threads of this
        process (for task functions that release the GIL, e.g. tree fitting).
    """

    def __init__(self, client: Any, threads: int = 1) -> None:
        self.client = client
        #: What :meth:`share` sent, by future key: sent again if its holders all die.
        self._shared: dict[str, Any] = {}
        #: Lost future key -> the future of the copy sent again.
        self._resent: dict[str, Any] = {}
        self._threads = max(1, threads)
        #: Without a client: one pool of threads for every run (started on first use; a
        #: pool per run started two threads per column of a small imputation).
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the threads of this process's pool, if one was started."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    @property
    def in_process(self) -> bool:
        """Whether tasks run in this process."""
        return self.client is None

    def share(self, value: Any) -> Any:
        """Send a large value to the workers once; tasks then take the handle.

        The runner keeps a reference to ``value`` while the returned handle
        lives: if every worker holding it dies, :meth:`run` sends it again and
        resubmits the tasks that need it.  Once the handle is dropped, so is the
        reference (a long run shares many values: the driver must not keep them all).
        """
        if self.client is None:
            return value
        future = tasks.scatter(self.client, value)
        if hasattr(future, "key"):  # one future (a list or dict scatters item by item)
            key = str(future.key)
            self._shared[key] = value
            weakref.finalize(future, self._shared.pop, key, None)
        return future

    def _resend(self, future: Any) -> Any:
        """A live copy of a shared value whose holders died (other futures unchanged)."""
        key = str(future.key)
        if key in self._resent:
            return self._resent[key]
        if key not in self._shared or future.status == "finished":
            return future
        again = tasks.scatter(self.client, self._shared[key])
        self._shared[str(again.key)] = self._shared[key]
        self._resent[key] = again
        return again

    def gather(self, value: Any) -> Any:
        """The value behind a handle from :meth:`share`."""
        return value if self.client is None else self.client.gather(value)

    def everywhere(self, func: Callable[..., Any], *args: Any) -> None:
        """Call ``func(*args)`` once in every worker process (in this one without a client).

        For tidying up what tasks kept in their process; a worker that fails
        or is gone is skipped.
        """
        if self.client is None:
            func(*args)
        else:
            self.client.run(func, *args, on_error="ignore")

    def threads(self) -> int:
        """Worker threads available (1 in process)."""
        return self._threads if self.client is None else tasks.total_threads(self.client)

    def run(
        self,
        func: Callable[..., Any],
        items: Sequence[Sequence[Any]],
        *,
        name: str,
        progress: tasks.ProgressCallback | None = None,
    ) -> Iterator[tuple[int, Any]]:
        """``func(*item)`` for every item; yields ``(index, result)`` as they finish."""
        if self.client is not None:
            yield from tasks.run_tasks(
                self.client, func, items, name=name, progress=progress, resend=self._resend
            )
            return
        total = len(items)
        if progress is not None:
            progress(0, total)
        if self._threads > 1 and total > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._threads)
            yield from _run_threads(func, items, self._pool, progress)
            return
        for i, args in enumerate(items):
            result = func(*args)
            if progress is not None:
                progress(i + 1, total)
            yield i, result


@contextlib.contextmanager
def in_process(exe: Execution, threads: int) -> Iterator[Runner]:
    """A :class:`Runner` on ``threads`` threads of this process (no cluster) for a block.

    Nested estimator calls inside the block run in this process too, on as many threads.
    """
    here = replace(exe, client=SYNCHRONOUS, scheduler=None, cluster=None, threads=threads)
    runner = Runner(None, threads)
    try:
        with use_execution(here):
            yield runner
    finally:
        runner.close()


def _run_threads(
    func: Callable[..., Any],
    items: Sequence[Sequence[Any]],
    pool: ThreadPoolExecutor,
    progress: tasks.ProgressCallback | None,
) -> Iterator[tuple[int, Any]]:
    """``func(*item)`` on a pool of this process's threads; yields as they finish."""
    futures = {pool.submit(func, *args): i for i, args in enumerate(items)}
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            if progress is not None:
                progress(done, len(items))
            yield futures[future], future.result()
    finally:  # an error or an abandoned run: no task of it keeps running behind the caller
        for future in futures:
            future.cancel()
        wait(futures)


def for_call(
    client: Any = None,
    scheduler: str | None = None,
    cluster: str | Path | None = None,
    progress: Progress | None = None,
) -> Execution:
    """The execution of a function call: the arguments given, else the current one.

    Functions such as ``pairwise()`` take ``client``/``scheduler``/``cluster``
    keywords for convenience; without them they run where the surrounding
    :func:`execution` block says.
    """
    now = current_execution()
    if client is None and scheduler is None and cluster is None:
        return replace(now, progress=progress or now.progress)
    return Execution(client, scheduler, cluster, progress or now.progress)
