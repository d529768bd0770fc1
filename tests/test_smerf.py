"""The SMERF estimator: fit on any D input, tiled prediction, out-of-bag, save/load, bad input.

scikit-learn's ``check_estimator`` cannot apply: it calls ``fit(X, y)`` with a
1-D target, and SMERF's second argument is an n x n matrix (every check that
fits would fail on the shape, by design).  The parts of the contract that do
apply are tested here: plain parameters (``clone``, ``get_params``,
``set_params``), no execution among them, pickling, validation in ``fit``,
``NotFittedError`` before ``fit``.
"""

from __future__ import annotations

import pickle

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from sklearn.base import clone
from smerf_oracle import oracle_leaf_mean

from distforest import execution
from distforest.errors import InputError, NotFittedError, ParameterError, StoreError
from distforest.forests.pairwise import pairwise
from distforest.forests.smerf import SMERF
from distforest.kernels import smerf as K


def _data(n=60, d=5, seed=0, missing=0.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    g = X[:, 0] ** 2 + X[:, 1]
    D = (g[:, None] - g[None, :]) ** 2 / 2
    if missing:
        hole = np.triu(rng.random((n, n)) < missing, 1)
        D[hole | hole.T] = np.nan
    return X, D


def _brute(model: SMERF, la: np.ndarray, lb: np.ndarray, oob_rows=None) -> np.ndarray:
    """Per cell and tree, the leaf-pair mean of D from the members; average over trees."""
    f = model.forest_
    start = f.leaf_start
    out = np.empty((len(la), len(lb)))
    for i in range(len(la)):
        for j in range(len(lb)):
            vals = []
            for t in range(la.shape[1]):
                if oob_rows is not None:
                    a, b = oob_rows[0][i], oob_rows[1][j]
                    if model.inbag_[a, t] or model.inbag_[b, t]:
                        continue
                ga, gb = f.node_offset[t] + la[i, t], f.node_offset[t] + lb[j, t]
                v = oracle_leaf_mean(
                    model.distances_,
                    f.leaf_members[start[ga] : start[ga + 1]],
                    f.leaf_members[start[gb] : start[gb + 1]],
                )
                if not np.isnan(v):
                    vals.append(v)
            out[i, j] = np.mean(vals) if vals else model.mean_distance_
    return out


@pytest.fixture(scope="module")
def fitted():
    X, D = _data(missing=0.2)
    with execution("synchronous"):
        model = SMERF(n_estimators=12, min_samples_leaf=2, random_state=4).fit(X, D)
    return X, D, model


def test_predictions_are_the_leaf_pair_means(fitted):
    X, _, model = fitted
    Q = np.random.default_rng(9).uniform(-1, 1, size=(9, 5))
    got = model.predict_distance(Q).values
    assert got.shape == (9, 60) and got.dtype == np.float32
    want = _brute(model, model.apply(Q), model.leaves_)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)
    got_ab = model.predict_distance(Q, X[:7]).values
    np.testing.assert_allclose(got_ab, want[:, :7].astype(np.float32), rtol=1e-6)


def test_out_of_bag_distance(fitted):
    X, D, model = fitted
    oob = model.oob_distance(tile_size=16).values
    assert oob.shape == (60, 60)
    np.testing.assert_array_equal(oob, oob.T)
    rows = np.arange(0, 60, 7)
    want = _brute(model, model.leaves_[rows], model.leaves_, oob_rows=(rows, np.arange(60)))
    np.testing.assert_allclose(oob[rows], want.astype(np.float32), rtol=1e-6)
    # out of bag is honest: in-bag predictions of the training pairs look better
    seen = ~np.isnan(D)
    inbag = model.predict_distance(X).values
    err_in = np.abs(inbag - D)[seen].mean()
    err_oob = np.abs(oob - D)[seen].mean()
    assert err_in < err_oob
    with pytest.raises(ParameterError, match="bootstrap=True"):
        with execution("synchronous"):
            SMERF(n_estimators=2, bootstrap=False).fit(X, D).oob_distance()


def test_store_matrix_is_tiled_lazy_and_equal(fitted, tmp_path):
    _, _, model = fitted
    Q = np.random.default_rng(1).uniform(-1, 1, size=(40, 5))
    memory = model.predict_distance(Q, tile_size=16).values
    with execution("synchronous"):
        lazy = model.predict_distance(Q, store=tmp_path / "p.zarr", tile_size=16)
    assert lazy.name == "distance" and lazy.dims == ("sample_i", "sample_j")
    assert lazy.chunks is not None  # dask-backed, not loaded
    opened = xr.open_zarr(tmp_path / "p.zarr")["distance"]
    assert opened.encoding["chunks"] == (16, 16)
    np.testing.assert_array_equal(opened.values, memory)
    # the tile size does not change a value
    np.testing.assert_array_equal(model.predict_distance(Q, tile_size=1024).values, memory)
    with pytest.raises(StoreError, match="already exists"):
        model.predict_distance(Q, store=tmp_path / "p.zarr")


def test_same_forest_in_process_and_on_a_cluster(client):
    X, D = _data(n=50, missing=0.3)
    with execution("synchronous"):
        here = SMERF(n_estimators=9, max_features=2, random_state=5).fit(X, D)
    there = SMERF(n_estimators=9, max_features=2, random_state=5).set_execution(client)
    there.fit(X, D)
    np.testing.assert_array_equal(here.leaves_, there.leaves_)
    np.testing.assert_array_equal(here.forest_.leaf_members, there.forest_.leaf_members)
    np.testing.assert_array_equal(
        here.predict_distance(X[:5]).values, there.predict_distance(X[:5]).values
    )


def test_save_and_load_predict_without_the_original_d(fitted, tmp_path):
    X, D, model = fitted
    path = tmp_path / "D.npy"
    np.save(path, D)
    rs = model.save(tmp_path / "model.zarr", tile_size=16)
    path.unlink()
    assert rs.read("feature_importances").shape == (5,)
    back = SMERF.load(tmp_path / "model.zarr")
    assert back.get_params() == {**model.get_params(), "random_state": model.random_state_}
    Q = np.random.default_rng(2).uniform(-1, 1, size=(6, 5))
    np.testing.assert_array_equal(back.predict_distance(Q).values, model.predict_distance(Q).values)
    np.testing.assert_array_equal(back.oob_distance().values, model.oob_distance().values)
    np.testing.assert_array_equal(back.feature_importances_, model.feature_importances_)
    stored = zarr.open_group(str(tmp_path / "model.zarr"), mode="r")
    assert stored["train_distance"].chunks == (16, 16)
    assert not any(p.suffix == ".pkl" for p in (tmp_path / "model.zarr").rglob("*"))
    pairwise(X, store=tmp_path / "other.zarr", client="synchronous")
    with pytest.raises(StoreError, match="not a SMERF model"):
        SMERF.load(tmp_path / "other.zarr")


def test_every_d_input_gives_the_same_forest(tmp_path):
    X, D = _data(n=40, missing=0.1)
    np.save(tmp_path / "D.npy", D)
    zarr.save_array(str(tmp_path / "Da.zarr"), D)
    group = zarr.open_group(str(tmp_path / "Dg.zarr"), mode="w")
    group.create_array("distance", data=D)
    inputs = [
        D,
        da.from_array(D, chunks=16),
        xr.DataArray(D),
        zarr.open_array(str(tmp_path / "Da.zarr"), mode="r"),
        str(tmp_path / "D.npy"),
        tmp_path / "Da.zarr",
        str(tmp_path / "Dg.zarr"),
    ]
    ref = None
    with execution("synchronous"):
        for source in inputs:
            leaves = SMERF(n_estimators=3, random_state=1).fit(X, source).leaves_
            if ref is None:
                ref = leaves
            np.testing.assert_array_equal(leaves, ref)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda D: D[:, :-1], "square"),
        (lambda D: D[:-1, :-1], "X has 40 rows"),
        (lambda D: np.full_like(D, np.nan), "no observed entry"),
        (lambda D: np.where(np.eye(len(D)) > 0, np.inf, D), "finite"),
        (lambda D: D + np.triu(np.ones_like(D), 1), "not symmetric"),
        (lambda D: np.where(np.triu(np.ones_like(D), 1) > 0, np.nan, D), "not symmetric"),
    ],
    ids=["not-square", "length", "all-nan", "inf", "asymmetric", "half-missing"],
)
def test_bad_d_is_refused(change, match):
    X, D = _data(n=40)
    with pytest.raises(InputError, match=match):
        SMERF(n_estimators=2).fit(X, change(D))


def test_bad_x_and_parameters():
    X, D = _data(n=40)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(InputError, match="missing"):
        SMERF().fit(Xn, D)
    with pytest.raises(ParameterError, match="max_features"):
        SMERF(max_features="cube").fit(X, D)
    with pytest.raises(ParameterError, match="n_estimators"):
        SMERF(n_estimators=0).fit(X, D)
    with pytest.raises(NotFittedError):
        SMERF().predict_distance(X)


def test_estimator_contract_parts_that_apply(client):
    est = SMERF(n_estimators=7, oblique=True, max_depth=4)
    assert set(est.get_params()) == {
        "n_estimators", "max_features", "oblique", "max_depth", "min_samples_leaf",
        "bootstrap", "random_state",
    }  # fmt: skip
    copy = clone(est.set_execution(client))
    assert copy.get_params() == est.get_params() and "_execution" not in vars(copy)
    back = pickle.loads(pickle.dumps(est))
    assert back.get_params() == est.get_params()
    assert clone(est).set_params(n_estimators=3).n_estimators == 3


def test_importances_pick_the_relevant_features():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(120, 8))
    r = np.sqrt(X[:, 0] ** 2 + X[:, 1] ** 2)
    D = (r[:, None] - r[None, :]) ** 2
    with execution("synchronous"):
        model = SMERF(n_estimators=20, random_state=0).fit(X, D)
    imp = model.feature_importances_
    assert imp.sum() == pytest.approx(1.0)
    assert set(np.argsort(imp)[-2:]) == {0, 1}
    np.testing.assert_allclose(
        imp, model.tree_importances_.mean(0) / model.tree_importances_.mean(0).sum()
    )
    assert model.apply(X).shape == (120, 20)
    assert (K.apply(model.forest_, X) == model.leaves_).all()
