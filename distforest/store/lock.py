"""One run at a time per output store: an advisory lock file next to the store.

The lock is ``<store>.lock`` (a sibling, so that replacing the store never
removes it).  It is held with ``fcntl.flock`` for the whole run, which the
operating system releases when the process dies, even on SIGKILL: a stale
lock from a dead run can therefore never block a new one.  The file's
content (pid, host, run id, start time) only serves the messages: who holds
the lock, and whose stale lock is being taken over.

``flock`` is reliable on local file systems and on most modern network file
systems (NFSv4, Lustre, GPFS); on file systems where it is not, run nightly
jobs under ``flock(1)`` as the README shows.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import logging
import os
import socket
from pathlib import Path
from types import TracebackType
from typing import Any

from distforest.errors import BusyError, StoreError

logger = logging.getLogger("distforest")


def lock_path(store: str | Path) -> Path:
    """The lock file of ``store``: ``<store>.lock`` in the same directory."""
    p = Path(store)
    return p.with_name(p.name + ".lock")


def read_lock(store: str | Path) -> dict[str, Any] | None:
    """The holder recorded in the lock file, or None when there is none."""
    try:
        return json.loads(lock_path(store).read_text() or "null")
    except (OSError, ValueError):
        return None


def is_locked(store: str | Path) -> bool:
    """Whether a live process holds the lock of ``store`` right now."""
    path = lock_path(store)
    if not path.exists():
        return False
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "an unknown process"
    return (
        f"run {holder.get('run_id')} (pid {holder.get('pid')} on {holder.get('host')}, "
        f"started {holder.get('started')})"
    )


class StoreLock:
    """Hold the lock of an output store for the duration of a ``with`` block.

    Parameters
    ----------
    store : str or Path
        The store to protect; its parent directory is created if needed.
    run_id : str
        Identifies this run in the lock file and in messages.

    Raises
    ------
    BusyError
        When another live process holds the lock.
    """

    def __init__(self, store: str | Path, run_id: str) -> None:
        self.store = Path(store)
        self.run_id = run_id
        self.path = lock_path(store)
        self._file: Any = None
        #: The holder of a stale lock taken over, if any.
        self.took_over: dict[str, Any] | None = None

    def __enter__(self) -> StoreLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            f = open(self.path, "a+")
        except OSError as exc:  # a directory in its place, a read-only parent, ...
            raise StoreError(
                f"cannot open the lock file {str(self.path)!r} of {str(self.store)!r}: "
                f"{exc.strerror or exc}; remove what is at that path or write the output "
                "somewhere you can create files"
            ) from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise BusyError(
                f"{self.store} is being written by {_describe(read_lock(self.store))}; "
                f"wait for that run to finish (the lock {self.path} frees itself when it "
                "ends, even if it is killed)"
            ) from None
        f.seek(0)
        previous = f.read().strip()
        if previous:
            try:
                self.took_over = json.loads(previous)
            except ValueError:
                self.took_over = {"raw": previous}
            logger.warning(
                "taking over the stale lock of %s: that run is no longer alive",
                _describe(self.took_over),
            )
        holder = {
            "run_id": self.run_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        }
        f.seek(0)
        f.truncate()
        f.write(json.dumps(holder))
        f.flush()
        os.fsync(f.fileno())
        self._file = f
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        f, self._file = self._file, None
        if f is None:
            return
        # Empty the file before unlocking: a later run then sees a clean
        # release, not a stale holder.
        f.seek(0)
        f.truncate()
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()
