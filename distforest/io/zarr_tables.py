"""A table stored in Zarr, as both readers (in memory and partitioned) find it.

Two layouts: distforest's own (a 2-D array ``X`` with its ``feature_names``
attribute, and an optional 1-D target ``y``), or any group of 1-D arrays of
equal length, one per column, read through :func:`xarray.open_zarr`.  A Zarr
group does not record the order of its arrays: the ``columns`` attribute that
distforest's writer stores gives it, else the columns are sorted by name.
The callers turn what is found here into numpy arrays or dask partitions.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from distforest.errors import InputError
from distforest.io.attrs import decode_value

__all__ = ["columns_dataset", "x_and_y"]


def x_and_y(node: Any) -> tuple[Any, list[str] | None, Any] | None:
    """``(X, feature names or None, y or None)`` of a group in distforest's layout, else None."""
    import zarr

    if "X" not in node or not isinstance(node["X"], zarr.Array):
        return None
    xa = node["X"]
    stored = decode_value(xa.attrs.get("feature_names"))
    names = [str(c) for c in stored] if isinstance(stored, list) else None
    return xa, names, node["y"] if "y" in node else None


def columns_dataset(node: Any, source: str, path: Path | None = None) -> Any:
    """The group's 1-D arrays as an ``xarray.Dataset``, its variables in column order.

    Parameters
    ----------
    node : zarr.Group
        The group (without an ``X`` array).
    source : str
        The input's name, for messages.
    path : Path, optional
        The group's folder on disk, opened by path when given.

    Raises
    ------
    InputError
        xarray cannot open the group as a dataset.
    """
    import xarray as xr

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if path is not None:
                ds = xr.open_zarr(str(path), consolidated=False)
            else:
                ds = xr.open_zarr(node.store, group=node.path or None, consolidated=False)
    except Exception as exc:
        raise InputError(
            f"{source}: a Zarr group without an 'X' array could not be opened with "
            f"xarray.open_zarr: {exc}; store the features as a 2-D array 'X'"
        ) from exc
    stored = decode_value(node.attrs.get("columns")) if hasattr(node, "attrs") else None
    if isinstance(stored, list) and sorted(map(str, stored)) == sorted(map(str, ds.data_vars)):
        return ds[[str(c) for c in stored]]
    return ds[sorted(ds.data_vars, key=str)]
