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
import time
from collections.abc import Callable

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
