"""One run at a time per output store: a lock file (or object) next to the store.

The lock is ``<store>.lock``, a sibling, so that replacing the store never
removes it; it exists only while a run holds it (a run removes it when it
ends; one killed leaves it, and the next run takes it over).

On a local or shared file system it is held with ``fcntl.flock`` for the
whole run, which the operating system releases when the process dies, even
on SIGKILL.  It is opened with ``O_NOFOLLOW`` (a symbolic link planted at
its name is refused, never followed) and an existing file is used only if
it is a lock distforest wrote: a user's file of that name is left as it is
and the run refused.  ``flock`` is reliable on local file systems and on
most modern network file systems (NFSv4, Lustre, GPFS).

On object storage (``s3://``, ``memory://``) there is no ``flock``: the lock
is an object created with a conditional write (create-if-absent, S3's
``If-None-Match: *``) holding a *lease* that the run renews in the
background; a run that stops renewing (killed) is taken over once its lease
has expired and no renewal has been seen for a while.  Where the file system
offers no create-if-absent write distforest trusts, the run is refused and
the message names the alternatives.

The content (run id, pid, host, start time) serves the messages: who holds
the lock, and whose stale lock is being taken over.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from distforest import location
from distforest.errors import BusyError, StoreError

logger = logging.getLogger("distforest")

#: Object-store protocols whose create-if-absent write distforest checked
#: (S3 and S3-compatible servers that honour ``If-None-Match``; fsspec's memory file system).
CONDITIONAL_WRITE_PROTOCOLS = frozenset({"s3", "s3a", "memory"})
#: Seconds a lease on object storage lasts without renewal (Dask config ``distforest.lock.lease``).
DEFAULT_LEASE = 60.0


def lock_path(store: str | Path) -> Any:
    """The lock of ``store``: ``<store>.lock`` beside it (a Path, or a URL for object storage)."""
    if location.is_remote(store):
        return location.Location(str(store).rstrip("/") + ".lock", location.options(store))
    p = Path(location.local(store))
    return p.with_name(p.name + ".lock")


def _parse(raw: bytes | str) -> dict[str, Any] | None:
    """A lock record distforest wrote, or None for anything else."""
    try:
        holder = json.loads(raw)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) and "run_id" in holder else None


def read_lock(store: str | Path) -> dict[str, Any] | None:
    """The holder recorded in the lock, or None when there is none."""
    path = lock_path(store)
    try:
        if location.is_remote(path):
            return _parse(location.read_bytes(path))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    with os.fdopen(fd, "rb") as f:
        return _parse(f.read(1 << 16) or b"null")


def is_locked(store: str | Path) -> bool:
    """Whether a live run holds the lock of ``store`` right now."""
    path = lock_path(store)
    if location.is_remote(path):
        holder = read_lock(store)
        return holder is not None and float(holder.get("expires", 0)) > time.time()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def describe_holder(holder: dict[str, Any] | None) -> str:
    """A lock's holder in words: its run, store, process, host and start."""
    if not holder:
        return "an unknown process"
    writing = f" writing the store {holder['store']}" if holder.get("store") else ""
    return (
        f"run {holder.get('run_id')}{writing} (pid {holder.get('pid')} on {holder.get('host')}, "
        f"started {holder.get('started')})"
    )


#: The name (less ``.lock``) of the lock of an output folder (:func:`folder_lock`).
FOLDER_LOCK = ".distforest-outputs"


def folder_lock(store: Any, run_id: str) -> StoreLock:
    """The lock a run holds on the folder of its output ``store``, for the whole run.

    Runs writing different stores into one folder also write the same report
    files and may write the same output names: the folder is claimed by one
    run at a time (the second is refused, :class:`BusyError` naming the first
    run's store), so what one run writes there is never overwritten by another
    one running at the same time.
    """
    return StoreLock(location.join(location.parent(store), FOLDER_LOCK), run_id,
                     owner=store)  # fmt: skip


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _lease() -> float:
    import dask.config

    return float(dask.config.get("distforest.lock.lease", DEFAULT_LEASE))


class StoreLock:
    """Hold the lock of an output store for the duration of a ``with`` block.

    Parameters
    ----------
    store : str or Path
        The store to protect (a local path or an fsspec URL); a local parent
        directory is created if needed.
    run_id : str
        Identifies this run in the lock and in messages.

    Raises
    ------
    BusyError
        When another live run holds the lock.
    StoreError
        When the lock cannot be made: a symbolic link, a directory or a file
        that is not distforest's at its name, a read-only folder, or object
        storage without a trusted create-if-absent write.
    """

    def __init__(self, store: str | Path, run_id: str, *, owner: Any = None) -> None:
        self.store = store
        #: The store this run writes, when the lock guards its folder (:func:`folder_lock`).
        self.owner = owner
        self.run_id = run_id
        self.path = lock_path(store)
        self._fd: int | None = None
        self._remote: _Lease | None = None
        #: The holder of a stale lock taken over, if any.
        self.took_over: dict[str, Any] | None = None

    def _holder(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": _now(),
            **({"store": location.display(self.owner)} if self.owner is not None else {}),
        }

    def __enter__(self) -> StoreLock:
        if location.is_remote(self.path):
            self._remote = _Lease(self.store, self.path, self._holder())
            self.took_over = self._remote.acquire()
        else:
            self._enter_local()
        if self.took_over is not None:
            logger.warning(
                "taking over the stale lock of %s: that run is no longer alive",
                describe_holder(self.took_over),
            )
        return self

    def _what(self) -> str:
        if self.owner is None:
            return str(self.store)
        return f"the output folder {location.display(location.parent(self.store))}"

    # -- local or shared file systems: flock -------------------------------

    def _refuse(self, why: str) -> StoreError:
        return StoreError(
            f"cannot open the lock file {str(self.path)!r} of {str(self.store)!r}: {why}; "
            "remove what is at that path or write the output somewhere you can create files"
        )

    def _open_local(self) -> tuple[int, bool]:
        """Open (or create) the lock file without following a link: ``(fd, created)``."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            pass
        try:
            return os.open(self.path, flags), False
        except OSError as exc:
            if exc.errno == errno.ELOOP or os.path.islink(self.path):
                raise self._refuse("it is a symbolic link (never followed)") from None
            raise

    def _enter_local(self) -> None:
        path = Path(self.path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._refuse(exc.strerror or str(exc)) from None
        for _ in range(20):  # a releasing run may remove the file between open and flock
            try:
                fd, created = self._open_local()
            except FileNotFoundError:
                continue
            except OSError as exc:  # a directory in its place, a read-only parent, ...
                raise self._refuse(exc.strerror or str(exc)) from None
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise self._refuse("it is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise BusyError(
                    f"{self._what()} is being written by {describe_holder(read_lock(self.store))}; "
                    f"wait for that run to finish (the lock {self.path} frees itself when it "
                    "ends, even if it is killed)"
                ) from None
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                break
            os.close(fd)  # removed by the run that held it: lock the file now at the path
        else:
            raise self._refuse("the file keeps being replaced by other processes")
        previous = os.pread(fd, 1 << 16, 0)
        if previous.strip():
            holder = _parse(previous)
            if holder is None:
                os.close(fd)
                raise self._refuse(
                    "it is not a lock distforest wrote (left as it is, not truncated)"
                )
            self.took_over = holder
        elif not created and st.st_size:
            os.close(fd)
            raise self._refuse("it is not a lock distforest wrote (left as it is)")
        data = json.dumps({**self._holder(), "distforest_lock": 1}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        self._fd = fd

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.release()
            return
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # Remove the file while still holding it (only if it is still ours): a run
        # that opened it meanwhile sees it gone after its flock and opens anew.
        with contextlib.suppress(OSError):
            st, now = os.fstat(fd), os.stat(self.path, follow_symlinks=False)
            if (st.st_ino, st.st_dev) == (now.st_ino, now.st_dev):
                os.unlink(self.path)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class _Lease:
    """A lease on object storage: create-if-absent, renewed, taken over once expired."""

    def __init__(self, store: Any, path: Any, holder: dict[str, Any]) -> None:
        self.store, self.path = store, path
        self.lease = _lease()
        self.token = uuid.uuid4().hex
        self.holder = {**holder, "token": self.token, "lease_seconds": self.lease}
        self.marker: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.shown = location.display(path)
        #: ``timeout=`` of every request (an object store that never answers a PUT), if any.
        seconds = location.request_deadline(path)
        self.deadline = {} if seconds is None else {"timeout": seconds}
        try:
            self.fs, self.key = location.filesystem(path)
        except Exception as exc:
            reached = location.access_error(exc, store)
            if reached is not None:
                raise reached from None
            raise

    def _record(self) -> bytes:
        now = time.time()
        record = {**self.holder, "distforest_lock": 1, "renewed": now, "expires": now + self.lease}
        return json.dumps(record).encode()

    def _create(self, key: str, data: bytes) -> bool:
        """Create ``key`` if absent: True if this call made it."""
        try:
            self.fs.pipe_file(key, data, mode="create", **self.deadline)
        except FileExistsError:
            return False
        return True

    def _read(self) -> tuple[bytes, dict[str, Any] | None] | None:
        try:
            raw = bytes(self.fs.cat_file(self.key, **self.deadline))
        except FileNotFoundError:
            return None
        return raw, _parse(raw)

    def _busy(self, holder: dict[str, Any] | None) -> BusyError:
        return BusyError(
            f"{location.display(self.store)} is being written by {describe_holder(holder)}; "
            f"wait for that run to finish (its lease {self.shown} is renewed while it runs and "
            f"is taken over {self.lease:.0f} s after it stops, even if it is killed)"
        )

    def acquire(self) -> dict[str, Any] | None:
        proto = location.protocol(self.path) or ""
        import dask.config

        if proto not in CONDITIONAL_WRITE_PROTOCOLS:
            if dask.config.get("distforest.lock.unsafe-skip", False):
                logger.warning("not locking %s (distforest.lock.unsafe-skip)", self.shown)
                self.fs = None
                return None
            raise StoreError(
                f"cannot lock {location.display(self.store)}: distforest knows no safe "
                f"create-if-absent write on {proto}:// (it does on "
                f"{', '.join(sorted(p + '://' for p in CONDITIONAL_WRITE_PROTOCOLS))}), so two "
                "runs could write the store at once; write the store to S3 or to a local or "
                "shared file system, or, making sure yourself that one run at a time writes it, "
                "set DASK_DISTFOREST__LOCK__UNSAFE_SKIP=true"
            )
        try:
            took_over = self._take()
        except (BusyError, StoreError):
            raise
        except Exception as exc:
            reached = location.access_error(exc, self.store)
            if reached is not None:
                raise reached from None
            why = " ".join(str(exc).split()) or type(exc).__name__
            raise StoreError(f"cannot create the lock {self.shown}: {why}") from exc
        self._thread = threading.Thread(target=self._renew, name="distforest-lease", daemon=True)
        self._thread.start()
        return took_over

    def _take(self) -> dict[str, Any] | None:
        for _ in range(3):
            if self._create(self.key, self._record()):
                if self._create(self.key, self._record()):  # the server ignored If-None-Match
                    self.fs.rm_file(self.key, **self.deadline)
                    raise StoreError(
                        f"cannot lock {location.display(self.store)}: the server accepted a "
                        "second create-if-absent write of the same object (it ignores "
                        "If-None-Match), so it cannot keep two runs apart; use a server that "
                        "supports conditional writes, or set "
                        "DASK_DISTFOREST__LOCK__UNSAFE_SKIP=true if one run at a time writes it"
                    )
                return None
            seen = self._read()
            if seen is None:
                continue  # released meanwhile
            raw, holder = seen
            if holder is None:
                raise StoreError(
                    f"cannot lock {location.display(self.store)}: {self.shown} exists and is "
                    "not a lock distforest wrote (left as it is); remove it or choose another "
                    "output"
                )
            if float(holder.get("expires", 0)) > time.time():
                raise self._busy(holder)
            # Expired by this machine's clock: make sure no renewal comes (clocks differ).
            wait = float(holder.get("lease_seconds", self.lease)) / 3 * 1.2
            logger.info("the lease of %s has expired; watching %.0f s for a renewal",
                        describe_holder(holder), wait)  # fmt: skip
            time.sleep(wait)
            again = self._read()
            if again is None:
                continue
            if again[0] != raw:
                raise self._busy(again[1])
            self.marker = f"{self.key}.takeover-{holder.get('token', 'none')}"
            if not self._create(self.marker, json.dumps(self.holder).encode()):
                self.marker = None
                raise self._busy(holder)  # another run is taking it over
            self.fs.pipe_file(self.key, self._record(), **self.deadline)
            return holder
        raise self._busy(None)

    def _renew(self) -> None:
        while not self._stop.wait(self.lease / 3):
            try:
                seen = self._read()
                if seen is None or seen[1] is None or seen[1].get("token") != self.token:
                    logger.error("lost the lock %s: another run took it over", self.shown)
                    return
                self.fs.pipe_file(self.key, self._record(), **self.deadline)
            except Exception as exc:  # keep trying: the lease has some slack
                logger.warning("could not renew the lock %s: %s", self.shown, exc)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.fs is None:
            return
        with contextlib.suppress(Exception):
            seen = self._read()
            if seen is not None and seen[1] is not None and seen[1].get("token") == self.token:
                self.fs.rm_file(self.key, **self.deadline)
            if self.marker is not None:
                self.fs.rm_file(self.marker, **self.deadline)
