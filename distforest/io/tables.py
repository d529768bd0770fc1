"""Read a user's table into a numeric feature matrix ``X`` and an optional target ``y``.

Accepted sources: a path to a ``.csv`` / ``.tsv`` / ``.txt`` file (delimiter sniffed from
the header: comma, tab or semicolon), a ``.parquet`` file, a ``.npy`` file (loaded with
``allow_pickle=False``) or a Zarr store (a directory ending in ``.zarr`` or holding
``zarr.json``); or an in-memory pandas DataFrame, 2-D numpy / dask array, xarray
DataArray or Dataset, zarr Array or Group.  A zarr Group holding a 2-D array ``X`` (and
optionally a 1-D ``y``) is read directly, with feature names from
``X.attrs["feature_names"]``; any other group is opened with ``xarray.open_zarr`` and
its 1-D data variables become columns, sorted by name (a store keeps no order).
Unnamed array columns are called ``"0"``, ``"1"``, ...

Encoding of feature columns:

- bool columns become 0.0 / 1.0; numeric columns become float64;
- a text column is read by one rule (:func:`distforest.io.encoding.decide_decimal`):
  its decimal mark, ``.`` or ``,``, is decided from the whole column (or set with
  ``decimal=`` / ``--decimal``), a thousands separator is never read; a column mixing
  both marks is refused naming a row of each; a column of numbers with a few values
  that are not numbers (often a missing-value marker such as ``?``) is refused naming
  the first one; otherwise the column is categorical: its labels (as strings) are
  sorted, value ``labels[k]`` is coded ``k`` and ``Table.categories[name]`` records
  the labels;
- nested values (Parquet list / struct columns, lists or dicts in cells) are refused.

Missing values are NaN in ``X``.  The target is returned as given (no encoding) and must
have no missing values and at least two distinct values.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import hashlib
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distforest import location
from distforest.errors import InputError, InputTypeError, did_you_mean
from distforest.io.zarr_tables import columns_dataset, x_and_y

__all__ = ["SUPPORTED_EXTENSIONS", "Table", "decimal_mark", "load_table", "read_frame"]

SUPPORTED_EXTENSIONS = (".csv", ".tsv", ".txt", ".parquet", ".pq", ".npy", ".zarr")
_TEXT = (".csv", ".tsv", ".txt")


@dataclass(frozen=True, eq=False)
class Table:
    """A numeric feature matrix with its names, category labels and optional target.

    Attributes
    ----------
    X : numpy.ndarray
        float64, shape (n_samples, n_features), C-contiguous; NaN marks a missing value;
        categorical features hold ordinal codes.
    feature_names : tuple of str
        One name per column of ``X``.
    categories : dict of str to tuple
        For categorical features only: code ``k`` in ``X`` means ``categories[name][k]``.
    y : numpy.ndarray or None
        Target values as given (numeric or object/str dtype), shape (n_samples,).
    target_name : str or None
        Name of the target column, if it came from one.
    source : str
        Where the data came from, e.g. ``"data.csv"`` or ``"<pandas.DataFrame>"``.
    ids : numpy.ndarray or None
        Row IDs (``id=COLUMN``, or a DataFrame's own index); None: row numbers.
    id_name : str or None
        Name of the ID column (the index's name, ``"index"`` when it has none).
    """

    X: np.ndarray
    feature_names: tuple[str, ...]
    categories: dict[str, tuple] = field(default_factory=dict)
    y: np.ndarray | None = None
    target_name: str | None = None
    source: str = "<unknown>"
    ids: np.ndarray | None = None
    id_name: str | None = None

    @property
    def n_samples(self) -> int:
        """Number of rows of ``X``."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of columns of ``X``."""
        return int(self.X.shape[1])

    def fingerprint(self) -> str:
        """Hash of the data, stable across runs and machines.

        Returns
        -------
        str
            Hex blake2b digest (16 bytes) of the shape and bytes of ``X``, the feature
            names, the category labels and ``y``.
        """
        h = hashlib.blake2b(digest_size=16)
        h.update(repr(self.X.shape).encode())
        h.update(np.ascontiguousarray(self.X, dtype="<f8").tobytes())
        h.update("\x1f".join(self.feature_names).encode())
        h.update(repr(sorted(self.categories.items())).encode())
        if self.y is None:
            h.update(b"no-y")
        elif self.y.dtype.kind in "biuf":
            h.update(self.y.dtype.str.encode() + np.ascontiguousarray(self.y).tobytes())
        else:
            h.update("\x1f".join(repr(v) for v in self.y.tolist()).encode())
        return h.hexdigest()


def load_table(
    source: Any,
    *,
    target: str | None = None,
    y: Any = None,
    drop: Sequence[str] = (),
    na_values: Sequence[str] = (),
    allow_missing: bool = True,
    min_rows: int = 2,
    id: str | None = None,
    decimal: str | None = None,
) -> Table:
    """Read ``source`` into a :class:`Table`.

    Parameters
    ----------
    source : str, pathlib.Path or array-like
        A path (csv/tsv/txt, parquet, npy, Zarr store) or an in-memory pandas
        DataFrame, numpy/dask array, xarray DataArray/Dataset, zarr Array/Group.
    target : str, optional
        Name of the column to use as the target; it is removed from ``X``.
    y : array-like, optional
        A separate 1-D target of length n_samples.  Not together with ``target``.
    drop : sequence of str
        Columns to leave out (e.g. an identifier).
    na_values : sequence of str
        Extra strings that mark a missing value (e.g. ``"?"``).
    allow_missing : bool
        If False, missing feature values raise an error.
    min_rows : int
        Fewest rows accepted (2 to fit a forest; 1 for new rows to transform).
    id : str, optional
        Column of row IDs (repeated values are kept, with a warning):
        removed from the features, kept as :attr:`Table.ids`.  Without it,
        a DataFrame whose index is not the default ``0..n-1`` gives its
        index as the IDs.  A feature column
        that looks like an ID (unique values named like ``id`` or ``key``, or
        consecutive integers) is used as a feature, with a warning.
    decimal : {".", ","}, optional
        Decimal mark of numbers written as text; default: the one set by
        :func:`decimal_mark`, else decided per column from its values.

    Returns
    -------
    Table

    Raises
    ------
    InputError
        If the data cannot be read or used; the message names the source, the column
        and the bad value, and suggests a fix.
    """
    if target is not None and y is not None:
        raise InputError("give either target= (a column name) or y= (an array), not both")
    na = [str(v) for v in na_values]
    drop = [str(c) for c in drop]
    target = None if target is None else str(target)
    refuse_sparse(source)
    decimal = _decimal(decimal)
    data, name, y_stored = _read(source, na, decimal)
    if isinstance(data, pd.DataFrame):
        names = [str(c) for c in data.columns]
        dup = sorted({c for c in names if names.count(c) > 1})
        if dup:
            raise InputError(f"{name}: duplicate column names {dup}; rename them")
    else:
        names = data[1]
    id_col = None if id is None else str(id)
    for col in [*drop, *([target] if target is not None else []), *([id_col] if id_col else [])]:
        check_column(col, names, name)
    skip = {*drop, target, id_col}
    keep = [i for i, c in enumerate(names) if c not in skip]
    n = len(data) if isinstance(data, pd.DataFrame) else data[0].shape[0]
    if n == 0:
        raise InputError(f"{name}: the table has no data rows")
    if not keep:
        raise InputError(
            f"{name}: no feature columns left after removing target/drop: 0 feature(s) "
            f"(shape=({n}, 0)) while a minimum of 1 is required."
        )
    if n < min_rows:
        raise InputError(f"{name}: the table has a single row (1 sample); at least 2 are needed")
    categories: dict[str, tuple] = {}
    if isinstance(data, pd.DataFrame):
        X = np.empty((n, len(keep)), dtype=np.float64)
        for j, i in enumerate(keep):
            X[:, j], labels = _encode(data.iloc[:, i], names[i], name, na, decimal)
            if labels is not None:
                categories[names[i]] = labels
        yv = None if target is None else data.iloc[:, names.index(target)].to_numpy()
    else:
        arr = data[0]
        sub = arr if len(keep) == arr.shape[1] else arr[:, keep]
        X = np.ascontiguousarray(sub, dtype=np.float64)
        yv = None if target is None else arr[:, names.index(target)]
    feature_names = tuple(names[i] for i in keep)
    _check_features(X, feature_names, name, allow_missing)
    ids, id_name = _row_ids(data, names, id_col, name)
    if ids is None:
        _warn_id_like(X, feature_names, name, skip=categories)
    if y is not None:
        yv = y
    elif target is None:
        yv = y_stored
    if yv is not None:
        yv = check_target(yv, n, target or "y", name)
    return Table(X, feature_names, categories, yv, target, name, ids, id_name)


def _row_ids(data: Any, names: list[str], id_col: str | None, name: str) -> tuple[Any, Any]:
    """The row IDs: column ``id_col``, else a DataFrame's own (non-default) index."""
    frame = data if isinstance(data, pd.DataFrame) else None
    if id_col is not None:
        if frame is not None:
            ids = frame.iloc[:, names.index(id_col)].to_numpy()
        else:
            ids = data[0][:, names.index(id_col)]
        label = id_col
    elif frame is not None and not (
        isinstance(frame.index, pd.RangeIndex)
        and frame.index.start == 0
        and frame.index.step == 1
        and frame.index.name is None
    ):
        ids, label = frame.index.to_numpy(), str(frame.index.name or "index")
    else:
        return None, None
    missing = pd.isna(ids)
    if missing.any():
        raise InputError(
            f"{name}: ID column {label!r} is empty in {int(missing.sum())} row(s) (first data "
            f"row {int(np.flatnonzero(missing)[0]) + 1}); every row needs an ID"
        )
    values = pd.Series(ids)
    repeated = values[values.duplicated()].unique()
    if repeated.size:  # kept (a patient measured twice); selecting by ID then finds both
        warnings.warn(
            f"{name}: ID column {label!r} repeats {repeated.size} value(s), e.g. "
            f"{repeated[0]}; rows keep their IDs, but an ID may then name several rows",
            UserWarning,
            stacklevel=3,
        )
    if values.dtype.kind not in "iu":
        ids = values.astype(str).to_numpy(dtype=object)
    return np.asarray(ids), label


#: Text that reads as a date or a time: 2024-01-31, 31/01/2024, 1.2.24, 13:45.
_DATE_TIME = re.compile(
    r"^\s*(\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}|\d{1,2}:\d{2})([ T]\S*)?\s*$"
)
#: A text column with at least this many rows, and distinct values in at least this
#: share of them, is free text or an identifier rather than categories.
FREE_TEXT_ROWS, FREE_TEXT_SHARE = 20, 0.5


def _warn_not_a_feature(labels: tuple[str, ...], n: int, col: str, name: str) -> None:
    """Warn, in one line with the fix, about a text column that is no feature: dates or
    times, or nearly one value per row (free text, an identifier); the same rule for
    every command, since every table is read here."""
    if not labels:
        return
    sample = labels[:: max(1, len(labels) // 50)]
    if all(_DATE_TIME.match(v) for v in sample):
        why, also = f"holds dates or times (e.g. {labels[0]!r})", ""
    elif n >= FREE_TEXT_ROWS and len(labels) >= FREE_TEXT_SHARE * n:
        why = f"is text with {len(labels)} distinct values in {n} rows"
        also = f", or --id {col} (id={col!r}) if it names the rows"
    else:
        return
    warnings.warn(
        f"{name}: column {col!r} {why} and is used as a feature (coded as categories); "
        f"pass --drop {col} (drop=[{col!r}]) to leave it out{also}",
        UserWarning,
        stacklevel=4,
    )


#: Column names that say "identifier" (compared in lower case, without separators).
_ID_NAMES = ("id", "key", "index", "rowid", "rownumber", "uuid")


def _warn_id_like(
    X: np.ndarray, names: tuple[str, ...], name: str, skip: Mapping[str, Any] | None = None
) -> None:
    """Warn about a feature column that looks like a row ID (it would be learnt from).

    Text columns (``skip``: their codes are sorted ranks) have their own rule
    (:func:`_warn_not_a_feature`).
    """
    n = X.shape[0]
    if n < 3:
        return
    for j, col in enumerate(names):
        if skip and col in skip:
            continue
        values = X[:, j]
        if np.isnan(values).any():
            continue
        plain = "".join(c for c in col.lower() if c.isalnum())
        # "id", "Id", "row_id", "patient.ID", "customerId"; not "fluid" or "acid"
        named = (
            plain in _ID_NAMES
            or re.search(r"[_\W]id$", col, flags=re.IGNORECASE) is not None
            or re.search(r"[a-z0-9](Id|ID)$", col) is not None
        )
        distinct = np.unique(values).size
        unique = distinct == n or (named and distinct >= 0.9 * n)
        consecutive = bool(np.all(np.diff(values) == 1)) and float(values[0]).is_integer()
        if unique and (named or consecutive):
            why = f"named so, {distinct} distinct values in {n} rows" if named else "consecutive"
            warnings.warn(
                f"{name}: column {col!r} looks like a row ID ({why}) and is used as a feature; "
                f"pass --id {col} (id={col!r}) to keep it as the row IDs, or --drop {col}",
                UserWarning,
                stacklevel=3,
            )


#: ``DataFrame.attrs`` key holding the file a frame was read from (kept by pandas through
#: column selections), so that errors found later name the user's file, not ``<pandas.DataFrame>``.
SOURCE_ATTR = "distforest_source"


def read_frame(
    source: Any, *, na_values: Sequence[str] = (), decimal: str | None = None
) -> pd.DataFrame:
    """Read ``source`` as a pandas DataFrame, columns and dtypes as stored (nothing encoded).

    Parameters
    ----------
    source : str, pathlib.Path or array-like
        Anything :func:`load_table` reads.  Arrays get columns ``"0"``, ``"1"``, ...
    na_values : sequence of str
        Extra strings that mark a missing value in text files (e.g. ``"?"``).
    decimal : {".", ","}, optional
        As for :func:`load_table`: text columns of numbers are read as float64 by its rule.

    Returns
    -------
    pandas.DataFrame
    """
    data, name, _ = _read(source, [str(v) for v in na_values], _decimal(decimal))
    frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data[0], columns=list(data[1]))
    if isinstance(source, str | Path):
        frame.attrs[SOURCE_ATTR] = name  # errors about its columns then name the file
    return frame


def refuse_sparse(X: Any) -> None:
    """Raise a clear :class:`InputError` for a scipy sparse matrix or array."""
    if type(X).__module__.startswith("scipy.sparse"):
        raise InputError(
            f"sparse input is not supported (got {type(X).__name__}); the trees need "
            "dense rows: convert it with X.toarray() if it fits in memory"
        )


#: The decimal mark set for the current command (:func:`decimal_mark`).
_DECIMAL: contextvars.ContextVar[str | None] = contextvars.ContextVar("decimal", default=None)
DECIMAL_MARKS = (".", ",")


def _decimal(decimal: str | None) -> str | None:
    mark = _DECIMAL.get() if decimal is None else decimal
    if mark is not None and mark not in DECIMAL_MARKS:
        raise InputError(f"decimal must be '.' or ',', got {mark!r}")
    return mark


@contextlib.contextmanager
def decimal_mark(mark: str | None) -> Iterator[None]:
    """Within the block, read numbers written as text with ``mark`` as decimal mark.

    The command line's ``--decimal`` and a pipeline's ``input.decimal``: every
    table the command reads follows it.  None: decided per column from its values.
    """
    token = _DECIMAL.set(_decimal(mark) if mark is not None else None)
    try:
        yield
    finally:
        _DECIMAL.reset(token)


def _read(source: Any, na: list[str], decimal: str | None = None) -> tuple[Any, str, Any]:
    """Return ``(DataFrame | (ndarray, names), source name, stored y or None)``."""
    if location.is_remote(source):
        return _read_url(source, na, decimal)
    if isinstance(source, str | Path):
        return _read_path(Path(location.local(source)), str(source), na, decimal)
    mod = type(source).__module__.split(".")[0]
    if isinstance(source, pd.DataFrame):
        return source, str(source.attrs.get(SOURCE_ATTR) or "<pandas.DataFrame>"), None
    if isinstance(source, np.ndarray):
        return _array(source, "<numpy.ndarray>"), "<numpy.ndarray>", None
    if mod == "dask" and hasattr(source, "compute"):
        return _read(source.compute(), na)[0], f"<dask.{type(source).__name__}>", None
    if mod == "xarray":
        import xarray as xr

        if isinstance(source, xr.DataArray):
            return _dataarray(source), "<xarray.DataArray>", None
        if isinstance(source, xr.Dataset):
            return _dataset(source, "<xarray.Dataset>"), "<xarray.Dataset>", None
    if mod == "zarr":
        return _zarr(source, f"<zarr.{type(source).__name__}>")
    if isinstance(source, list | tuple) or hasattr(source, "__array__"):
        name = f"<{type(source).__name__}>"
        try:
            arr = np.asarray(source)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name}: cannot be read as an array ({exc})") from None
        return _array(arr, name), name, None
    raise InputError(
        f"cannot read a {type(source).__name__}; pass a path ({', '.join(SUPPORTED_EXTENSIONS)})"
        " or a pandas DataFrame, numpy/dask array, xarray DataArray/Dataset, zarr Array/Group"
    )


def _read_path(
    path: Path, name: str, na: list[str], decimal: str | None = None
) -> tuple[Any, str, Any]:
    if not path.exists():
        if path.is_symlink():  # a loop of links, or a link to nothing
            raise InputError(
                f"no such file: {name} is a symbolic link that leads to no file (a loop of "
                "links, or a missing target); check the link"
            )
        where = os.path.realpath(path)
        raise InputError(f"no such file: {name} (resolved to {where}); check the path")
    suffix = path.suffix.lower()
    if path.is_dir() and (
        suffix == ".zarr" or any((path / f).exists() for f in ("zarr.json", ".zgroup", ".zarray"))
    ):
        import zarr

        try:
            node = zarr.open(str(path), mode="r")
        except Exception as exc:
            raise InputError(f"{name}: cannot open as a Zarr store: {exc}") from exc
        return _zarr(node, name, path)
    if not path.is_dir() and not path.is_file():  # reading a FIFO would wait for ever
        raise InputError(
            f"{name}: not a regular file (a pipe, socket or device); write the data to a file "
            "and give its path"
        )
    if path.is_dir():
        raise InputError(
            f"{name} is a folder: this reader takes one table whole, from a file "
            f"({', '.join(sorted(SUPPORTED_EXTENSIONS))}; a .zarr store is a folder). A folder "
            "of table parts (or a glob) is read by partitions, on the workers, by the commands "
            "`proximity`, `impute`, `outliers`, `mislabels`, `mds`, `knn fit` (a measure, "
            "rf-proximity or rfgap), `knn predict`, `score`, `similarity`, `neighbors`, "
            "`smerf fit`, `simforest fit` (a table), `simforest predict`, `xforest` and their "
            "pipelines, and in Python by `distforest.store.inputs.ingest(folder, store)` for a "
            "ProximityForest, SMERF, SimForest or XForest; the others (`smerf predict`) "
            "hold every row, or every row's leaves, in this process: here, give one file"
        )
    if suffix not in SUPPORTED_EXTENSIONS or suffix == ".zarr":
        raise InputError(
            f"{name}: unsupported file type {suffix or '(none)'!r}; supported: "
            f"{', '.join(SUPPORTED_EXTENSIONS)} (a .zarr store is a directory)"
        )
    try:
        if suffix in _TEXT:
            return _read_text(path, name, na, decimal), name, None
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path), name, None
        arr = np.load(path, allow_pickle=False)
    except InputError:
        raise
    except Exception as exc:
        hint = " (object arrays are not supported; save a numeric one)" if suffix == ".npy" else ""
        raise InputError(f"{name}: cannot read the file: {exc}{hint}") from exc
    return _array(arr, name), name, None


def _read_url(url: str, na: list[str], decimal: str | None = None) -> tuple[Any, str, Any]:
    """A table at an fsspec URL: a Zarr store is opened where it is; a file (read whole
    anyway) is copied to a temporary local file and read by the rules for local files."""
    import tempfile

    name = location.display(url)
    try:
        fs, where = location.filesystem(url)
        is_dir = fs.isdir(where)
        if is_dir or where.rstrip("/").lower().endswith(".zarr"):
            import zarr

            node = zarr.open(location.zarr_store(url, read_only=True), mode="r")
            return _zarr(node, name)
        with tempfile.TemporaryDirectory(prefix="distforest-") as tmp:
            copy = Path(tmp) / location.name(url)
            fs.get_file(where, str(copy))
            return _read_path(copy, name, na, decimal)
    except InputError:
        raise
    except Exception as exc:
        reached = location.access_error(exc, url)
        if reached is not None:
            raise reached from None
        if isinstance(exc, FileNotFoundError):
            raise InputError(f"no such file: {name}; check the URL") from None
        raise InputError(f"{name}: cannot read it: {location.why(exc)}") from exc


def _read_text(path: Path, name: str, na: list[str], decimal: str | None) -> pd.DataFrame:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        first, second = fh.readline(), fh.readline()
    if not first.strip():
        raise InputError(f"{name}: the file is empty (no header row)")
    widths = {d: len(next(csv.reader([first], delimiter=d))) for d in _DELIMITERS}
    sep = max(widths, key=lambda d: widths[d])  # ties keep the comma
    header = next(csv.reader([first], delimiter=sep))
    if second.strip() and len(header) > 1:
        row = {d: len(next(csv.reader([second], delimiter=d))) for d in _DELIMITERS}
        if row[sep] == 1 and any(row[d] == len(header) for d in row if d != sep):
            other = next(d for d in row if d != sep and row[d] == len(header))
            raise InputError(
                f"{name}: the header is separated by {sep!r} but the data rows by {other!r}; "
                "use one delimiter throughout the file"
            )
    dup = sorted({c for c in header if header.count(c) > 1})
    if dup:
        raise InputError(f"{name}: duplicate column names in the header: {dup}; rename them")
    # with a decimal comma, read every column as text: a column pandas would read with
    # decimal points must be checked against the rule too
    as_text = {"dtype": str} if decimal == "," else {}
    try:
        frame = pd.read_csv(path, sep=sep, na_values=na, encoding="utf-8-sig", **as_text)
    except Exception as exc:
        raise InputError(
            f"{name}: cannot parse as delimited text ({sep!r}-separated): {exc}; check that "
            "every row has as many fields as the header"
        ) from exc
    from distforest.io.text_numbers import count_numbers, decide_decimal, parse_numbers

    for k, col in enumerate(frame.columns):
        values = frame.iloc[:, k]
        if not (values.dtype == object or pd.api.types.is_string_dtype(values.dtype)):
            continue
        try:  # a column that breaks the rule stays text: refused if used (not if dropped)
            mark = decide_decimal(count_numbers(values), str(col), name, decimal)
        except InputError:
            continue
        if mark is not None:
            frame.isetitem(k, parse_numbers(values, mark))
    return frame


def _need_2d(shape: tuple[int, ...], name: str) -> None:
    raise InputError(
        f"{name}: expected a 2-D array (samples x features), got {len(shape)}-D with "
        f"shape {shape}; Reshape your data, e.g. x.reshape(-1, 1) for a single feature"
    )


def _array(arr: np.ndarray, name: str, names: Sequence[str] | None = None) -> tuple:
    if arr.ndim != 2:
        _need_2d(arr.shape, name)
    if arr.dtype.kind == "c":
        raise InputError(
            f"{name}: Complex data not supported (dtype {arr.dtype}); pass the real "
            "and imaginary parts as separate columns"
        )
    if arr.dtype.kind == "O":
        arr = _object_numbers(arr, name)
    if arr.dtype.kind not in "biuf":
        raise InputError(
            f"{name}: array dtype {arr.dtype} is not numeric; convert it to numbers "
            "or pass a pandas DataFrame so categorical columns get encoded"
        )
    if names is None:
        names = [str(i) for i in range(arr.shape[1])]
    elif len(names) != arr.shape[1]:
        raise InputError(
            f"{name}: {len(names)} feature names for {arr.shape[1]} columns; fix feature_names"
        )
    return arr, [str(c) for c in names]


def _object_numbers(arr: np.ndarray, name: str) -> np.ndarray:
    """An object array of numbers as float64; anything else is refused."""
    try:
        return arr.astype(np.float64)
    except TypeError as exc:  # e.g. a dict in a cell
        raise InputTypeError(
            f"{name}: an object array must hold only numbers ({exc}); convert it to "
            "numbers or pass a pandas DataFrame so categorical columns get encoded"
        ) from None
    except ValueError as exc:  # e.g. text in a cell
        raise InputError(
            f"{name}: an object array must hold only numbers ({exc}); pass a pandas "
            "DataFrame so categorical columns get encoded"
        ) from None


def _dataarray(da: Any) -> tuple:
    if da.ndim != 2:
        _need_2d(da.shape, "<xarray.DataArray>")
    dim = da.dims[1]
    names = [str(c) for c in da[dim].values] if dim in da.coords else None
    return _array(np.asarray(da.values), "<xarray.DataArray>", names)


def _dataset(ds: Any, name: str) -> pd.DataFrame:
    dims = {k: v.dims for k, v in ds.data_vars.items()}
    if not dims:
        raise InputError(f"{name}: the Dataset has no data variables")
    if len(set(dims.values())) != 1 or len(next(iter(dims.values()))) != 1:
        raise InputError(
            f"{name}: every data variable must be 1-D along one common dimension, got "
            f"{dims}; select the variables to use, e.g. ds[['a', 'b']]"
        )
    return pd.DataFrame({str(k): _plain(np.asarray(v.values)) for k, v in ds.data_vars.items()})


def _plain(values: np.ndarray) -> np.ndarray:
    """NumPy's variable-width strings (Zarr v3 string arrays) as an object array."""
    if values.dtype.kind == "T":
        return values.astype(object)
    return values


def _zarr(node: Any, name: str, path: Path | None = None) -> tuple[Any, str, Any]:
    import zarr

    if isinstance(node, zarr.Array):
        return _array(np.asarray(node[...]), name), name, None
    found = x_and_y(node)
    if found is not None:
        xa, names, ya = found
        y = np.asarray(ya[...]) if ya is not None else None
        return _array(np.asarray(xa[...]), name, names), name, y
    return _dataset(columns_dataset(node, name, path), name), name, None


def _encode(
    s: pd.Series, col: str, name: str, na: list[str], decimal: str | None = None
) -> tuple[np.ndarray, tuple | None]:
    """Encode one feature column as float64 (and category labels, if categorical)."""
    dtype = s.dtype
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype):
        return s.to_numpy(dtype=np.float64, na_value=np.nan), None
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        raise InputError(
            f"{name}: column {col!r} has dtype {dtype}, which is not a feature; "
            f"pass --drop {col} (drop=[{col!r}]), or convert it to numbers first"
        )
    raw = s.astype(object)
    missing = np.array(raw.isna(), dtype=bool)
    if na:
        missing |= raw.map(str).isin(na).to_numpy() & ~missing
        raw = raw.where(~missing, None)
    _refuse_nested(raw.where(~missing, None), col, name)
    from distforest.io.text_numbers import count_numbers, decide_decimal, parse_numbers

    mark = decide_decimal(count_numbers(raw.where(~missing, None)), col, name, decimal)
    if mark is not None:
        return parse_numbers(raw.where(~missing, None), mark), None
    strs = pd.Series(np.where(missing, None, raw.map(str).to_numpy(dtype=object)), dtype=object)
    labels = set(strs[~missing])
    if isinstance(dtype, pd.CategoricalDtype):
        labels |= {str(c) for c in dtype.categories}
    ordered = tuple(sorted(labels))
    _warn_not_a_feature(ordered, int((~missing).sum()), col, name)
    codes = pd.Categorical(strs.where(~missing, None), categories=list(ordered)).codes
    out = codes.astype(np.float64)
    out[codes < 0] = np.nan
    return out, ordered


def _refuse_nested(values: pd.Series, col: str, name: str) -> None:
    """Refuse a column of lists, arrays or mappings (Parquet list / struct columns)."""
    nested = values.map(lambda v: isinstance(v, list | tuple | dict | set | np.ndarray))
    if nested.any():
        r = int(np.flatnonzero(nested.to_numpy())[0])
        raise InputTypeError(
            f"{name}: column {col!r} holds nested values (lists or structs, e.g. "
            f"{_short(values.iloc[r])} in data row {r + 1}); "
            "only flat columns of numbers or labels can be features: flatten it into one "
            "column per field, or drop it"
        )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_column(col: str, names: list[str], name: str) -> None:
    """Raise an InputError naming the columns (and the closest one) when ``col`` is not one."""
    if col in names:
        return
    shown = ", ".join(repr(c) for c in names[:20]) + (", ..." if len(names) > 20 else "")
    hint = did_you_mean(col, names)
    raise InputError(f"{name}: no column {col!r}; available columns: {shown}{hint}")


#: Largest magnitude the trees (which work in float32) can hold.
_FLOAT32_MAX = float(np.finfo(np.float32).max)

#: Delimiters tried on a text file's header and first rows.
_DELIMITERS = ",\t;|"


def _check_features(X: np.ndarray, names: tuple[str, ...], name: str, allow_missing: bool) -> None:
    inf = np.isinf(X)
    if inf.any():
        j = int(np.flatnonzero(inf.any(axis=0))[0])
        rows = (np.flatnonzero(inf[:, j])[:5] + 1).tolist()
        raise InputError(
            f"{name}: column {names[j]!r} holds infinite values (data rows {rows}, counted "
            "from 1); replace them with finite values or leave them empty (missing)"
        )
    with np.errstate(invalid="ignore"):
        huge = np.abs(X) > _FLOAT32_MAX
    if huge.any():
        j = int(np.flatnonzero(huge.any(axis=0))[0])
        r = int(np.flatnonzero(huge[:, j])[0])
        raise InputError(
            f"{name}: column {names[j]!r} holds {float(X[r, j])!r} (data row {r + 1}, counted "
            "from 1), "
            f"beyond the float32 range the trees use (|x| <= {_FLOAT32_MAX:.3g}); rescale the "
            "column (e.g. divide it by a power of ten) or fix the value"
        )
    if not allow_missing:
        counts = np.isnan(X).sum(axis=0)
        if counts.any():
            cols = ", ".join(f"{names[j]!r} ({counts[j]})" for j in np.flatnonzero(counts))
            raise InputError(
                f"{name}: missing values (NaN) in columns {cols}; impute them first, "
                "e.g. `distforest impute`"
            )


def _as_1d(y: Any, name: str, n: int) -> np.ndarray:
    if hasattr(y, "compute") and type(y).__module__.split(".")[0] == "dask":
        y = y.compute()
    if isinstance(y, pd.Series | pd.Index):
        arr = y.to_numpy()
    else:
        arr = np.asarray(getattr(y, "values", y) if type(y).__module__.startswith("xarray") else y)
    where = f"{name}: " if name else ""
    if arr.ndim != 1:
        raise InputError(f"{where}y must be 1-D, got shape {arr.shape}; pass e.g. y.ravel()")
    if arr.shape[0] != n:
        raise InputError(
            f"{where}y has {arr.shape[0]} values but the table has {n} rows; "
            "pass one target value per row"
        )
    return arr


def check_target(
    y: Any, n: int, col: str, name: str, *, allow_constant: bool = False
) -> np.ndarray:
    """The one check of a target: 1-D, one value per row, none missing, not constant.

    Missing rows are named both ways users count them: data rows from 1 (as
    in a file) and positions from 0 (as in an array).

    Returns
    -------
    ndarray
        The target as a 1-D array.
    """
    y = _as_1d(y, name, n)
    where = f"{name}: " if name else ""
    miss = np.asarray(pd.isna(y), dtype=bool)
    if miss.any():
        first = np.flatnonzero(miss)[:5]
        raise InputError(
            f"{where}target {col!r} is missing in {int(miss.sum())} row(s) (first data rows "
            f"{(first + 1).tolist()} counted from 1, positions {first.tolist()} counted from "
            f"0); a supervised forest needs a class or value for every row: drop those rows "
            f"first (e.g. df.dropna(subset=[{col!r}])), or do without the target (y=None; on "
            "the command line, leave out --target)"
        )
    values = pd.unique(pd.Series(y, copy=False))
    if len(values) == 1 and not allow_constant:
        raise InputError(
            f"{where}target {col!r} has the single value {values[0]!r} in all rows (one "
            "class only, where a classifier needs two); omit the target to grow an "
            "unsupervised forest"
        )
    return y
