"""One reading rule for numbers written as text: counts, the decimal mark, the values.

A text column is read as numbers when nearly all its values read as numbers
under one decimal mark (:func:`count_numbers`, :func:`decide_decimal`,
:func:`parse_numbers`); the whole-table reader (:mod:`distforest.io.tables`) and
the readers by partitions use the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from distforest.errors import InputError

__all__ = ["NUMERIC_SHARE", "SHOWN", "NumberCounts", "count_numbers", "decide_decimal",
           "parse_numbers"]  # fmt: skip

#: Share of a column's values that must read as numbers for the rest to be taken as
#: misplaced text (a missing-value marker, a typo) rather than the column being text.
NUMERIC_SHARE = 0.9

#: Values that are not numbers kept (and named in an error) per column.
SHOWN = 5


@dataclass(frozen=True)
class NumberCounts:
    """How the values of one text column read as numbers, under each decimal mark.

    Counts of non-missing values; ``first_*`` hold ``(row, value)`` of the first
    such value and ``failures`` of the first :data:`SHOWN` values that are not
    numbers (data rows counted from 1, over the whole column).  Counts of two
    parts of a column (e.g. two partitions of a file) add up with :meth:`merge`.

    Attributes
    ----------
    dot : int
        Values that read as numbers only with ``.`` as decimal mark (``-2.5557``).
    comma : int
        Values that read as numbers only with ``,`` as decimal mark (``0,36``).
    plain : int
        Values that read as numbers either way (``12``, ``1e5``, ``inf``).
    fail : int
        Values that read as numbers in neither way (``n.v.``, ``1.234,5``).
    """

    dot: int = 0
    comma: int = 0
    plain: int = 0
    fail: int = 0
    first_dot: tuple[int, str] | None = None
    first_comma: tuple[int, str] | None = None
    failures: tuple[tuple[int, str], ...] = ()


def count_numbers(values: pd.Series, first_row: int = 1) -> NumberCounts:
    """Count how the non-missing text ``values`` read as numbers (see :class:`NumberCounts`).

    ``first_row`` is the data row (counted from 1) of ``values``' first element, so
    that parts of one column report rows of the whole column.  A thousands
    separator is never read: ``1.234,5`` and ``1,234.5`` read as neither.
    """
    text = values.astype(str).str.strip()
    rows = np.arange(len(values)) + first_row
    keep = values.notna().to_numpy()
    text, rows = text[keep], rows[keep]
    has_dot = text.str.contains(".", regex=False).to_numpy()
    has_comma = text.str.contains(",", regex=False).to_numpy()
    as_dot = pd.to_numeric(text.where(~has_comma), errors="coerce").notna().to_numpy()
    swapped = text.str.replace(",", ".", regex=False).where(has_comma & ~has_dot)
    as_comma = pd.to_numeric(swapped, errors="coerce").notna().to_numpy()
    plain = as_dot & ~has_dot
    dot = as_dot & has_dot
    fail = ~(as_dot | as_comma)

    def shown(mask: np.ndarray, k: int) -> tuple[tuple[int, str], ...]:
        return tuple((int(rows[i]), str(text.iloc[i])) for i in np.flatnonzero(mask)[:k])

    dots, commas = shown(dot, 1), shown(as_comma, 1)
    return NumberCounts(int(dot.sum()), int(as_comma.sum()), int(plain.sum()), int(fail.sum()),
                        dots[0] if dots else None, commas[0] if commas else None,
                        shown(fail, SHOWN))  # fmt: skip


def decide_decimal(
    counts: NumberCounts, column: str, source: str, decimal: str | None = None
) -> str | None:
    """The decimal mark of one text column, decided from the counts of the whole column.

    Parameters
    ----------
    counts : NumberCounts
        Of the whole column (:func:`count_numbers`, merged over its parts).
    column, source : str
        Named in the errors.
    decimal : {".", ","}, optional
        The mark the user set (``--decimal``, ``input.decimal``); None decides from
        the values.

    Returns
    -------
    str or None
        ``"."`` or ``","`` for a column of numbers; None for a column of text labels.

    Raises
    ------
    InputError
        For a column mixing both marks (without ``decimal``), a column of numbers
        with a few values that are not numbers, and a column written with the other
        mark than ``decimal``; the message names the column, the row and the option
        that settles it.
    """
    if decimal is None and counts.dot and counts.comma:
        dot, comma = counts.first_dot, counts.first_comma
        assert dot is not None and comma is not None
        raise InputError(
            f"{source}: column {column!r} mixes decimal marks: {dot[1]!r} (data row {dot[0]}) "
            f"has a decimal point, {comma[1]!r} (data row {comma[0]}) a decimal comma "
            f"({counts.dot} and {counts.comma} such values); say which one the file uses "
            "(`--decimal ,` or `--decimal .` on the command line, `input: {decimal: ','}` "
            "in a pipeline) or fix the values"
        )
    mark = decimal or ("," if counts.comma else ".")
    good = counts.plain + (counts.comma if mark == "," else counts.dot)
    other = counts.dot if mark == "," else counts.comma
    first_other = counts.first_dot if mark == "," else counts.first_comma
    total = good + other + counts.fail
    if good == total:
        return mark
    if other and other + good >= NUMERIC_SHARE * total:
        assert first_other is not None
        other_mark = "." if mark == "," else ","
        raise InputError(
            f"{source}: column {column!r} holds numbers written with {other_mark!r} as decimal "
            f"mark (e.g. {first_other[1]!r}, data row {first_other[0]}; {other} value(s)) "
            f"while the decimal mark is {mark!r}; give the right one (`--decimal "
            f"{other_mark}` on the command line, `input: {{decimal: '{other_mark}'}}` in a "
            "pipeline) or fix the values; thousands separators are never read"
        )
    if good >= NUMERIC_SHARE * total:
        shown = ", ".join(f"{value!r} (row {row})" for row, value in counts.failures)
        values = sorted({value for _, value in counts.failures})
        if any("." in v and "," in v for v in values):
            hint = ("numbers with a thousands separator are never read: remove the "
                    "separators")  # fmt: skip
        else:
            hint = (f"if they mark missing values, pass na_values={values} (`--na-values "
                    f"{values[0]}` on the CLI); otherwise fix them or drop the column")  # fmt: skip
        raise InputError(
            f"{source}: column {column!r} is numeric except for {counts.fail} non-numeric "
            f"value(s): {shown} (data rows counted from 1); {hint}"
        )
    return None


def parse_numbers(values: pd.Series, mark: str) -> np.ndarray:
    """Text values of a column decided numeric (:func:`decide_decimal`) as float64."""
    text = values.astype(object).where(values.notna(), None)
    if mark == ",":
        text = text.map(lambda v: v if v is None else str(v).replace(",", "."))
    return pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
