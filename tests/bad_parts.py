"""A table written as part files with one bad cell in one part (the by-partitions error tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def write_bad_parts(frame: pd.DataFrame, folder: Path, *, column: str, row: int, value: Any,
                    kind: str = "parquet", parts: int = 5, bad_part: int = 3) -> int:  # fmt: skip
    """Write ``frame`` into ``folder`` (made here) as ``parts`` files, ``part-K.parquet``
    (``kind="parquet"``) or ``t-K.csv`` (``kind="csv"``, ``column`` written as text), with
    ``value`` in ``column`` at row ``row`` of part ``bad_part``.

    Returns
    -------
    int
        That cell's row in the whole table, counted from 0.
    """
    folder.mkdir()
    cuts = np.array_split(np.arange(len(frame)), parts)
    for k, cut in enumerate(cuts):
        part = frame.iloc[cut].astype({column: object} if kind == "csv" else {})
        if k == bad_part:
            part.loc[part.index[row], column] = value
        if kind == "csv":
            part.to_csv(folder / f"t-{k}.csv", index=False)
        else:
            part.to_parquet(folder / f"part-{k}.parquet", index=False)
    return int(cuts[bad_part][0]) + row
