"""Where and how work runs, kept apart from what an estimator computes.

An estimator holds plain parameters only (so :func:`sklearn.base.clone` and
``check_estimator`` work).  The cluster it runs on, and the callback that
reports progress, come from an :class:`Execution`:

- ``with distforest.execution(client=c): forest.fit(X)`` sets it for a block
  (every estimator called inside, including clones made by scikit-learn's
  model selection, runs on ``c``);
- ``forest.set_execution(client=c)`` sets it for one estimator object (not
  copied by ``clone``: clones use the surrounding execution);
- otherwise the current default ``distributed`` client is used, else a
  LocalCluster is started for the duration of a call.

``client="synchronous"`` runs the same tasks one after another in this
process (no cluster at all), which is what small inputs and tests want.

A :class:`Runner` is the one executor every stage uses: it shares large
arrays with the workers and runs a function over a list of argument tuples,
yielding results as they finish.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from distforest.errors import ParameterError
from distforest.parallel import tasks
from distforest.parallel.cluster import use_client

#: ``progress(stage, done, total)`` after every finished task of a stage.
Progress = Callable[[str, int, int], None]

#: ``client=SYNCHRONOUS`` runs every task in this process, one after another.
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

    With none of ``client``, ``scheduler``, ``cluster``: the current default
    ``distributed`` client, else a LocalCluster for the duration of a call.
    """

    client: Any = None
    scheduler: str | None = None
    cluster: str | Path | None = None
    progress: Progress | None = None

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
            with use_execution(self):
                yield Runner(None)
            return
        with use_client(self.client, scheduler=self.scheduler, cluster=self.cluster) as client:
            with use_execution(replace(self, client=client, scheduler=None, cluster=None)):
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
    return use_execution(Execution(client, scheduler, cluster, progress))


class Runner:
    """Runs task functions on a Dask client, or in this process when it has none.

    Parameters
    ----------
    client : distributed.Client or None
        None: every task runs here, in order (``client="synchronous"``).
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def in_process(self) -> bool:
        """Whether tasks run in this process."""
        return self.client is None

    def share(self, value: Any) -> Any:
        """Send a large value to the workers once; tasks then take the handle."""
        return value if self.client is None else tasks.scatter(self.client, value)

    def gather(self, value: Any) -> Any:
        """The value behind a handle from :meth:`share`."""
        return value if self.client is None else self.client.gather(value)

    def threads(self) -> int:
        """Worker threads available (1 in process)."""
        return 1 if self.client is None else tasks.total_threads(self.client)

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
            yield from tasks.run_tasks(self.client, func, items, name=name, progress=progress)
            return
        total = len(items)
        if progress is not None:
            progress(0, total)
        for i, args in enumerate(items):
            result = func(*args)
            if progress is not None:
                progress(i + 1, total)
            yield i, result


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
