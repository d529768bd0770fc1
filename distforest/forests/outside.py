"""Forests fitted outside distforest: scikit-learn, LightGBM and XGBoost models.

A fitted model becomes the per-row arrays every distforest answer reads:
``leaves[i, t]`` (the leaf of row i in tree t, from the library's own routing:
``apply`` or ``predict(..., pred_leaf=True)``) and, where the library's
bagging can be replayed exactly, ``inbag[i, t]`` (the bootstrap count of row i
in tree t).  Each function works on one chunk of rows, so tasks can call it
partition by partition.

Families and what is known of them:

=========================================  ==========================  ===============
family                                     leaves                      in-bag counts
=========================================  ==========================  ===============
scikit-learn RandomForest*, ExtraTrees*    ``apply``                   replayed from each
                                                                       tree's seed (bootstrap)
scikit-learn GradientBoosting*             ``apply`` (stages x class)  unknown if subsample < 1
scikit-learn HistGradientBoosting*         the predictors' routing     all rows, once
LightGBM ``Booster`` / ``LGBM*``           ``pred_leaf=True``          unknown with bagging
XGBoost ``Booster`` / ``XGB*``             ``pred_leaf=True``          unknown with subsample
=========================================  ==========================  ===============

Where the in-bag counts are unknown, the out-of-bag and RF-GAP proximities are
refused with the reason; the original, KeRF and boosted weightings need no
in-bag counts.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.kernels.proximity import weighted_proximity_tile

#: LightGBM's and XGBoost's boosters are not safe to predict from in two threads at
#: once (a worker runs several tasks in threads): their calls take turns.
_BOOSTER_LOCK = threading.Lock()

#: LightGBM's classification objectives and their aliases.
_LIGHTGBM_CLASSIFIERS = ("binary", "multiclass", "softmax", "multiclassova", "multiclass_ova",
                         "ova", "ovr")  # fmt: skip
#: LightGBM's regression objectives and their aliases (ranking and custom ones: neither).
_LIGHTGBM_REGRESSORS = (
    "regression", "regression_l2", "l2", "mean_squared_error", "mse", "l2_root",
    "root_mean_squared_error", "rmse", "regression_l1", "l1", "mean_absolute_error", "mae",
    "huber", "fair", "poisson", "quantile", "mape", "mean_absolute_percentage_error",
    "gamma", "tweedie",
)  # fmt: skip

#: Weightings that read in-bag counts (refused where the model's bagging is unknown).
NEEDS_INBAG = ("oob", "rfgap")
#: Weightings with a weight per row and tree (:func:`proximity_weights`).
WEIGHTINGS = ("kerf", "boosted")


@dataclass(frozen=True)
class OutsideForest:
    """A fitted outside model seen as a forest of ``n_trees`` trees.

    Attributes
    ----------
    model : object
        The fitted model (a scikit-learn ensemble, a LightGBM or XGBoost booster).
    family : str
        ``"sklearn-bagging"``, ``"sklearn-gb"``, ``"sklearn-hgb"``, ``"lightgbm"``
        or ``"xgboost"``.
    n_trees : int
        Trees as distforest counts them (one per class and stage for boosting).
    no_inbag : str or None
        Why the in-bag counts cannot be known, or None when they can.
    """

    model: Any
    family: str
    n_trees: int
    no_inbag: str | None

    def leaves(self, X: Any, trees: slice | None = None) -> np.ndarray:
        """Leaf of each row of ``X`` in every tree (or in ``trees``), int32, shape (n, trees)."""
        trees = slice(0, self.n_trees) if trees is None else trees
        return _LEAVES[self.family](self.model, X, trees)

    def inbag(
        self, n_samples: int, sample_weight: np.ndarray | None = None, trees: slice | None = None
    ) -> np.ndarray:
        """In-bag counts of the ``n_samples`` training rows, shape (n_samples, trees), uint8.

        Parameters
        ----------
        n_samples : int
            Rows the model was fitted on (the rows passed to distforest must be
            those rows, in the same order).
        sample_weight : ndarray or None
            The weights given to the model's ``fit`` (scikit-learn draws a
            weighted bootstrap when they are given).
        trees : slice or None
            The trees (default all).
        """
        if self.no_inbag is not None:
            raise ParameterError(
                f"the in-bag counts of this {type(self.model).__name__} cannot be known: "
                f"{self.no_inbag}; use method='original', 'kerf' or 'boosted'"
            )
        picked = range(self.n_trees)[slice(0, self.n_trees) if trees is None else trees]
        if not self.bootstrap:
            return np.ones((n_samples, len(picked)), dtype=np.uint8)
        return _bootstrap_counts(self.model, n_samples, sample_weight, picked)

    @property
    def bootstrap(self) -> bool:
        """Whether some rows are out of bag in some trees (OOB and RF-GAP are defined)."""
        return self.family == "sklearn-bagging" and bool(getattr(self.model, "bootstrap", False))

    @property
    def task(self) -> str:
        """The task the model was fitted for, read from the model (its estimator type or
        objective): ``"classification"``, ``"regression"``, or ``"auto"`` when the model
        does not say (a custom or ranking objective: the target decides)."""
        if self.family.startswith("sklearn"):
            from sklearn.base import is_classifier, is_regressor

            if is_classifier(self.model):
                return "classification"
            return "regression" if is_regressor(self.model) else "auto"
        if self.family == "lightgbm":
            params = getattr(self.model, "params", None) or {}
            objective = str(params.get("objective", "")).split(" ")[0]
            if objective in _LIGHTGBM_CLASSIFIERS:
                return "classification"
            return "regression" if objective in _LIGHTGBM_REGRESSORS else "auto"
        objective = _xgboost_config(self.model)["learner"]["objective"]["name"]
        kind = str(objective).split(":")[0]
        if kind in ("binary", "multi"):
            return "classification"
        return "regression" if kind in ("reg", "count", "survival") else "auto"

    def check_method(self, method: str) -> None:
        """Refuse a weighting that needs in-bag counts this model cannot give."""
        if method in NEEDS_INBAG and self.no_inbag is not None:
            raise ParameterError(
                f"method={method!r} needs each row's in-bag counts, and those of this "
                f"{type(self.model).__name__} cannot be known: {self.no_inbag}; "
                "use method='original', 'kerf' or 'boosted'"
            )

    def leaf_values(self, leaves: np.ndarray) -> np.ndarray:
        """The output value of each row's leaf in every tree, shape like ``leaves``."""
        return _VALUES[self.family](self.model, leaves)

    def node_counts(self) -> np.ndarray:
        """Nodes of each tree (every leaf number a row can reach is below it), int64."""
        return np.asarray(_NODE_COUNTS[self.family](self.model), dtype=np.int64)

    def predict(self, X: Any, classification: bool) -> np.ndarray:
        """The model's own prediction of rows ``X``, as :func:`predict_values` gives it.

        Class probabilities, shape (n, classes), for a classifier (a binary
        booster's probability p of the second class becomes ``(1 - p, p)``),
        else the predicted values, shape (n, 1).
        """
        rows = _as_rows(X)
        if self.family.startswith("sklearn"):
            if classification:
                return np.asarray(self.model.predict_proba(rows), dtype=np.float64)
            return np.asarray(self.model.predict(rows), dtype=np.float64).reshape(-1, 1)
        if self.family == "xgboost":
            import xgboost

            rows = xgboost.DMatrix(rows)
        with _BOOSTER_LOCK:
            out = np.asarray(self.model.predict(rows), dtype=np.float64)
        if classification and out.ndim == 1:
            return np.column_stack([1.0 - out, out])
        return out.reshape(len(out), -1)


def outside_forest(model: Any) -> OutsideForest:
    """See a fitted model as a forest: the one place that tells the families apart.

    Parameters
    ----------
    model : fitted estimator or booster
        A scikit-learn ``RandomForest*``, ``ExtraTrees*``, ``GradientBoosting*``
        or ``HistGradientBoosting*`` (classifier or regressor), a LightGBM
        ``Booster`` or ``LGBMModel``, or an XGBoost ``Booster`` or ``XGBModel``.

    Returns
    -------
    OutsideForest

    Raises
    ------
    ParameterError
        For another kind of model, or one not fitted.
    """
    module = type(model).__module__.split(".")[0]
    name = type(model).__name__
    if module == "sklearn":
        return _sklearn_forest(model)
    if module == "lightgbm":
        booster = model.booster_ if hasattr(model, "booster_") else model
        if not hasattr(booster, "num_trees"):
            raise ParameterError(f"this LightGBM {name} is not fitted: fit it first")
        params = booster.params if hasattr(booster, "params") else {}
        bagging = _lightgbm_bagging(params)
        return OutsideForest(booster, "lightgbm", int(booster.num_trees()), bagging)
    if module == "xgboost":
        booster = model.get_booster() if hasattr(model, "get_booster") else model
        n_trees = len(booster.get_dump())
        return OutsideForest(booster, "xgboost", n_trees, _xgboost_bagging(booster))
    raise ParameterError(
        f"cannot read the trees of a {type(model).__module__}.{name}: distforest takes "
        "scikit-learn RandomForest*, ExtraTrees*, GradientBoosting* and "
        "HistGradientBoosting* models, LightGBM and XGBoost models"
    )


def _sklearn_forest(model: Any) -> OutsideForest:
    from sklearn.ensemble import (
        BaseEnsemble,
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        HistGradientBoostingClassifier,
        HistGradientBoostingRegressor,
    )
    from sklearn.ensemble._forest import BaseForest
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    name = type(model).__name__
    try:
        check_is_fitted(model)
    except NotFittedError as err:
        raise ParameterError(f"this {name} is not fitted: call its fit first") from err
    if isinstance(model, BaseForest):
        return OutsideForest(model, "sklearn-bagging", len(model.estimators_), None)
    if isinstance(model, GradientBoostingClassifier | GradientBoostingRegressor):
        no_inbag = None
        if model.subsample < 1.0:
            no_inbag = (
                f"subsample={model.subsample} draws each stage's rows from one generator "
                "shared by all stages, which is not kept with the model"
            )
        return OutsideForest(model, "sklearn-gb", int(model.estimators_.size), no_inbag)
    if isinstance(model, HistGradientBoostingClassifier | HistGradientBoostingRegressor):
        n_trees = sum(len(stage) for stage in model._predictors)
        return OutsideForest(model, "sklearn-hgb", n_trees, None)
    kind = "an ensemble" if isinstance(model, BaseEnsemble) else "a model"
    raise ParameterError(
        f"{name} is {kind} distforest cannot read trees from: use a RandomForest*, "
        "ExtraTrees*, GradientBoosting* or HistGradientBoosting* model"
    )


def _bootstrap_counts(
    model: Any, n_samples: int, sample_weight: np.ndarray | None, trees: range
) -> np.ndarray:
    """scikit-learn's bootstrap replayed: each tree draws from its own ``random_state``."""
    fitted_n = getattr(model, "_n_samples", n_samples)
    if fitted_n != n_samples:
        raise InputError(
            f"the model was fitted on {fitted_n} rows and {n_samples} were given: the "
            "in-bag counts are those of the training rows, pass the same rows in the same order"
        )
    n_boot = getattr(model, "_n_samples_bootstrap", None) or n_samples
    if sample_weight is None:
        sample_weight = getattr(model, "_sample_weight", None)
    counts = np.zeros((n_samples, len(trees)), dtype=np.uint8)
    for k, t in enumerate(trees):
        rng = np.random.RandomState(model.estimators_[t].random_state)
        if sample_weight is None:
            drawn = rng.randint(0, n_samples, n_boot)
        else:
            p = np.asarray(sample_weight, dtype=np.float64)
            drawn = rng.choice(n_samples, n_boot, replace=True, p=p / p.sum())
        column = np.bincount(drawn, minlength=n_samples)
        counts[:, k] = np.minimum(column, np.iinfo(np.uint8).max)
    return counts


def _lightgbm_bagging(params: dict[str, Any]) -> str | None:
    for key in ("bagging_fraction", "subsample", "sub_row", "bagging"):
        if key in params and float(params[key]) < 1.0:
            return f"{key}={params[key]} draws rows inside LightGBM, which does not keep them"
    if str(params.get("boosting", params.get("boosting_type", ""))) in ("goss", "rf"):
        return "its boosting type samples rows inside LightGBM, which does not keep them"
    if str(params.get("data_sample_strategy", "")) == "goss":
        return "GOSS samples rows inside LightGBM, which does not keep them"
    return None


def _xgboost_config(booster: Any) -> dict[str, Any]:
    import json

    return dict(json.loads(booster.save_config()))


def _xgboost_bagging(booster: Any) -> str | None:
    config = _xgboost_config(booster)["learner"]["gradient_booster"]
    train = config.get("tree_train_param", config.get("updater", {}))
    subsample = float(train.get("subsample", "1")) if isinstance(train, dict) else 1.0
    if subsample < 1.0:
        return f"subsample={subsample} draws rows inside XGBoost, which does not keep them"
    return None


# -- leaves, one function per family ----------------------------------------


def _as_rows(X: Any) -> Any:
    return X if hasattr(X, "iloc") else np.asarray(X)


def _sklearn_leaves(model: Any, X: Any, trees: slice) -> np.ndarray:
    rows = np.asarray(_as_rows(X), dtype=np.float32)
    estimators = np.asarray(model.estimators_, dtype=object).reshape(-1)[trees]
    columns = [tree.apply(rows) for tree in estimators]
    return np.column_stack(columns).astype(np.int32) if columns else np.empty((len(rows), 0))


def _hgb_leaves(model: Any, X: Any, trees: slice) -> np.ndarray:
    rows = model._preprocess_X(_as_rows(X), reset=False)
    known, f_idx_map = model._bin_mapper.make_known_categories_bitsets()
    columns = []
    for predictor in [p for stage in model._predictors for p in stage][trees]:
        # The predictor returns its leaves' values: a copy whose leaves hold their index.
        indexed = copy.copy(predictor)
        indexed.nodes = predictor.nodes.copy()
        indexed.nodes["value"] = np.arange(len(indexed.nodes), dtype=indexed.nodes["value"].dtype)
        columns.append(indexed.predict(rows, known, f_idx_map, 1))
    return np.column_stack(columns).astype(np.int32)


def _iterations(trees: slice, per_iteration: int) -> tuple[int, int]:
    """The boosting iterations that hold ``trees`` (a library routes whole iterations)."""
    return trees.start // per_iteration, -(-trees.stop // per_iteration)


def _lightgbm_leaves(booster: Any, X: Any, trees: slice) -> np.ndarray:
    k = int(booster.num_model_per_iteration())
    first, last = _iterations(trees, k)
    with _BOOSTER_LOCK:
        leaves = booster.predict(_as_rows(X), pred_leaf=True, start_iteration=first,
                                 num_iteration=last - first)  # fmt: skip
    leaves = np.asarray(leaves).reshape(len(leaves), -1)
    return leaves[:, trees.start - first * k : trees.stop - first * k].astype(np.int32)


def _xgboost_leaves(booster: Any, X: Any, trees: slice) -> np.ndarray:
    import xgboost

    k = max(1, len(booster.get_dump()) // max(1, booster.num_boosted_rounds()))
    first, last = _iterations(trees, k)
    matrix = xgboost.DMatrix(_as_rows(X))
    with _BOOSTER_LOCK:  # leaves only from iteration 0: a slice of the model starts there
        part = booster if first == 0 else booster[first:last]
        leaves = part.predict(matrix, pred_leaf=True, iteration_range=(0, last - first))
    leaves = np.asarray(leaves).reshape(matrix.num_row(), -1)
    return leaves[:, trees.start - first * k : trees.stop - first * k].astype(np.int32)


_LEAVES = {
    "sklearn-bagging": _sklearn_leaves,
    "sklearn-gb": _sklearn_leaves,
    "sklearn-hgb": _hgb_leaves,
    "lightgbm": _lightgbm_leaves,
    "xgboost": _xgboost_leaves,
}


# -- tree sizes ----------------------------------------------------------------


def _sklearn_nodes(model: Any) -> list[int]:
    return [int(t.tree_.node_count) for t in np.asarray(model.estimators_).reshape(-1)]


def _hgb_nodes(model: Any) -> list[int]:
    return [len(p.nodes) for stage in model._predictors for p in stage]


def _lightgbm_nodes(booster: Any) -> list[int]:
    # a leaf number is below the tree's number of leaves
    import re

    text = booster.model_to_string()
    return [int(n) for n in re.findall(r"^num_leaves=(\d+)", text, flags=re.MULTILINE)]


def _xgboost_nodes(booster: Any) -> list[int]:
    # a leaf number is a node number of the tree (lines "  id:...")
    import re

    return [
        1 + max(int(i) for i in re.findall(r"^\s*(\d+):", dump, flags=re.MULTILINE))
        for dump in booster.get_dump()
    ]


_NODE_COUNTS = {
    "sklearn-bagging": _sklearn_nodes,
    "sklearn-gb": _sklearn_nodes,
    "sklearn-hgb": _hgb_nodes,
    "lightgbm": _lightgbm_nodes,
    "xgboost": _xgboost_nodes,
}


# -- leaf values (the boosted weighting) --------------------------------------


def _gb_values(model: Any, leaves: np.ndarray) -> np.ndarray:
    trees = model.estimators_.reshape(-1)
    out = np.empty(leaves.shape, dtype=np.float64)
    for t, tree in enumerate(trees):
        out[:, t] = tree.tree_.value[leaves[:, t], 0, 0] * model.learning_rate
    return out


def _hgb_values(model: Any, leaves: np.ndarray) -> np.ndarray:
    predictors = [p for stage in model._predictors for p in stage]
    out = np.empty(leaves.shape, dtype=np.float64)
    for t, predictor in enumerate(predictors):
        out[:, t] = predictor.nodes["value"][leaves[:, t]]
    return out


def _lightgbm_values(booster: Any, leaves: np.ndarray) -> np.ndarray:
    out = np.empty(leaves.shape, dtype=np.float64)
    for t in range(leaves.shape[1]):
        ids, where = np.unique(leaves[:, t], return_inverse=True)
        values = np.array([booster.get_leaf_output(t, int(i)) for i in ids])
        out[:, t] = values[where]
    return out


def _xgboost_values(booster: Any, leaves: np.ndarray) -> np.ndarray:
    import json

    out = np.empty(leaves.shape, dtype=np.float64)
    for t, dump in enumerate(booster.get_dump(dump_format="json")):
        values: dict[int, float] = {}
        stack = [json.loads(dump)]
        while stack:
            node = stack.pop()
            if "leaf" in node:
                values[int(node["nodeid"])] = float(node["leaf"])
            stack.extend(node.get("children", ()))
        out[:, t] = [values[int(i)] for i in leaves[:, t]]
    return out


def _no_values(model: Any, leaves: np.ndarray) -> np.ndarray:
    raise ParameterError(
        f"method='boosted' weights the trees of a boosted ensemble by their leaf values; "
        f"this {type(model).__name__} averages its trees: use method='original' or 'kerf'"
    )


_VALUES = {
    "sklearn-bagging": _no_values,
    "sklearn-gb": _gb_values,
    "sklearn-hgb": _hgb_values,
    "lightgbm": _lightgbm_values,
    "xgboost": _xgboost_values,
}


# -- the weightings of outside forests ----------------------------------------
#
# KeRF and the boosted weighting give each row a weight in each tree that depends on
# its leaf only: ``w_i(t) = table[offset[t] + leaf_t(i)]``.  The table holds one
# number per leaf of the model (``offset`` from the trees' sizes), so it is as large
# as the model, never as the rows: tasks count each leaf's rows chunk by chunk
# (:func:`count_leaves`), the driver sums the counts into the table
# (:func:`weight_table`), and each tile task looks its rows' weights up
# (:func:`weighted_tile`).  No process holds an (n, T) array of weights.

#: Rows one counting task reads.
COUNT_ROWS = 65_536


def leaf_offsets(node_counts: np.ndarray) -> np.ndarray:
    """Where each tree's leaves start in a per-leaf table, int64, shape (T + 1,).

    Tree t's leaf numbers are below ``node_counts[t]``
    (:meth:`OutsideForest.node_counts`, or a forest grown here's ``node_counts_``).
    """
    sizes = np.asarray(node_counts, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def count_leaves(leaves: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Rows of ``leaves`` in each leaf of each tree, int64, shape (offsets[-1],).

    Parameters
    ----------
    leaves : ndarray of int, shape (rows, T)
        A chunk of the rows' leaves.
    offsets : ndarray of int64, shape (T + 1,)
        From :func:`leaf_offsets`.

    Raises
    ------
    InputError
        When a leaf number is not below its tree's size (leaves of another forest).
    """
    leaves = np.asarray(leaves)
    sizes = np.diff(offsets)
    if leaves.shape[1] != sizes.size:
        raise InputError(
            f"the leaves have {leaves.shape[1]} trees and the forest {sizes.size}: "
            "they are not this forest's leaves"
        )
    if leaves.size:
        top, low = leaves.max(axis=0), leaves.min(axis=0)
        bad = np.flatnonzero((top >= sizes) | (low < 0))
        if bad.size:
            t = int(bad[0])
            raise InputError(
                f"tree {t} has {int(sizes[t])} nodes but a row is in its leaf "
                f"{int(top[t]) if top[t] >= sizes[t] else int(low[t])}: the leaves are not "
                "this forest's; route the rows through the forest again"
            )
    flat = (leaves.astype(np.int64) + offsets[:-1]).ravel()
    return np.bincount(flat, minlength=int(offsets[-1]))


def count_task(leaves: Any, rows: slice, offsets: np.ndarray) -> np.ndarray:
    """A task: :func:`count_leaves` of rows ``rows`` of ``leaves`` (a store's path, whose
    ``leaves`` array is read, or an array shared with the task)."""
    return count_leaves(_leaf_rows(leaves, rows), offsets)


def _leaf_rows(leaves: Any, rows: slice, row: bool = True) -> np.ndarray:
    """Rows ``rows`` of ``leaves``: a store's path, ``(path, write)`` (read through the tile
    service's block cache; ``row``: the tile's row block) or an array."""
    if isinstance(leaves, str):
        from distforest.store.run_store import read_rows

        return np.asarray(read_rows(leaves, "leaves", rows))
    if isinstance(leaves, tuple):
        from distforest.forests.tiles import stored_leaves

        return stored_leaves(leaves[0], leaves[1], rows, row=row)
    return np.asarray(leaves[rows])


def weight_table(
    method: str, counts: np.ndarray, offsets: np.ndarray, forest: OutsideForest | None
) -> np.ndarray:
    """The weight of a row in each leaf of each tree for ``method``, float64, per leaf.

    - ``"kerf"``: ``1 / (T |L_t(i)|)``, each co-leaf event over the size of i's
      leaf (``counts``), so each row's proximities sum to 1.
    - ``"boosted"``: ``w_t / sum_s w_s`` in every leaf of tree t, with
      ``w_t = (1/n) sum_i |v_t(leaf_t(i))|`` the tree's mean absolute leaf value
      over the rows: trees that move the prediction more count more (late,
      shrunken trees little).  A model whose every leaf value is 0 gets equal weights.

    Parameters
    ----------
    method : {"kerf", "boosted"}
    counts : ndarray of int, shape (offsets[-1],)
        Rows in each leaf (:func:`count_leaves`, summed over the chunks).
    offsets : ndarray of int64, shape (T + 1,)
    forest : OutsideForest or None
        The model (``boosted`` reads its leaf values; None: a forest grown here).

    Returns
    -------
    ndarray of float64, shape (offsets[-1],)
    """
    n_trees = offsets.size - 1
    counts = np.asarray(counts, dtype=np.int64)
    if method == "kerf":
        table = np.zeros(counts.size, dtype=np.float64)
        used = counts > 0
        table[used] = 1.0 / (n_trees * counts[used])
        return table
    if forest is None:
        raise ParameterError(
            "method='boosted' weights the trees of a boosted model by their leaf values; "
            "this forest was grown by distforest (its trees are averaged): use "
            "method='original' or 'kerf', or ProximityForest.from_model(boosted_model, X)"
        )
    per_tree = _mean_abs_values(counts, offsets, forest)
    total = per_tree.sum()
    per_tree = np.full(n_trees, 1.0 / n_trees) if total == 0 else per_tree / total
    return np.repeat(per_tree, np.diff(offsets))


def _mean_abs_values(counts: np.ndarray, offsets: np.ndarray, forest: OutsideForest) -> np.ndarray:
    """Each tree's mean absolute leaf value over the rows counted, from the occupied leaves
    only (a (leaves, T) array: the model's size, not the rows')."""
    n_trees = offsets.size - 1
    occupied = [np.flatnonzero(counts[offsets[t] : offsets[t + 1]]) for t in range(n_trees)]
    depth = max(1, max(len(ids) for ids in occupied))
    leaves = np.zeros((depth, n_trees), dtype=np.int32)
    mass = np.zeros((depth, n_trees), dtype=np.float64)
    for t, ids in enumerate(occupied):
        if ids.size:
            leaves[:, t] = ids[0]  # padding: a real leaf, counted 0 times
            leaves[: ids.size, t] = ids
            mass[: ids.size, t] = counts[offsets[t] + ids]
    n = mass.sum(axis=0)
    sums = (mass * np.abs(forest.leaf_values(leaves))).sum(axis=0)
    return np.divide(sums, n, out=np.zeros(n_trees), where=n > 0)


def leaf_table(
    method: str, runner: Any, leaves: Any, n_rows: int, node_counts: np.ndarray,
    forest: OutsideForest | None, *, in_process: bool = False,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``(table, offsets)`` of ``method`` for the rows' ``leaves``, counted by row chunks.

    ``leaves`` is a store's path (each task reads its chunk) or an array; with
    ``in_process`` (or an array the driver holds anyway) the chunks are counted here.
    Only the per-leaf counts come back: the driver holds the model's size, not n x T.
    """
    offsets = leaf_offsets(node_counts)
    chunks = [slice(s, min(s + COUNT_ROWS, n_rows)) for s in range(0, n_rows, COUNT_ROWS)]
    counts = np.zeros(int(offsets[-1]), dtype=np.int64)
    if in_process or runner is None:
        for rows in chunks:
            counts += count_task(leaves, rows, offsets)
    else:
        shared = runner.share(offsets)
        items = [(leaves, rows, shared) for rows in chunks]
        for _, part in runner.run(count_task, items, name=f"{method}-leaf-counts"):
            counts += part
    return weight_table(method, counts, offsets, forest), offsets


def row_weights(leaves: np.ndarray, table: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The weights ``w_i(t)`` of a block of rows, shape like ``leaves``, float64."""
    return table[np.asarray(leaves, dtype=np.int64) + offsets[:-1]]


def weighted_tile(
    leaves: Any, table: np.ndarray, offsets: np.ndarray, rows: slice, cols: slice
) -> np.ndarray:
    """A tile function of the tile service: rows ``rows`` by ``cols`` of a weighted proximity.

    ``leaves``: an array, or ``(store path, write)`` whose row blocks are read once per
    process (:func:`distforest.forests.tiles.stored_leaves`); the rows' weights are
    looked up in the per-leaf ``table`` (:func:`weight_table`).
    """
    leaves_i = _leaf_rows(leaves, rows)
    leaves_j = leaves_i if rows == cols else _leaf_rows(leaves, cols, row=False)
    return weighted_proximity_tile(leaves_i, leaves_j, row_weights(leaves_i, table, offsets))


def weighted_in_memory(
    method: str, leaves: Any, node_counts: np.ndarray, forest: OutsideForest | None,
    tile_size: int,
) -> np.ndarray:  # fmt: skip
    """A small ``kerf`` / ``boosted`` matrix in this process (rows in memory or in a store's
    ``leaves`` array, read chunk by chunk), through the tiles' own function."""
    from distforest.forests.tiled import matrix_in_memory
    from distforest.forests.tiles import SYMMETRIC
    from distforest.parallel.tiling import TilePlan

    rows = np.asarray(leaves)  # the matrix is n x n: its rows' leaves are smaller
    n = int(rows.shape[0])
    table, offsets = leaf_table(method, None, rows, n, node_counts, forest)
    plan = TilePlan(n, n, tile_size, symmetric=SYMMETRIC[method])
    return matrix_in_memory(plan, weighted_tile, (rows, table, offsets))


def write_weighted(
    runner: Any, rs: Any, method: str, node_counts: np.ndarray, forest: OutsideForest | None,
    tile_size: int, *, fit_id: str, progress: Any = None,
) -> dict[str, int]:  # fmt: skip
    """Write the ``kerf`` / ``boosted`` matrix of the forest whose ``leaves`` the store
    ``rs`` holds, tile by tile and resumable (the tile service).

    Tasks count the rows of each leaf chunk by chunk from the store, the driver makes
    the per-leaf table (:func:`leaf_table`), and each tile task reads its two row blocks
    (once per process) and looks their weights up: the driver holds the model's size.
    """
    import contextlib
    import uuid

    from distforest.forests.tiled import write_matrix
    from distforest.forests.tiles import ARRAY_NAMES, SYMMETRIC, forget_blocks
    from distforest.kernels.proximity import warm_up
    from distforest.parallel.tiling import TilePlan
    from distforest.store.schema import matrix_encoding

    n, n_trees = (int(v) for v in rs.array("leaves").shape)
    table, offsets = leaf_table(method, runner, rs.path, n, node_counts, forest,
                                in_process=runner.in_process)  # fmt: skip
    name = ARRAY_NAMES[method]
    plan = TilePlan(n, n, tile_size, symmetric=SYMMETRIC[method])
    warm_up(())  # (no tree counts) compile once here, not in every worker at once
    write = uuid.uuid4().hex
    try:
        return write_matrix(
            runner, rs, name, plan, weighted_tile,
            ((rs.path, write), runner.share(table), runner.share(offsets)),
            identity={"fit_id": fit_id, "method": method},
            encoding=matrix_encoding(name, n_trees=n_trees),
            attrs={"method": method, "n_trees": n_trees}, progress=progress,
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):  # only memory is at stake: never mask an error
            runner.everywhere(forget_blocks, write)


# -- the fit driver's grower of an outside forest ------------------------------


def route_batch(
    X: np.ndarray,
    y: np.ndarray | None,
    seeds: np.ndarray,
    *,
    forest: OutsideForest,
    tree_of_seed: dict[int, int],
    node_counts: np.ndarray,
    sample_weight: np.ndarray | None = None,
) -> Any:
    """The fit driver's grower for a model fitted elsewhere: nothing grows, rows are routed.

    The driver plans one seed per tree; ``tree_of_seed`` maps the batch's seeds back to
    the model's trees (batches are contiguous ranges of trees); ``node_counts`` are the
    trees' sizes (:meth:`OutsideForest.node_counts`).  Returns the batch's rows' leaves
    and in-bag counts, as a grown batch of distforest's own trees does.
    """
    from distforest.forests.fit_driver import GrownBatch

    first = tree_of_seed[int(seeds[0])]
    trees = slice(first, first + len(seeds))
    leaves = forest.leaves(X, trees)
    if forest.no_inbag is None:
        inbag = forest.inbag(len(X), sample_weight, trees)
    else:  # unknown: kept as every row in bag; the methods that would read it are refused
        inbag = np.ones(leaves.shape, dtype=np.uint8)
    return GrownBatch(
        rows={"leaves": leaves, "inbag": inbag},
        # No nodes are kept (the model routes new rows), only the trees' sizes; no
        # importances are measured here (the model has its own): NaN.
        trees={
            "node_counts": np.asarray(node_counts[trees], dtype=np.int64),
            "importances": np.full((len(seeds), X.shape[1]), np.nan),
        },
    )
