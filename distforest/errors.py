"""Every exception distforest raises on purpose.

Each error message says what is wrong, shows the offending value and
suggests a fix.  The CLI exits with the class's ``exit_code``: 2 bad
parameters (as click's usage errors), 3 bad input data, 4 bad YAML,
5 cluster problems, 6 store problems, 7 output busy (another run holds
its lock), 75 no progress (``EX_TEMPFAIL``: try again later), 130 Ctrl-C and
143 SIGTERM (:class:`Terminated`; both leave the run resumable), 1 anything else.
"""

from __future__ import annotations

import difflib
import errno
import threading
from collections.abc import Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any


class DistforestError(Exception):
    """Base class of every error raised on purpose by distforest."""

    exit_code = 1


class InputError(DistforestError, ValueError):
    """The user's data cannot be used: missing file, bad column, bad values."""

    exit_code = 3


class InputTypeError(InputError, TypeError):
    """Input of a type that cannot be used (e.g. a dict in an array cell)."""


class ParameterError(DistforestError, ValueError):
    """An estimator or command parameter has an invalid value."""

    exit_code = 2


class ConfigError(DistforestError, ValueError):
    """A YAML configuration file (pipeline or cluster) is invalid."""

    exit_code = 4


class ClusterError(DistforestError, RuntimeError):
    """A Dask cluster could not be created or reached."""

    exit_code = 5


class MissingDependencyError(ClusterError, ImportError):
    """An optional package needed for the requested feature is not installed."""

    exit_code = 5


class StalledError(ClusterError):
    """A run made no progress for too long (no task finished, or no worker left).

    Exit code 75 (``EX_TEMPFAIL``): try again later; the run's store stays
    resumable and its lock is released.
    """

    exit_code = 75


class StoreError(DistforestError, RuntimeError):
    """A Zarr store is missing, incomplete or of an unexpected layout."""

    exit_code = 6


#: How the caller replaces an existing output, as :class:`OutputExists` words it: Python's
#: keyword; the command line sets its option for the command's run (``run``: the pipeline's
#: key).
OVERWRITE_FIX: ContextVar[str] = ContextVar("overwrite_fix", default="pass overwrite=True")


class OutputExists(StoreError):
    """An output that is already there, refused without overwriting: one wording for every
    command and writer (made by :func:`distforest.location.existing_output`), its fix the
    caller's (:data:`OVERWRITE_FIX`)."""

    def __init__(self, shown: str, detail: str = "") -> None:
        super().__init__(
            f"output {shown!r} already exists{detail}; {OVERWRITE_FIX.get()} to replace it, or "
            "choose another path"
        )


#: ``errno`` values meaning that the disk (or the user's quota) is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFullError(StoreError):
    """The disk filled up while writing (exit 6, as every store problem).

    What was finished stays on disk: the store is not marked complete, and the
    same command run again (after freeing space) resumes it.
    """

    @classmethod
    def from_os_error(cls, exc: OSError, what: str | None = None) -> DiskFullError:
        """The error for ``exc`` (an ``OSError`` with an errno of :data:`DISK_FULL_ERRNOS`).

        ``what`` names what was being written; else the file of ``exc``.
        """
        where = what or (repr(str(exc.filename)) if exc.filename else "the output")
        return cls(
            f"disk full while writing {where} ({exc.strerror or exc}); nothing is marked "
            "complete: free some space (or write to another directory) and run the same "
            "command again (a half-written store resumes where it stopped)"
        )


class BusyError(StoreError):
    """Another live run holds the lock of the output store."""

    exit_code = 7


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (systemd, Slurm, ``kill``): handled as Ctrl-C is, exit 143 (128 + 15).

    A ``KeyboardInterrupt`` so that every ``with`` block and cleanup that handles
    Ctrl-C (locks released, no half-written chunk kept) handles it the same way.
    """

    exit_code = 143


class ChangedMeaningWarning(FutureWarning):
    """A name that meant something else in earlier versions (the message names the old mode).

    Silence it with ``warnings.filterwarnings("ignore", category=ChangedMeaningWarning)``.
    """


_DEFINING = threading.Lock()

if TYPE_CHECKING:
    from sklearn.exceptions import NotFittedError as _SklearnNotFitted

    class NotFittedError(DistforestError, _SklearnNotFitted):
        """A method needing a fitted estimator was called before ``fit``."""


def _not_fitted_error() -> type[DistforestError]:
    """Define :class:`NotFittedError` (a subclass of scikit-learn's, so imported late)."""
    from sklearn.exceptions import NotFittedError as _SklearnNotFitted

    class NotFittedError(DistforestError, _SklearnNotFitted):
        """A method needing a fitted estimator was called before ``fit``.

        Also scikit-learn's ``NotFittedError`` (so ``check_is_fitted`` callers catch it).
        """

        exit_code = 1

    NotFittedError.__module__ = __name__
    NotFittedError.__qualname__ = "NotFittedError"
    return NotFittedError


def __getattr__(name: str) -> Any:
    """``NotFittedError`` on first use: importing this module must not load scikit-learn
    (the command line's ``--help`` imports it)."""
    if name != "NotFittedError":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _DEFINING:  # one class, even when two threads ask at once
        if "NotFittedError" not in globals():
            globals()["NotFittedError"] = _not_fitted_error()
    return globals()["NotFittedError"]


def did_you_mean(value: Any, choices: Iterable[Any], *, cutoff: float = 0.6) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to ``value``, or ``""``.

    The one "did you mean" of distforest: parameters, columns, YAML keys and
    cluster-file keys all suggest the same way.
    """
    names = [str(c) for c in choices]
    text = str(value)
    lower = [c for c in names if c.lower() == text.lower() and c != text]
    close = lower or difflib.get_close_matches(text, names, n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""
