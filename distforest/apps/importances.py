"""Feature importances of a fitted forest: impurity-based and by permutation.

Impurity importances come with the forest (``feature_importances_``, as
scikit-learn's forests).  They favour features with many distinct values and
are measured on the training rows; permutation importances
(:func:`sklearn.inspection.permutation_importance`) measure, on rows the
forest did not see, how much the score drops when one column is shuffled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.io import Table


def labelled_frame(table: Table) -> pd.DataFrame:
    """The features of ``table`` as a DataFrame, categorical codes given back as labels.

    What a forest's ``predict`` reads as the same columns it was fitted on
    (its categorical columns are coded again from the labels).
    """
    frame = pd.DataFrame(table.X, columns=list(table.feature_names))
    for name, labels in table.categories.items():
        codes = frame[name].to_numpy()
        observed = ~np.isnan(codes)
        column = np.full(codes.shape, None, dtype=object)
        column[observed] = np.asarray(labels, dtype=object)[codes[observed].astype(np.int64)]
        frame[name] = column
    return frame


def importance_table(
    forest: ProximityForest,
    test: Table,
    *,
    n_repeats: int = 5,
    random_state: int | None = 0,
) -> pd.DataFrame:
    """Impurity and permutation importance of every feature, most important first.

    Parameters
    ----------
    forest : ProximityForest
        Fitted with a target.
    test : Table
        Rows held out of the fit, with their target.
    n_repeats : int
        Shuffles per feature.
    random_state : int or None
        Seed of the shuffles.

    Returns
    -------
    pandas.DataFrame
        Columns ``feature``, ``impurity`` (sums to 1), ``permutation_mean`` and
        ``permutation_std`` (drop of accuracy, or of R² for regression),
        sorted by ``permutation_mean`` then ``impurity``, both descending.
    """
    from sklearn.inspection import permutation_importance

    result = permutation_importance(
        forest, labelled_frame(test), test.y, n_repeats=n_repeats, random_state=random_state
    )
    frame = pd.DataFrame({
        "feature": list(forest.feature_names_in_),
        "impurity": forest.feature_importances_,
        "permutation_mean": result.importances_mean,
        "permutation_std": result.importances_std,
    })  # fmt: skip
    order = np.lexsort((-frame["impurity"].to_numpy(), -frame["permutation_mean"].to_numpy()))
    return frame.iloc[order].reset_index(drop=True)
