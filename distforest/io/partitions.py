"""Open a user's table as partitions that tasks read, never as one frame in this process.

:func:`open_partitions` turns a source into a :class:`Partitions`: a lazy
``dask.dataframe`` (tables) or ``dask.array`` (numeric arrays) whose
partitions are defined by dask's own readers, plus one name per partition
for error messages (the part file it came from).  Nothing is read here
except a text file's header (to sniff its delimiter) and Parquet metadata.

Accepted sources:

- a CSV / TSV / TXT file or a glob of them (``"exports/day-*.csv"``): read
  with :func:`dask.dataframe.read_csv` in blocks of ``blocksize`` bytes,
  every column as text (the encoding is decided later from summaries of all
  partitions, not from dask's guess on the first block); the delimiter is
  sniffed from the first file's header (comma, tab, semicolon, bar);
- a Parquet file, or a folder of Parquet files of any names, including a
  hive-partitioned dataset (``year=2024/part-0.parquet``; its partition
  keys become columns): :func:`dask.dataframe.read_parquet`;
- a Zarr array, or a Zarr group holding a 2-D array ``X`` (and optionally a
  1-D ``y``): :func:`dask.array.from_zarr`;
- an in-memory ``dask.dataframe.DataFrame`` or ``dask.array.Array`` (used
  as they are: their partitions run on the workers), a pandas DataFrame or
  an xarray Dataset (its 1-D variables become columns;
  ``Dataset.to_dask_dataframe`` keeps a chunked one lazy).
"""

from __future__ import annotations

import csv
import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distforest import location
from distforest.errors import InputError
from distforest.io.zarr_tables import columns_dataset, x_and_y

__all__ = ["DEFAULT_BLOCKSIZE", "Partitions", "open_partitions", "sniff_delimiter"]

#: Bytes of text per CSV partition (dask's ``blocksize``).
DEFAULT_BLOCKSIZE = "64MB"

#: Delimiters tried on a text file's header, in order of preference on ties.
DELIMITERS = ",\t;|"

#: Name of the column dask's CSV reader adds with each row's file.
PATH_COLUMN = "__distforest_file__"

_TEXT = (".csv", ".tsv", ".txt")
_PARQUET = (".parquet", ".pq")


@dataclass(frozen=True)
class Partitions:
    """A table as lazy partitions.

    Attributes
    ----------
    frame : dask.dataframe.DataFrame or None
        The table (tables); None for a numeric array.
    array : dask.array.Array or None
        The features (arrays); None for a table.
    columns : tuple of str
        Column names (for an array: ``"0"``, ``"1"``, ... or stored names).
    source : str
        What the user gave, for messages.
    names : tuple of str or None
        The part file of each partition (None: ``"partition k"``; for CSV the
        file is read from :data:`PATH_COLUMN` in each partition).
    y : dask.array.Array or None
        A target stored next to an array (a Zarr group's ``y``).
    text : bool
        Every column was read as text (CSV): numbers are parsed from strings.
    sep : str or None
        The delimiter of a text source.
    protocol : str or None
        The URL scheme of a source on another file system (``"s3"``): dask's
        path column holds the files without it, :meth:`file_url` puts it back.
    """

    frame: Any
    array: Any
    columns: tuple[str, ...]
    source: str
    names: tuple[str, ...] | None = None
    y: Any = None
    text: bool = False
    sep: str | None = None
    protocol: str | None = None

    def file_url(self, file: str | None) -> str | None:
        """A part file as the user names it: with the URL scheme of a remote source."""
        if file is None or self.protocol is None:
            return file
        return f"{self.protocol}://{file.lstrip('/')}"

    @property
    def npartitions(self) -> int:
        """Number of partitions."""
        data = self.frame if self.frame is not None else self.array
        return int(data.npartitions) if self.frame is not None else len(data.chunks[0])

    def partition_name(self, k: int) -> str:
        """The part file of partition ``k``, or ``"partition k+1 of N"``."""
        if self.names is not None and k < len(self.names):
            return self.names[k]
        return f"partition {k + 1} of {self.npartitions}"


def _first_line(path: str | Path) -> str:
    """The header line of a text file, local or at a URL (read alone, not the file)."""
    if location.is_remote(path):
        import fsspec

        with fsspec.open(str(path), "rt", newline="", encoding="utf-8-sig",
                         **location.open_options(path)) as fh:  # fmt: skip
            return str(fh.readline())
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return fh.readline()


def sniff_delimiter(path: str | Path) -> str:
    """The delimiter of a text file (local or a URL), from its header: the one giving the
    most columns.

    Raises
    ------
    InputError
        If the file is empty.
    """
    first = _first_line(path)
    if not first.strip():
        raise InputError(f"{path}: the file is empty (no header row)")
    widths = {d: len(next(csv.reader([first], delimiter=d))) for d in DELIMITERS}
    return max(widths, key=lambda d: widths[d])  # ties keep the first (comma)


def open_partitions(
    source: Any, *, na_values: tuple[str, ...] | list[str] = (), blocksize: Any = None
) -> Partitions:
    """Open ``source`` as lazy partitions (see the module docstring for what is accepted).

    Parameters
    ----------
    source : str, Path, dask/pandas DataFrame, dask array, xarray Dataset, zarr Array/Group
    na_values : sequence of str
        Extra strings that mark a missing value in text files.
    blocksize : int or str, optional
        Bytes per CSV partition (default :data:`DEFAULT_BLOCKSIZE`).

    Returns
    -------
    Partitions

    Raises
    ------
    InputError
        No such file, nothing matching a glob, an unsupported type.
    """
    import dask.array as da
    import dask.dataframe as dd

    if isinstance(source, str | Path):
        return _open_path(str(source), list(na_values), blocksize or DEFAULT_BLOCKSIZE)
    mod = type(source).__module__.split(".")[0]
    if isinstance(source, dd.DataFrame):
        return Partitions(source, None, tuple(map(str, source.columns)), "<dask.DataFrame>")
    if isinstance(source, da.Array):
        return _array(source, "<dask.Array>")
    if isinstance(source, pd.DataFrame):
        frame = dd.from_pandas(source, npartitions=max(1, len(source) // 1_000_000 + 1))
        return Partitions(frame, None, tuple(map(str, source.columns)), "<pandas.DataFrame>")
    if mod == "xarray":
        return _dataset(source)
    if mod == "zarr":
        return _zarr(source, f"<zarr.{type(source).__name__}>")
    raise InputError(
        f"cannot read a {type(source).__name__} by partitions; pass a path (CSV/TSV or a glob "
        "of them, a Parquet file or dataset folder, a Zarr store) or a dask/pandas DataFrame, "
        "dask array, xarray Dataset or zarr Array/Group"
    )


def _array(arr: Any, source: str, names: list[str] | None = None, y: Any = None) -> Partitions:
    if arr.ndim != 2:
        raise InputError(
            f"{source}: expected a 2-D array (samples x features), got {arr.ndim}-D with shape "
            f"{arr.shape}; reshape it, e.g. x.reshape(-1, 1) for a single feature"
        )
    if np.dtype(arr.dtype).kind not in "biuf":
        raise InputError(
            f"{source}: array dtype {arr.dtype} is not numeric; convert it to numbers or pass "
            "a table so that categorical columns get encoded"
        )
    if any(np.isnan(c) for c in arr.chunks[0]):
        raise InputError(f"{source}: the dask array's row chunk sizes are unknown; call "
                         "compute_chunk_sizes() on it first")  # fmt: skip
    if arr.chunks[1] != (arr.shape[1],):
        arr = arr.rechunk({1: -1})  # a task reads whole rows
    cols = tuple(names) if names is not None else tuple(str(i) for i in range(arr.shape[1]))
    if len(cols) != arr.shape[1]:
        raise InputError(f"{source}: {len(cols)} feature names for {arr.shape[1]} columns")
    return Partitions(None, arr, cols, source, y=y)


def _dataset(ds: Any) -> Partitions:
    import xarray as xr

    if isinstance(ds, xr.DataArray):
        import dask.array as da

        data = ds.data if isinstance(ds.data, da.Array) else da.from_array(ds.values)
        dim = ds.dims[1]
        names = [str(c) for c in ds[dim].values] if dim in ds.coords else None
        return _array(data, "<xarray.DataArray>", names)
    dims = {k: v.dims for k, v in ds.data_vars.items()}
    if not dims or len(set(dims.values())) != 1 or len(next(iter(dims.values()))) != 1:
        raise InputError(
            f"<xarray.Dataset>: every data variable must be 1-D along one common dimension, "
            f"got {dims}; select the variables to use, e.g. ds[['a', 'b']]"
        )
    dim = next(iter(dims.values()))[0]
    ds = ds.drop_vars([c for c in ds.coords])
    if not ds.chunks:
        ds = ds.chunk({dim: max(1, ds.sizes[dim] // 8 or 1)})
    frame = ds.to_dask_dataframe(dim_order=[dim])
    frame = frame.drop(columns=[c for c in frame.columns if c == dim])
    return Partitions(frame, None, tuple(map(str, frame.columns)), "<xarray.Dataset>")


def _zarr(node: Any, source: str) -> Partitions:
    import dask.array as da
    import zarr

    if isinstance(node, zarr.Array):
        return _array(da.from_zarr(node), source)
    found = x_and_y(node)
    if found is not None:
        xa, names, ya = found
        y = da.from_zarr(ya) if ya is not None else None
        return _array(da.from_zarr(xa), source, names, y)
    parts = _dataset(columns_dataset(node, source))
    return Partitions(parts.frame, None, parts.columns, source)


def _open_path(path: str, na: list[str], blocksize: Any) -> Partitions:
    if location.is_remote(path):
        return _open_url(path, na, blocksize)
    path = location.local(path)
    p = Path(path)
    if glob.has_magic(path) and not p.exists():
        files = sorted(glob.glob(path))
        if not files:
            raise InputError(f"no file matches {path!r}; check the pattern")
        if _parquet_files(files, path):
            return _parquet(files, path)
        return _text(files, path, na, blocksize)
    if not p.exists():
        raise InputError(f"no such file: {path} (resolved to {os.path.realpath(p)}); "
                         "check the path")  # fmt: skip
    suffix = p.suffix.lower()
    if p.is_dir():
        if suffix == ".zarr" or any((p / f).exists() for f in ("zarr.json", ".zgroup", ".zarray")):
            import zarr

            try:
                node = zarr.open(str(p), mode="r")
            except Exception as exc:
                raise InputError(f"{path}: cannot open as a Zarr store: {exc}") from exc
            return _zarr(node, path)
        return _parquet(p, path)
    if suffix in _TEXT:
        return _text([path], path, na, blocksize)
    if suffix in _PARQUET:
        return _parquet(p, path)
    if suffix == ".npy":
        import dask.array as da

        arr = np.load(p, mmap_mode="r", allow_pickle=False)  # a view of the file, not a copy
        rows = max(1, (1 << 20) // max(1, arr.shape[-1])) if arr.ndim == 2 else -1
        return _array(da.from_array(arr, chunks=(rows, -1) if arr.ndim == 2 else -1), path)
    raise InputError(
        f"{path}: unsupported file type {suffix or '(none)'!r}; give a CSV/TSV/TXT file or a "
        "glob of them, a Parquet file or dataset folder, a .npy file or a Zarr store"
    )


def _open_url(url: str, na: list[str], blocksize: Any) -> Partitions:
    """A source at an fsspec URL: the same rules as a local path, read by dask's readers
    with the URL's storage options (the tasks open the files; nothing is read here but a
    text file's header and Parquet metadata)."""
    name = location.display(url)
    try:
        fs, where = location.filesystem(url)
        fs.invalidate_cache()
        if glob.has_magic(where) and not fs.exists(where):
            files = sorted(fs.glob(where))
            if not files:
                raise InputError(f"no file matches {name!r}; check the pattern")
            urls: list[Any] = [location.Location(fs.unstrip_protocol(f), location.options(url))
                    for f in files]  # fmt: skip
            if _parquet_files(files, name):
                return _parquet(urls, name)
            return _text(urls, name, na, blocksize)
        if not fs.exists(where):
            raise InputError(f"no such file: {name}; check the URL")
        suffix = Path(where.rstrip("/")).suffix.lower()
        if fs.isdir(where):
            if suffix == ".zarr" or any(fs.exists(f"{where.rstrip('/')}/{m}")
                                        for m in ("zarr.json", ".zgroup", ".zarray")):  # fmt: skip
                import zarr

                return _zarr(zarr.open(location.zarr_store(url, read_only=True), mode="r"), name)
            return _parquet(url, name)
        if suffix in _TEXT:
            return _text([url], name, na, blocksize)
        if suffix in _PARQUET:
            return _parquet(url, name)
    except InputError:
        raise
    except Exception as exc:
        reached = location.access_error(exc, url)
        if reached is not None:
            raise reached from None
        raise InputError(f"{name}: cannot read it: {location.why(exc)}") from exc
    raise InputError(
        f"{name}: unsupported file type {suffix or '(none)'!r} at a URL for reading by "
        "partitions; give a CSV/TSV/TXT file or a glob of them, a Parquet file or dataset "
        "folder, or a Zarr store"
    )


def _text(files: list[str], source: str, na: list[str], blocksize: Any) -> Partitions:
    import dask.dataframe as dd

    check_parts(files, source, None, text=True)
    sep = sniff_delimiter(files[0])
    header = next(csv.reader([_first_line(files[0])], delimiter=sep))
    dup = sorted({c for c in header if header.count(c) > 1})
    if dup:
        raise InputError(f"{files[0]}: duplicate column names in the header: {dup}; rename them")
    try:
        frame = dd.read_csv(
            files if len(files) > 1 else files[0],
            sep=sep,
            dtype=object,  # decided from the summaries of all partitions, not from a sample
            na_values=na or None,
            keep_default_na=True,
            blocksize=blocksize,
            encoding="utf-8-sig",
            include_path_column=PATH_COLUMN,
            storage_options=location.open_options(files[0]) or None,
        )
    except Exception as exc:
        raise InputError(f"{source}: cannot read as delimited text ({sep!r}-separated): "
                         f"{exc}") from exc  # fmt: skip
    columns = tuple(str(c) for c in frame.columns if c != PATH_COLUMN)
    if list(columns) != [str(c) for c in header]:
        raise InputError(f"{source}: the files do not share one header ({list(columns)} "
                         f"vs {header}); give files with the same columns")  # fmt: skip
    return Partitions(frame, None, columns, source, None, text=True, sep=sep,
                      protocol=location.protocol(files[0]) if location.is_remote(files[0])
                      else None)  # fmt: skip


def _part_link_outside(file: str, folder: Any) -> str | None:
    """Where the local part ``file`` points, when it is a link leading outside ``folder``
    (the dataset folder, else the part's own folder); else None."""
    if location.is_remote(file) or not os.path.islink(file):
        return None
    root = os.path.realpath(folder if folder is not None else os.path.dirname(file))
    target = os.path.realpath(file)
    return None if target.startswith(root.rstrip("/") + "/") else target


def _part_columns(file: str, text: bool, source: str) -> dict[str, str]:
    """Column name -> type (``"text"`` for a text file's header) of one part, read from its
    header or Parquet footer only; :class:`InputError` for an empty part or one that is not
    a table."""
    if text:
        try:
            first = _first_line(file)
        except UnicodeDecodeError as exc:
            raise InputError(f"{source}: part {file} is not a text table (not UTF-8 text: "
                             f"{location.why(exc)}); remove it from the files the pattern "
                             "matches, or write it again as CSV") from None  # fmt: skip
        if not first.strip():
            raise InputError(f"{source}: part {file} is empty (no header row); remove it")
        return dict.fromkeys(next(csv.reader([first], delimiter=sniff_delimiter(file))), "text")
    import pyarrow.parquet as pq

    fs, where = location.filesystem(file) if location.is_remote(file) else (None, file)
    if fs is None and os.path.getsize(file) == 0:
        raise InputError(f"{source}: part {file} is empty (0 bytes); remove it or write it again")
    try:
        schema = pq.read_schema(where, filesystem=fs)
    except Exception as exc:
        raise InputError(f"{source}: part {file} is not a Parquet table ({location.why(exc)}); "
                         "remove it from the folder or write it again") from exc  # fmt: skip
    return {name: _kind(schema.field(name).type) for name in schema.names}


def _kind(arrow_type: Any) -> str:
    """A column's type as parts may differ in it without changing the values (any integer or
    float is a number; any string is text)."""
    import pyarrow.types as pat

    if pat.is_integer(arrow_type) or pat.is_floating(arrow_type) or pat.is_decimal(arrow_type):
        return "number"
    if pat.is_string(arrow_type) or pat.is_large_string(arrow_type):
        return "text"
    if pat.is_dictionary(arrow_type):
        return _kind(arrow_type.value_type)
    return str(arrow_type)


def check_parts(files: Sequence[str], source: str, folder: Any, *, text: bool = False) -> None:
    """Every part of a folder (or glob) checked by name before anything is read or written.

    A link leading outside the folder, an empty part, a part that is not a table,
    and a part whose columns differ from the first part's (a missing or extra
    column, another type) raise :class:`InputError` (exit 3) naming the part
    and the column.  Only each part's header or footer is read.  A CSV part's
    columns are all text here: their types are compared where their values are
    read, in the summaries pass (a column that is numbers in one part and text
    in another, :func:`distforest.io.summaries.decide`).
    """
    first: dict[str, str] | None = None
    for file in map(str, files):
        outside = _part_link_outside(file, folder)
        if outside is not None:
            raise InputError(
                f"{source}: part {file} is a link to {outside}, outside the "
                "folder; copy the file into the folder or remove the link"
            )
        columns = _part_columns(file, text, source)
        if first is None:
            first, first_file = columns, file
            continue
        missing = [c for c in first if c not in columns]
        extra = [c for c in columns if c not in first]
        changed = [c for c in first if c in columns and columns[c] != first[c]]
        if missing or extra or changed:
            what = (f"has no column {missing[0]!r}" if missing else
                    f"has a column {extra[0]!r}" if extra else
                    f"holds column {changed[0]!r} as {columns[changed[0]]}, not "
                    f"{first[changed[0]]}")  # fmt: skip
            raise InputError(f"{source}: part {file} {what}, unlike the part {first_file}; "
                             "every part must have the same columns of the same types")  # fmt: skip


def _parquet_files(files: list[str], source: str) -> bool:
    """Whether the files a glob matched are Parquet files (else text); a mix is refused."""
    parquet = [Path(str(f)).suffix.lower() in _PARQUET for f in files]
    if any(parquet) and not all(parquet):
        text = files[parquet.index(False)]
        raise InputError(f"{source} matches Parquet files and others (e.g. {text}); give a "
                         "pattern that matches one kind, e.g. '*.parquet'")  # fmt: skip
    return all(parquet)


def _parquet(p: Path | str | list[Any], source: str) -> Partitions:
    """A Parquet file, a dataset folder (hive folders allowed) or the files of a glob."""
    import dask.dataframe as dd
    import pyarrow.dataset as pads

    first = p[0] if isinstance(p, list) else p
    options = location.open_options(first)
    try:
        if location.is_remote(first):  # pyarrow lists the files through the fsspec file system
            fs, where = location.filesystem(str(first))
            if isinstance(p, list):  # a glob's files: no hive folders to read
                listed = [location.filesystem(str(f))[1] for f in p]
                dataset = pads.dataset(listed, format="parquet", filesystem=fs)
            else:
                dataset = pads.dataset(where, format="parquet", partitioning="hive", filesystem=fs)
            files = tuple(fs.unstrip_protocol(f) for f in dataset.files)
        elif isinstance(p, list):
            dataset = pads.dataset([str(f) for f in p], format="parquet")
            files = tuple(dataset.files)
        else:
            dataset = pads.dataset(str(p), format="parquet", partitioning="hive")
            files = tuple(dataset.files)
    except Exception as exc:
        raise InputError(f"{source}: cannot open as a Parquet file or dataset folder: {exc}; "
                         "a folder must hold Parquet files (any names, hive folders "
                         "allowed)") from exc  # fmt: skip
    if not files:
        raise InputError(f"{source}: the folder holds no Parquet file")
    check_parts(files, source, None if isinstance(p, list) else p)
    try:
        where_read: Any = [str(f) for f in p] if isinstance(p, list) else str(p)
        frame = dd.read_parquet(where_read, split_row_groups=False, parquet_file_extension=None,
                                storage_options=options or None)  # fmt: skip
    except Exception as exc:
        raise InputError(f"{source}: cannot read the Parquet data: {exc}") from exc
    names = files if frame.npartitions == len(files) else None
    return Partitions(frame, None, tuple(map(str, frame.columns)), source, names)
