"""Temporary run stores: made under dask's ``temporary-directory``, removed with their owner.

An input read by partitions (:mod:`distforest.store.source`) and results too
large for memory (:mod:`distforest.store.sink`) live in a store of a new folder
that lives as long as its *owner* (the fitted estimator whose arrays are in it):
removed when the owner is garbage-collected, when the owner gets a new one, or
at once by :func:`release`.  :func:`temporary_store` is the same folder for a
``with`` block.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["new_folder", "release", "temporary_store", "tie"]

#: The removal of each owner's temporary folder, by ``id(owner)`` (owners need not be
#: hashable: a source with a dict of categories is one); an entry leaves with its owner.
_FOLDERS: dict[int, weakref.finalize] = {}


def new_folder(prefix: str = "distforest-input-") -> Path:
    """A new empty folder under dask's ``temporary-directory`` (else the system's)."""
    import dask

    parent = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def _remove(key: int, folder: str) -> None:
    _FOLDERS.pop(key, None)
    shutil.rmtree(folder, ignore_errors=True)


def tie(owner: Any, folder: Path) -> None:
    """Remove ``folder`` when ``owner`` is garbage-collected (or released); the owner's
    previous folder, if any, is removed now."""
    release(owner)
    _FOLDERS[id(owner)] = weakref.finalize(owner, _remove, id(owner), str(folder))


def release(owner: Any) -> None:
    """Remove the temporary folder of ``owner`` now (nothing if it has none)."""
    done = _FOLDERS.get(id(owner))
    if done is not None:
        done()


@contextlib.contextmanager
def temporary_store() -> Iterator[Path]:
    """The path of a run store to create in a new folder, removed when the block ends
    (also on errors)."""
    work = new_folder()
    try:
        yield work / "run.zarr"
    finally:
        shutil.rmtree(work, ignore_errors=True)
