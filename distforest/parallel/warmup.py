"""Worker warm-up: import the task modules in the background as a local worker starts.

A fresh worker process imports scikit-learn (and the kernels) when its first
tree task arrives, seconds of CPU during which the fit waits.  The
LocalCluster distforest starts names this module as a worker ``preload``:
:func:`dask_setup` starts a daemon thread that imports :data:`MODULES`, so the
imports overlap with the rest of the start-up (the other workers, the
client, loading the data) instead of delaying the first task.  The worker
registers at once; a task that needs a module still being imported waits for
that import (Python's per-module import lock), never sees half a module.

Nothing here changes results: only when modules are imported.  A cluster of
your own can use it too: ``LocalCluster(preload=["distforest.parallel.warmup"])``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)

#: Modules the fit tasks need on every worker.
MODULES = ("distforest.kernels.trees",)


def import_modules(modules: tuple[str, ...] = MODULES) -> None:
    """Import ``modules``; a failure is logged, never raised (the task will raise it)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the task importing it reports the real error
            logger.warning("warm-up import of %s failed: %s", name, exc)


def dask_setup(worker: Any) -> None:
    """Dask preload hook: start the imports on a daemon thread and return at once."""
    threading.Thread(target=import_modules, name="distforest-warmup", daemon=True).start()
