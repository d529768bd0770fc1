"""Write a table (a pandas DataFrame) to CSV, Parquet or a Zarr group, never half-written.

Every writer first writes to a hidden temporary name in the destination's
folder and renames it into place only when complete, so an interrupted or
failed write leaves no partial file under the requested name.  An existing
destination is refused unless ``overwrite=True``; even then a directory is
only replaced if it is a Zarr store (a folder with ``zarr.json``), never an
arbitrary folder.

The Zarr layout (readable by ``xarray.open_zarr`` and by :func:`load_table`):

- one group; one 1-D array per column, named after it, with
  ``dimension_names = ("sample",)``;
- numeric and boolean columns in their NumPy dtype (pandas' nullable
  ``Int64``/``boolean``/``Float64`` as float64 with NaN for missing);
  text, object and categorical columns as variable-length UTF-8 strings
  (a missing text value is stored as the empty string, and the array's
  attribute ``empty_is_missing`` says so when no real value is empty),
  categorical columns of numbers as float64;
- group attributes ``columns`` (the column order: a Zarr group does not keep
  one), ``dtypes`` (pandas dtype names) and ``categories`` (the labels of
  each categorical column, in order); each array's attributes repeat its
  ``dtype`` and, if categorical, its ``categories``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distforest import location
from distforest.errors import InputError, ParameterError, StoreError
from distforest.io.attrs import decode_attrs, encode_attrs

__all__ = ["OUTPUT_FORMATS", "check_can_write", "output_format", "write_table"]

#: Suffix -> format name.
OUTPUT_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".zarr": "zarr"}


def output_format(path: str | Path) -> str:
    """The format a destination's suffix asks for: ``"csv"``, ``"parquet"`` or ``"zarr"``.

    Raises
    ------
    ParameterError
        For any other suffix; the message lists the supported ones.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise ParameterError(
            f"cannot write {str(path)!r}: unsupported output type {suffix or '(no suffix)'!r}; "
            f"name the output with one of {', '.join(OUTPUT_FORMATS)}"
        )
    return OUTPUT_FORMATS[suffix]


def check_can_write(path: str | Path, overwrite: bool = False) -> Path:
    """Check, before any work, that ``path`` can be written.

    Parameters
    ----------
    path : str or Path
        Destination (.csv, .parquet/.pq or .zarr).
    overwrite : bool
        Allow replacing an existing file or Zarr store.

    Returns
    -------
    Path
        The destination, resolved.

    Raises
    ------
    ParameterError
        Unsupported suffix.
    StoreError
        An existing destination without ``overwrite``, a directory that is
        not a Zarr store, a missing parent folder, or a folder this process
        cannot write (read-only mount, permissions): exit 6, as every output
        problem of the command line.
    """
    fmt = output_format(path)
    if location.is_remote(path):
        return _check_remote(path, fmt, overwrite)
    dest = Path(location.local(path)).resolve()
    if dest.parent.is_dir() and not os.access(dest.parent, os.W_OK | os.X_OK):
        raise StoreError(
            f"cannot write {str(path)!r}: the folder {str(dest.parent)!r} is not writable "
            "(read-only, or no permission); choose another output path"
        )
    if not dest.parent.is_dir():
        raise StoreError(
            f"cannot write {str(path)!r}: the folder {str(dest.parent)!r} does not exist; "
            "create it first"
        )
    if dest.exists() or dest.is_symlink():
        if not overwrite:
            raise location.existing_output(path)
        if dest.is_dir() and not (fmt == "zarr" and (dest / "zarr.json").exists()):
            raise StoreError(
                f"{str(path)!r} is a directory that is not a Zarr store; refusing to replace "
                "it: choose another name"
            )
        if not dest.is_dir() and fmt == "zarr":
            raise StoreError(
                f"{str(path)!r} exists and is a file, not a Zarr store; refusing to replace "
                "it: choose another name"
            )
    return dest


def _check_remote(url: Any, fmt: str, overwrite: bool) -> Any:
    """:func:`check_can_write` for a URL (object storage has no folders to check)."""
    if location.exists(url):
        shown = location.display(url)
        if not overwrite:
            raise location.existing_output(url)
        if location.is_dir(url) and not (
            fmt == "zarr" and location.exists(location.join(url, "zarr.json"))
        ):
            raise StoreError(
                f"{shown!r} is a folder that is not a Zarr store; refusing to replace it: "
                "choose another name"
            )
    return url


def _write_remote(frame: pd.DataFrame, url: Any, fmt: str, attrs: dict[str, Any]) -> None:
    """Object storage: a file is one upload (never seen half-written); a Zarr table is
    written in place, its metadata consolidated last."""
    import io

    if fmt == "zarr":
        if location.exists(url):
            location.remove_tree(url)
        _write_zarr(frame, url, attrs)
        return
    buffer = io.BytesIO()
    if fmt == "csv":
        frame.to_csv(buffer, index=False)
    else:
        frame.to_parquet(buffer, index=False)
    location.write_bytes(url, buffer.getvalue())


@contextlib.contextmanager
def _staged(dest: Path) -> Iterator[Path]:
    """A temporary sibling of ``dest``, moved onto ``dest`` only if the block succeeds."""
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        if dest.is_dir():
            trash = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(dest, trash)
            try:
                os.replace(tmp, dest)
            except OSError:
                os.replace(trash, dest)  # put the old store back
                raise
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_table(
    frame: pd.DataFrame,
    path: str | Path,
    *,
    overwrite: bool = False,
    attrs: dict[str, Any] | None = None,
) -> Path:
    """Write ``frame`` to ``path`` (.csv, .parquet/.pq or .zarr), atomically.

    Parameters
    ----------
    frame : pandas.DataFrame
        Column names must be unique strings (or convertible to them).
    path : str or Path
        Destination; the suffix chooses the format.
    overwrite : bool
        Replace an existing file / Zarr store.
    attrs : dict, optional
        Extra JSON-serialisable group attributes (Zarr only), e.g. provenance.

    Returns
    -------
    Path
        The written destination, resolved.
    """
    dest = check_can_write(path, overwrite)
    fmt = output_format(dest)
    names = [str(c) for c in frame.columns]
    if len(set(names)) != len(names):
        dup = sorted({c for c in names if names.count(c) > 1})
        raise InputError(f"cannot write {str(path)!r}: duplicate column names {dup}; rename them")
    if location.is_remote(dest):
        _write_remote(frame.set_axis(names, axis=1), dest, fmt, attrs or {})
        return dest
    with _staged(dest) as tmp:
        if fmt == "csv":
            frame.to_csv(tmp, index=False)
        elif fmt == "parquet":
            frame.set_axis(names, axis=1).to_parquet(tmp, index=False)
        else:
            _write_zarr(frame.set_axis(names, axis=1), tmp, attrs or {})
    return dest


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def _column(series: pd.Series) -> tuple[np.ndarray, dict[str, Any]]:
    """One column as a NumPy array for Zarr, and its attributes."""
    dtype = series.dtype
    attrs: dict[str, Any] = {"dtype": str(dtype)}
    if isinstance(dtype, pd.CategoricalDtype):
        categories = list(dtype.categories)
        attrs["categories"] = [_jsonable(c) for c in categories]
        if pd.api.types.is_numeric_dtype(dtype.categories.dtype):
            return series.astype("float64").to_numpy(), attrs
        return _strings(series.astype(object)), attrs
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        return series.to_numpy(), attrs
    if pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
        return series.to_numpy(dtype=np.float64, na_value=np.nan), attrs
    return _strings(series), attrs


def _strings(series: pd.Series) -> np.ndarray:
    values = series.astype(object).to_numpy()
    return np.array(["" if pd.isna(v) else str(v) for v in values], dtype=object)


def _empty_is_missing(series: pd.Series) -> bool:
    """True if every empty string written for ``series`` stands for a missing value."""
    missing = series.isna().to_numpy()
    if not missing.any():
        return False
    values = series.astype(object).to_numpy()[~missing]
    return not any(isinstance(v, str) and v == "" for v in values)


def _write_zarr(frame: pd.DataFrame, tmp: Any, attrs: dict[str, Any]) -> None:
    import zarr

    group = zarr.open_group(location.zarr_store(tmp), mode="w-")
    n = len(frame)
    dtypes, categories = {}, {}
    chunk = max(1, min(n, 1 << 20))
    for name in frame.columns:
        if "/" in name or name.startswith("__") or name in ("", ".", ".."):
            raise InputError(
                f"column {name!r} cannot be a Zarr array name (no '/', no leading '__', not "
                "empty); rename it"
            )
        values, col_attrs = _column(frame[name])
        if values.dtype == object and _empty_is_missing(frame[name]):
            col_attrs["empty_is_missing"] = True
        dtypes[name] = col_attrs["dtype"]
        if "categories" in col_attrs:
            categories[name] = col_attrs["categories"]
        array = group.create_array(
            name,
            shape=(n,),
            chunks=(chunk,),
            dtype=str if values.dtype == object else values.dtype,
            dimension_names=("sample",),
            attributes=encode_attrs(col_attrs),
        )
        if n:
            array[:] = values
    meta = {
        **attrs,
        "columns": list(frame.columns),
        "dtypes": dtypes,
        "categories": categories,
        "n_rows": n,
    }
    group.attrs.update(encode_attrs(json.loads(json.dumps(meta, default=str))))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        zarr.consolidate_metadata(location.zarr_store(tmp))


def read_zarr_table(path: str | Path) -> pd.DataFrame:
    """Read a Zarr group written by :func:`write_table` back into a DataFrame.

    Column order, pandas dtypes and categories are restored from the
    attributes; empty strings are read as missing where the writer marked
    them so (``empty_is_missing``).

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    pandas.DataFrame
    """
    import zarr

    group = zarr.open_group(location.zarr_store(path, read_only=True), mode="r")
    attrs = decode_attrs(group.attrs)
    columns = attrs.get("columns")
    if not isinstance(columns, list):
        raise InputError(
            f"{str(path)!r} is not a table written by distforest (no 'columns' attribute); "
            "open it with xarray.open_zarr instead"
        )
    dtypes = dict(attrs.get("dtypes") or {})
    data = {}
    for name in columns:
        node = group[name]
        assert isinstance(node, zarr.Array), name
        values = np.asarray(node[...])
        if values.dtype.kind == "T":
            values = values.astype(object)
        dtype = dtypes.get(name)
        series = pd.Series(values, name=name)
        column_attrs = decode_attrs(node.attrs)
        if column_attrs.get("empty_is_missing"):
            series = series.where(series != "", None)
        if dtype == "category":
            cats = column_attrs.get("categories", [])
            series = pd.Series(pd.Categorical(series, categories=cats))
        elif dtype is not None and dtype != str(series.dtype):
            with contextlib.suppress(TypeError, ValueError):
                series = series.astype(dtype)
        data[name] = series
    return pd.DataFrame(data, columns=columns)


def join_pieces(paths: list[str], dest: Path, suffix: str) -> None:
    """Files written by tasks (CSV pieces, the header in the first only, or Parquet files)
    appended to ``dest`` in order, one at a time, each removed once appended."""
    if suffix == ".csv":
        with open(dest, "wb") as out:
            for path in paths:
                with open(path, "rb") as piece:
                    shutil.copyfileobj(piece, out, length=1 << 20)
                Path(path).unlink()
        return
    import pyarrow.parquet as pq

    writer: Any = None
    try:
        for path in paths:
            table = pq.read_table(path)
            if writer is None:
                writer = pq.ParquetWriter(str(dest), table.schema)
            writer.write_table(table.cast(writer.schema))
            del table
            Path(path).unlink()
    finally:
        if writer is not None:
            writer.close()


@contextlib.contextmanager
def pieces_beside(dest: Path) -> Iterator[Path]:
    """A new hidden folder beside ``dest`` where tasks write their pieces, removed at the end."""
    folder = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}.pieces")
    folder.mkdir(parents=True)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def publish_pieces(paths: list[str], dest: Path) -> None:
    """CSV pieces appended in order to a temporary file beside ``dest``, then renamed onto
    it: nothing is left under ``dest``'s name if joining fails."""
    partial = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        join_pieces(paths, partial, ".csv")
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
