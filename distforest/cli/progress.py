"""Progress bars for the command line (log lines without a terminal:
:class:`~distforest.jobs.progress.ProgressLog`)."""

from __future__ import annotations

import sys
from typing import Any

import click

LABELS = {"fit": "fitting trees  ", "tiles": "proximity tiles", "neighbors": "neighbours     "}


class ProgressBars:
    """A ``progress(stage, done, total)`` callback drawing one bar per stage.

    Without a terminal on stderr (a log file) the stages log their counts and
    time left instead (:class:`~distforest.jobs.progress.ProgressLog`).

    Parameters
    ----------
    enabled : bool
        Draw nothing when False (``--quiet``).
    """

    def __init__(self, enabled: bool = True) -> None:
        from distforest.jobs.progress import ProgressLog

        self.enabled = enabled
        self._bars: dict[str, Any] = {}
        self._done: dict[str, int] = {}
        self._log = None if sys.stderr.isatty() else ProgressLog()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._log is not None:
            self._log(stage, done, total)
            return
        if stage not in self._bars:
            bar = click.progressbar(
                length=total, label=LABELS.get(stage, stage), file=sys.stderr, show_pos=True
            )
            bar.__enter__()
            self._bars[stage] = bar
            self._done[stage] = 0
        bar = self._bars[stage]
        bar.update(done - self._done[stage])
        self._done[stage] = done
        if done >= total:
            bar.__exit__(None, None, None)
            del self._bars[stage]
