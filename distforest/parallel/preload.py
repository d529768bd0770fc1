"""Worker start-up: the imports every task needs, done before the worker takes tasks.

A fresh worker process imports scikit-learn (with scipy), numba and Zarr the
first time a task needs them: about 2 s of CPU, otherwise paid inside the
first fit (a cold fit of 20,000 rows took 1.9x a warm one).  distforest's
LocalCluster loads this module as a worker ``preload``: :func:`dask_setup`
imports them as the worker starts, before it registers.

Not on a background thread (as once): two threads importing one package whose
modules import each other (Zarr's do) can each get the other's half-initialised
module, and Python then raises ``ImportError: cannot import name ... from
partially initialized module``.  That happened to a worker reading a message
(a task holding a Zarr array) while the background thread imported Zarr: the
worker's connection handler died with it, and the run waited on a worker that
would never answer.

It also holds the worker classes of a local cluster without dashboard
(:class:`NannyWithoutHTTP`, :class:`WorkerWithoutHTTP`): dask's workers serve
HTTP (health, metrics, call stacks) on a port any local user can reach even
when no dashboard is asked for; these start no HTTP server at all.  They are
defined here, at module level, because the worker class travels to the
spawned worker process by reference.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from distributed import Nanny, Worker

logger = logging.getLogger("distforest")

#: What the tasks of a fit and of the tile service unpickle on a fresh worker.
MODULES = ("distforest.kernels.trees", "distforest.forests.tiles")


def import_modules(modules: tuple[str, ...] = MODULES) -> None:
    """Import ``modules``; a failure is left for the task that needs the module to report."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the task importing it raises the real error
            logger.debug("preloading %s failed: %s", name, exc)


def scrub_output() -> None:
    """This process's stdout, stderr and log handlers write through the one scrubber
    (:func:`distforest.location.scrub`): a worker's log lines and tracebacks (a failed
    task's exception text, botocore's or fsspec's included) print no URL credentials nor
    secret option values, as the driver's own do."""
    import sys

    from distforest.location import ScrubbedStream

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, ScrubbedStream):
            setattr(sys, name, ScrubbedStream(stream))
    loggers = [logging.getLogger(), *(
        logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
    )]  # fmt: skip
    for each in loggers:
        for handler in getattr(each, "handlers", ()):
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and stream is not None and not (
                isinstance(stream, ScrubbedStream)
            ):  # fmt: skip
                handler.setStream(ScrubbedStream(stream))


def dask_setup(worker: Any) -> None:
    """distributed's preload hook: output scrubbed, then the imports, before the worker
    takes any task."""
    scrub_output()
    import_modules()


class WorkerWithoutHTTP(Worker):
    """dask's Worker, minus its HTTP server (no dashboard, health or metrics pages)."""

    def start_http_server(self, *args: Any, **kwargs: Any) -> None:
        return None


class NannyWithoutHTTP(Nanny):
    """dask's Nanny (which serves no HTTP itself) starting :class:`WorkerWithoutHTTP`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("worker_class", WorkerWithoutHTTP)
        super().__init__(*args, **kwargs)
