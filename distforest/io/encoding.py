"""Tables encoded for imputation: numbers in, numbers out, the input's own form kept.

:func:`encode_table` reads any supported input (DataFrame, array, path,
:class:`~distforest.io.Table`) into an :class:`EncodedTable`: float64 codes
with NaN for missing cells, categorical columns as level codes, plus what
is needed to give the filled values back in the input's form, names, order
and dtypes (:func:`decode_output`).  :func:`encode_like` reads new rows with
the training columns, codes and labels.
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distforest.errors import InputError, ParameterError
from distforest.io.tables import Table, check_target, load_table, read_frame, refuse_sparse
from distforest.io.text_numbers import (  # noqa: F401 - their home before io/text_numbers.py
    NumberCounts,
    count_numbers,
    decide_decimal,
    parse_numbers,
)


@dataclass
class EncodedTable:
    """Features as float64 codes (NaN = missing) plus what is needed to give them back."""

    X: np.ndarray
    names: tuple[str, ...]
    categorical: np.ndarray  # bool per column
    levels: dict[int, np.ndarray]  # column -> labels (code k means levels[k])
    y: np.ndarray | None = None
    target_name: str | None = None
    source: str = "<unknown>"
    form: str = "array"  # "frame" | "array" | "table"
    original: Any = None  # the input object (DataFrame of all columns, ndarray, Table)
    feature_columns: tuple[str, ...] = ()  # DataFrame columns holding the features
    label_values: dict[int, dict[Any, Any]] = field(default_factory=dict)

    @property
    def missing(self) -> np.ndarray:
        return np.isnan(self.X)

    def table(self, X: np.ndarray) -> Table:
        """A :class:`Table` of filled values for the forest (categoricals as codes)."""
        cats = {self.names[j]: tuple(map(str, lv)) for j, lv in self.levels.items()}
        return Table(X, self.names, cats, self.y, self.target_name, self.source)


def _canonical(value: Any, numeric: bool) -> Any:
    return float(value) if numeric else str(value)


def numeric_levels(levels: np.ndarray) -> bool:
    """Levels of a column declared categorical although numeric (kept as numbers)."""
    return bool(levels.size) and all(isinstance(v, float) for v in levels)


def _read_input(X: Any, y: Any) -> tuple[Any, str, Any, Any]:
    """``(features object, form, original, y)`` with a column-name target split off."""
    refuse_sparse(X)
    if isinstance(X, str | Path):
        X = read_frame(X)
        form = "frame"
    elif isinstance(X, pd.DataFrame):
        form = "frame"
    elif isinstance(X, Table):
        return X, "table", X, y
    else:
        form = "array"
        if not hasattr(X, "shape") and not isinstance(X, Table):
            X = np.asarray(X)  # lists and other array-likes
    original = X
    if isinstance(y, str):
        if form != "frame":
            raise InputError(
                f"y={y!r} names a column, but X is a {type(X).__name__} without column names; "
                "pass the target values as an array, or X as a DataFrame or a path"
            )
        if y not in X.columns:
            shown = ", ".join(repr(str(c)) for c in list(X.columns)[:20])
            raise InputError(f"no target column {y!r} in X; available columns: {shown}")
        target = X[y].rename(y)
        return X.drop(columns=[y]), form, original, target
    return X, form, original, y


def _check_target(y: Any, n: int) -> np.ndarray | None:
    if y is None:
        return None
    name = str(getattr(y, "name", None) or "y")
    # a constant target is allowed here: imputation only needs the rows' proximities
    return check_target(y, n, name, "", allow_constant=True)


def _resolve_categorical(
    spec: Sequence[str | int] | None, names: tuple[str, ...], frame: pd.DataFrame | None
) -> set[int]:
    """Columns the user (or a pandas ``category`` dtype) declares categorical."""
    chosen: set[int] = set()
    if frame is not None:
        for j, col in enumerate(frame.columns):
            if isinstance(frame[col].dtype, pd.CategoricalDtype):
                chosen.add(j)
    for item in spec or ():
        if isinstance(item, numbers.Integral) and not isinstance(item, bool):
            if not 0 <= int(item) < len(names):
                raise ParameterError(
                    f"categorical_features: column index {item} is out of range for "
                    f"{len(names)} features; use 0..{len(names) - 1} or a column name"
                )
            chosen.add(int(item))
        elif str(item) in names:
            chosen.add(names.index(str(item)))
        else:
            shown = ", ".join(repr(c) for c in names[:20])
            raise ParameterError(
                f"categorical_features: no feature column {item!r}; features are {shown}"
            )
    return chosen


def encode_table(X: Any, y: Any, categorical_features: Sequence[str | int] | None) -> EncodedTable:
    """Read any supported input into :class:`EncodedTable` (training schema decided here)."""
    feats, form, original, y = _read_input(X, y)
    if form == "table":
        table = feats if y is None else replace(feats, y=_check_target(y, feats.n_samples))
    else:
        y_arr = _check_target(y, len(feats))
        table = load_table(feats, y=y_arr)
        if isinstance(y, pd.Series):
            table = replace(table, target_name=str(y.name))
    frame = feats if form == "frame" else None
    names = table.feature_names
    Xc = table.X.copy()
    categorical = np.zeros(len(names), dtype=bool)
    levels: dict[int, np.ndarray] = {}
    for j, name in enumerate(names):
        if name in table.categories:
            categorical[j] = True
            levels[j] = np.asarray(table.categories[name], dtype=object)
    for j in _resolve_categorical(categorical_features, names, frame):
        if categorical[j]:
            continue
        col = Xc[:, j]
        observed = np.unique(col[~np.isnan(col)])
        categorical[j] = True
        levels[j] = observed.astype(object)
        codes = np.searchsorted(observed, col[~np.isnan(col)])
        col[~np.isnan(col)] = codes
    data = EncodedTable(
        Xc, names, categorical, levels, table.y, table.target_name, table.source, form, original
    )
    if frame is not None:
        data.feature_columns = tuple(frame.columns)
        data.label_values = _label_values(frame, data)
    return data


def _label_values(frame: pd.DataFrame, data: EncodedTable) -> dict[int, dict[Any, Any]]:
    """For each categorical column: canonical label -> an original value of that column."""
    out: dict[int, dict[Any, Any]] = {}
    for j in np.flatnonzero(data.categorical):
        numeric = numeric_levels(data.levels[int(j)])
        col = frame.iloc[:, j]
        values = col[col.notna()]
        seen: dict[Any, Any] = {}
        for v in pd.unique(values.astype(object)):
            seen.setdefault(_canonical(v, numeric), v)
        if isinstance(col.dtype, pd.CategoricalDtype):
            for v in col.dtype.categories:
                seen.setdefault(_canonical(v, numeric), v)
        out[int(j)] = seen
    return out


def encode_like(X: Any, train: EncodedTable) -> EncodedTable:
    """Read new rows with the training columns, codes and label mapping."""
    feats, form, original, _ = _read_input(X, None)
    if form == "frame" and train.target_name is not None and train.target_name in feats.columns:
        feats = feats.drop(columns=[train.target_name])
    if form == "table":
        table = feats
    else:
        if form == "frame":
            missing_cols = [c for c in train.names if c not in [str(k) for k in feats.columns]]
            if missing_cols:
                raise InputError(
                    f"X lacks the training feature column(s) {missing_cols}; pass the same "
                    f"columns as in fit: {list(train.names)}"
                )
            extra = [c for c in feats.columns if str(c) not in train.names]
            if extra:
                raise InputError(
                    f"X has column(s) {extra} that were not features in fit; drop them "
                    f"(training features: {list(train.names)})"
                )
            feats = feats[[c for n in train.names for c in feats.columns if str(c) == n]]
        table = load_table(feats, min_rows=1)  # new rows: one is enough
    if table.n_features != len(train.names):
        raise InputError(
            f"X has {table.n_features} features, but ProximityImputer is expecting "
            f"{len(train.names)} features as input; pass the same columns ({list(train.names)})"
        )
    Xc = table.X.copy()
    for j, name in enumerate(train.names):
        col = Xc[:, j]
        obs = ~np.isnan(col)
        new_labels = table.categories.get(table.feature_names[j])
        if not train.categorical[j]:
            if new_labels is not None:
                raise InputError(
                    f"column {name!r} was numeric in fit but holds text now (e.g. "
                    f"{new_labels[0]!r}); pass numbers, or leave the cell empty if missing"
                )
            continue
        numeric = numeric_levels(train.levels[j])
        index = {_canonical(v, numeric): k for k, v in enumerate(train.levels[j])}
        if new_labels is not None:
            labels = [_canonical(new_labels[int(c)], numeric) for c in col[obs]]
        else:
            labels = [_canonical(v, numeric) for v in col[obs]]
        unseen = sorted({str(v) for v in labels if v not in index})
        if unseen:
            raise InputError(
                f"column {name!r} has level(s) {unseen[:5]} not seen in fit (known: "
                f"{[str(v) for v in train.levels[j]][:10]}); map them to known levels or "
                "blank them so they get imputed"
            )
        col[obs] = [index[v] for v in labels]
    data = EncodedTable(
        Xc, train.names, train.categorical, train.levels, None, None, table.source, form, original
    )
    if form == "frame":
        data.feature_columns = tuple(feats.columns)
        data.label_values = train.label_values
    return data


def fingerprint(X: np.ndarray, names: tuple[str, ...]) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(X.shape).encode())
    h.update(np.ascontiguousarray(X, dtype="<f8").tobytes())
    h.update("\x1f".join(names).encode())
    return h.hexdigest()


def _decode_numbers(data: EncodedTable, filled: np.ndarray) -> np.ndarray:
    """Codes of categorical columns with numeric levels back to those numbers."""
    out = filled
    for j, levels in data.levels.items():
        if numeric_levels(levels):
            if out is filled:
                out = filled.copy()
            out[:, j] = np.asarray(levels, dtype=np.float64)[filled[:, j].astype(np.int64)]
    return out


def decode_output(data: EncodedTable, filled: np.ndarray) -> Any:
    """The filled values in the input's own form."""
    filled = _decode_numbers(data, filled)
    if data.form == "table":
        return replace(data.original, X=filled)
    missing = data.missing
    if data.form == "array":
        orig = data.original
        if isinstance(orig, np.ndarray) and orig.dtype.kind == "f":
            out = orig.copy()
            out[missing] = filled[missing]
            return out
        return filled
    out = data.original.copy()
    for j, col in enumerate(data.feature_columns):
        rows = np.flatnonzero(missing[:, j])
        if rows.size:
            column = out[col].copy()
            column.iloc[rows] = _cell_values(column.dtype, filled[rows, j], data, j)
            out.isetitem(out.columns.get_loc(col), column)
    return out


def _cell_values(dtype: Any, values: np.ndarray, data: EncodedTable, j: int) -> Any:
    """Imputed numbers as values of a DataFrame column of ``dtype``."""
    if data.categorical[j]:
        levels = data.levels[j]
        numeric = numeric_levels(levels)
        labels = values if numeric else levels[values.astype(np.int64)]
        return [data.label_values[j][_canonical(v, numeric)] for v in labels]
    if pd.api.types.is_bool_dtype(dtype):
        return values >= 0.5
    if pd.api.types.is_integer_dtype(dtype):
        return np.rint(values).astype(np.int64)
    if pd.api.types.is_float_dtype(dtype):
        return values.astype(dtype)
    return values
