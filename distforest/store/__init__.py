"""Zarr run stores: layout, provenance, completion status."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr

    from distforest.store.run_store import RunStore


def __getattr__(name: str) -> object:
    """``RunStore`` on first use: the light modules of this package (the row source's
    rule, temporary folders, the schema) load without Zarr or numba."""
    if name == "RunStore":
        from distforest.store.run_store import RunStore

        return RunStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(path: str | Path, *, allow_incomplete: bool = False) -> xr.Dataset:
    """Open a run store as a lazy :class:`xarray.Dataset`.

    Parameters
    ----------
    path : str or Path
        The store written by distforest.
    allow_incomplete : bool
        Open a store whose run did not finish (with a warning) instead of
        raising :class:`~distforest.errors.StoreError`.

    Returns
    -------
    xarray.Dataset
        Arrays such as ``proximity`` (dims ``sample_i``, ``sample_j``),
        ``leaves`` and ``inbag`` (``sample``, ``tree``); provenance in ``attrs``.
    """
    from distforest.store.run_store import RunStore

    store = RunStore.open(path, require_complete=not allow_incomplete)
    if not store.is_complete:
        warnings.warn(
            f"store {store.path!r} is incomplete (status {store.status!r}); "
            "some tiles may be missing (NaN)",
            stacklevel=2,
        )
    return store.dataset()


__all__ = ["RunStore", "open_store"]
