"""Forests fitted outside distforest: leaves, in-bag counts and weightings against oracles."""

from __future__ import annotations

import re

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

from distforest.errors import InputError, ParameterError
from distforest.forests.outside import (
    count_leaves,
    leaf_offsets,
    outside_forest,
    row_weights,
    weight_table,
)
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
    np.testing.assert_array_equal(forest.leaves(X, slice(4, 11)), leaves[:, 4:11])
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
    # a batch of trees not from the first (as the fit driver's later tasks ask)
    np.testing.assert_array_equal(forest.leaves(X, slice(1, 3)), leaves[:, 1:3])
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


def _table(method: str, forest, leaves: np.ndarray, chunk: int = 64):
    """The per-leaf table of ``method``, its leaves counted chunk by chunk as tasks do."""
    offsets = leaf_offsets(forest.node_counts())
    counts = sum(count_leaves(leaves[s : s + chunk], offsets) for s in range(0, len(leaves), chunk))
    np.testing.assert_array_equal(counts, count_leaves(leaves, offsets))  # chunks add up
    return weight_table(method, counts, offsets, forest), offsets


def test_kerf_against_a_dense_oracle(classification) -> None:
    X, y = classification
    model = RandomForestClassifier(n_estimators=6, min_samples_leaf=3, random_state=2).fit(X, y)
    forest = outside_forest(model)
    leaves = forest.leaves(X)
    same = leaves[:, None, :] == leaves[None, :, :]  # (n, n, T)
    sizes = same.sum(axis=1)  # rows in i's leaf, per tree
    oracle = (same / sizes[:, None, :]).mean(axis=2)
    table, offsets = _table("kerf", forest, leaves)
    assert table.size == forest.node_counts().sum()  # the model's size, not the rows'
    weights = row_weights(leaves, table, offsets)
    np.testing.assert_array_equal(weights, 1.0 / (6 * sizes))
    got = weighted_proximity_tile(leaves, leaves, weights)
    np.testing.assert_allclose(got, oracle, rtol=1e-6)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
    # Tiles agree with the whole matrix.
    np.testing.assert_allclose(
        weighted_proximity_tile(leaves[:50], leaves[100:], weights[:50]),
        oracle[:50, 100:], rtol=1e-6,
    )  # fmt: skip


def test_leaves_of_another_forest_refused(classification) -> None:
    X, y = classification
    forest = outside_forest(RandomForestClassifier(n_estimators=3, random_state=0).fit(X, y))
    leaves = forest.leaves(X)
    offsets = leaf_offsets(forest.node_counts())
    leaves[5, 1] = forest.node_counts()[1]
    with pytest.raises(InputError, match=r"tree 1 has \d+ nodes but a row is in its leaf"):
        count_leaves(leaves, offsets)
    with pytest.raises(InputError, match="2 trees and the forest 3"):
        count_leaves(leaves[:, :2], offsets)


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
    table, offsets = _table("boosted", forest, leaves)
    weights = row_weights(leaves, table, offsets)
    np.testing.assert_allclose(weights, np.broadcast_to(w, leaves.shape), rtol=1e-12)
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


#: Family -> the weightings its model has (bagging known: Breiman's, OOB, RF-GAP, KeRF;
#: boosting: Breiman's, KeRF and the boosted weights).
BY_PARTS = {"random-forest": ("original", "oob", "rfgap", "kerf"),
            "lightgbm": ("original", "kerf", "boosted"),
            "xgboost": ("original", "kerf", "boosted")}  # fmt: skip


@pytest.mark.parametrize("family", list(BY_PARTS))
def test_from_model_by_partitions_same_bytes(tmp_path, classification, family) -> None:
    """Every family and every weighting: the rows read from a folder of parts give the
    leaves, in-bag counts and matrices of the rows passed in memory, bit for bit, and the
    matrices are the dense oracle's (computed with numpy from the model's own leaves)."""
    pd = pytest.importorskip("pandas")
    from distforest import ProximityForest

    X, y = classification
    X = np.nan_to_num(X)
    model, own_leaves = _models(X, y)[family]
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(label=y)
    folder = tmp_path / "parts"
    folder.mkdir()
    for p, rows in enumerate(np.array_split(np.arange(N), 4)):
        frame.iloc[rows].to_parquet(folder / f"part-{p}.parquet", index=False)
    in_memory = ProximityForest.from_model(model, X, y)
    by_parts = ProximityForest.from_model(model, str(folder), "label")
    leaves = np.asarray(in_memory.leaves_)
    np.testing.assert_array_equal(np.asarray(by_parts.leaves_), leaves)
    np.testing.assert_array_equal(np.asarray(by_parts.inbag_), np.asarray(in_memory.inbag_))
    own = np.asarray(own_leaves(X))  # the model's own apply / pred_leaf
    same = own[:, None, :] == own[None, :, :]
    oracles = {"original": same.mean(axis=2),
               "kerf": (same / same.sum(axis=1)[:, None, :]).mean(axis=2)}  # fmt: skip
    if "boosted" in BY_PARTS[family]:
        w = np.abs(outside_forest(model).leaf_values(leaves)).mean(axis=0)
        oracles["boosted"] = (same * (w / w.sum())).sum(axis=2)
    for method in BY_PARTS[family]:
        got = by_parts.proximity(method).values
        np.testing.assert_array_equal(got, in_memory.proximity(method).values)
        if method in oracles:
            np.testing.assert_allclose(got, oracles[method], atol=1e-6)


# -- new rows, MDS, imputation and the weightings' tiles from a model --------------


def _new_rows(n: int = 60) -> np.ndarray:
    X, _ = make_classification(N + n, 6, n_informative=4, n_classes=3, random_state=0)
    Xn = X[N:].copy()
    Xn[::7, 2] = np.nan
    return Xn


def _models(X: np.ndarray, y: np.ndarray) -> dict[str, tuple[object, object]]:
    """name -> (model, function giving the leaves of rows from the model itself)."""
    rf = RandomForestClassifier(n_estimators=9, min_samples_leaf=2, random_state=7).fit(X, y)
    models = {"random-forest": (rf, lambda Z: rf.apply(Z.astype(np.float32)))}
    lgb = pytest.importorskip("lightgbm")
    booster = lgb.LGBMClassifier(n_estimators=4, num_leaves=6, verbose=-1).fit(X, y)
    models["lightgbm"] = (booster, lambda Z: booster.predict(Z, pred_leaf=True))
    xgb = pytest.importorskip("xgboost")
    boosted = xgb.XGBClassifier(n_estimators=3, max_depth=3).fit(X, y)
    models["xgboost"] = (boosted, lambda Z: boosted.apply(Z))
    return models


def _top_k(dense: np.ndarray, k: int) -> np.ndarray:
    """The k largest of each row, ties to the smaller column (the dense oracle's order)."""
    cols = np.arange(dense.shape[1])
    return np.array([np.lexsort((cols, -row))[:k] for row in dense])


def _classical_mds(P: np.ndarray, k: int) -> np.ndarray:
    n = P.shape[0]
    J = np.eye(n) - 1.0 / n
    values, vectors = np.linalg.eigh(-0.5 * J @ (1.0 - P) @ J)
    order = np.argsort(values)[::-1][:k]
    return vectors[:, order] * np.sqrt(values[order])


@pytest.mark.parametrize("family", ["random-forest", "lightgbm", "xgboost"])
def test_from_model_new_rows_mds_and_imputation_match_dense_oracles(family, classification):
    from distforest import ProximityForest
    from distforest.apps.mds import mds
    from distforest.apps.scoring import impute_rows
    from distforest.io import load_table

    X, y = classification
    model, leaves_of = _models(X, y)[family]
    pf = ProximityForest.from_model(model, X, y, tile_size=64)
    Xn = _new_rows()
    train, new = leaves_of(X), leaves_of(Xn)
    np.testing.assert_array_equal(pf.apply(Xn), new)
    cross = (new[:, None, :] == train[None, :, :]).mean(axis=2)
    np.testing.assert_allclose(pf.proximity(Xn).values, cross, atol=1e-6)
    got = pf.proximity_neighbors(5, X=Xn)
    np.testing.assert_array_equal(got["index"].values, _top_k(cross, 5))
    # predictions are the model's own; the proximity-weighted vote is the dense one's
    np.testing.assert_array_equal(pf.predict(Xn), model.predict(Xn))
    np.testing.assert_allclose(pf.predict_proba(Xn), model.predict_proba(Xn), rtol=1e-6)
    votes = cross @ (y[:, None] == np.arange(3)[None, :])
    np.testing.assert_array_equal(pf.predict_proximity(Xn, "original"), votes.argmax(axis=1))
    if family == "random-forest":  # in-bag counts replayed: RF-GAP of new rows
        inbag = np.column_stack([np.bincount(s, minlength=N) for s in model.estimators_samples_])
        same = new[:, None, :] == train[None, :, :]
        mass = (same * inbag[None, :, :]).sum(axis=1)  # M_i(t)
        rfgap = (same * inbag[None, :, :] / mass[:, None, :]).mean(axis=2)
        np.testing.assert_allclose(pf.proximity("rfgap", X=Xn).values, rfgap, atol=1e-6)
    # MDS of the training rows: classical scaling of the dense proximity
    dense = (train[:, None, :] == train[None, :, :]).mean(axis=2)
    coordinates, _ = mds(pf, 2)
    expected = _classical_mds(dense, 2)
    for axis in range(2):
        a, b = coordinates[:, axis], expected[:, axis]
        np.testing.assert_allclose(a, np.sign(a @ b) * b, atol=1e-6 * np.abs(b).max())
    # imputation of new rows: each hole the proximity-weighted mean of the observed values
    holes = Xn.copy()
    holes[1::5, 0] = np.nan
    table = load_table(holes)
    filled, cells = impute_rows(pf, table, X, method="original")
    assert cells == int(np.isnan(holes).sum())
    P = (leaves_of(holes)[:, None, :] == train[None, :, :]).mean(axis=2)
    for c in (0, 2):
        observed = ~np.isnan(X[:, c])
        rows = np.flatnonzero(np.isnan(holes[:, c]))
        weights = P[np.ix_(rows, observed)]
        assert (weights.sum(axis=1) > 0).all()
        oracle = weights @ X[observed, c] / weights.sum(axis=1)
        np.testing.assert_allclose(filled.iloc[rows, 1 + c].to_numpy(), oracle, rtol=1e-5)


def test_kerf_and_boosted_tiles_in_a_store_match_dense_oracles(tmp_path, classification):
    from distforest import ProximityForest, open_store

    lgb = pytest.importorskip("lightgbm")
    X, y = classification
    model = lgb.LGBMClassifier(n_estimators=5, num_leaves=6, learning_rate=0.3, verbose=-1)
    model.fit(X, y)
    pf = ProximityForest.from_model(model, X, y, tile_size=64)  # 240 rows: edge tiles
    leaves = model.predict(X, pred_leaf=True)
    same = leaves[:, None, :] == leaves[None, :, :]
    kerf = (same / same.sum(axis=1)[:, None, :]).mean(axis=2)
    raw = model.predict(X, raw_score=True)  # the leaf values add up to it (checked above)
    values = outside_forest(model).leaf_values(leaves)
    np.testing.assert_allclose(values.reshape(N, 5, 3).sum(axis=1), raw, rtol=1e-6, atol=1e-9)
    w = np.abs(values).mean(axis=0)
    boosted = (same * (w / w.sum())).sum(axis=2)
    store = tmp_path / "model.zarr"
    for method, oracle in (("kerf", kerf), ("boosted", boosted)):
        np.testing.assert_allclose(pf.proximity(method).values, oracle, atol=1e-6)
        stored = pf.proximity(method, store=store)
        np.testing.assert_allclose(stored.values, oracle, atol=1e-6)
    np.testing.assert_allclose(pf.proximity("original", store=store).values, same.mean(axis=2),
                               atol=1e-6)  # fmt: skip
    ds = open_store(store)
    assert {"proximity_kerf", "proximity_boosted", "proximity"} <= set(ds.data_vars)
    grown = ProximityForest(n_estimators=4, random_state=0).fit(X, y)
    own = np.asarray(grown.leaves_)
    same = own[:, None, :] == own[None, :, :]
    kerf = (same / same.sum(axis=1)[:, None, :]).mean(axis=2)
    np.testing.assert_allclose(grown.proximity("kerf").values, kerf, atol=1e-6)
    with pytest.raises(ParameterError, match="grown by distforest"):
        grown.proximity("boosted")


# -- the command line and pipelines: --model FILE, model: ------------------------


@pytest.fixture(scope="module")
def model_files(tmp_path_factory, classification):
    """A training CSV, new rows, and the same kinds of model files a user saves."""
    import collections
    import pickle

    pd = pytest.importorskip("pandas")
    sio = pytest.importorskip("skops.io")
    lgb = pytest.importorskip("lightgbm")
    folder = tmp_path_factory.mktemp("models")
    X, y = classification
    names = [f"f{i}" for i in range(X.shape[1])]
    pd.DataFrame(X, columns=names).assign(label=y).to_csv(folder / "train.csv", index=False)
    Xn = _new_rows(30)
    Xn[2::4, 0] = np.nan
    pd.DataFrame(Xn, columns=names).to_csv(folder / "new.csv", index=False)
    rf = RandomForestClassifier(n_estimators=6, random_state=3).fit(X, y)
    sio.dump(rf, folder / "rf.skops")
    booster = lgb.LGBMClassifier(n_estimators=4, num_leaves=6, verbose=-1).fit(X, y).booster_
    booster.save_model(str(folder / "model.txt"))
    (folder / "rf.pkl").write_bytes(pickle.dumps(rf))
    sio.dump({"model": collections.Counter("abc")}, folder / "evil.skops")
    return folder, X, y, Xn, rf, booster


def _invoke(*args: object):
    from click.testing import CliRunner

    from distforest.cli.main import cli

    return CliRunner().invoke(cli, ["-q", *[str(a) for a in args]])


@pytest.mark.parametrize("bad", ["rf.pkl", "evil.skops"])
def test_commands_refuse_pickles_and_untrusted_skops_files(bad, model_files, tmp_path):
    folder = model_files[0]
    train, model = folder / "train.csv", folder / bad
    commands = {
        "proximity": ("proximity", train, "--target", "label", "--out", tmp_path / "p.zarr"),
        "outliers": ("outliers", train, "--target", "label", "--out", tmp_path / "o.csv"),
        "mds": ("mds", train, "--target", "label", "--out", tmp_path / "m.csv"),
        "impute": ("impute", train, "--target", "label", "--out", tmp_path / "i.csv"),
    }
    why = r"pickle or joblib.*runs code.*skops" if bad == "rf.pkl" else r"does not trust.*Counter"
    for name, args in commands.items():
        result = _invoke(*args, "--model", model)
        assert result.exit_code == 3, (name, result.output)
        assert re.search(why, result.output, flags=re.S), (name, result.output)
    result = _invoke("score", model, folder / "new.csv", "--training", train, "--target",
                     "label", "--out", tmp_path / "s.csv")  # fmt: skip
    assert result.exit_code == 3 and "skops" in result.output, result.output
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_commands_with_a_model_file_match_the_python_api(model_files, tmp_path):
    pd = pytest.importorskip("pandas")
    from distforest import ProximityForest, open_store
    from distforest.apps.outliers import outlier_scores

    folder, X, y, _, rf, booster = model_files
    train = folder / "train.csv"
    store = tmp_path / "kerf.zarr"
    result = _invoke("proximity", train, "--target", "label", "--model", folder / "model.txt",
                     "--method", "kerf", "--tile-size", "64", "--out", store)  # fmt: skip
    assert result.exit_code == 0, result.output
    leaves = booster.predict(X, pred_leaf=True)
    same = leaves[:, None, :] == leaves[None, :, :]
    kerf = (same / same.sum(axis=1)[:, None, :]).mean(axis=2)
    np.testing.assert_allclose(open_store(store)["proximity_kerf"].values, kerf, atol=1e-6)
    result = _invoke("outliers", train, "--target", "label", "--model", folder / "rf.skops",
                     "--out", tmp_path / "o.csv")  # fmt: skip
    assert result.exit_code == 0, result.output
    expected = outlier_scores(ProximityForest.from_model(rf, X, y))
    np.testing.assert_allclose(pd.read_csv(tmp_path / "o.csv")["outlier"], expected, rtol=1e-6)
    result = _invoke("mds", train, "--target", "label", "--model", folder / "model.txt",
                     "--out", tmp_path / "mds.csv")  # fmt: skip
    assert result.exit_code == 0, result.output
    got = pd.read_csv(tmp_path / "mds.csv")[["dim1", "dim2"]].to_numpy()
    expected = _classical_mds(same.mean(axis=2), 2)
    for axis in range(2):
        a, b = got[:, axis], expected[:, axis]
        np.testing.assert_allclose(a, np.sign(a @ b) * b, atol=1e-6 * np.abs(b).max())
    # impute: only the holes change, each the proximity-weighted mean of the column
    holes = pd.read_csv(train)
    holes.loc[::9, "f1"] = np.nan
    holes.to_csv(tmp_path / "holes.csv", index=False)
    result = _invoke("impute", tmp_path / "holes.csv", "--target", "label", "--model",
                     folder / "model.txt", "--out", tmp_path / "imputed.csv")  # fmt: skip
    assert result.exit_code == 0, result.output
    imputed = pd.read_csv(tmp_path / "imputed.csv")
    kept = holes.notna()
    pd.testing.assert_frame_equal(imputed[kept], holes[kept])
    Xh = holes.drop(columns="label").to_numpy()
    lh = booster.predict(Xh, pred_leaf=True)
    P = (lh[:, None, :] == lh[None, :, :]).mean(axis=2)
    rows, observed = np.flatnonzero(np.isnan(Xh[:, 1])), ~np.isnan(Xh[:, 1])
    W = P[np.ix_(rows, observed)]
    oracle = W @ Xh[observed, 1] / W.sum(axis=1)
    np.testing.assert_allclose(imputed["f1"].to_numpy()[rows], oracle, rtol=1e-5)


def test_proximity_with_a_model_file_on_a_folder_of_parts(model_files, tmp_path):
    """``proximity --model`` routes rows read by partitions (written into the job's store)
    as it routes the one file: the same leaves and matrix; run again, it is complete."""
    pd = pytest.importorskip("pandas")
    from distforest import open_store

    folder = model_files[0]
    train = pd.read_csv(folder / "train.csv")
    parts = tmp_path / "parts"
    parts.mkdir()
    for p, rows in enumerate(np.array_split(np.arange(len(train)), 3)):
        train.iloc[rows].to_parquet(parts / f"part-{p}.parquet", index=False)
    args = ("--target", "label", "--model", folder / "model.txt", "--method", "kerf",
            "--tile-size", "64")  # fmt: skip
    stores = {}
    for name, source in (("file", folder / "train.csv"), ("parts", parts)):
        stores[name] = tmp_path / f"{name}.zarr"
        result = _invoke("proximity", source, *args, "--out", stores[name])
        assert result.exit_code == 0, (name, result.output)
    assert (stores["parts"] / "input" / "X").is_dir()  # the rows the trees routed
    assert not (stores["file"] / "input").exists()
    got, expected = open_store(stores["parts"]), open_store(stores["file"])
    for name in ("proximity_kerf", "leaves"):
        np.testing.assert_array_equal(got[name].values, expected[name].values)
    again = _invoke("proximity", parts, *args, "--out", stores["parts"])
    assert again.exit_code == 0, again.output
    np.testing.assert_array_equal(open_store(stores["parts"])["proximity_kerf"].values,
                                  expected["proximity_kerf"].values)  # fmt: skip


def test_scoring_pipeline_with_a_model_file(model_files, tmp_path, monkeypatch):
    pd = pytest.importorskip("pandas")
    import shutil

    folder, X, y, Xn, _, booster = model_files
    for name in ("train.csv", "new.csv", "model.txt"):
        shutil.copy(folder / name, tmp_path / name)
    (tmp_path / "score.yaml").write_text(
        "model: {path: model.txt, training: train.csv, target: label}\n"
        "input: {path: new.csv}\n"
        "score: {out: scores.csv, method: original}\n"
        "impute: {out: imputed.csv, proximity: original}\n"
        "output: {dir: out}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # paths are read relative to the YAML file
    result = _invoke("run", tmp_path / "score.yaml")
    assert result.exit_code == 0, result.output
    scores = pd.read_csv(tmp_path / "out" / "scores.csv")
    probabilities = booster.predict(Xn)
    np.testing.assert_array_equal(scores["predicted"], probabilities.argmax(axis=1))
    train, new = booster.predict(X, pred_leaf=True), booster.predict(Xn, pred_leaf=True)
    cross = (new[:, None, :] == train[None, :, :]).mean(axis=2)
    votes = cross @ (y[:, None] == np.arange(3)[None, :])
    np.testing.assert_array_equal(scores["proximity_predicted"], votes.argmax(axis=1))
    imputed = pd.read_csv(tmp_path / "out" / "imputed.csv")
    rows, observed = np.flatnonzero(np.isnan(Xn[:, 0])), ~np.isnan(X[:, 0])
    W = cross[np.ix_(rows, observed)]
    np.testing.assert_allclose(imputed["f0"].to_numpy()[rows], W @ X[observed, 0] / W.sum(axis=1),
                               rtol=1e-5)  # fmt: skip
    again = _invoke("run", tmp_path / "score.yaml")  # the same model and rows: complete
    assert again.exit_code == 0 and "already complete" in again.output, again.output


@pytest.mark.parametrize("family", ["sklearn", "lightgbm", "xgboost"])
def test_from_model_task_is_the_models(family, classification) -> None:
    """The task comes from the model: a regressor of a few integer values stays a
    regression (its target read as floats, not sorted), a classifier gives classes."""
    from distforest import ProximityForest

    X, _ = classification
    X = np.nan_to_num(X)
    counts = (np.abs(X[:, 0]) * 2).astype(np.int64)  # a handful of integer values
    assert np.unique(counts).size < 20  # what task="auto" would take for classes
    labels = (X[:, 1] > 0).astype(np.int64)
    if family == "sklearn":
        regressor = RandomForestRegressor(n_estimators=3, random_state=0).fit(X, counts)
        classifier = RandomForestClassifier(n_estimators=3, random_state=0).fit(X, labels)
    elif family == "lightgbm":
        lgb = pytest.importorskip("lightgbm")
        regressor = lgb.LGBMRegressor(n_estimators=3, verbose=-1).fit(X, counts)
        classifier = lgb.LGBMClassifier(n_estimators=3, verbose=-1).fit(X, labels)
    else:
        xgb = pytest.importorskip("xgboost")
        regressor = xgb.XGBRegressor(n_estimators=3).fit(X, counts)
        classifier = xgb.XGBClassifier(n_estimators=3).fit(X, labels)
    reg = ProximityForest.from_model(regressor, X, counts)
    assert reg.task_ == "regression" and reg.classes_ == []
    np.testing.assert_array_equal(reg.y_, counts.astype(np.float64))
    assert reg.y_.dtype == np.float64
    clf = ProximityForest.from_model(classifier, X, labels)
    assert clf.task_ == "classification" and clf.classes_ == [0, 1]
    np.testing.assert_array_equal(clf.y_, labels)
