"""What a fitted :class:`~distforest.forests.proximity_forest.ProximityForest` predicts.

The forest's flat trees keep every node's value (class fractions, or the
mean target of its in-bag rows), so predictions need no scikit-learn tree
objects:

- new rows: the mean over the trees of the value of each row's leaf (as
  scikit-learn's ``RandomForestClassifier.predict_proba`` /
  ``RandomForestRegressor.predict``), one task per block of rows through the
  forest's :class:`~distforest.parallel.execution.Runner` (in this process for
  small inputs);
- training rows out of bag: the same mean over the trees where the row is
  out of bag (``oob_decision_function_``, ``oob_prediction_``, ``oob_score_``);
- impurity-based feature importances: each tree's normalised importances,
  averaged over the trees that split at all, normalised again (as
  scikit-learn's forests).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from distforest.errors import InputError, NotFittedError
from distforest.io import Table, load_table
from distforest.kernels.apply import ROUTING_FIELDS, leaf_value_sums, mean_leaf_value
from distforest.kernels.signatures import kernel_input
from distforest.kernels.trees import tree_input
from distforest.parallel import tasks
from distforest.parallel.execution import Runner

if TYPE_CHECKING:
    from distforest.forests.fitted import FittedForest

#: Most rows one prediction task routes (a block of rows x trees of leaves at a time).
ROWS_PER_TASK = 65_536

#: scikit-learn's warning for rows that are in bag in every tree (same words, so filters match).
NO_OOB_WARNING = (
    "Some inputs do not have OOB scores. This probably means too few trees were used to "
    "compute any reliable OOB estimates."
)


def check_supervised(forest: FittedForest, what: str) -> None:
    """Raise unless ``forest`` is fitted with a target (and kept its nodes, or routes new
    rows through a model fitted elsewhere)."""
    if getattr(forest, "outside_", None) is None:
        forest._check_nodes(what)
    forest._check_fitted()
    if forest.task_ == "unsupervised":
        raise NotFittedError(
            f"this ProximityForest was fitted without a target (task 'unsupervised'), so it has "
            f"no {what}: fit it with y (or task='classification' / 'regression')"
        )


# -- new rows ------------------------------------------------------------------


def _fitted_with_names(forest: FittedForest) -> bool:
    """Whether the training columns had names of their own (not an array's 0..d-1)."""
    names = tuple(forest.feature_names_in_)
    return names != tuple(str(i) for i in range(len(names)))


def _frame_names(X: Any) -> list[str] | None:
    """Column names of a DataFrame whose columns are all strings (scikit-learn's rule)."""
    columns = getattr(X, "columns", None)
    if columns is None or not hasattr(X, "iloc"):
        return None
    names = list(columns)
    return [str(c) for c in names] if names and all(isinstance(c, str) for c in names) else None


def check_feature_names(forest: FittedForest, X: Any) -> None:
    """scikit-learn's feature-name rules for new rows (same messages as its estimators).

    A DataFrame must have the training columns in the training order; a
    frame given to a forest fitted on an array, or an array given to one
    fitted on named columns, only warns.
    """
    given = _frame_names(X)
    fitted = list(forest.feature_names_in_) if _fitted_with_names(forest) else None
    name = type(forest).__name__
    if given is None and fitted is not None and hasattr(X, "shape") and not isinstance(X, Table):
        if not isinstance(X, str | os.PathLike):
            warnings.warn(
                f"X does not have valid feature names, but {name} was fitted with feature names",
                UserWarning,
                stacklevel=3,
            )
        return
    if given is None:
        return
    if fitted is None:
        warnings.warn(
            f"X has feature names, but {name} was fitted without feature names",
            UserWarning,
            stacklevel=3,
        )
        return
    if given == fitted:
        return
    unseen = [c for c in given if c not in fitted]
    missing = [c for c in fitted if c not in given]
    message = "The feature names should match those that were passed during fit.\n"
    if unseen:
        message += "Feature names unseen at fit time:\n" + "".join(f"- {c}\n" for c in unseen)
    if missing:
        message += "Feature names seen at fit time, yet now missing:\n"
        message += "".join(f"- {c}\n" for c in missing)
    if not unseen and not missing:
        message += "Feature names must be in the same order as they were in fit.\n"
    raise InputError(message)


def new_rows(forest: FittedForest, X: Any) -> np.ndarray:
    """New rows as the trees read them: the training columns, codes and float32.

    Categorical columns are coded with the training labels (a level not seen
    in ``fit`` is refused).

    Parameters
    ----------
    forest : ProximityForest
        Fitted.
    X : array-like, DataFrame, path or Table
        Rows with the training features, in the training order.

    Returns
    -------
    ndarray of float32, shape (n, n_features_in_)
    """
    check_feature_names(forest, X)
    table = X if isinstance(X, Table) else load_table(X, min_rows=1)
    if table.n_features != forest.n_features_in_:
        raise InputError(
            f"X has {table.n_features} features, but {type(forest).__name__} is expecting "
            f"{forest.n_features_in_} features as input; pass the training columns "
            "(without the target)"
        )
    X_new = table.X
    for j, feature in enumerate(forest.feature_names_in_):
        known = forest.categories_.get(feature)
        labels = table.categories.get(table.feature_names[j])
        if known is None and labels is None:
            continue
        if known is None:
            assert labels is not None  # both None: skipped above
            raise InputError(
                f"column {feature!r} was numeric in fit but holds text now (e.g. "
                f"{labels[0]!r}); pass numbers, or leave the cell empty if missing"
            )
        X_new = X_new.copy() if X_new is table.X else X_new
        X_new[:, j] = _recode(X_new[:, j], labels, known, feature)
    return tree_input(X_new)


def _recode(codes: np.ndarray, labels: Any, known: Any, feature: str) -> np.ndarray:
    """Codes of new labels (or numbers) in the training levels of one column."""
    index = {str(v): k for k, v in enumerate(known)}
    observed = ~np.isnan(codes)
    values = codes[observed]
    if labels is None:  # numbers given for a column that was text in fit
        words = [str(int(v)) if float(v).is_integer() else str(v) for v in values]
    else:
        words = [str(labels[int(c)]) for c in values]
    unseen = sorted({w for w in words if w not in index})
    if unseen:
        raise InputError(
            f"column {feature!r} has level(s) {unseen[:5]} not seen in fit (known: "
            f"{[str(v) for v in known][:10]}); map them to known levels, or leave the cells "
            "empty (missing values follow the trees' missing-value branches)"
        )
    out = codes.copy()
    out[observed] = [index[w] for w in words]
    return out


def _forest_arrays(forest: FittedForest) -> tuple[np.ndarray, ...]:
    """``node_offset``, ``value`` and the routing arrays, in :func:`mean_leaf_value`'s order."""
    assert forest.nodes_ is not None  # callers check
    offsets = np.concatenate([[0], np.cumsum(forest.node_counts_)]).astype(np.int64)
    return (offsets, forest.nodes_["value"], *(forest.nodes_[f] for f in ROUTING_FIELDS))


def runner_for(forest: FittedForest, cells: int) -> contextlib.AbstractContextManager[Runner]:
    """Where work on ``cells`` input cells of new rows runs: this process (threads) when
    small and no cluster was asked for, else the forest's execution."""
    return forest._runner(cells)


def predict_values(forest: FittedForest, X: Any) -> np.ndarray:
    """Mean leaf value of every new row: class probabilities, or the prediction (k = 1).

    One task per block of at most :data:`ROWS_PER_TASK` rows; small inputs
    (and calls without a cluster asked for) run in this process.  Each row's
    value depends on that row only, so the result does not depend on the
    blocks or the workers.

    Returns
    -------
    ndarray of float64, shape (n, k)
    """
    check_supervised(forest, "predict()")
    X32 = new_rows(forest, X)
    n = X32.shape[0]
    with runner_for(forest, X32.size) as runner:
        size = min(ROWS_PER_TASK, tasks.default_batch_size(n, runner.threads()))
        blocks = tasks.plan_batches(n, size)
        X_shared = runner.share(X32)
        arrays = tuple(runner.share(a) for a in _forest_arrays(forest))
        values = np.empty((n, forest.nodes_["value"].shape[1]), dtype=np.float64)  # type: ignore[index]
        items = [(X_shared, rows, *arrays) for rows in blocks]
        for i, block in runner.run(
            mean_leaf_value, items, name="predict", progress=forest._report("predict")
        ):
            values[blocks[i]] = block
    return values


def decode_classes(forest: FittedForest, proba: np.ndarray) -> np.ndarray:
    """The class labels of the most probable classes (the first one on ties)."""
    return np.asarray(forest.classes_)[np.argmax(proba, axis=1)]


# -- training rows out of bag -----------------------------------------------


def oob_values(forest: FittedForest) -> np.ndarray:
    """Mean value of each training row's leaf over the trees where it is out of bag.

    Rows in bag in every tree get zeros (with scikit-learn's warning).

    Returns
    -------
    ndarray of float64, shape (n_samples, k)
    """
    check_supervised(forest, "out-of-bag estimate")
    if not forest.params_["bootstrap"]:
        raise NotFittedError(
            "out-of-bag estimates need bootstrap=True (without it every row is in bag in every "
            "tree); fit with bootstrap=True"
        )
    offsets, value = _forest_arrays(forest)[:2]
    # (a forest fitted from a stored table holds its leaves in the store: read here)
    leaves, inbag = np.asarray(forest.leaves_), np.asarray(forest.inbag_)
    sums, counts = leaf_value_sums(leaves, offsets, kernel_input(value, value.dtype), inbag, True)
    if (counts == 0).any():
        warnings.warn(NO_OOB_WARNING, UserWarning, stacklevel=3)
    return sums / np.maximum(counts, 1)[:, None]


def oob_score(forest: FittedForest, values: np.ndarray) -> float:
    """Accuracy (classification) or R² (regression) of the out-of-bag estimates."""
    from sklearn.metrics import accuracy_score, r2_score

    assert forest.y_ is not None  # a supervised forest
    if forest.task_ == "classification":
        return float(accuracy_score(forest.y_, np.argmax(values, axis=1)))
    return float(r2_score(forest.y_, values[:, 0]))


# -- importances -----------------------------------------------------------------


def feature_importances(tree_importances: np.ndarray, node_counts: np.ndarray) -> np.ndarray:
    """The forest's impurity-based importances, as scikit-learn's forests compute them.

    Parameters
    ----------
    tree_importances : ndarray of float64, shape (n_trees, n_features)
        Each tree's normalised importances.
    node_counts : ndarray of int, shape (n_trees,)
        Nodes per tree: single-leaf trees do not count.

    Returns
    -------
    ndarray of float64, shape (n_features,)
        Summing to 1 (all zeros when no tree splits).
    """
    split = tree_importances[np.asarray(node_counts) > 1]
    if split.shape[0] == 0:
        return np.zeros(tree_importances.shape[1], dtype=np.float64)
    mean = split.mean(axis=0)
    total = mean.sum()
    return mean / total if total > 0 else mean
