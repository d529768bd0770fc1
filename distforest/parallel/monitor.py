"""What a run reports about its cluster: task attempts, retries, worker memory.

:class:`RunMonitor` watches a client for the length of a run: a scheduler
plugin counts how often each task was sent to a worker again before it
finished (a task whose worker died is sent again: that is a retry), and a
background thread samples the memory of every worker from the scheduler's
heartbeats.  Both are
best-effort: if the scheduler cannot load the plugin (distforest not
installed there), retries are reported as unknown rather than failing the
run.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from types import TracebackType
from typing import Any

from dask.utils import key_split
from distributed import Client
from distributed.diagnostics.plugin import SchedulerPlugin

logger = logging.getLogger("distforest")

PLUGIN_NAME = "distforest-attempts"


class AttemptCounter(SchedulerPlugin):
    """Counts, per task, the attempts that were sent to a worker again.

    A task is retried when it goes to ``processing`` again before it reached
    ``memory`` or ``erred``: its worker died, or it raised and has dask
    retries left.  A task computed again after it finished (its result was
    released, then asked for by a later computation) or after the client gave
    it up (``forgotten``) is a new run, not a retry.
    """

    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.pending: Counter[str] = Counter()  # attempts of the current, unfinished run
        self.retries: Counter[str] = Counter()
        self.kinds: dict[str, str] = {}

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        name = str(key)
        if finish == "processing":
            if self.pending[name]:
                self.retries[name] += 1
            self.pending[name] += 1
            if name not in self.kinds:  # fit-trees-1a2b3c4d-7 -> fit-trees
                self.kinds[name] = key_split(key)
        elif finish in ("memory", "erred", "forgotten"):
            self.pending.pop(name, None)


def _attempts_on_scheduler(dask_scheduler: Any = None) -> list[tuple[str, int]]:
    """(kind, retries) of every task the plugin saw."""
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    if plugin is None:
        return []
    return [(kind, plugin.retries[key]) for key, kind in plugin.kinds.items()]


class RunMonitor:
    """Count task attempts and sample peak worker memory while a run is going.

    Parameters
    ----------
    client : distributed.Client
    interval : float
        Seconds between memory samples.
    """

    def __init__(self, client: Client, interval: float = 1.0) -> None:
        self.client = client
        self.interval = interval
        self.peak_memory: dict[str, int] = {}
        self._plugin_ok = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RunMonitor:
        try:
            self.client.register_plugin(AttemptCounter(), name=PLUGIN_NAME)
            self._plugin_ok = True
        except Exception as exc:  # a remote scheduler without distforest
            logger.warning("cannot count task retries on this scheduler: %s", exc)
        self._thread = threading.Thread(target=self._sample, name="distforest-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._plugin_ok:  # the next run on this scheduler starts its own count
            try:
                self.client.unregister_scheduler_plugin(PLUGIN_NAME)
            except Exception as exc:  # the scheduler or the client is gone
                logger.debug("could not remove the %s plugin: %s", PLUGIN_NAME, exc)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval)

    def sample_once(self) -> None:
        """Record the current memory of every worker (from the scheduler)."""
        try:
            workers = self.client.scheduler_info(n_workers=-1)["workers"]
        except Exception:  # the client is closing
            return
        for info in workers.values():
            name = str(info.get("name", info.get("id")))
            memory = int(info.get("metrics", {}).get("memory", 0))
            self.peak_memory[name] = max(self.peak_memory.get(name, 0), memory)

    def tasks(self) -> dict[str, dict[str, int]] | None:
        """Per task kind (key prefix): ``tasks`` run and ``retries`` (extra attempts).

        None when the scheduler could not count them.
        """
        if not self._plugin_ok:
            return None
        try:
            attempts = self.client.run_on_scheduler(_attempts_on_scheduler)
        except Exception as exc:
            logger.warning("cannot read task attempts from the scheduler: %s", exc)
            return None
        out: dict[str, dict[str, int]] = {}
        for kind, retries in attempts:
            entry = out.setdefault(kind, {"tasks": 0, "retries": 0})
            entry["tasks"] += 1
            entry["retries"] += retries
        return out
