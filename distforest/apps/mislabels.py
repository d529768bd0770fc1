"""Suspected mislabels: rows whose out-of-bag neighbours vote for another class.

The RF-GAP proximity reproduces the forest's out-of-bag prediction, so
``P_rfgap @ onehot(y)`` is each row's out-of-bag class probability, computed
matrix-free.  A row is suspect when the probability of its given label is
low; the outlier score (a mislabelled row is far from its given class) breaks
ties (a small weight measured best: benchmarks/results/mislabels.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from distforest.apps.outliers import outlier_scores
from distforest.errors import ParameterError

#: Weight of the outlier score's rank in the combined score.
OUTLIER_WEIGHT = 0.02


def _rank01(values: np.ndarray) -> np.ndarray:
    """Ranks scaled to [0, 1] (ties get their mean rank)."""
    ranks = pd.Series(values).rank(method="average").to_numpy()
    return (ranks - 1) / max(1, len(values) - 1)


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
    from distforest.forests.products import product_session

    require_classification(forest)
    codes = forest.y_
    n_classes = len(forest.classes_)
    onehot = np.zeros((codes.size, n_classes))
    onehot[np.arange(codes.size), codes] = 1.0
    with product_session(forest) as session:
        proba = session.product(onehot, "rfgap")
    outlier = outlier_scores(forest)
    p_label = proba[np.arange(codes.size), codes]
    suggested = proba.argmax(axis=1)
    score = (_rank01(1.0 - p_label) + outlier_weight * _rank01(outlier)) / (1 + outlier_weight)
    order = np.lexsort((np.arange(codes.size), -score))  # most suspect first, then by row
    ids = getattr(forest, "sample_ids_", None)
    return ranking_frame(
        {"row": order, "code": codes[order], "suggested": suggested[order],
         "p_label": p_label[order], "p_suggested": proba[order, suggested[order]],
         "outlier": outlier[order], "key": score[order]},
        np.asarray(forest.classes_, dtype=object),
        None if ids is None else np.asarray(ids)[order],
        getattr(forest, "id_name_", None),
    )  # fmt: skip


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
