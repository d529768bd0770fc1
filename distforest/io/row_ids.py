"""Row IDs of a table read by partitions (``--id``, pipeline ``input.id``).

The ID column is read by the same tasks that read the partitions, never
gathered here: pass 1 returns, per partition, what kind of values the column
holds and where it is empty (:func:`id_summary`); :func:`id_kind` merges
those into the kind the in-memory reader would give the whole column; pass 2
(:func:`id_block`) turns each partition's column into that kind, and the
store writes the blocks as ``input/id``.

The kinds follow :func:`distforest.io.load_table`: integers stay integers
(int64); any other IDs become text, as ``pandas.Series.astype(str)`` writes
them (a number read from text with a decimal point, as pandas' ``read_csv``
parses it, becomes ``"7.0"``).  Every row needs an ID.  Unlike the in-memory
reader, repeated IDs are not looked for (that would need every ID in one
place); they are kept as given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from distforest.errors import InputError

__all__ = ["IdSummary", "id_block", "id_kind", "id_summary"]

#: Kinds of ID column, weakest first: a table's kind is the last one any partition needs.
KINDS = ("int", "float", "text")


@dataclass(frozen=True)
class IdSummary:
    """The ID column of one partition: its kind and its empty cells."""

    kind: str
    missing: int
    first_missing: int  # row within the partition, -1 if none


def _missing(values: pd.Series, na: tuple[str, ...]) -> np.ndarray:
    missing = np.asarray(values.isna(), dtype=bool)
    if na:
        missing |= values.astype(str).isin(list(na)).to_numpy(dtype=bool)
    return missing


def _numbers(values: pd.Series) -> pd.Series | None:
    """Text values as pandas' CSV reader types them (int64 or float64), None if any is
    not a number."""
    parsed = pd.to_numeric(values, errors="coerce")
    return None if bool(parsed.isna().any()) else parsed


def id_summary(part: pd.DataFrame, column: str, text: bool, na: tuple[str, ...]) -> IdSummary:
    """Pass 1 of the ID column of one partition (runs in a task).

    Parameters
    ----------
    part : pandas.DataFrame
    column : str
    text : bool
        The partition was read as text (CSV): numbers are parsed from strings.
    na : tuple of str
        Extra missing-value markers.
    """
    values = part[column]
    missing = _missing(values, na)
    first = int(np.flatnonzero(missing)[0]) if missing.any() else -1
    present = values[~missing]
    if text:
        parsed = _numbers(present.astype(object))
        kind = "text" if parsed is None else ("int" if parsed.dtype.kind in "iu" else "float")
    else:
        kind = {"i": "int", "u": "int", "f": "float"}.get(present.dtype.kind, "text")
    return IdSummary(kind, int(missing.sum()), first)


def id_kind(summaries: list[IdSummary], lengths: tuple[int, ...] | list[int], column: str,
            source: str, names: list[str]) -> str:  # fmt: skip
    """The kind of the whole column; an empty ID anywhere is refused.

    Raises
    ------
    InputError
        Naming the column, the count of empty IDs and the first one's row of the table
        and part file.
    """
    missing = sum(s.missing for s in summaries)
    if missing:
        k = next(i for i, s in enumerate(summaries) if s.missing)
        row = int(sum(lengths[:k])) + summaries[k].first_missing + 1
        raise InputError(
            f"{source}: ID column {column!r} is empty in {missing} row(s) (first data row "
            f"{row}, in {names[k]}); every row needs an ID"
        )
    return max((s.kind for s in summaries), key=KINDS.index, default="int")


def id_block(part: pd.DataFrame, column: str, kind: str, text: bool) -> np.ndarray:
    """Pass 2 of the ID column of one partition: int64 values, or text (runs in a task)."""
    values = part[column]
    if text and kind != "text":
        values = pd.to_numeric(values.astype(object))
    if kind == "int":
        return values.to_numpy(dtype=np.int64)
    if kind == "float":
        values = values.astype(np.float64)
    return values.astype(str).to_numpy(dtype=object)
