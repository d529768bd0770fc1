"""Persistence declared once: every persisted estimator saves and loads through one base.

- Round trips: a loaded estimator predicts and gives matrices equal to the saved one.
- Old stores still load: the on-disk layout (array names, dtypes, dims and
  attribute keys) is the golden one, written from main at f328777 before
  persistence was declared (``tests/golden/store_layouts.json``).
- ``ProximityForest.from_store`` warns and still works.
- One in-memory-or-store rule (``io.in_memory``) for every matrix.
"""

from __future__ import annotations

import json
from pathlib import Path

import dask
import dask.array
import numpy as np
import pytest
import zarr
from sklearn.datasets import load_iris

from distforest import (
    KNNClassifier,
    KNNRegressor,
    ProximityForest,
    SimilarityForestClassifier,
    XForest,
    execution,
)
from distforest.errors import ParameterError, StoreError
from distforest.forests.pairwise import pairwise
from distforest.forests.persistence import Persisted
from distforest.forests.smerf import SMERF
from distforest.io.in_memory import fits_in_memory, in_memory_cells
from distforest.io.matrices import load_matrix

GOLDEN = Path(__file__).with_name("golden") / "store_layouts.json"
X, Y = load_iris(return_X_y=True)
X, Y = X[::3], Y[::3]  # 50 rows
D = np.abs(X[:, None, 0] - X[None, :, 0]) + np.abs(X[:, None, 1] - X[None, :, 1])
S = np.exp(-D)


def layout(path: Path) -> dict:
    """Array names, dtypes, dims and attribute keys of a store, by path in the store."""
    out: dict = {}

    def walk(group: zarr.Group, prefix: str) -> None:
        entry: dict = {"attrs": sorted(group.attrs.keys())}
        for key in ("params", "input"):
            if isinstance(group.attrs.get(key), dict):
                entry[key] = sorted(group.attrs[key])
        out[prefix or "/"] = entry
        for name, a in sorted(group.arrays()):
            out[f"{prefix}/{name}"] = {
                "dtype": str(a.dtype),
                "ndim": a.ndim,
                "attrs": sorted(a.attrs.keys()),
                "dims": list(a.metadata.dimension_names or ()),
            }
        for name, sub in sorted(group.groups()):
            walk(sub, f"{prefix}/{name}")

    walk(zarr.open_group(str(path), mode="r"), "")
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Each persisted estimator fitted on 50 iris rows, saved, and loaded back."""
    tmp = tmp_path_factory.mktemp("persist")
    fitted = {
        "ProximityForest": ProximityForest(4, random_state=0),
        "SimilarityForestClassifier": SimilarityForestClassifier(n_estimators=3, random_state=0),
        "SimilarityForestClassifier_named": SimilarityForestClassifier(
            n_estimators=3, metric="cosine", random_state=0
        ),
        "XForest": XForest(3, random_state=0),
        "SMERF": SMERF(n_estimators=3, random_state=0),
        "KNNClassifier_mahalanobis": KNNClassifier(
            n_neighbors=3, normalize="range", metric="mahalanobis"
        ),
        "KNNRegressor_rfgap": KNNRegressor(
            n_neighbors=3, normalize="zscore", metric="rfgap", n_estimators=4, random_state=0
        ),
    }
    data = {
        "ProximityForest": (X, Y),
        "SimilarityForestClassifier": (S, Y),
        "SimilarityForestClassifier_named": (X, Y),
        "XForest": (X,),
        "SMERF": (X, D),
        "KNNClassifier_mahalanobis": (X, Y),
        "KNNRegressor_rfgap": (X, X[:, 0]),
    }
    out = {}
    with execution("synchronous"):
        for key, est in fitted.items():
            est.fit(*data[key])
            path = tmp / f"{key}.zarr"
            if isinstance(est, Persisted):
                est.save(path, complete=True)
            else:
                est.save(path)
            out[key] = (est, type(est).load(path), path)
    return out


def test_the_forests_share_one_implementation():
    for cls in (ProximityForest, SimilarityForestClassifier, XForest, SMERF):
        assert issubclass(cls, Persisted)
        assert "save" not in vars(cls) and "load" not in vars(cls), cls  # declared, not written
        assert cls._stored_arrays and cls._stored_fields


def test_store_layouts_are_unchanged(saved):
    """Stores written before persistence was declared load: same names, dtypes, dims, keys."""
    golden = json.loads(GOLDEN.read_text())
    assert set(golden) == set(saved)
    for key, (_, _, path) in saved.items():
        assert layout(path) == golden[key], key


def test_round_trips_predict_identically(saved):
    with execution("synchronous"):
        pf, back, _ = saved["ProximityForest"]
        np.testing.assert_array_equal(back.predict_proba(X), pf.predict_proba(X))
        np.testing.assert_array_equal(back.proximity("rfgap").values, pf.proximity("rfgap").values)
        np.testing.assert_array_equal(back.feature_importances_, pf.feature_importances_)
        assert back.get_params() == {**pf.get_params(), "random_state": pf.random_state_}

        sf, back, _ = saved["SimilarityForestClassifier"]
        np.testing.assert_array_equal(back.predict_proba(S[:7]), sf.predict_proba(S[:7]))
        np.testing.assert_array_equal(back.proximity("oob").values, sf.proximity("oob").values)
        sf, back, _ = saved["SimilarityForestClassifier_named"]
        np.testing.assert_array_equal(
            back.predict_proba(X[:7] + 0.1), sf.predict_proba(X[:7] + 0.1)
        )
        np.testing.assert_array_equal(back.pair_objects_, sf.pair_objects_)

        xf, back, _ = saved["XForest"]
        np.testing.assert_array_equal(back.similarity().values, xf.similarity().values)
        np.testing.assert_array_equal(back.cross_similarity(X[:5]), xf.cross_similarity(X[:5]))

        sm, back, _ = saved["SMERF"]
        Q = X[:6] + 0.05
        np.testing.assert_array_equal(
            back.predict_distance(Q).values, sm.predict_distance(Q).values
        )
        np.testing.assert_array_equal(back.oob_distance().values, sm.oob_distance().values)
        assert back.mean_distance_ == sm.mean_distance_

        for key in ("KNNClassifier_mahalanobis", "KNNRegressor_rfgap"):
            model, back, _ = saved[key]
            np.testing.assert_array_equal(back.predict(X[1::4]), model.predict(X[1::4]))


def test_stores_of_other_kinds_are_refused(saved):
    _, _, xforest_store = saved["XForest"]
    _, _, smerf_store = saved["SMERF"]
    with pytest.raises(StoreError, match=r"not a SMERF model \(method 'xforest'\)"):
        SMERF.load(xforest_store)
    with pytest.raises(StoreError, match="not a SimilarityForestClassifier model"):
        SimilarityForestClassifier.load(smerf_store)
    with pytest.raises(StoreError, match=r"not a ProximityForest model \(it holds no"):
        ProximityForest.load(xforest_store)
    _, _, knn_store = saved["KNNRegressor_rfgap"]
    with pytest.raises(StoreError, match="holds a KNNRegressor, not a KNNClassifier"):
        KNNClassifier.load(knn_store)


def test_a_store_without_a_required_attribute_is_refused(saved, tmp_path):
    import shutil

    _, _, path = saved["XForest"]
    copy = tmp_path / "copy.zarr"
    shutil.copytree(path, copy)
    group = zarr.open_group(str(copy), mode="r+")
    attrs = dict(group.attrs)
    del attrs["fit_id"]
    group.attrs.clear()
    group.attrs.update(attrs)
    with pytest.raises(StoreError, match="no attribute 'fit_id'"):
        XForest.load(copy)


def test_from_store_warns_and_still_loads(saved):
    pf, _, path = saved["ProximityForest"]
    with pytest.warns(DeprecationWarning, match=r"ProximityForest\.load"):
        back = ProximityForest.from_store(path)
    np.testing.assert_array_equal(back.leaves_, pf.leaves_)
    assert back.fit_id_ == pf.fit_id_


def test_unfinished_smerf_store_needs_require_complete_false(tmp_path):
    with execution("synchronous"):
        model = SMERF(n_estimators=3, random_state=0).fit(X, D)
    model.save(tmp_path / "m.zarr", complete=False)
    with pytest.raises(StoreError):
        SMERF.load(tmp_path / "m.zarr")
    assert SMERF.load(tmp_path / "m.zarr", require_complete=False).fit_id_ == model.fit_id_


# -- one in-memory-or-store rule ------------------------------------------------------


def test_one_limit_decides_in_memory_everywhere(saved):
    pf, _, _ = saved["ProximityForest"]
    xf, _, _ = saved["XForest"]
    sf, _, _ = saved["SimilarityForestClassifier"]
    sm, _, _ = saved["SMERF"]
    n = 50
    assert in_memory_cells() == 100_000_000 and in_memory_cells(7) == 49
    assert fits_in_memory(n, n) and not fits_in_memory(n, n, max_in_memory=n - 1)
    calls = {
        "pairwise": lambda: pairwise(X, client="synchronous"),
        "ProximityForest": lambda: pf.proximity(),
        "ProximityForest X=": lambda: pf.proximity("rfgap", X=X),
        "XForest": lambda: xf.similarity(),
        "SimForest": lambda: sf.proximity(),
        "SMERF": lambda: sm.oob_distance(),
    }
    with execution("synchronous"):
        for what, call in calls.items():
            assert call().shape == (n, n), what
        with dask.config.set({"distforest.in-memory-cells": n * n - 1}):
            for what, call in calls.items():
                with pytest.raises(ParameterError, match="in-memory limit of 2,499 cells"):
                    call()
                    pytest.fail(what)
            dask_matrix = dask.array.from_array(D, chunks=10)
            with pytest.raises(Exception, match="in-memory limit"):
                load_matrix(dask_matrix, "D")
        with dask.config.set({"distforest.in-memory-cells": n * n}):
            assert load_matrix(dask.array.from_array(D, chunks=10), "D").shape == (n, n)
