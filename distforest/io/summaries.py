"""Per-partition summaries of a table, merged on the driver into its encoding.

Pass 1 of an out-of-core read: a task per partition returns a
:class:`PartSummary` (rows, and per column: missing and parse-failure
counts, the first bad values with their rows, the range of the numbers for
the float32 check, the text values with their counts).  The driver merges
them (:func:`decide`) into an :class:`Encoding` with the rules
:func:`distforest.io.load_table` applies to a table in memory, and refuses
what it refuses: stray strings in a numeric column, decimal commas it cannot
read, values beyond float32, a missing or constant target, an empty table.
Every message names the part file (or partition), the column and the row of
the whole table (counted from 1, from the partitions' cumulative lengths).

Pass 2 (:func:`encode_partition`, :func:`encode_target`) turns a partition
into float32 features and the target with that encoding.

Decimal commas are decided per column from counts: a text column whose every
observed value reads as a number with a decimal comma (``-0,026``; integers
read both ways) but not every one with a decimal dot is a decimal-comma column
(in a file not separated by commas); no thousands separator is guessed.

Text values are counted per partition up to :data:`MAX_LEVELS` distinct ones
(beyond that the partition records only that there were more): a categorical
column may have at most that many levels when read by partitions.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from distforest.errors import InputError

__all__ = [
    "MAX_LEVELS",
    "ColumnSummary",
    "Encoding",
    "NeedLevels",
    "PartSummary",
    "decide",
    "encode_partition",
    "encode_target",
    "summarise_partition",
    "typed_partition",
    "warn_empty_features",
]

#: Most distinct text values counted per column (per partition and merged).
MAX_LEVELS = 1000
#: Share of values that must parse as numbers for stray strings to be an error.
GARBAGE_FRACTION = 0.9
#: Largest magnitude the trees (float32) can hold.
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: Bad values shown per column in a message.
SHOWN = 5

_COMMA_NUMBER = re.compile(r"^\s*[-+]?\d+(,\d+)?\s*$")
_BOOL_TEXT = {"True": 1.0, "TRUE": 1.0, "true": 1.0, "False": 0.0, "FALSE": 0.0, "false": 0.0}


@dataclass
class Range:
    """Finite extremes of a column's numbers and its first out-of-range value."""

    low: float = np.inf
    high: float = -np.inf
    bad_row: int = -1  # first row holding an infinity or |x| > FLOAT32_MAX (-1: none)
    bad_value: float = 0.0

    @classmethod
    def of(cls, values: np.ndarray, rows: np.ndarray | None = None) -> Range:
        """The range of ``values`` (NaN ignored); ``rows`` maps positions to rows."""
        with np.errstate(invalid="ignore"):
            bad = np.abs(values) > FLOAT32_MAX
        out = cls()
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            out.bad_row = int(k if rows is None else rows[k])
            out.bad_value = float(values[k])
        ok = values[~np.isnan(values) & ~bad]
        if ok.size:
            out.low, out.high = float(ok.min()), float(ok.max())
        return out


@dataclass
class ColumnSummary:
    """What pass 1 learns about one column of one partition."""

    kind: str  # "number", "bool", "text", "datetime"
    dtype: str
    observed: int = 0
    missing: int = 0
    first_missing: int = -1
    dot: int = 0  # text: values that read as numbers (decimal dot)
    comma: int = 0  # text: values that read as numbers with a decimal comma (or integers)
    bad: list[tuple[int, str]] = field(default_factory=list)  # first non-numbers (row, value)
    dot_range: Range = field(default_factory=Range)
    comma_range: Range | None = None  # only when every value here reads with a comma
    levels: dict[str, int] | None = None  # text values and counts (None: not counted)
    overflow: bool = False  # more than MAX_LEVELS distinct values here
    integral: bool = True  # every number is a whole number


@dataclass
class PartSummary:
    """Summary of one partition: its rows, file and columns."""

    rows: int
    file: str | None
    columns: dict[str, ColumnSummary]


def _missing_mask(raw: np.ndarray, na: tuple[str, ...]) -> np.ndarray:
    missing = np.asarray(pd.isna(raw), dtype=bool)
    if na:
        strs = np.array([str(v) for v in raw], dtype=object)
        missing |= np.isin(strs, list(na)) & ~missing
    return missing


def _count_levels(values: pd.Series, summary: ColumnSummary) -> None:
    counts = values.value_counts(sort=False)
    if len(counts) > MAX_LEVELS:
        summary.overflow = True
        return
    summary.levels = {str(k): int(v) for k, v in counts.items()}


def _as_text(values: np.ndarray) -> Any:
    """The values as an Arrow string array (``str()`` of each only if some are not text)."""
    import pyarrow as pa

    try:
        return pa.array(values, type=pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.array([str(v) for v in values], type=pa.string())


def _matches(text: Any, pattern: str) -> np.ndarray:
    """Which strings match ``pattern`` (ASCII classes), vectorised by Arrow (a Python loop was
    half of pass 1 on a CSV)."""
    import pyarrow.compute as pc

    found = pc.match_substring_regex(text, pattern)
    return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)


def _text_column(raw: np.ndarray, na: tuple[str, ...], levels: bool) -> ColumnSummary:
    out = ColumnSummary("text", "object")
    missing = _missing_mask(raw, na)
    rows = np.flatnonzero(~missing)
    obs = raw[rows]
    out.missing = int(missing.sum())
    out.first_missing = int(np.flatnonzero(missing)[0]) if out.missing else -1
    out.observed = int(obs.size)
    num = pd.to_numeric(pd.Series(obs, dtype=object), errors="coerce").to_numpy(
        dtype=np.float64, na_value=np.nan
    )
    ok = ~np.isnan(num)
    out.dot = int(ok.sum())
    out.dot_range = Range.of(num[ok], rows[ok])
    out.integral = bool(np.all(np.mod(num[ok][np.isfinite(num[ok])], 1) == 0))
    text = _as_text(obs)
    comma_ok = _matches(text, _COMMA_NUMBER.pattern) if obs.size else ok
    out.comma = int(comma_ok.sum())
    strs = None
    if out.dot < out.observed or levels:
        strs = pd.Series(text.to_numpy(zero_copy_only=False), dtype=object)
    if out.comma == out.observed and out.dot < out.observed:
        assert strs is not None
        values = pd.to_numeric(strs.str.replace(",", ".", regex=False)).to_numpy(np.float64)
        out.comma_range = Range.of(values, rows)
    bad = np.flatnonzero(~ok)[:SHOWN]
    out.bad = [(int(rows[k]), str(obs[k])) for k in bad]
    if strs is not None:
        _count_levels(strs, out)
    return out


def summarise_partition(
    part: pd.DataFrame,
    text_columns: tuple[str, ...],
    na: tuple[str, ...],
    target: str | None,
    file_column: str | None = None,
) -> PartSummary:
    """Pass 1 of one partition (runs in a task).

    Parameters
    ----------
    part : pandas.DataFrame
    text_columns : tuple of str
        Columns to read as text whatever their dtype (all of a CSV's).
    na : tuple of str
        Extra missing-value markers.
    target : str or None
        The target column (its text values are always counted).
    file_column : str, optional
        A column holding each row's file (dask's ``include_path_column``).

    Returns
    -------
    PartSummary
    """
    file = None
    if file_column is not None and file_column in part.columns:
        if len(part):
            file = str(part[file_column].iloc[0])
        part = part.drop(columns=[file_column])
    columns: dict[str, ColumnSummary] = {}
    for name in part.columns:
        s = part[name]
        dtype = s.dtype
        col = str(name)
        is_text = col in text_columns
        if not is_text and (
            pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_numeric_dtype(dtype)
        ):
            kind = "bool" if pd.api.types.is_bool_dtype(dtype) else "number"
            values = s.to_numpy(dtype=np.float64, na_value=np.nan)
            miss = np.isnan(values)
            summary = ColumnSummary(kind, str(dtype), observed=int((~miss).sum()),
                                    missing=int(miss.sum()))  # fmt: skip
            summary.first_missing = int(np.flatnonzero(miss)[0]) if summary.missing else -1
            summary.dot = summary.observed
            summary.dot_range = Range.of(values)
            finite = values[np.isfinite(values)]
            summary.integral = bool(np.all(np.mod(finite, 1) == 0))
            if col == target:
                _count_levels(pd.Series(values[~miss]), summary)
        elif pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(
            dtype
        ):
            summary = ColumnSummary("datetime", str(dtype))
        else:
            raw = s.to_numpy(dtype=object, na_value=None)
            categorical = isinstance(dtype, pd.CategoricalDtype)
            summary = _text_column(raw, na, levels=col == target or categorical)
            summary.dtype = str(dtype)
            if categorical and summary.levels is not None:
                # unused categories are levels too (as the in-memory reader has them)
                for value in dtype.categories:
                    summary.levels.setdefault(str(value), 0)
                summary.overflow = len(summary.levels) > MAX_LEVELS
        columns[col] = summary
    return PartSummary(len(part), file, columns)


def summarise_block(block: np.ndarray, names: tuple[str, ...]) -> PartSummary:
    """Pass 1 of a block of rows of a numeric array (runs in a task)."""
    block = np.asarray(block)
    columns = {}
    for j, name in enumerate(names):
        values = block[:, j].astype(np.float64, copy=False)
        miss = np.isnan(values)
        summary = ColumnSummary("number", str(block.dtype), observed=int((~miss).sum()),
                                missing=int(miss.sum()))  # fmt: skip
        summary.dot = summary.observed
        summary.dot_range = Range.of(values)
        columns[name] = summary
    return PartSummary(block.shape[0], None, columns)


# -- merging on the driver ------------------------------------------------------------


@dataclass(frozen=True)
class ColumnEncoding:
    """How pass 2 turns one column into numbers."""

    how: str  # "number", "comma", "bool", "labels"
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Encoding:
    """The table's encoding, decided from the merged summaries.

    Attributes
    ----------
    features : tuple of str
        Feature columns, in order.
    columns : dict of str to ColumnEncoding
    categories : dict of str to tuple
        Labels of categorical features (code k means ``categories[name][k]``).
    lengths : tuple of int
        Rows of each partition.
    target : str or None
    target_kind : {"float", "int", "labels", None}
        How the target is stored: numbers as float64 / int64, text as int32
        codes of ``target_labels``.
    target_labels : tuple
    fingerprint : str
        Hash of the summaries (rows, counts, ranges, levels per partition).
    text_columns : tuple of str
        Columns read as text.
    na : tuple of str
    missing : dict of str to int
        Missing cells per feature column.
    """

    features: tuple[str, ...]
    columns: dict[str, ColumnEncoding]
    categories: dict[str, tuple[str, ...]]
    lengths: tuple[int, ...]
    target: str | None
    target_kind: str | None
    target_labels: tuple[Any, ...]
    fingerprint: str
    text_columns: tuple[str, ...]
    na: tuple[str, ...]
    missing: dict[str, int] = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        """Rows of the table."""
        return int(sum(self.lengths))

    @property
    def empty_features(self) -> tuple[str, ...]:
        """The features with no value in any row (every cell missing)."""
        n = self.n_samples
        return tuple(c for c in self.features if n and self.missing.get(c, 0) == n)


def warn_empty_features(names: Sequence[str], stacklevel: int = 2) -> None:
    """The one warning naming features with no value in any row (no tree can split on them),
    for rows in memory and rows read by partitions alike; nothing when ``names`` is empty."""
    if not names:
        return
    shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
    warnings.warn(
        f"{len(names)} feature(s) have no value in any row ({shown}): no tree can split on "
        "them; drop them (--drop) or check the input",
        UserWarning,
        stacklevel=stacklevel + 1,
    )


class _Where:
    """Turns (partition, row in partition) into words: file, row of the table."""

    def __init__(self, source: str, parts: list[PartSummary], names: list[str]) -> None:
        self.source = source
        self.offsets = np.concatenate([[0], np.cumsum([p.rows for p in parts])]).astype(int)
        self.parts = parts
        self.names = names

    def __call__(self, k: int, row: int) -> str:
        global_row = int(self.offsets[k] + row) + 1
        where = self.names[k]
        file = self.parts[k].file
        if file is not None:
            local = sum(p.rows for p in self.parts[:k] if p.file == file) + row + 1
            if local == global_row:
                return f"row {global_row} of {file}"
            return f"row {global_row} of the table, row {local} of {file}"
        if where == self.source:
            return f"row {global_row}"
        return f"row {global_row} of the table, in {where}"


def decide(
    parts: list[PartSummary],
    *,
    source: str,
    names: list[str],
    columns: tuple[str, ...],
    target: str | None,
    drop: tuple[str, ...],
    text_columns: tuple[str, ...],
    na: tuple[str, ...],
    sep: str | None,
    allow_missing: bool = True,
    min_rows: int = 2,
) -> Encoding:
    """Merge the partitions' summaries and decide the encoding (the checks of load_table).

    Parameters
    ----------
    parts : list of PartSummary
        One per partition, in order.
    source : str
        The input, for messages.
    names : list of str
        Name of each partition (its part file), for messages.
    columns : tuple of str
        All columns of the table.
    target : str or None
    drop : tuple of str
    text_columns, na, sep
        How the partitions were read.
    allow_missing : bool
    min_rows : int

    Raises
    ------
    InputError
        With the file, column and row of the table of the first problem.
    """
    where = _Where(source, parts, names)
    n = int(where.offsets[-1])
    if n == 0:
        raise InputError(f"{source}: the table has no data rows")
    if n < min_rows:
        raise InputError(f"{source}: the table has a single row (1 sample); at least 2 are needed")
    skip = {*drop, *([target] if target else [])}
    features = tuple(c for c in columns if c not in skip)
    if not features:
        raise InputError(
            f"{source}: no feature columns left after removing target/drop: 0 feature(s) "
            f"(shape=({n}, 0)) while a minimum of 1 is required."
        )
    encodings: dict[str, ColumnEncoding] = {}
    categories: dict[str, tuple[str, ...]] = {}
    for col in features:
        _check_part_types(col, parts, source)
        enc = _decide_column(col, [p.columns[col] for p in parts], where, source, sep)
        encodings[col] = enc
        if enc.how == "labels":
            categories[col] = enc.labels
        if not allow_missing:
            count = sum(p.columns[col].missing for p in parts)
            if count == n:
                raise InputError(f"{source}: column {col!r} has no value in any row ({n} rows); "
                                 f"drop it (--drop {col}) or check the input")  # fmt: skip
            if count:
                k = next(k for k, p in enumerate(parts) if p.columns[col].missing)
                first = parts[k].columns[col].first_missing  # (-1: not recorded)
                at = f", the first at {where(k, first)} (counted from 1)" if first >= 0 else ""
                raise InputError(f"{source}: missing values (NaN) in columns {col!r} ({count})"
                                 f"{at}; impute them first, e.g. `distforest impute`")  # fmt: skip
    kind, labels = (None, ())
    if target is not None:
        kind, labels = _decide_target(target, [p.columns[target] for p in parts], where, source)
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((source, columns, target, drop, na)).encode())
    for p in parts:
        h.update(repr((p.rows, sorted((c, _digest(s)) for c, s in p.columns.items()))).encode())
    missing = {c: sum(p.columns[c].missing for p in parts) for c in features}
    return Encoding(features, encodings, categories, tuple(p.rows for p in parts), target, kind,
                    labels, h.hexdigest(), text_columns, na, missing)  # fmt: skip


def _check_part_types(col: str, parts: list[PartSummary], source: str) -> None:
    """Refuse a column that is numbers in one part file and text in another (exit 3, naming
    both parts and the column).

    Parts of a text source (CSV) are typed by their values: a file whose values of
    ``col`` all read as numbers holds numbers; one where none does holds text.  (A
    typed source's parts are compared by their schemas when they are opened,
    :func:`distforest.io.partitions.check_parts`.)  Files mixing both are left to
    the column's own rules (stray strings, or a categorical column).
    """
    files: dict[str, list[ColumnSummary]] = {}
    for part in parts:  # (a file may be read in several blocks)
        if part.file is not None and part.columns[col].kind == "text":
            files.setdefault(part.file, []).append(part.columns[col])
    numbers: str | None = None
    text: tuple[str, str] | None = None
    for file, blocks in files.items():
        observed, dot = sum(b.observed for b in blocks), sum(b.dot for b in blocks)
        if observed and dot == observed:
            numbers = numbers or file
        elif observed and dot == 0 and text is None:
            text = (file, next(v for b in blocks for _, v in b.bad))
    if numbers is not None and text is not None:
        raise InputError(
            f"{source}: part {text[0]} holds column {col!r} as text (e.g. {text[1]!r}), not "
            f"number, unlike the part {numbers}; every part must have the same columns of the "
            "same types: fix or remove that part"
        )


def _digest(s: ColumnSummary) -> tuple:
    levels = None if s.levels is None else sorted(s.levels.items())
    r = s.dot_range
    return (s.kind, s.observed, s.missing, s.dot, s.comma, r.low, r.high, levels, s.overflow)


def _first_bad(summaries: list[ColumnSummary], attr: str) -> tuple[int, Range] | None:
    for k, s in enumerate(summaries):
        r = getattr(s, attr)
        if r is not None and r.bad_row >= 0:
            return k, r
    return None


def _range_error(col: str, found: tuple[int, Range], where: _Where, source: str) -> InputError:
    k, r = found
    if np.isinf(r.bad_value):
        return InputError(
            f"{source}: column {col!r} holds infinite values ({where(k, r.bad_row)}, counted "
            "from 1); replace them with finite values or leave them empty (missing)"
        )
    return InputError(
        f"{source}: column {col!r} holds {r.bad_value!r} ({where(k, r.bad_row)}, counted from 1), "
        f"beyond the float32 range the trees use (|x| <= {FLOAT32_MAX:.3g}); rescale the column "
        "(e.g. divide it by a power of ten) or fix the value"
    )


def _decide_column(
    col: str, summaries: list[ColumnSummary], where: _Where, source: str, sep: str | None
) -> ColumnEncoding:
    kinds = {s.kind for s in summaries}
    if "datetime" in kinds:
        dtype = next(s.dtype for s in summaries if s.kind == "datetime")
        raise InputError(f"{source}: column {col!r} has dtype {dtype}; convert it to numbers first")
    if kinds <= {"number", "bool"}:
        found = _first_bad(summaries, "dot_range")
        if found is not None:
            raise _range_error(col, found, where, source)
        return ColumnEncoding("bool" if kinds == {"bool"} else "number")
    observed = sum(s.observed for s in summaries)
    dot = sum(s.dot for s in summaries)
    if dot == observed:
        found = _first_bad(summaries, "dot_range")
        if found is not None:
            raise _range_error(col, found, where, source)
        return ColumnEncoding("number")
    comma = sum(s.comma for s in summaries)
    if comma == observed:
        example = next(v for s in summaries for _, v in s.bad)
        if sep == "," or sep is None:
            raise InputError(
                f"{source}: column {col!r} holds numbers written with decimal commas (e.g. "
                f"{example!r}); read them as numbers (pandas: decimal=','; a ';'-separated file "
                "is read that way automatically) instead of as text labels"
            )
        found = _first_bad(summaries, "comma_range")
        if found is not None:
            raise _range_error(col, found, where, source)
        return ColumnEncoding("comma")
    if dot >= GARBAGE_FRACTION * observed:
        shown = [(k, r, v) for k, s in enumerate(summaries) for r, v in s.bad][:SHOWN]
        listed = "; ".join(f"{v!r} ({where(k, r)})" for k, r, v in shown)
        values = sorted({v for _, _, v in shown})
        raise InputError(
            f"{source}: column {col!r} is numeric except for {observed - dot} non-numeric "
            f"value(s): {listed} (rows counted from 1). If they mark missing values, pass "
            f"na_values={values} (`--na-values {values[0]}` on the CLI); otherwise fix them "
            "or drop the column"
        )
    labels = _merged_levels(col, summaries, source)
    if sep is not None and set(labels) <= set(_BOOL_TEXT):
        return ColumnEncoding("bool")  # pandas reads True/False in a text file as booleans
    return ColumnEncoding("labels", tuple(sorted(labels)))


def _merged_levels(col: str, summaries: list[ColumnSummary], source: str) -> set[str]:
    labels: set[str] = set()
    for s in summaries:
        if s.overflow or (s.levels is None and s.observed):
            if s.overflow:
                raise InputError(
                    f"{source}: column {col!r} is text with more than {MAX_LEVELS} distinct "
                    "values, too many levels for a categorical feature read by partitions; "
                    "drop the column (an identifier?) or encode it as numbers first"
                )
            raise NeedLevels(col)
        labels |= set((s.levels or {}).keys())
        if len(labels) > MAX_LEVELS:
            raise InputError(
                f"{source}: column {col!r} has more than {MAX_LEVELS} distinct text values, too "
                "many levels for a categorical feature read by partitions; drop the column or "
                "encode it as numbers first"
            )
    return labels


class NeedLevels(Exception):
    """A categorical column whose all-numeric partitions did not count their values."""

    def __init__(self, column: str) -> None:
        super().__init__(column)
        self.column = column


def _decide_target(
    col: str, summaries: list[ColumnSummary], where: _Where, source: str
) -> tuple[str, tuple[Any, ...]]:
    for k, s in enumerate(summaries):
        if s.missing:
            total = sum(t.missing for t in summaries)
            raise InputError(
                f"{source}: target {col!r} is missing in {total} row(s) (first: "
                f"{where(k, s.first_missing)}, counted from 1); a supervised forest needs a "
                f"class or value for every row: drop those rows first (e.g. "
                f"df.dropna(subset=[{col!r}])), or do without the target (y=None; on the "
                "command line, leave out --target)"
            )
    kinds = {s.kind for s in summaries}
    numeric = kinds <= {"number", "bool"} or all(s.dot == s.observed for s in summaries)
    distinct: set[Any] = set()
    overflow = any(s.overflow for s in summaries)
    for s in summaries:
        distinct |= set((s.levels or {}).keys())
    if numeric:
        low = min(s.dot_range.low for s in summaries)
        high = max(s.dot_range.high for s in summaries)
        if low == high:
            raise InputError(f"{source}: target {col!r} has the single value {low!r} in all "
                             "rows; omit the target to grow an unsupervised forest")  # fmt: skip
        floats = any(s.kind == "number" and "float" in s.dtype for s in summaries)
        integral = all(s.integral for s in summaries) and not floats
        return ("int" if integral else "float"), ()
    if overflow or len(distinct) > MAX_LEVELS:
        raise InputError(f"{source}: target {col!r} is text with more than {MAX_LEVELS} "
                         "distinct values; a class target needs fewer")  # fmt: skip
    if len(distinct) == 1:
        raise InputError(f"{source}: target {col!r} has the single value "
                         f"{next(iter(distinct))!r} in all rows; omit the target to grow an "
                         "unsupervised forest")  # fmt: skip
    return "labels", tuple(sorted(distinct))


# -- pass 2: encoding a partition ------------------------------------------------------


def _column_numbers(
    s: pd.Series, enc: ColumnEncoding, na: tuple[str, ...], text: bool
) -> np.ndarray:
    if (
        enc.how in ("number", "bool")
        and not text
        and (pd.api.types.is_bool_dtype(s.dtype) or pd.api.types.is_numeric_dtype(s.dtype))
    ):
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    raw = s.to_numpy(dtype=object, na_value=None)
    missing = _missing_mask(raw, na)
    out = np.full(raw.shape[0], np.nan)
    obs = raw[~missing]
    if enc.how == "number":
        out[~missing] = pd.to_numeric(pd.Series(obs, dtype=object)).to_numpy(np.float64)
    elif enc.how == "comma":
        strs = pd.Series([str(v) for v in obs], dtype=object).str.replace(",", ".", regex=False)
        out[~missing] = pd.to_numeric(strs).to_numpy(np.float64)
    elif enc.how == "bool":
        out[~missing] = [_BOOL_TEXT[str(v)] for v in obs]
    else:
        codes = pd.Categorical([str(v) for v in obs], categories=list(enc.labels)).codes
        out[~missing] = np.where(codes < 0, np.nan, codes)
    return out


def encode_partition(part: pd.DataFrame, encoding: Encoding, dtype: Any = np.float32) -> np.ndarray:
    """Pass 2: the features of one partition as float32 (runs in a task).

    Returns
    -------
    ndarray of ``dtype``, shape (rows, n_features)
        The values :func:`distforest.io.load_table` gives (float64), as the
        trees read them (float32) by default.
    """
    out = np.empty((len(part), len(encoding.features)), dtype=dtype)
    for j, col in enumerate(encoding.features):
        text = col in encoding.text_columns
        out[:, j] = _column_numbers(part[col], encoding.columns[col], encoding.na, text)
    return out


def encode_target(part: pd.DataFrame, encoding: Encoding) -> np.ndarray:
    """Pass 2: the target of one partition (float64, int64, or int32 label codes)."""
    assert encoding.target is not None
    s = part[encoding.target]
    if encoding.target_kind == "labels":
        return pd.Categorical(
            [str(v) for v in s.to_numpy(dtype=object)], categories=list(encoding.target_labels)
        ).codes.astype(np.int32)
    values = _column_numbers(s, ColumnEncoding("number"), encoding.na,
                             encoding.target in encoding.text_columns)  # fmt: skip
    return values.astype(np.int64) if encoding.target_kind == "int" else values


def typed_partition(
    part: pd.DataFrame, encoding: Encoding, file_column: str | None = None
) -> pd.DataFrame:
    """One partition with typed columns, as :func:`distforest.io.read_frame` would give them.

    A partition read from a typed source (Parquet, a DataFrame) is returned
    as it is.  One read as text (CSV) gets its numeric features and a
    numeric target as float64 (an ``"int"`` target as int64), the same
    numbers pass 2 encodes; label columns keep their text (missing: NaN);
    other columns (``--drop``) keep their text.  ``file_column`` is removed.
    """
    if file_column is not None and file_column in part.columns:
        part = part.drop(columns=[file_column])
    part = part.reset_index(drop=True)
    default = pd.Series(["a"]).dtype  # pandas' own text dtype (what read_parquet gives)
    nullable = [c for c in part.columns if isinstance(part[c].dtype, pd.StringDtype)
                and part[c].dtype != default and part[c].dtype.na_value is pd.NA]  # fmt: skip
    if nullable:  # dask's readers give NA-valued strings; pandas' give NaN-valued ones
        part = part.astype(dict.fromkeys(nullable, default))
    if not encoding.text_columns:
        return part
    out = part.copy()
    for col in out.columns:
        if col not in encoding.text_columns:
            continue
        enc = encoding.columns.get(col)
        if col == encoding.target and encoding.target_kind in ("float", "int"):
            values = _column_numbers(out[col], ColumnEncoding("number"), encoding.na, True)
            out[col] = values.astype(np.int64) if encoding.target_kind == "int" else values
        elif enc is not None and enc.how != "labels":
            out[col] = _column_numbers(out[col], enc, encoding.na, True)
        else:
            raw = out[col].to_numpy(dtype=object, na_value=None)
            raw[_missing_mask(raw, encoding.na)] = np.nan
            out[col] = pd.Series(raw, dtype=object)
    return out


def count_levels(part: pd.DataFrame, column: str, na: tuple[str, ...]) -> dict[str, int] | None:
    """The text values of one column of a partition with their counts (None: too many)."""
    raw = part[column].to_numpy(dtype=object, na_value=None)
    missing = _missing_mask(raw, na)
    summary = ColumnSummary("text", "object")
    _count_levels(pd.Series([str(v) for v in raw[~missing]], dtype=object), summary)
    return summary.levels
