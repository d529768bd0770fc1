"""Progress bars and log lines for the command line."""

from __future__ import annotations

import logging
import sys
import uuid
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

    Installed by the console script's :func:`~distforest.cli.main.main` only (the
    process ends with the command; code that calls ``cli`` keeps its own hook).
    """
    text = " ".join(str(message).split())
    print(f"distforest: warning: {text}", file=file or sys.stderr, flush=True)
