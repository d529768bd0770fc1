"""Outlier scores of a forest fitted from a store, by row chunks on the workers.

The same numbers as :func:`distforest.apps.outliers.outlier_scores`, with no
vector of n rows on the driver:

1. each row's sum of squared within-class proximities is written to the
   store by tasks (:func:`~distforest.forests.square_sums.stored_square_sums`);
2. each class's median of ``raw = n / sum``, then its median of
   ``|raw - median|``, are found exactly by radix selection over the row
   chunks (:mod:`distforest.kernels.order_stats`): tasks return counts of 65,536
   buckets a class and round, and the few values of the last bucket;
3. tasks score their chunk and return it, or hand it to a sink: a piece of
   the CSV (ID or row number, label, score; :class:`CsvPieces`, which the
   driver appends to the output file a megabyte at a time), or a scratch
   array of the store (:class:`ScratchScores`, for the mislabel ranking).

Used when the forest's leaves are in a local store that can be written and
the labels are the forest's own (or there are none); anything else is scored
in memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from distforest.forests.square_sums import (
    SUMS_ARRAY,
    StoredCodes,
    drop_scratch,
    row_chunks,
    stored_square_sums,
)
from distforest.kernels import order_stats
from distforest.store.run_store import read_rows, write_block

#: Candidates of a class left in the bucket below which they are gathered and sorted.
GATHER_LIMIT = 1 << 18


@dataclass(frozen=True)
class RawValues:
    """The rows' raw outlier values (``n / sum``, a zero sum counted as 1) a task reads by
    rows; with ``center`` (one per class), ``|raw - center[class]|`` instead."""

    codes: StoredCodes
    n: int
    center: np.ndarray | None = None

    def read(self, rows: slice) -> tuple[np.ndarray, np.ndarray]:
        """Values and class codes of ``rows``."""
        sums = read_rows(self.codes.path, SUMS_ARRAY, rows).astype(np.float64)
        sums[sums == 0] = 1.0  # as scores_from_square_sums: the same floats
        raw = np.divide(self.n, sums, out=sums)
        codes = self.codes.read(rows)
        if self.center is not None:
            raw = np.abs(raw - self.center[codes])
        return raw, codes


class ScoreSink(Protocol):
    """Where a score task leaves its chunk's scores (instead of returning them)."""

    def write(self, k: int, rows: slice, codes: np.ndarray, scores: np.ndarray) -> None:
        """Keep chunk ``k``: rows ``rows``, their class codes and scores."""


@dataclass(frozen=True)
class ScratchScores:
    """Scores written into rows of array ``name`` of the store at ``path`` (made beforehand,
    chunked as :func:`~distforest.forests.square_sums.row_chunks`)."""

    path: str
    name: str

    def write(self, k: int, rows: slice, codes: np.ndarray, scores: np.ndarray) -> None:
        write_block(self.path, self.name, (rows,), scores)


@dataclass(frozen=True)
class CsvPieces:
    """Where score tasks write their CSV pieces, and what goes beside the score."""

    folder: str
    id_location: tuple[str, str] | None
    id_name: str
    class_names: tuple[str, ...] | None

    def write(self, k: int, rows: slice, codes: np.ndarray, scores: np.ndarray) -> None:
        import pandas as pd

        if self.id_location is None:
            ids = np.arange(rows.start, rows.stop)
        else:
            ids = read_rows(*self.id_location, rows)
        frame = pd.DataFrame({self.id_name: ids})
        if self.class_names is not None:
            frame["label"] = np.asarray(self.class_names, dtype=object)[codes]
        frame["outlier"] = scores
        frame.to_csv(Path(self.folder) / f"part-{k:06d}.csv", index=False, header=k == 0)


def _bucket_task(values: RawValues, rows: slice, queries: list[tuple[int, int, int]]) -> np.ndarray:
    raw, codes = values.read(rows)
    counts = np.zeros((len(queries), order_stats.BUCKETS), dtype=np.int64)
    for q, (c, known, prefix) in enumerate(queries):
        keys = order_stats.sortable_keys(raw[codes == c])
        counts[q] = order_stats.bucket_counts(keys, known, prefix)
    return counts


def _gather_task(values: RawValues, rows: slice,
                 queries: list[tuple[int, int, int]]) -> list[np.ndarray]:  # fmt: skip
    raw, codes = values.read(rows)
    return [order_stats.prefix_members(order_stats.sortable_keys(raw[codes == c]), known, prefix)
            for c, known, prefix in queries]  # fmt: skip


def order_statistics(runner: Any, values: RawValues, ranks: dict[int, list[int]],
                     sizes: np.ndarray) -> dict[tuple[int, int], float]:  # fmt: skip
    """The ``rank``-th smallest (0-based) value of each class, exactly, by row chunks.

    ``ranks``: class -> ranks wanted; ``sizes``: rows of each class.
    """
    state = {(c, r): [0, 0, r, int(sizes[c])] for c, wanted in ranks.items() for r in wanted}
    chunks = row_chunks(values.n)
    while True:
        open_ = sorted({(c, s[0], s[1]) for (c, _), s in state.items()
                        if s[3] > GATHER_LIMIT and s[0] < order_stats.KEY_BITS})  # fmt: skip
        if not open_:
            break
        totals = np.zeros((len(open_), order_stats.BUCKETS), dtype=np.int64)
        for _, counts in runner.run(_bucket_task, [(values, rows, open_) for rows in chunks],
                                    name="outlier-medians"):  # fmt: skip
            totals += counts
        for (c, _), s in state.items():
            if (c, s[0], s[1]) in open_:
                bucket, s[2], s[3] = order_stats.narrow(totals[open_.index((c, s[0], s[1]))], s[2])
                s[0], s[1] = s[0] + order_stats.BITS, (s[1] << order_stats.BITS) | bucket
    result: dict[tuple[int, int], float] = {}
    for key, s in state.items():  # every bit known: the prefix is the value
        if s[0] == order_stats.KEY_BITS:
            result[key] = float(order_stats.key_values(np.array([s[1]], dtype=np.uint64))[0])
    wanted = sorted({(key[0], s[0], s[1]) for key, s in state.items() if key not in result})
    if wanted:
        members: list[list[np.ndarray]] = [[] for _ in wanted]
        for _, found in runner.run(_gather_task, [(values, rows, wanted) for rows in chunks],
                                   name="outlier-medians"):  # fmt: skip
            for q, keys in enumerate(found):
                members[q].append(keys)
        joined = [np.sort(np.concatenate(m)) for m in members]
        for key, s in state.items():
            if key not in result:
                keys = joined[wanted.index((key[0], s[0], s[1]))]
                result[key] = float(order_stats.key_values(keys[s[2] : s[2] + 1])[0])
    return result


def class_medians(runner: Any, values: RawValues, sizes: np.ndarray) -> np.ndarray:
    """Each class's median (``np.median``'s: the mean of the middle two for an even count)."""
    ranks = {c: sorted({(int(m) - 1) // 2, int(m) // 2}) for c, m in enumerate(sizes) if m}
    found = order_statistics(runner, values, ranks, sizes)
    medians = np.zeros(len(sizes), dtype=np.float64)
    for c, m in enumerate(sizes):
        if m:
            low, high = np.float64(found[c, (m - 1) // 2]), np.float64(found[c, m // 2])
            medians[c] = low if m % 2 else (low + high) / 2
    return medians


def _count_task(codes: StoredCodes, rows: slice, k: int) -> np.ndarray:
    return np.bincount(codes.read(rows), minlength=k)


def _score_task(values: RawValues, rows: slice, center: np.ndarray, scale: np.ndarray,
                k: int, sink: ScoreSink | None) -> np.ndarray | None:  # fmt: skip
    raw, codes = values.read(rows)
    scores = (raw - center[codes]) / scale[codes]
    if sink is None:
        return scores
    sink.write(k, rows, codes, scores)
    return None


def scores_by_chunks(forest: Any, path: str, sink: ScoreSink | None = None) -> np.ndarray | None:
    """Outlier scores of the training rows of a forest fitted from the store at ``path``.

    Returns the scores, or (with ``sink``) None once every chunk is written to it.
    """
    from distforest.apps.outliers import MAD_SCALE
    from distforest.forests.products import product_session

    n = int(forest.n_samples_)
    classification = forest.task_ == "classification"
    codes = StoredCodes(path, "target" if classification else None, n)
    k = len(forest.classes_) if classification else 1
    try:
        stored_square_sums(forest, codes)
        with product_session(forest) as session:
            runner = session.runner
            chunks = row_chunks(n)
            sizes = np.zeros(k, dtype=np.int64)
            for _, counts in runner.run(_count_task, [(codes, rows, k) for rows in chunks],
                                        name="outlier-classes"):  # fmt: skip
                sizes += counts[:k]
            raw = RawValues(codes, n)
            medians = class_medians(runner, raw, sizes)
            mads = MAD_SCALE * class_medians(runner, RawValues(codes, n, medians), sizes)
            scale = np.where(mads > 0, mads, 1.0)
            items = [(raw, rows, medians, scale, j, sink) for j, rows in enumerate(chunks)]
            parts: list[Any] = [None] * len(items)
            for j, part in runner.run(_score_task, items, name="outlier-scores"):
                parts[j] = part
    finally:
        drop_scratch(path, SUMS_ARRAY)
    return None if sink is not None else np.concatenate(parts)


def stored_path(forest: Any) -> str | None:
    """The local store of a forest fitted from a store, if its scores can be made there."""
    from distforest.forests.products import stored_location

    where = stored_location(forest.leaves_)
    if where is None or not os.access(where[0], os.W_OK):
        return None
    ids = getattr(forest, "sample_ids_", None)
    if ids is not None and stored_location(ids) is None:  # IDs held in memory
        return None
    if forest.task_ == "classification":
        from distforest.store.run_store import RunStore

        if "target" not in RunStore.open(where[0]).group:
            return None
    return where[0]


def write_scores_csv(forest: Any, path: str, out: str) -> str:
    """The outlier CSV (ID or ``row``, ``label``, ``outlier``) written by tasks in pieces,
    joined into ``out`` through a temporary file and a rename; returns ``out`` resolved."""
    from distforest.forests.products import stored_location
    from distforest.io.writers import pieces_beside, publish_pieces

    dest = Path(out).resolve()
    ids = getattr(forest, "sample_ids_", None)
    names = (tuple(str(c) for c in forest.classes_)
             if forest.task_ == "classification" else None)  # fmt: skip
    with pieces_beside(dest) as folder:
        where = None if ids is None else stored_location(ids)
        pieces = CsvPieces(str(folder), where, forest.id_name_ if where else "row", names)
        scores_by_chunks(forest, path, pieces)
        publish_pieces(sorted(str(p) for p in folder.glob("part-*.csv")), dest)
    return str(dest)
