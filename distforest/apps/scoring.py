"""New rows against a saved forest: scores and imputations, the model left as it is.

What ``distforest score`` and a pipeline with a ``model:`` key both run:

- :func:`new_rows_table`: tonight's table, its columns matched to the
  model's features by name (in any order; other columns are ignored) and its
  IDs kept;
- :func:`score_rows`: per new row, the forest's prediction, the
  proximity-weighted prediction from the training targets and the outlier
  score on the training rows' scale (:func:`~distforest.apps.outliers.outlier_scores_new_rows`);
- :func:`impute_rows`: each missing cell of a new row filled from the
  training rows' observed values of its column, weighted by the new row's
  proximity to them (numeric: weighted mean; categorical: weighted vote).
  A new row is routed through the trees with its missing cells following
  the trees' missing-value branches (no start values, no iterations): it is
  out of bag in every tree.  Training rows are never changed.

Nothing is refitted, no proximity of the training rows is written, and no
``n_new x n_train`` matrix is formed: the predictions route the new rows,
the weighted sums are per-tree leaf sums (:mod:`distforest.kernels.leafsums`)
and the outlier scores' sums of squares come from sparse leaf-member rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from distforest.errors import InputError, StoreError
from distforest.forests import forest_predict
from distforest.forests.new_rows import new_leaves
from distforest.forests.products import product_session
from distforest.io import Table, load_table, read_frame
from distforest.kernels.imputation import build_v, plan_columns, start_values, update_cells
from distforest.store.run_store import RunStore


def new_rows_table(
    forest: Any,
    source: Any,
    *,
    id_column: str | None = None,
    na_values: Sequence[str] = (),
    decimal: str | None = None,
) -> Table:
    """The model's feature columns of ``source`` (by name, any order), with its IDs.

    Raises
    ------
    InputError
        A feature of the model is not a column of ``source``.
    """
    frame = read_frame(source, na_values=na_values, decimal=decimal)
    frame.columns = [str(c) for c in frame.columns]
    names = list(forest.feature_names_in_)
    missing = [c for c in names if c not in frame.columns]
    if missing:
        raise InputError(
            f"{source}: the model needs column(s) {missing} that are not there; "
            f"available: {', '.join(list(frame.columns)[:20])}"
        )
    if id_column is not None and id_column not in frame.columns:
        raise InputError(
            f"{source}: no ID column {id_column!r}; available: "
            f"{', '.join(list(frame.columns)[:20])}"
        )
    keep = names if id_column is None else [id_column, *names]
    return load_table(frame[keep], id=id_column, min_rows=1, decimal=decimal)


def _id_frame(table: Table) -> pd.DataFrame:
    """The first column of every output: the rows' IDs (or numbers)."""
    ids = np.arange(table.n_samples) if table.ids is None else table.ids
    return pd.DataFrame({table.id_name or "row": ids})


def score_rows(
    forest: Any,
    table: Table,
    *,
    method: str = "rfgap",
    proximity_prediction: bool = True,
    outliers: bool = True,
) -> pd.DataFrame:
    """Scores of new rows: ID, ``predicted``, ``proximity_predicted``, ``outlier``,
    ``outlier_flag`` (the training rows' default flag:
    :func:`~distforest.apps.outliers.outlier_flags_new_rows`).

    Parameters
    ----------
    forest : ProximityForest
        Fitted with its nodes (loaded with ``ProximityForest.load``).
    table : Table
        New rows (:func:`new_rows_table`).
    method : {"rfgap", "original", "oob"}
        Proximity weighing the training targets in ``proximity_predicted``.
    proximity_prediction, outliers : bool
        Whether to add those columns (the predictions need a supervised forest).

    Returns
    -------
    pandas.DataFrame
        One row per new row, the ID column first.
    """
    from distforest.apps.outliers import FLAG_COLUMN, outlier_flags_new_rows

    result = _id_frame(table)
    labels = None
    if forest.task_ != "unsupervised":
        result["predicted"] = forest.predict(table)
        if forest.task_ == "classification":  # the outlier scores' classes: routed once
            labels = result["predicted"].to_numpy()
        if proximity_prediction:
            result["proximity_predicted"] = forest.predict_proximity(table, method)
    if outliers:
        found = outlier_flags_new_rows(forest, table, labels=labels)
        result["outlier"] = found.scores
        result[FLAG_COLUMN] = found.flags
    return result


def training_features(model: str, forest: Any, training: Any = None,
                      na_values: Sequence[str] = ()) -> np.ndarray:  # fmt: skip
    """The model's training features (float64, NaN where missing), as the trees saw them.

    From the store's ``input/X`` when the model was fitted from a stored
    table; else read from ``training`` (default: the source the store
    records) and checked against the fingerprint of the table the model was
    fitted on.

    Raises
    ------
    StoreError
        The training table cannot be found, or is not the one the model was fitted on.
    """
    rs = RunStore.open(model)
    if "input" in rs.group and "X" in rs.subgroup("input"):
        return np.asarray(rs.read("input/X"), dtype=np.float64)
    path = training if training is not None else forest.input_.get("source")
    recorded = forest.input_.get("fingerprint")
    hint = ("give model.training (the table the model was fitted on), or leave the impute "
            "section out")  # fmt: skip
    if not isinstance(path, str) or path.startswith("<"):
        raise StoreError(
            f"{model}: the model was fitted on {path or 'an in-memory table'}, not a file; {hint}"
        )
    try:
        frame = read_frame(path, na_values=na_values)
    except (InputError, OSError) as exc:
        raise StoreError(
            f"{model}: cannot read its training table {path!r} ({exc}); {hint}"
        ) from None
    frame.columns = [str(c) for c in frame.columns]
    columns = [c for c in (forest.id_name_, *forest.feature_names_in_, forest.target_name_) if c]
    absent = [c for c in columns if c not in frame.columns]
    table = None if absent else load_table(frame[columns], target=forest.target_name_,
                                           id=forest.id_name_)  # fmt: skip
    if table is None or table.fingerprint() != recorded:
        raise StoreError(
            f"{model}: {path!r} is not the table the model was fitted on (fingerprint "
            f"{recorded}, {'missing columns ' + str(absent) if absent else 'other values'}); "
            f"{hint}"
        )
    return table.X


def impute_rows(
    forest: Any,
    table: Table,
    X_train: np.ndarray,
    *,
    method: str = "rfgap",
    vote: str = "sum",
) -> tuple[pd.DataFrame, int]:
    """The new rows with their missing cells filled from the training rows by proximity.

    Cell ``(i, c)``: ``sum_j P_ij m_jc x_jc / sum_j P_ij m_jc`` over the
    training rows j with column c observed (numeric), or the level with the
    largest such sum (``vote="sum"``) or mean (``"mean"``) (categorical);
    the training median / most frequent level when no training row with an
    observed value shares a leaf with row i.  One product ``P @ V``
    (:class:`~distforest.forests.products.ProximityProducts`) for all columns.

    Parameters
    ----------
    forest : ProximityForest
    table : Table
        New rows (:func:`new_rows_table`).
    X_train : ndarray, shape (n_train, n_features)
        :func:`training_features`.
    method : {"rfgap", "original", "oob"}
    vote : {"sum", "mean"}

    Returns
    -------
    imputed : pandas.DataFrame
        ID column first, then the features (categories as their labels).
    cells : int
        Cells filled.
    """
    X_new = forest_predict.new_rows(forest, table).astype(np.float64)
    names = list(forest.feature_names_in_)
    categorical = np.array([f in forest.categories_ for f in names], dtype=bool)
    missing = np.isnan(X_new)
    rows = np.flatnonzero(missing.any(axis=1))
    if rows.size:
        stats = start_values(X_train, categorical)
        columns = np.flatnonzero(missing[rows].any(axis=0)).tolist()
        layout = plan_columns(X_train, categorical, columns)
        V = build_v(X_train, layout, stats)
        leaves = new_leaves(forest, table)[rows]
        with product_session(forest) as session:
            R = session.product(V, method, new_leaves=leaves)
        local = np.where(missing[rows], stats, X_new[rows])
        update_cells(local, np.arange(rows.size), missing[rows], R, layout, stats, stats, vote)
        X_new[rows] = local
    out = _id_frame(table)
    for j, name in enumerate(names):
        levels = forest.categories_.get(name)
        if levels is None:
            out[name] = X_new[:, j]
        else:
            codes = X_new[:, j]
            out[name] = np.asarray(levels, dtype=object)[codes.astype(np.int64)]
    return out, int(missing.sum())
