"""``proximity="rfimpute"`` follows R's rfImpute rules, checked rule by rule.

R ``randomForest::rfImpute(x, y, iter=5, ntree=300)``: ``na.roughfix`` start
(median / most frequent level); ``iter`` times grow a random forest (bootstrap
samples, ``mtry = floor(sqrt(p))`` for classification, ``floor(p/3)`` for
regression) and replace each missing value by the proximity-weighted mean of
the column's observed values (the level with the largest proximity-weighted
sum), the proximity being Breiman's share of trees in which two rows share a
leaf.  The forests' bootstrap samples cannot be matched with R's or
scikit-learn's, so the forests are taken as they are and every rule around
them is checked against a dense numpy oracle.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from oracles import dense_original_proximity
from test_impute import expected_first_iteration, structured

from distforest.apps.impute import ProximityImputer
from distforest.errors import ChangedMeaningWarning, ParameterError
from distforest.forests.proximity_forest import ProximityForest
from distforest.kernels.imputation import (
    build_v,
    plan_columns,
    rfimpute_mtry,
    start_values,
    update_cells,
)


def test_mtry_is_r_randomforest_default():
    # R: if (classification) floor(sqrt(p)) else max(floor(p/3), 1)
    for p in range(1, 60):
        assert rfimpute_mtry("classification", p) == max(math.floor(math.sqrt(p)), 1)
        assert rfimpute_mtry("unsupervised", p) == max(math.floor(math.sqrt(p)), 1)
        assert rfimpute_mtry("regression", p) == max(math.floor(p / 3), 1)
    assert [rfimpute_mtry("classification", p) for p in (3, 4, 8, 9, 10)] == [1, 2, 2, 3, 3]
    assert [rfimpute_mtry("regression", p) for p in (2, 3, 5, 6, 9, 10)] == [1, 1, 1, 2, 3, 3]


def test_start_is_na_roughfix():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(41, 3))
    X[:, 2] = rng.integers(0, 4, size=41)
    X[:, 2][:8] = 1  # level 1 the most frequent ...
    X[rng.random(X.shape) < 0.2] = np.nan
    got = start_values(X, np.array([False, False, True]))
    frame = pd.DataFrame(X)
    np.testing.assert_array_equal(got[:2], frame[[0, 1]].median().to_numpy())
    counts = frame[2].value_counts()
    assert got[2] == counts.index[counts.to_numpy() == counts.max()].min() == 1
    # a tie goes to the first level (R: levels(x)[which.max(table(x))])
    tie = np.array([[3.0], [1.0], [3.0], [1.0], [np.nan], [2.0]])
    assert start_values(tie, np.array([True]))[0] == 1.0


def test_update_from_a_known_proximity_matrix():
    """The update of one iteration given P: R's formulas written out by hand."""
    rng = np.random.default_rng(5)
    n = 30
    A = rng.random((n, n))
    P = (A + A.T) / 2
    np.fill_diagonal(P, 1.0)
    X = np.column_stack([rng.normal(size=n), rng.normal(size=n), rng.integers(0, 3, n)])
    X = X.astype(np.float64)
    X[rng.random(X.shape) < 0.25] = np.nan
    categorical = np.array([False, False, True])
    missing = np.isnan(X)
    start = start_values(X, categorical)
    for vote in ("sum", "mean"):
        X_cur = np.where(missing, start, X)
        rows = np.flatnonzero(missing.any(axis=1))
        layout = plan_columns(X, categorical, [0, 1, 2])
        R = P[rows] @ build_v(X, layout, start)
        update_cells(X_cur, rows, missing[rows], R, layout, start, start, vote)
        for j in range(3):
            obs = ~missing[:, j]
            for i in np.flatnonzero(missing[:, j]):
                w = P[i, obs]  # proximities to the rows where the value is observed
                if categorical[j]:
                    levels = np.unique(X[obs, j])
                    score = [w[X[obs, j] == lv].sum() for lv in levels]
                    if vote == "mean":  # R's code: tapply(prox, level, mean)
                        score = [w[X[obs, j] == lv].mean() for lv in levels]
                    assert X_cur[i, j] == levels[int(np.argmax(score))]
                else:
                    assert np.isclose(X_cur[i, j], w @ X[obs, j] / w.sum(), rtol=1e-12)
        np.testing.assert_array_equal(X_cur[~missing], X[~missing])


def _record_forests(monkeypatch):
    """Every forest the imputer grows, with the table it was grown on."""
    grown: list[tuple[ProximityForest, np.ndarray]] = []
    fit, fit_leaves = ProximityForest.fit, ProximityForest.fit_leaves

    def spy(original):
        def wrapped(self, X, y=None):
            out = original(self, X, y)
            grown.append((self, np.array(X.X, copy=True)))
            return out

        return wrapped

    monkeypatch.setattr(ProximityForest, "fit", spy(fit))
    monkeypatch.setattr(ProximityForest, "fit_leaves", spy(fit_leaves))
    return grown


@pytest.mark.parametrize("supervised", [True, False])
def test_five_iterations_of_random_forests_and_breimans_proximity(monkeypatch, supervised):
    _, Xm, y, _ = structured(80, seed=3, missing=0.15)
    grown = _record_forests(monkeypatch)
    imp = ProximityImputer(proximity="rfimpute", categorical_features=[5], n_estimators=12,
                           random_state=4)  # fmt: skip
    with pytest.warns(ChangedMeaningWarning, match="proximity='rfgap'"):
        got = imp.fit_transform(Xm, y if supervised else None)
    # iter = 5: five forests, five history entries
    assert imp.n_iter_ == 5 and len(grown) == 5
    categorical = np.array([False] * 5 + [True])
    start = start_values(Xm, categorical)  # na.roughfix (tested above)
    expected = np.where(np.isnan(Xm), start, Xm)
    for forest, trained_on in grown:
        params = forest.get_params()
        assert params["kind"] == "random-forest" and params["bootstrap"]
        assert params["max_features"] == 2 == math.floor(math.sqrt(6))  # mtry
        assert params["n_estimators"] == 12 and params["max_samples"] is None
        assert forest.task_ == ("classification" if supervised else "unsupervised")
        # bootstrap: n draws with replacement per tree, so some rows twice, some never
        inbag = forest.inbag_
        assert (inbag.sum(axis=0) == Xm.shape[0]).all() and inbag.max() > 1
        assert ((inbag == 0).mean(axis=0) > 0.2).all()
        # the forest grew on the previous iteration's imputation (the first on the start)
        # (in the encoded space: the categorical column as codes of its sorted levels)
        encoded = expected.copy()
        encoded[:, 5] = np.searchsorted([5.0, 15.0, 25.0], expected[:, 5])
        np.testing.assert_allclose(trained_on, encoded, rtol=1e-9, atol=1e-12)
        P = dense_original_proximity(forest.leaves_, forest.leaves_)  # all rows, diagonal 1
        assert np.all(np.diag(P) == 1.0)
        expected, ties = expected_first_iteration(Xm, categorical, P, "mean", start)  # R
        for (i, j), tied in ties.items():  # an exact tie may go either way
            expected[i, j] = got[i, j] if got[i, j] in tied else expected[i, j]
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    assert imp.max_features_ == 2 and not np.isnan(got).any()


def test_regression_target_uses_a_third_of_the_features(monkeypatch):
    _, Xm, _, _ = structured(60, seed=8, missing=0.1)
    target = np.linspace(0.0, 1.0, 60) ** 2  # numeric, many values: regression
    grown = _record_forests(monkeypatch)
    with pytest.warns(ChangedMeaningWarning):
        imp = ProximityImputer(2, proximity="rfimpute", n_estimators=5, random_state=0)
        imp.fit(Xm, target)
    assert imp.task_ == "regression" and imp.max_features_ == 2 == 6 // 3
    assert [f.get_params()["max_features"] for f, _ in grown] == [2, 2]


def test_defaults_and_refusals():
    imp = ProximityImputer(proximity="rfimpute")
    params = imp._settings()
    assert (params["iterations"], params["n_estimators"], params["kind"]) == (
        5, 300, "random-forest",
    )  # fmt: skip
    assert params["weights"] == "original"
    assert params["categorical_vote"] == "mean"  # R: the level of largest average proximity
    assert ProximityImputer(proximity="rfgap")._settings()["categorical_vote"] == "sum"
    forced = ProximityImputer(proximity="rfimpute", categorical_vote="sum")._settings()
    assert forced["categorical_vote"] == "sum"
    old = ProximityImputer(proximity="rfgap")._settings()  # the mode 'rfimpute' named before
    assert (old["iterations"], old["n_estimators"], old["kind"], old["max_features"]) == (
        5, 100, "extra-trees", 1,
    )  # fmt: skip
    _, Xm, y, _ = structured(30, seed=1)
    with pytest.raises(ParameterError, match="R's rfImpute grows random-forest trees"):
        ProximityImputer(proximity="rfimpute", kind="extra-trees").fit(Xm, y)
    with warnings.catch_warnings():  # the other modes do not warn
        warnings.simplefilter("error", ChangedMeaningWarning)
        ProximityImputer(1, proximity="rfgap", n_estimators=3).fit(Xm, y)


def test_rfimpute_end_to_end_beats_the_median_and_transforms_new_rows():
    X, Xm, y, mask = structured(240, seed=2)
    train, new = slice(0, 200), slice(200, 240)
    imp = ProximityImputer(proximity="rfimpute", n_estimators=60, random_state=0)
    with pytest.warns(ChangedMeaningWarning):
        F = imp.fit_transform(Xm[train], y[train])
    num = mask[train][:, :5]

    def nrmse(filled, truth, m):
        return np.sqrt(np.mean((filled[:, :5][m] - truth[:, :5][m]) ** 2)) / truth[:, :5].std()

    median = np.where(np.isnan(Xm[train]), imp.statistics_, Xm[train])
    assert nrmse(F, X[train], num) < 0.8 * nrmse(median, X[train], num)
    np.testing.assert_array_equal(F[~mask[train]], X[train][~mask[train]])
    out = imp.transform(Xm[new])
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out[~mask[new]], X[new][~mask[new]])
