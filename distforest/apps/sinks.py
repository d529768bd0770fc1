"""Where tasks over row chunks leave an answer's per-row results, instead of returning them.

A task scoring (or placing) a chunk of rows hands its values to a sink: a
scratch array of the run store (:class:`ScratchScores`, read again by a later
step, as the mislabel ranking reads the outlier scores), or a piece of a CSV
(:class:`CsvPieces`: ID or row number, label, the values), which
:func:`csv_by_pieces` joins into the output file a megabyte at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from distforest.store.run_store import read_rows, write_block


class ScoreSink(Protocol):
    """Where a task leaves its chunk's per-row values (instead of returning them)."""

    def write(self, k: int, rows: slice, codes: np.ndarray,
              scores: np.ndarray | Mapping[str, np.ndarray]) -> None:  # fmt: skip
        """Keep chunk ``k``: rows ``rows``, their class codes and values (one column, or
        each column by its name)."""


@dataclass(frozen=True)
class ScratchScores:
    """Values written into rows of array ``name`` of the store at ``path`` (made beforehand,
    chunked as :func:`~distforest.store.scratch.row_chunks`)."""

    path: str
    name: str

    def write(self, k: int, rows: slice, codes: np.ndarray,
              scores: np.ndarray | Mapping[str, np.ndarray]) -> None:  # fmt: skip
        if not isinstance(scores, np.ndarray):
            raise TypeError(f"{self.name} holds one column; got columns {sorted(scores)}")
        write_block(self.path, self.name, (rows,), scores)


@dataclass(frozen=True)
class CsvPieces:
    """Where tasks write their CSV pieces (ID or ``row``, ``label``, then ``columns``)."""

    folder: str
    id_location: tuple[str, str] | None
    id_name: str
    class_names: tuple[str, ...] | None
    columns: tuple[str, ...] = ("outlier",)

    def write(self, k: int, rows: slice, codes: np.ndarray,
              values: np.ndarray | Mapping[str, np.ndarray]) -> None:  # fmt: skip
        """Piece ``k`` (the header in piece 0 only): ``values`` one column or one a name, or
        each column by its name."""
        import pandas as pd

        if self.id_location is None:
            ids = np.arange(rows.start, rows.stop)
        else:
            ids = read_rows(*self.id_location, rows)
        frame = pd.DataFrame({self.id_name: ids})
        if self.class_names is not None:
            frame["label"] = np.asarray(self.class_names, dtype=object)[codes]
        if not isinstance(values, Mapping):
            values = dict(zip(self.columns, np.reshape(values, (len(frame), -1)).T, strict=True))
        for name in self.columns:
            frame[name] = values[name]
        frame.to_csv(Path(self.folder) / f"part-{k:06d}.csv", index=False, header=k == 0)


def csv_by_pieces(forest: Any, out: str, columns: tuple[str, ...],
                  fill: Callable[[CsvPieces], Any]) -> str:  # fmt: skip
    """A CSV of the training rows (ID or ``row``, ``label``, ``columns``) whose pieces
    ``fill(pieces)`` has tasks write, joined into ``out`` through a temporary file and a
    rename; returns ``out`` resolved."""
    from distforest.forests.products import stored_location
    from distforest.io.writers import pieces_beside, publish_pieces

    dest = Path(out).resolve()
    ids = getattr(forest, "sample_ids_", None)
    names = (tuple(str(c) for c in forest.classes_)
             if forest.task_ == "classification" else None)  # fmt: skip
    with pieces_beside(dest) as folder:
        where = None if ids is None else stored_location(ids)
        fill(CsvPieces(str(folder), where, forest.id_name_ if where else "row", names, columns))
        publish_pieces(sorted(str(p) for p in folder.glob("part-*.csv")), dest)
    return str(dest)
