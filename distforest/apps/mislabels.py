"""Suspected mislabels: rows whose out-of-bag neighbours vote for another class.

The RF-GAP proximity reproduces the forest's out-of-bag prediction, so
``P_rfgap @ onehot(y)`` is each row's out-of-bag class probability, computed
matrix-free.  A row is suspect when the probability of its given label is
low; the outlier score (a mislabelled row is far from its given class) breaks
ties (a small weight measured best: benchmarks/results/mislabels.md).

One algorithm by row chunks, its scratch arrays in the run store of a forest
fitted from a store (``scratch/mislabels``, removed at the end: no vector or
table of n rows on the driver) or held in memory
(:class:`~distforest.store.scratch.ScratchSpace`):

1. the outlier scores (:mod:`distforest.apps.outliers`) into a scratch column;
2. the RF-GAP product ``P @ onehot(y)``: one task per batch of trees (in a
   store each builds the one-hot labels from the stored target and writes its
   part, :meth:`~distforest.forests.products.ProximityProducts.product_to_store`);
3. a task per row chunk adds the parts in batch order and writes each row's
   ``p_label``, suggested class and its probability, and ``1 - p_label``;
4. the exact average ranks of ``1 - p_label`` and of the outlier score give
   the combined score, and each chunk's rows are written in the order (score
   descending, row ascending) (:mod:`distforest.apps.ranking`);
5. the score is cut into ranges of about a chunk of rows; a task per range
   gathers its rows from every chunk, sorts them and writes its piece of the
   CSV (the driver joins the pieces in range order,
   :func:`~distforest.io.writers.publish_pieces`) or returns its table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from distforest.apps.outliers import scores_by_chunks
from distforest.apps.ranking import (
    DescendingOrder,
    SortedChunks,
    range_bounds,
    sort_chunks,
    split_points,
)
from distforest.errors import ParameterError
from distforest.forests.products import stored_product_rows
from distforest.forests.square_sums import StoredCodes
from distforest.parallel.execution import Runner
from distforest.store import scratch
from distforest.store.run_store import task_array
from distforest.store.scratch import Column, HeldColumn, ScratchSpace, StoredColumn, row_chunks
from distforest.store.sink import ScratchScores

#: Weight of the outlier score's rank in the combined score.
OUTLIER_WEIGHT = 0.02


def require_classification(forest: Any) -> None:
    """Refuse a forest that is not a classification forest (:class:`ParameterError`)."""
    if getattr(forest, "task_", None) != "classification":
        raise ParameterError(
            "mislabel detection needs a classification forest (fit with the labels to check); "
            f"got task {getattr(forest, 'task_', None)!r}"
        )


def mislabel_scores(forest, *, outlier_weight: float = OUTLIER_WEIGHT) -> pd.DataFrame:
    """Rank the training rows of a classification forest by how suspect their label is.

    Parameters
    ----------
    forest : ProximityForest
        Fitted with ``task="classification"`` on the labels to check.
    outlier_weight : float, default 0.02
        Weight of the outlier score's rank next to the rank of
        ``1 - p(given label)``.

    Returns
    -------
    pandas.DataFrame
        One row per sample, most suspect first, with columns ``row``,
        ``label``, ``suggested`` (the class with the largest out-of-bag
        probability), ``p_label``, ``p_suggested``, ``outlier``, ``score``
        (combined, in [0, 1]) and ``disagrees`` (suggested != label).
    """
    from distforest.apps.outliers import stored_path

    require_classification(forest)
    ids = _id_column(forest)
    tables = Tables(np.asarray(forest.classes_, dtype=object),
                    forest.id_name_ if ids is not None else None)  # fmt: skip
    frames, _ = rank_by_chunks(forest, ScratchSpace(stored_path(forest)), tables, outlier_weight)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def ranking_frame(columns: dict[str, np.ndarray], classes: np.ndarray, ids: np.ndarray | None,
                  id_name: str | None) -> pd.DataFrame:  # fmt: skip
    """The ranking's table from its columns, already in order (most suspect first).

    ``columns``: ``row``, ``code`` (the given label's class code), ``suggested``
    (a class code), ``p_label``, ``p_suggested``, ``outlier`` and ``key`` (the
    combined score); ``classes``: the class names (object array); with
    ``ids``, the rows' IDs come first under ``id_name``, in place of ``row``.
    """
    codes, suggested = columns["code"], columns["suggested"]
    frame = pd.DataFrame(
        {
            "row": columns["row"],
            "label": classes[codes],
            "suggested": classes[suggested],
            "p_label": columns["p_label"],
            "p_suggested": columns["p_suggested"],
            "outlier": columns["outlier"],
            "score": columns["key"],
            "disagrees": suggested != codes,
        }
    )
    if ids is not None:  # the rows' IDs first, under the ID column's name
        frame.insert(0, id_name, ids)
        frame = frame.drop(columns="row")
    return frame


@dataclass(frozen=True)
class RankingSummary:
    """What a command reports of a ranking written to a file: its rows, the rows whose
    out-of-bag vote disagrees with the label, and the first rows (most suspect)."""

    rows: int
    disagrees: int
    head: pd.DataFrame

    @classmethod
    def of(cls, ranking: pd.DataFrame, top: int) -> RankingSummary:
        """The summary of a ranking held whole."""
        return cls(len(ranking), int(ranking["disagrees"].sum()), ranking.head(top))


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


def _vote_task(space: ScratchSpace, codes: Column, rows: slice) -> int:
    """Rows ``rows``' votes written to the scratch columns; returns how many disagree."""
    if space.path is None:  # the product held whole
        proba = space.read(PRODUCT, rows)
    else:  # the tree batches' parts, added in batch order (the same floats)
        proba = stored_product_rows(space.path, PRODUCT, rows)
    given = codes.read(rows)
    at = np.arange(given.size)
    p_label = proba[at, given]
    suggested = proba.argmax(axis=1)
    for name, values in ((P_LABEL, p_label), (MISS, 1.0 - p_label), (SUGGESTED, suggested),
                         (P_SUGGESTED, proba[at, suggested])):  # fmt: skip
        space.write(name, (rows,), values)
    return int(np.count_nonzero(suggested != given))


@dataclass(frozen=True)
class Scoring:
    """What a chunk's score task reads: the ranked columns, the codes and the IDs."""

    space: ScratchSpace
    codes: Column
    miss: SortedChunks
    outlier: SortedChunks
    order: DescendingOrder
    ids: Column | None
    weight: float


def _order_task(scoring: Scoring, rows: slice) -> np.ndarray:
    """Chunk ``rows`` scored and written in order; returns the samples of its scores."""
    weight = scoring.weight
    score = (scoring.miss.ranks01(rows) + weight * scoring.outlier.ranks01(rows)) / (1 + weight)
    columns = {"code": scoring.codes.read(rows)}
    for name in (SUGGESTED, P_LABEL, P_SUGGESTED, OUTLIER):
        columns[name.rsplit("/", 1)[1]] = scoring.space.read(name, rows)
    if scoring.ids is not None:
        columns["id"] = scoring.ids.read(rows)
    return scoring.order.write(rows, score, columns)


@dataclass(frozen=True)
class Tables:
    """What a range's task makes of its rows: the ranking's table (class names, the ID
    column's name), written as CSV piece ``r`` into ``folder`` (its ``top`` first rows
    returned) or, without a folder, returned whole."""

    classes: np.ndarray
    id_name: str | None
    folder: str | None = None
    top: int = 0


def _range_task(order: DescendingOrder, tables: Tables, bounds: np.ndarray,
                r: int) -> pd.DataFrame:  # fmt: skip
    """Range ``r`` of the ranking: its table, or its first rows once written as a piece."""
    names = ["code", "suggested", "p_label", "p_suggested", "outlier"]
    with_ids = tables.id_name is not None
    columns = order.gather([*names, "id"] if with_ids else names, bounds, r)
    frame = ranking_frame(columns, tables.classes, columns.get("id"), tables.id_name)
    if tables.folder is None:
        return frame
    frame.to_csv(Path(tables.folder) / f"part-{r:06d}.csv", index=False, header=r == 0)
    return frame.head(tables.top)


def rank_by_chunks(
    forest: Any, space: ScratchSpace, tables: Tables, outlier_weight: float = OUTLIER_WEIGHT
) -> tuple[list[pd.DataFrame], int]:
    """The ranking of a forest, by row chunks, its scratch arrays in ``space``.

    Returns each range's table (or, with ``tables.folder``, its first rows once
    written as CSV piece ``r``, the header in piece 0), in order, and the rows
    whose out-of-bag vote disagrees with the label.
    """
    from distforest.forests.products import product_session

    require_classification(forest)
    n, k = int(forest.n_samples_), len(forest.classes_)
    chunk = scratch.ROWS_PER_CHUNK
    chunks = row_chunks(n, chunk)
    codes: Column
    if space.path is None:
        codes = HeldColumn(np.asarray(forest.y_))
    else:
        codes = StoredCodes(space.path, "target", n)
    try:
        space.create(OUTLIER, (n,), "float64", chunk=chunk)
        if space.path is None:
            from distforest.apps.outliers import outlier_scores

            space.write(OUTLIER, (slice(None),), outlier_scores(forest))
        else:
            scores_by_chunks(forest, space.path, ScratchScores(space.path, OUTLIER))
        with product_session(forest) as products:
            runner = products.runner if space.path is not None else Runner(None)
            if space.path is None:
                onehot = np.zeros((n, k))
                onehot[np.arange(n), np.asarray(forest.y_)] = 1.0
                space.held[PRODUCT] = products.product(onehot, "rfgap")
            else:
                assert isinstance(codes, StoredCodes)
                products.product_to_store(OneHot(codes, k), k, "rfgap", PRODUCT)
            for name, dtype in ((P_LABEL, "float64"), (MISS, "float64"),
                                (SUGGESTED, "int64"), (P_SUGGESTED, "float64")):  # fmt: skip
                space.create(name, (n,), dtype, chunk=chunk)
            disagrees = 0
            for _, count in runner.run(_vote_task, [(space, codes, rows) for rows in chunks],
                                       name="mislabel-votes"):  # fmt: skip
                disagrees += count
            space.drop(PRODUCT)
            miss = SortedChunks(space, MISS, f"{MISS}_sorted", n, chunk)
            outlier = SortedChunks(space, OUTLIER, f"{OUTLIER}_sorted", n, chunk)
            sort_chunks(runner, [miss, outlier])
            order = DescendingOrder(space, ORDER, n, chunk)
            dtypes: dict[str, Any] = {"code": "int32", "suggested": "int64", "p_label": "float64",
                                      "p_suggested": "float64", "outlier": "float64"}  # fmt: skip
            ids = _id_column(forest)
            if isinstance(ids, HeldColumn):
                dtypes["id"] = ids.values.dtype
            elif ids is not None:
                dtypes["id"] = task_array(ids.path, ids.name, "r").dtype
            order.create(dtypes)
            scoring = Scoring(space, codes, miss, outlier, order, ids, outlier_weight)
            samples: list[np.ndarray] = [np.empty(0)] * len(chunks)
            for j, sample in runner.run(_order_task, [(scoring, rows) for rows in chunks],
                                        name="mislabel-scores"):  # fmt: skip
                samples[j] = sample
            points = split_points(samples, len(chunks))
            bounds = range_bounds(runner, order, points)
            frames: list[Any] = [None] * (points.size + 1)
            items = [(order, tables, bounds, r) for r in range(points.size + 1)]
            for r, frame in runner.run(_range_task, items, name="mislabel-ranges"):
                frames[r] = frame
    finally:
        space.drop(GROUP)
    return frames, disagrees


def _id_column(forest: Any) -> HeldColumn | StoredColumn | None:
    """The rows' IDs as tasks read them (in the store, or held), or None without IDs."""
    from distforest.forests.products import stored_location

    ids = getattr(forest, "sample_ids_", None)
    if ids is None:
        return None
    where = stored_location(ids)
    return HeldColumn(np.asarray(ids)) if where is None else StoredColumn(*where)


def write_ranking_csv(forest: Any, path: str, out: str, top: int = 0) -> tuple[str, RankingSummary]:
    """The mislabel CSV of a forest fitted from the store at ``path``, written by tasks in
    pieces and joined into ``out`` through a temporary file and a rename; returns ``out``
    resolved and the summary (with the ``top`` first rows)."""
    from distforest.io.writers import pieces_beside, publish_pieces

    dest = Path(out).resolve()
    ids = _id_column(forest)
    with pieces_beside(dest) as folder:
        tables = Tables(np.asarray(forest.classes_, dtype=object),
                        forest.id_name_ if ids is not None else None, str(folder), top)  # fmt: skip
        heads, disagrees = rank_by_chunks(forest, ScratchSpace(path), tables)
        publish_pieces(sorted(str(p) for p in folder.glob("part-*.csv")), dest)
    firsts = [h for h in heads if len(h)] or heads[:1]
    head = pd.concat(firsts, ignore_index=True).head(top)
    return str(dest), RankingSummary(int(forest.n_samples_), disagrees, head)
