"""ProximityForest as a scikit-learn forest: predictions, out-of-bag scores, importances.

The oracle is scikit-learn itself: every tree of a ProximityForest is the
``DecisionTreeClassifier`` / ``DecisionTreeRegressor`` that scikit-learn's
``RandomForest*`` fits for the same bootstrap (the whole X, the in-bag counts
as sample weights, the tree's own seed).  Refitting those trees here gives
the random forest's predictions, out-of-bag estimates and importances to
compare with.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from oracles import sklearn_forest_trees
from sklearn.datasets import load_wine, make_regression
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import GridSearchCV, cross_val_score, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from distforest import ProximityForest, execution
from distforest.errors import InputError, NotFittedError
from distforest.forests import forest_predict
from distforest.io import load_table

DATA = Path(__file__).resolve().parents[1] / "distforest" / "data"


def _oob_oracle(pf: ProximityForest, trees: list, X: np.ndarray) -> np.ndarray:
    """scikit-learn's out-of-bag estimate: sum over the trees that left the row out."""
    k = len(pf.classes_) if pf.task_ == "classification" else 1
    total, count = np.zeros((len(X), k)), np.zeros(len(X))
    for t, tree in enumerate(trees):
        out = pf.inbag_[:, t] == 0
        pred = tree.predict_proba(X[out]) if k > 1 else tree.predict(X[out])[:, None]
        total[out] += pred
        count[out] += 1
    return total / np.maximum(count, 1)[:, None]


@pytest.fixture(scope="module")
def cancer() -> tuple[np.ndarray, np.ndarray]:
    """The bundled breast-cancer table: 16 missing values, string classes."""
    table = load_table(DATA / "breast_cancer.csv", target="Class", drop=["Id"])
    return table.X, table.y


def test_classifier_is_a_random_forest_of_the_same_bootstraps(cancer):
    X, y = cancer
    new = X[::3] + 0.5  # new rows between the training values, missing values kept
    with execution("synchronous"):
        pf = ProximityForest(15, task="classification", random_state=4).fit(X, y)
        proba = pf.predict_proba(new)
        predicted = pf.predict(new)
    trees = sklearn_forest_trees(pf, X, y)
    expected = np.mean([tree.predict_proba(new) for tree in trees], axis=0)
    np.testing.assert_allclose(proba, expected, atol=1e-6)
    assert list(pf.classes_) == ["benign", "malignant"]
    np.testing.assert_array_equal(predicted, np.asarray(pf.classes_)[expected.argmax(axis=1)])
    oob = _oob_oracle(pf, trees, X)
    np.testing.assert_allclose(pf.oob_decision_function_, oob, atol=1e-6)
    codes = np.searchsorted(pf.classes_, y)
    assert pf.oob_score_ == pytest.approx(np.mean(oob.argmax(axis=1) == codes))
    split = [tree.feature_importances_ for tree in trees if tree.tree_.node_count > 1]
    mean = np.mean(split, axis=0)
    np.testing.assert_allclose(pf.feature_importances_, mean / mean.sum(), rtol=1e-9)
    assert pf.feature_importances_.sum() == pytest.approx(1.0)


def test_regressor_is_a_random_forest_of_the_same_bootstraps():
    X, y = make_regression(n_samples=150, n_features=5, noise=5.0, random_state=0)
    with execution("synchronous"):
        pf = ProximityForest(12, task="regression", random_state=1).fit(X, y)
        predicted = pf.predict(X[:40] * 0.9)
        score = pf.score(X, y)
    trees = sklearn_forest_trees(pf, X, y)
    expected = np.mean([tree.predict(X[:40] * 0.9) for tree in trees], axis=0)
    np.testing.assert_allclose(predicted, expected, rtol=1e-5)
    oob = _oob_oracle(pf, trees, X)[:, 0]
    np.testing.assert_allclose(pf.oob_prediction_, oob, rtol=1e-5)
    from sklearn.metrics import r2_score

    assert pf.oob_score_ == pytest.approx(r2_score(y, oob), rel=1e-6)
    assert 0.5 < pf.oob_score_ < score <= 1.0
    assert not hasattr(pf, "predict_proba")  # a regressor gives no probabilities
    assert not hasattr(pf, "oob_decision_function_")


def _accuracies(X: np.ndarray, y: np.ndarray, seeds: range) -> dict[str, np.ndarray]:
    got: dict[str, list[float]] = {"pf": [], "rf": [], "pf_oob": [], "rf_oob": []}
    for seed in seeds:
        Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.5, stratify=y, random_state=seed)
        with execution("synchronous"):
            pf = ProximityForest(100, task="classification", random_state=seed).fit(Xa, ya)
            got["pf"].append(pf.score(Xb, yb))
        got["pf_oob"].append(pf.oob_score_)
        rf = RandomForestClassifier(100, oob_score=True, random_state=seed).fit(Xa, ya)
        got["rf"].append(rf.score(Xb, yb))
        got["rf_oob"].append(rf.oob_score_)
    return {k: 100 * np.array(v) for k, v in got.items()}


def test_accuracy_and_oob_score_as_random_forest_classifier(cancer):
    """Three sets, five seeds each, 100 trees: held-out accuracy and oob_score_ vs scikit-learn.

    Two forests of different seeds differ by about 1 point on one split of
    Ionosphere (measured: sd 1.1 between two RandomForestClassifier seeds), so
    a set's mean over five seeds is allowed 1.5 points and the mean over the
    three sets 0.5 point (accuracy) and 1 point (out of bag).
    """
    wine = load_wine(return_X_y=True)
    ion = load_table(DATA / "ionosphere.csv", target="Class")
    gaps, oob_gaps = [], []
    for X, y in (cancer, wine, (ion.X, ion.y)):
        acc = _accuracies(X, y, range(5))
        gaps.append(acc["pf"].mean() - acc["rf"].mean())
        oob_gaps.append(acc["pf_oob"].mean() - acc["rf_oob"].mean())
        assert acc["pf"].mean() > 90
    assert np.all(np.abs(gaps) < 1.5), gaps
    assert np.all(np.abs(oob_gaps) < 1.5), oob_gaps
    assert abs(np.mean(gaps)) < 0.5, gaps
    assert abs(np.mean(oob_gaps)) < 1.0, oob_gaps


def test_model_selection_and_pipelines_take_it():
    X, y = load_wine(return_X_y=True)
    forest = ProximityForest(10, task="classification", random_state=0)
    with execution("synchronous"):
        scores = cross_val_score(forest, X, y, cv=3)
        search = GridSearchCV(forest, {"min_samples_leaf": [1, 20]}, cv=3).fit(X, y)
        pipe = make_pipeline(StandardScaler(), forest).fit(X, y)
        reg = cross_val_score(ProximityForest(10, task="regression", random_state=0), X, X[:, 0],
                              cv=3)  # fmt: skip
    assert scores.shape == (3,) and scores.min() > 0.8
    assert search.best_params_ == {"min_samples_leaf": 1}
    assert search.best_estimator_.predict(X).shape == (178,)
    assert pipe.score(X, y) > 0.95
    assert reg.min() > 0.5  # R² of a column the others predict well


def test_prediction_tasks_on_a_cluster_give_the_same_values(client, cancer, monkeypatch):
    X, y = cancer
    with execution("synchronous"):
        pf = ProximityForest(8, random_state=2).fit(X, y)
        here = pf.predict_proba(X)
    monkeypatch.setattr(forest_predict, "ROWS_PER_TASK", 100)  # several blocks of rows
    seen = []
    with execution(client, progress=lambda stage, done, total: seen.append((stage, total))):
        there = pf.predict_proba(X)
    np.testing.assert_array_equal(here, there)
    totals = {total for stage, total in seen if stage == "predict"}
    assert totals == {8}  # 699 rows in blocks of 88: four blocks per worker thread, <= 100


def test_dataframes_keep_their_columns_and_categories():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({
        "size": rng.normal(size=200),
        "colour": rng.choice(["red", "green", "blue"], size=200),
    })  # fmt: skip
    y = np.where(frame["colour"] == "red", "hot", "cold")
    with execution("synchronous"):
        pf = ProximityForest(10, random_state=0).fit(frame, y)
        # rows in another order: the labels, not their order of appearance, decide the codes
        subset = frame.iloc[::-1].iloc[:30]
        np.testing.assert_array_equal(pf.predict(subset), y[::-1][:30])
        np.testing.assert_array_equal(pf.apply(subset), pf.leaves_[::-1][:30])
        np.testing.assert_array_equal(pf.apply(frame.iloc[[7]]), pf.leaves_[[7]])  # one row
        with pytest.raises(InputError, match="must be in the same order"):
            pf.predict(frame[["colour", "size"]])
        with pytest.raises(InputError, match="Feature names unseen at fit time:\n- shade"):
            pf.predict(frame.rename(columns={"colour": "shade"}))
        with pytest.raises(InputError, match=r"level\(s\) \['purple'\] not seen in fit"):
            pf.predict(frame.assign(colour="purple"))
        with pytest.warns(UserWarning, match="X does not have valid feature names"):
            pf.predict(np.array([[0.0, np.nan]]))


def test_saved_forest_predicts_the_same(tmp_path, cancer):
    X, y = cancer
    with execution("synchronous"):
        pf = ProximityForest(12, random_state=0).fit(X, y)
        pf.save(tmp_path / "f.zarr").mark_complete()
        back = ProximityForest.load(tmp_path / "f.zarr")
        np.testing.assert_array_equal(back.predict_proba(X), pf.predict_proba(X))
    np.testing.assert_array_equal(back.feature_importances_, pf.feature_importances_)
    assert back.oob_score_ == pf.oob_score_


def test_unsupervised_and_unbootstrapped_forests_say_what_is_missing():
    X, y = load_wine(return_X_y=True)
    with execution("synchronous"):
        unsupervised = ProximityForest(4, random_state=0).fit(X)
        plain = ProximityForest(4, bootstrap=False, random_state=0).fit(X, y)
    with pytest.raises(NotFittedError, match="without a target"):
        unsupervised.predict(X)
    assert not hasattr(unsupervised, "oob_score_")
    assert unsupervised.feature_importances_.sum() == pytest.approx(1.0)
    with pytest.raises(NotFittedError, match="bootstrap=True"):
        _ = plain.oob_score_
    with pytest.raises(NotFittedError, match="not fitted"):
        ProximityForest().predict(X)


def test_rows_in_bag_in_every_tree_warn_as_scikit_learn():
    X, y = load_wine(return_X_y=True)
    with execution("synchronous"):
        pf = ProximityForest(1, random_state=0).fit(X, y)
    with pytest.warns(UserWarning, match="Some inputs do not have OOB scores"):
        values = pf.oob_decision_function_
    np.testing.assert_array_equal(values[pf.inbag_[:, 0] > 0], 0.0)


def test_importances_command_ranks_the_feature_that_decides(tmp_path):
    from click.testing import CliRunner

    from distforest.cli.main import cli

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(300, 4)), columns=["a", "b", "c", "d"])
    frame["kind"] = rng.choice(["x", "y", "z"], size=300)  # a text column, coded and decoded
    frame["label"] = np.where(frame["c"] > 0, "up", "down")
    frame.to_csv(tmp_path / "t.csv", index=False)
    out = tmp_path / "imp.csv"
    result = CliRunner().invoke(cli, ["-q", "importances", str(tmp_path / "t.csv"), "--target",
                                      "label", "--trees", "30", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert list(table.columns) == ["feature", "impurity", "permutation_mean", "permutation_std"]
    assert table["feature"].iloc[0] == "c"  # the only feature that decides the label
    assert table.set_index("feature")["impurity"].idxmax() == "c"
    assert table["impurity"].sum() == pytest.approx(1.0)
    others = table[table["feature"] != "c"]
    assert others["permutation_mean"].abs().max() < 0.05 < table["permutation_mean"].iloc[0]
    assert "held-out accuracy" in result.output
    missing = CliRunner().invoke(cli, ["-q", "importances", str(tmp_path / "t.csv"), "--out",
                                       str(tmp_path / "x.csv")])  # fmt: skip
    assert missing.exit_code == 2 and "--target" in missing.output


def test_cross_val_score_takes_every_supervised_estimator():
    """Every estimator with a target goes through cross_val_score (the imputer in a pipeline).

    XForest (unsupervised, no ``score``) and SMERF (fitted to a distance matrix,
    not to a target) are not scored this way: they have nothing to score against.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold

    from distforest import KNNClassifier, KNNRegressor, ProximityImputer
    from distforest.forests.simforest import SimilarityForestClassifier

    X, y = load_wine(return_X_y=True)
    X_missing = X.copy()
    X_missing[np.random.default_rng(0).random(X.shape) < 0.1] = np.nan
    from sklearn.metrics.pairwise import rbf_kernel

    kernel = rbf_kernel(StandardScaler().fit_transform(X), gamma=0.05)  # scikit-learn slices it
    cases = [
        (SimilarityForestClassifier(n_estimators=10, random_state=0), kernel, y, 0.7),
        (
            make_pipeline(
                StandardScaler(),
                SimilarityForestClassifier(n_estimators=10, metric="rbf", random_state=0),
            ),
            X,
            y,
            0.8,
        ),
        (KNNClassifier(5, normalize="zscore"), X, y, 0.8),
        (KNNRegressor(5, normalize="zscore"), X, X[:, 0], 0.3),
    ]
    imputer = ProximityImputer(2, n_estimators=5, random_state=0)
    pipeline = make_pipeline(imputer, StandardScaler(), LogisticRegression(max_iter=500))
    cases.append((pipeline, X_missing, y, 0.8))
    with execution("synchronous"):
        for estimator, features, target, floor in cases:
            folds = KFold(3, shuffle=True, random_state=0)  # wine's rows are sorted by class
            scores = cross_val_score(estimator, features, target, cv=folds)
            assert scores.shape == (3,) and scores.min() > floor, (estimator, scores)
