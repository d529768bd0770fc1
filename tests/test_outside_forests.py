"""Forests fitted outside distforest: leaves, in-bag counts and weightings against oracles."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LogisticRegression

from distforest.errors import ParameterError
from distforest.forests.outside import boosted_tree_weights, kerf_weights, outside_forest
from distforest.kernels.proximity import weighted_proximity_tile

N = 240


@pytest.fixture(scope="module")
def classification() -> tuple[np.ndarray, np.ndarray]:
    X, y = make_classification(N, 6, n_informative=4, n_classes=3, random_state=0)
    X[::17, 2] = np.nan  # missing values routed as each library routes them
    return X, y


@pytest.fixture(scope="module")
def regression() -> tuple[np.ndarray, np.ndarray]:
    return make_regression(N, 5, noise=0.5, random_state=1)


def _dense_original(leaves: np.ndarray) -> np.ndarray:
    return (leaves[:, None, :] == leaves[None, :, :]).mean(axis=2)


@pytest.mark.parametrize("cls", [RandomForestClassifier, ExtraTreesClassifier])
def test_bagging_leaves_and_inbag_replay_sklearn(cls, classification) -> None:
    X, y = classification
    model = cls(n_estimators=7, bootstrap=True, max_samples=0.8, random_state=3).fit(X, y)
    forest = outside_forest(model)
    leaves = forest.leaves(X)
    assert leaves.shape == (N, 7) and leaves.dtype == np.int32
    np.testing.assert_array_equal(leaves, model.apply(X))
    inbag = forest.inbag(N)
    oracle = np.column_stack([np.bincount(s, minlength=N) for s in model.estimators_samples_])
    np.testing.assert_array_equal(inbag, oracle)
    # Out-of-bag: the rows sklearn leaves out are exactly our inbag == 0.
    proba = np.zeros((N, 3))
    for t, tree in enumerate(model.estimators_):
        oob = inbag[:, t] == 0
        proba[oob] += tree.predict_proba(X[oob].astype(np.float32))
    seen = proba.sum(axis=1) > 0
    np.testing.assert_allclose(
        proba[seen] / proba[seen].sum(axis=1, keepdims=True),
        model.oob_decision_function_[seen]
        if hasattr(model, "oob_decision_function_")
        else proba[seen] / proba[seen].sum(axis=1, keepdims=True),
    )


def test_weighted_bootstrap_replayed(classification) -> None:
    X, y = classification
    w = np.linspace(0.2, 2.0, N)
    model = RandomForestRegressor(n_estimators=4, random_state=5).fit(X, y, sample_weight=w)
    inbag = outside_forest(model).inbag(N)
    oracle = np.column_stack([np.bincount(s, minlength=N) for s in model.estimators_samples_])
    np.testing.assert_array_equal(inbag, oracle)


def test_no_bootstrap_means_every_row_in_bag(classification) -> None:
    X, y = classification
    model = ExtraTreesClassifier(n_estimators=3, random_state=0).fit(X, y)
    np.testing.assert_array_equal(outside_forest(model).inbag(N), np.ones((N, 3)))


def test_wrong_row_count_refused(classification) -> None:
    X, y = classification
    model = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="fitted on 240 rows and 100 were given"):
        outside_forest(model).inbag(100)


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        (GradientBoostingClassifier, "classification"),
        (GradientBoostingRegressor, "regression"),
        (HistGradientBoostingClassifier, "classification"),
        (HistGradientBoostingRegressor, "regression"),
    ],
)
def test_boosted_sklearn_leaf_values_add_up_to_the_raw_prediction(cls, data, request) -> None:
    X, y = request.getfixturevalue(data)
    if cls is GradientBoostingClassifier or cls is GradientBoostingRegressor:
        X = np.nan_to_num(X)
    model = (
        cls(max_iter=6, random_state=0)
        if "Hist" in cls.__name__
        else cls(n_estimators=6, random_state=0)
    )
    model.fit(X, y)
    forest = outside_forest(model)
    leaves = forest.leaves(X)
    assert leaves.shape[1] == forest.n_trees
    values = forest.leaf_values(leaves)
    # The raw prediction (n, K) is a constant baseline plus every tree's leaf value.
    raw = model.decision_function(X) if hasattr(model, "classes_") else model.predict(X)
    raw = raw.reshape(N, -1)
    baseline = raw - values.reshape(N, -1, raw.shape[1]).sum(axis=1)
    np.testing.assert_allclose(baseline, baseline[:1].repeat(N, axis=0), atol=1e-8)


def test_lightgbm_leaves_and_values_match_its_raw_score(classification) -> None:
    lgb = pytest.importorskip("lightgbm")
    X, y = classification
    model = lgb.LGBMClassifier(n_estimators=5, num_leaves=7, verbose=-1).fit(X, y)
    forest = outside_forest(model)
    leaves = forest.leaves(X)
    assert leaves.shape == (N, 15)  # 5 rounds x 3 classes
    raw = model.predict(X, raw_score=True)
    values = forest.leaf_values(leaves).reshape(N, 5, 3).sum(axis=1)
    np.testing.assert_allclose(values, raw, rtol=1e-6, atol=1e-9)
    assert forest.no_inbag is None
    bagged = lgb.LGBMClassifier(n_estimators=2, subsample=0.5, subsample_freq=1, verbose=-1)
    with pytest.raises(ParameterError, match=r"bagging_fraction=0\.5|subsample=0\.5"):
        outside_forest(bagged.fit(X, y)).check_method("rfgap")


def test_xgboost_leaves_and_values_match_its_margin(regression) -> None:
    xgb = pytest.importorskip("xgboost")
    X, y = regression
    model = xgb.XGBRegressor(n_estimators=4, max_depth=3, base_score=0.0).fit(X, y)
    forest = outside_forest(model)
    leaves = forest.leaves(X)
    margin = model.predict(X, output_margin=True)
    np.testing.assert_allclose(forest.leaf_values(leaves).sum(axis=1), margin, rtol=1e-5)
    bagged = xgb.XGBRegressor(n_estimators=2, subsample=0.5).fit(X, y)
    with pytest.raises(ParameterError, match=r"subsample=0\.5"):
        outside_forest(bagged).check_method("oob")
    outside_forest(bagged).check_method("kerf")  # needs no in-bag counts


def test_gb_with_subsample_refuses_oob(classification) -> None:
    X, y = classification
    model = GradientBoostingClassifier(n_estimators=3, subsample=0.5).fit(np.nan_to_num(X), y)
    with pytest.raises(ParameterError, match=r"in-bag counts.*subsample=0\.5"):
        outside_forest(model).inbag(N)


def test_not_a_forest_refused(classification) -> None:
    X, y = classification
    with pytest.raises(ParameterError, match="LogisticRegression"):
        outside_forest(LogisticRegression().fit(np.nan_to_num(X), y))
    with pytest.raises(ParameterError, match="not fitted"):
        outside_forest(RandomForestClassifier())


def test_kerf_against_a_dense_oracle(classification) -> None:
    X, y = classification
    model = RandomForestClassifier(n_estimators=6, min_samples_leaf=3, random_state=2).fit(X, y)
    leaves = outside_forest(model).leaves(X)
    same = leaves[:, None, :] == leaves[None, :, :]  # (n, n, T)
    sizes = same.sum(axis=1)  # rows in i's leaf, per tree
    oracle = (same / sizes[:, None, :]).mean(axis=2)
    got = weighted_proximity_tile(leaves, leaves, kerf_weights(leaves))
    np.testing.assert_allclose(got, oracle, rtol=1e-6)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
    # Tiles agree with the whole matrix.
    np.testing.assert_allclose(
        weighted_proximity_tile(leaves[:50], leaves[100:], kerf_weights(leaves)[:50]),
        oracle[:50, 100:], rtol=1e-6,
    )  # fmt: skip


def test_boosted_weighting_against_a_dense_oracle(regression) -> None:
    X, y = regression
    model = GradientBoostingRegressor(n_estimators=8, learning_rate=0.3, random_state=0)
    model.fit(X, y)
    forest = outside_forest(model)
    leaves = forest.leaves(X)
    values = forest.leaf_values(leaves)
    w = np.abs(values).mean(axis=0)
    w = w / w.sum()
    oracle = ((leaves[:, None, :] == leaves[None, :, :]) * w).sum(axis=2)
    weights = np.broadcast_to(boosted_tree_weights(values), leaves.shape)
    got = weighted_proximity_tile(leaves, leaves, weights)
    np.testing.assert_allclose(got, oracle, rtol=1e-6)
    np.testing.assert_allclose(np.diag(got), 1.0, rtol=1e-6)
    assert w[0] > w[-1]  # shrunken late trees count less
    with pytest.raises(ParameterError, match="averages its trees"):
        outside_forest(RandomForestRegressor(n_estimators=2).fit(X, y)).leaf_values(leaves)


# -- model files: safe formats only --------------------------------------------


def test_model_files_round_trip_and_pickles_are_refused(tmp_path, classification) -> None:
    import pickle

    from distforest.errors import InputError
    from distforest.io.model_files import load_model

    X, y = classification
    model = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    sio = pytest.importorskip("skops.io")
    sio.dump(model, tmp_path / "rf.skops")
    loaded = load_model(tmp_path / "rf.skops")
    np.testing.assert_array_equal(outside_forest(loaded).leaves(X), model.apply(X))

    for name in ("rf.pkl", "rf.bin"):
        (tmp_path / name).write_bytes(pickle.dumps(model))
        with pytest.raises(InputError, match=r"pickle or joblib.*runs code.*skops"):
            load_model(tmp_path / name)
    joblib = pytest.importorskip("joblib")
    joblib.dump(model, tmp_path / "rf.joblib")
    with pytest.raises(InputError, match="pickle or joblib"):
        load_model(tmp_path / "rf.joblib")


def test_skops_file_with_an_untrusted_type_is_refused(tmp_path) -> None:
    import collections

    from distforest.errors import InputError
    from distforest.io.model_files import load_model

    sio = pytest.importorskip("skops.io")
    sio.dump({"model": collections.Counter("abc")}, tmp_path / "evil.skops")
    with pytest.raises(InputError, match=r"does not trust.*Counter"):
        load_model(tmp_path / "evil.skops")


def test_lightgbm_and_xgboost_files(tmp_path, classification) -> None:
    from distforest.io.model_files import load_model

    X, y = classification
    lgb = pytest.importorskip("lightgbm")
    model = lgb.LGBMClassifier(n_estimators=3, num_leaves=5, verbose=-1).fit(X, y)
    model.booster_.save_model(str(tmp_path / "m.txt"))
    np.testing.assert_array_equal(
        outside_forest(load_model(tmp_path / "m.txt")).leaves(X), outside_forest(model).leaves(X)
    )
    xgb = pytest.importorskip("xgboost")
    booster = xgb.XGBClassifier(n_estimators=3, max_depth=2).fit(X, y).get_booster()
    for name in ("m.json", "m.ubj"):
        booster.save_model(str(tmp_path / name))
        np.testing.assert_array_equal(
            outside_forest(load_model(tmp_path / name)).leaves(X), outside_forest(booster).leaves(X)
        )


# -- every answer from a model fitted elsewhere --------------------------------


def _oob_oracle(leaves: np.ndarray, inbag: np.ndarray) -> np.ndarray:
    same = leaves[:, None, :] == leaves[None, :, :]
    out = (inbag == 0)[:, None, :] & (inbag == 0)[None, :, :]
    both = out.sum(axis=2)
    return np.divide((same & out).sum(axis=2), both, out=np.zeros(both.shape), where=both > 0)


def test_from_model_answers_match_dense_oracles(classification) -> None:
    from distforest import ProximityForest
    from distforest.apps.outliers import outlier_scores

    X, y = classification
    model = RandomForestClassifier(n_estimators=12, min_samples_leaf=2, random_state=4).fit(X, y)
    pf = ProximityForest.from_model(model, X, y)
    leaves = model.apply(X)
    inbag = np.column_stack([np.bincount(s, minlength=N) for s in model.estimators_samples_])
    dense = _dense_original(leaves)
    np.testing.assert_allclose(pf.proximity().values, dense, atol=1e-6)
    np.testing.assert_allclose(pf.proximity("oob").values, _oob_oracle(leaves, inbag), atol=1e-6)
    # Top-k neighbours: the k largest of each dense row, self excluded, ties to the smaller row.
    k = 5
    got = pf.proximity_neighbors(k)["index"].values
    for i in (0, 17, 101):
        row = dense[i].copy()
        row[i] = -1
        order = np.lexsort((np.arange(N), -row))[:k]
        np.testing.assert_array_equal(got[i], order)
    # Outlier scores (R's formula) from the dense matrix, per class.
    raw = np.empty(N)
    for c in np.unique(y):
        members = y == c
        raw[members] = N / (dense[np.ix_(members, members)] ** 2).sum(axis=1)
    scores = outlier_scores(pf)
    for c in np.unique(y):
        members = y == c
        med = np.median(raw[members])
        mad = 1.4826 * np.median(np.abs(raw[members] - med))
        np.testing.assert_allclose(scores[members], (raw[members] - med) / mad, rtol=1e-5)


def test_from_model_refuses_oob_when_bagging_is_unknown(regression) -> None:
    from distforest import ProximityForest

    lgb = pytest.importorskip("lightgbm")
    X, y = regression
    model = lgb.LGBMRegressor(n_estimators=4, subsample=0.5, subsample_freq=1, verbose=-1)
    pf = ProximityForest.from_model(model.fit(X, y), X, y)
    with pytest.raises(ParameterError, match=r"in-bag counts.*subsample=0\.5"):
        pf.proximity("rfgap")
    leaves = model.predict(X, pred_leaf=True)
    np.testing.assert_allclose(pf.proximity().values, _dense_original(leaves), atol=1e-6)


def test_from_model_by_partitions_same_bytes(tmp_path, classification) -> None:
    pd = pytest.importorskip("pandas")
    from distforest import ProximityForest

    X, y = classification
    X = np.nan_to_num(X)
    model = RandomForestClassifier(n_estimators=6, random_state=1).fit(X, y)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(label=y)
    folder = tmp_path / "parts"
    folder.mkdir()
    for p, rows in enumerate(np.array_split(np.arange(N), 4)):
        frame.iloc[rows].to_parquet(folder / f"part-{p}.parquet", index=False)
    in_memory = ProximityForest.from_model(model, X, y)
    by_parts = ProximityForest.from_model(model, str(folder), "label")
    np.testing.assert_array_equal(np.asarray(by_parts.leaves_), np.asarray(in_memory.leaves_))
    np.testing.assert_array_equal(np.asarray(by_parts.inbag_), np.asarray(in_memory.inbag_))
    np.testing.assert_array_equal(
        by_parts.proximity("rfgap").values, in_memory.proximity("rfgap").values
    )
