"""Zarr run stores: layout, provenance, completion status."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from distforest.store import chunks
from distforest.store.run_store import RunStore

chunks.install()  # a damaged chunk is a StoreError naming it, on every reader

if TYPE_CHECKING:
    import xarray as xr


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
    store = RunStore.open(path, require_complete=not allow_incomplete)
    if not store.is_complete:
        warnings.warn(
            f"store {store.path!r} is incomplete (status {store.status!r}); "
            "some tiles may be missing (NaN)",
            stacklevel=2,
        )
    return store.dataset()


__all__ = ["RunStore", "open_store"]
