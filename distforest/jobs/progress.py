"""Progress an operator can read in a log: tasks done out of the total, and time left.

Without a terminal (cron, nohup, a batch scheduler's log file) a progress bar
prints nothing useful; :class:`ProgressLog` logs one line per stage at a
steady interval instead: when a stage starts, whenever :data:`INTERVAL`
seconds passed or another :data:`STEP` of its tasks finished since the last
line, and when it ends.  Each line says the tasks done, the total, the time
spent and (from the rate so far) the time left.
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from distforest.jobs.stages import seconds_text

logger = logging.getLogger("distforest")

#: Seconds between two lines of a stage at most (when a task ends after them).
INTERVAL = 30.0
#: Share of a stage's tasks between two lines at most.
STEP = 0.1


class ProgressLog:
    """A ``progress(stage, done, total)`` callback that logs counts and time left.

    Parameters
    ----------
    interval : float
        Log at least every ``interval`` seconds while tasks finish.
    step : float
        Log whenever another ``step`` of the stage's tasks finished.
    clock : callable
        The time in seconds (a test gives its own).
    """

    def __init__(self, interval: float = INTERVAL, step: float = STEP,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.interval, self.step, self.clock = interval, step, clock
        self._start: dict[str, float] = {}
        self._last: dict[str, tuple[float, int]] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self.clock()
        if stage not in self._start or done == 0:
            self._start[stage] = now
            self._last[stage] = (now, 0)
            logger.info("%s: 0 of %d tasks done, started", stage, total)
            return
        when, at = self._last[stage]
        finished = done >= total
        if not finished and now - when < self.interval and done - at < self.step * total:
            return
        self._last[stage] = (now, done)
        spent = now - self._start[stage]
        if finished:
            logger.info("%s: %d of %d tasks done in %s", stage, done, total, seconds_text(spent))
            del self._start[stage]
            return
        left = spent * (total - done) / max(done, 1)
        logger.info("%s: %d of %d tasks done (%d%%), %s spent, about %s left", stage, done,
                    total, 100 * done // max(total, 1), seconds_text(spent),
                    seconds_text(left))  # fmt: skip


# -- the log lines of a command: tagged with its run id, Python warnings on one line --


class _RunIdFilter(logging.Filter):
    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.run_id = self.run_id
        return True


def setup_logging(quiet: bool, verbose: bool) -> str:
    """Send distforest's log lines to stderr, each tagged with a new run id.

    Returns
    -------
    str
        The run id.
    """
    run_id = uuid.uuid4().hex[:8]
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RunIdFilter(run_id))
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s run=%(run_id)s %(name)s: %(message)s")
    )
    logger = logging.getLogger("distforest")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    nanny = logging.getLogger("distributed.nanny")
    nanny.filters[:] = [f for f in nanny.filters if not isinstance(f, _ShutdownNoise)]
    if quiet:
        nanny.addFilter(_ShutdownNoise())
    return run_id


class _ShutdownNoise(logging.Filter):
    """Drops the nanny's "Worker process still alive after 4.0 seconds, killing" lines,
    which every LocalCluster prints when it closes (``-q``: only errors and the summary)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Worker process still alive after")


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:  # fmt: skip
    """A Python warning on the command line: one ``distforest: warning: ...`` line
    (no source file and line, which mean nothing to someone running a command).

    Installed by the console script (``distforest.cli.main.main``) only (the
    process ends with the command; code that calls ``cli`` keeps its own hook).
    """
    text = " ".join(str(message).split())
    print(f"distforest: warning: {text}", file=file or sys.stderr, flush=True)
