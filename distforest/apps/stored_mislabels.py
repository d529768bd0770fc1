"""The mislabel ranking of a forest fitted from a store, by row chunks on the workers.

The same CSV, byte for byte, as :func:`distforest.apps.mislabels.mislabel_scores`
written whole, with no vector or table of n rows on the driver.  Every step
is a set of tasks that read and write scratch arrays of the run store
(``scratch/mislabels``, removed at the end):

1. the outlier scores, by :func:`~distforest.apps.stored_outliers.scores_by_chunks`
   into a scratch column (:class:`~distforest.apps.stored_outliers.ScratchScores`);
2. the RF-GAP product ``P @ onehot(y)``: one task per batch of trees builds
   the one-hot labels from the stored target and writes its part
   (:meth:`~distforest.forests.products.ProximityProducts.product_to_store`);
3. a task per row chunk adds the parts in batch order (the floats of the
   in-memory product) and writes each row's ``p_label``, suggested class and
   its probability, and ``1 - p_label``;
4. the exact average ranks of ``1 - p_label`` and of the outlier score give
   the combined score, and each chunk's rows are written in the order (score
   descending, row ascending) (:mod:`distforest.apps.stored_ranks`);
5. the score is cut into ranges of about a chunk of rows; a task per range
   gathers its rows from every chunk, sorts them and writes its piece of the
   CSV, and the driver joins the pieces in range order
   (:func:`~distforest.io.writers.publish_pieces`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distforest.apps.mislabels import (
    OUTLIER_WEIGHT,
    RankingSummary,
    ranking_frame,
    require_classification,
)
from distforest.apps.stored_outliers import ScratchScores, scores_by_chunks
from distforest.apps.stored_ranks import (
    DescendingOrder,
    SortedChunks,
    range_bounds,
    sort_chunks,
    split_points,
)
from distforest.forests import square_sums
from distforest.forests.products import stored_product_rows
from distforest.forests.square_sums import StoredCodes, drop_scratch, row_chunks, scratch_array
from distforest.store.run_store import read_rows, task_array, write_block


def scratch_bytes(n: int, n_classes: int) -> int:
    """Bytes of the scratch arrays of :func:`rank_by_chunks` at their largest (removed at
    the end): the RF-GAP votes (a float64 a class), then five score columns, two sorted
    copies, the sort keys and row numbers."""
    return 8 * n * max(n_classes + 1, 5 + 2 + 2)


#: The scratch group of the ranking, and its arrays.
GROUP = "scratch/mislabels"
PRODUCT = f"{GROUP}/rfgap"
OUTLIER, MISS, P_LABEL = f"{GROUP}/outlier", f"{GROUP}/miss", f"{GROUP}/p_label"
SUGGESTED, P_SUGGESTED = f"{GROUP}/suggested", f"{GROUP}/p_suggested"
ORDER = f"{GROUP}/order"


@dataclass(frozen=True)
class OneHot:
    """The one-hot ``(n, k)`` float64 matrix of the stored class codes, built in a task."""

    codes: StoredCodes
    k: int

    def read(self) -> np.ndarray:
        codes = self.codes.read()
        onehot = np.zeros((codes.size, self.k))
        onehot[np.arange(codes.size), codes] = 1.0
        return onehot


def _vote_task(codes: StoredCodes, rows: slice) -> int:
    """Rows ``rows``' votes written to the scratch columns; returns how many disagree."""
    path = codes.path
    proba = stored_product_rows(path, PRODUCT, rows)
    given = codes.read(rows)
    at = np.arange(given.size)
    p_label = proba[at, given]
    suggested = proba.argmax(axis=1)
    for name, values in ((P_LABEL, p_label), (MISS, 1.0 - p_label), (SUGGESTED, suggested),
                         (P_SUGGESTED, proba[at, suggested])):  # fmt: skip
        write_block(path, name, (rows,), values)
    return int(np.count_nonzero(suggested != given))


@dataclass(frozen=True)
class Scoring:
    """What a chunk's score task reads: the ranked columns, the codes and the IDs."""

    codes: StoredCodes
    miss: SortedChunks
    outlier: SortedChunks
    order: DescendingOrder
    ids: tuple[str, str] | None
    weight: float


def _order_task(scoring: Scoring, rows: slice) -> np.ndarray:
    """Chunk ``rows`` scored and written in order; returns the samples of its scores."""
    weight = scoring.weight
    score = (scoring.miss.ranks01(rows) + weight * scoring.outlier.ranks01(rows)) / (1 + weight)
    path = scoring.codes.path
    columns = {"code": scoring.codes.read(rows)}
    for name in (SUGGESTED, P_LABEL, P_SUGGESTED, OUTLIER):
        columns[name.rsplit("/", 1)[1]] = read_rows(path, name, rows)
    if scoring.ids is not None:
        columns["id"] = read_rows(*scoring.ids, rows)
    return scoring.order.write(rows, score, columns)


@dataclass(frozen=True)
class Pieces:
    """The CSV pieces of the ranges: ``folder``, class names, ID column, rows to return."""

    folder: str
    classes: np.ndarray
    id_name: str | None
    top: int


def _range_task(order: DescendingOrder, pieces: Pieces, bounds: np.ndarray,
                r: int) -> pd.DataFrame:  # fmt: skip
    """Range ``r`` of the ranking written as CSV piece ``r``; returns its first rows."""
    names = ["code", "suggested", "p_label", "p_suggested", "outlier"]
    with_ids = pieces.id_name is not None
    columns = order.gather([*names, "id"] if with_ids else names, bounds, r)
    frame = ranking_frame(columns, pieces.classes, columns.get("id"), pieces.id_name)
    frame.to_csv(Path(pieces.folder) / f"part-{r:06d}.csv", index=False, header=r == 0)
    return frame.head(pieces.top)


def rank_by_chunks(forest: Any, path: str, pieces: Pieces,
                   outlier_weight: float = OUTLIER_WEIGHT) -> RankingSummary:  # fmt: skip
    """Write the ranking of a forest fitted from the store at ``path`` as CSV pieces (one a
    range, in order, the header in piece 0) into ``pieces.folder``."""
    from distforest.forests.products import product_session

    require_classification(forest)
    n, k = int(forest.n_samples_), len(forest.classes_)
    chunk = square_sums.ROWS_PER_CHUNK
    chunks = row_chunks(n, chunk)
    codes = StoredCodes(path, "target", n)
    try:
        scratch_array(path, OUTLIER, (n,), "float64", chunk=chunk)
        scores_by_chunks(forest, path, ScratchScores(path, OUTLIER))
        with product_session(forest) as products:
            runner = products.runner
            products.product_to_store(OneHot(codes, k), k, "rfgap", PRODUCT)
            for name, dtype in ((P_LABEL, "float64"), (MISS, "float64"),
                                (SUGGESTED, "int64"), (P_SUGGESTED, "float64")):  # fmt: skip
                scratch_array(path, name, (n,), dtype, chunk=chunk)
            disagrees = 0
            for _, count in runner.run(_vote_task, [(codes, rows) for rows in chunks],
                                       name="mislabel-votes"):  # fmt: skip
                disagrees += count
            drop_scratch(path, PRODUCT)
            miss = SortedChunks(path, MISS, f"{MISS}_sorted", n, chunk)
            outlier = SortedChunks(path, OUTLIER, f"{OUTLIER}_sorted", n, chunk)
            sort_chunks(runner, [miss, outlier])
            order = DescendingOrder(path, ORDER, n, chunk)
            dtypes: dict[str, Any] = {"code": "int32", "suggested": "int64", "p_label": "float64",
                                      "p_suggested": "float64", "outlier": "float64"}  # fmt: skip
            ids = _id_location(forest)
            if ids is not None:
                dtypes["id"] = task_array(*ids, "r").dtype
            order.create(dtypes)
            scoring = Scoring(codes, miss, outlier, order, ids, outlier_weight)
            samples: list[np.ndarray] = [np.empty(0)] * len(chunks)
            for j, sample in runner.run(_order_task, [(scoring, rows) for rows in chunks],
                                        name="mislabel-scores"):  # fmt: skip
                samples[j] = sample
            points = split_points(samples, len(chunks))
            bounds = range_bounds(runner, order, points)
            heads: list[Any] = [None] * (points.size + 1)
            items = [(order, pieces, bounds, r) for r in range(points.size + 1)]
            for r, head in runner.run(_range_task, items, name="mislabel-ranges"):
                heads[r] = head
    finally:
        drop_scratch(path, GROUP)
    firsts = [h for h in heads if len(h)] or heads[:1]
    head = pd.concat(firsts, ignore_index=True).head(pieces.top)
    return RankingSummary(n, disagrees, head)


def _id_location(forest: Any) -> tuple[str, str] | None:
    from distforest.forests.products import stored_location

    ids = getattr(forest, "sample_ids_", None)
    return None if ids is None else stored_location(ids)


def write_ranking_csv(forest: Any, path: str, out: str, top: int = 0) -> tuple[str, RankingSummary]:
    """The mislabel CSV of a forest fitted from the store at ``path``, written by tasks in
    pieces and joined into ``out`` through a temporary file and a rename; returns ``out``
    resolved and the summary (with the ``top`` first rows)."""
    from distforest.io.writers import pieces_beside, publish_pieces

    dest = Path(out).resolve()
    ids = _id_location(forest)
    with pieces_beside(dest) as folder:
        pieces = Pieces(str(folder), np.asarray(forest.classes_, dtype=object),
                        forest.id_name_ if ids is not None else None, top)  # fmt: skip
        summary = rank_by_chunks(forest, path, pieces)
        publish_pieces(sorted(str(p) for p in folder.glob("part-*.csv")), dest)
    return str(dest), summary
