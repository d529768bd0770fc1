"""SimilarityForestClassifier: the estimator on the spine (the kernels have their own tests).

Oracles: the kernel's own trees grown in process from the same seeds, the
dense proximity computed from ``leaves_`` in numpy, and the same forest fed
the same similarities through every input path (numpy, .npy, Zarr array,
Zarr group, xarray, dask, a named measure, a function).
"""

from __future__ import annotations

import math

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.preprocessing import StandardScaler

from distforest import SimilarityForestClassifier, execution
from distforest.apps.mds import mds
from distforest.apps.outliers import outlier_scores, scores_from_square_sums
from distforest.errors import InputError, NotFittedError, ParameterError
from distforest.io.matrices import layout_advice, load_matrix, open_matrix
from distforest.kernels.simfetch import fetch_columns, fetch_rows
from distforest.kernels.simtrees import SimTreeParams, grow_tree, predict_forest
from distforest.parallel.tasks import plan_seeds

GAMMA = 0.02


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))[:300]
    tr, te = idx[:200], idx[200:]
    labels = np.where(y == 1, "benign", "malignant")
    S = rbf_kernel(X[tr], gamma=GAMMA)
    Q = rbf_kernel(X[te], X[tr], gamma=GAMMA)
    return {"X": X[tr], "Xt": X[te], "y": labels[tr], "yt": labels[te], "S": S, "Q": Q}


@pytest.fixture(scope="module")
def fitted(data):
    with execution("synchronous"):
        return SimilarityForestClassifier(n_estimators=12, random_state=3).fit(data["S"], data["y"])


def test_forest_is_the_kernels_trees_from_the_planned_seeds(data, fitted):
    _, seeds = plan_seeds(3, 12)
    codes = np.unique(data["y"], return_inverse=True)[1]
    trees = [grow_tree(fetch_rows(data["S"]), codes, int(s), SimTreeParams(), 2) for s in seeds]
    expected = predict_forest(trees, fetch_columns(data["Q"]), data["Q"].shape[0])
    np.testing.assert_array_equal(fitted.predict_proba(data["Q"]), expected)
    np.testing.assert_array_equal(fitted.leaves_, np.stack([t.leaves for t in trees], axis=1))
    assert fitted.n_similarity_evaluations_ == sum(t.n_evaluations for t in trees)
    assert set(fitted.predict(data["Q"])) <= {"benign", "malignant"}
    assert (fitted.predict(data["Q"]) == data["yt"]).mean() > 0.85


def test_same_trees_in_process_and_on_a_cluster(client, data, fitted):
    there = SimilarityForestClassifier(n_estimators=12, random_state=3, batch_size=5)
    there.set_execution(client).fit(data["S"], data["y"])
    np.testing.assert_array_equal(there.leaves_, fitted.leaves_)
    np.testing.assert_array_equal(there.inbag_, fitted.inbag_)
    np.testing.assert_array_equal(there.predict_proba(data["Q"]), fitted.predict_proba(data["Q"]))


def test_every_input_path_gives_the_same_forest(tmp_path, data, fitted):
    np.save(tmp_path / "S.npy", data["S"])
    np.save(tmp_path / "Q.npy", data["Q"])
    zarr.create_array(str(tmp_path / "S.zarr"), data=data["S"], chunks=(32, 32))
    group = zarr.open_group(str(tmp_path / "G.zarr"), mode="w")
    group.create_array("similarity", data=data["S"], chunks=(50, 200))
    group.create_array("labels_unused", data=np.arange(3))
    sources = [
        tmp_path / "S.npy",
        str(tmp_path / "S.zarr"),
        zarr.open_array(str(tmp_path / "S.zarr")),
        tmp_path / "G.zarr",
        str(tmp_path / "G.zarr" / "similarity"),
        xr.DataArray(data["S"], dims=("i", "j")),
        da.from_array(data["S"], chunks=64),
        data["S"].astype(np.float32).astype(np.float64),
    ]
    expected = fitted.predict_proba(data["Q"])
    with execution("synchronous"):
        for source in sources:
            forest = clone(fitted).fit(source, data["y"])
            np.testing.assert_array_equal(forest.leaves_, fitted.leaves_, err_msg=str(source))
            got = forest.predict_proba(tmp_path / "Q.npy")
            np.testing.assert_array_equal(got, expected, err_msg=str(source))


@pytest.mark.parametrize("cache_bytes", [None, 1])
def test_a_row_chunked_matrix_is_read_by_whole_rows_about_twice_per_split(
    tmp_path, data, cache_bytes
):
    """Same tree as in memory; each node that draws a pair reads at most its two rows.

    Without the row cache (``cache_bytes=1`` keeps one row) the draw of
    ``S(O_i, O_j)`` and the level's request read ``O_i``'s row twice.
    """
    S = data["S"].astype(np.float32)
    S[3, 7] = S[7, 3] = np.nan
    n = S.shape[0]
    zarr.create_array(str(tmp_path / "S.zarr"), data=S, chunks=(1, n))
    codes = np.unique(data["y"], return_inverse=True)[1]
    expected = grow_tree(fetch_rows(S.astype(np.float64)), codes, 5, SimTreeParams(), 2)
    reader = open_matrix(load_matrix(tmp_path / "S.zarr"))
    if cache_bytes is not None:
        reader = type(reader)(reader.array, cache_bytes=cache_bytes)
    tree = grow_tree(fetch_rows(reader), codes, 5, SimTreeParams(), 2)
    for field in ("left", "pair_i", "pair_j", "threshold", "value", "leaves"):
        np.testing.assert_array_equal(getattr(tree, field), getattr(expected, field))
    drawn = int(((tree.value > 0).sum(axis=1) >= 2).sum())  # nodes that drew a pair
    pairs = np.unique(np.concatenate([tree.pair_i, tree.pair_j]))
    assert reader.rows_read >= pairs[pairs >= 0].shape[0]  # every pair row, once at least
    if cache_bytes is None:
        assert reader.rows_read <= 2 * drawn
    else:
        assert reader.rows_read > 2 * drawn
    rows, cols = np.array([4, 9, 4, 150]), np.array([8, 1, 8, 3])
    np.testing.assert_array_equal(reader[rows, cols], S[rows, cols])
    np.testing.assert_array_equal(reader[100:][rows[:3], cols[:3]], S[rows[:3] + 100, cols[:3]])


def test_a_matrix_chunked_across_its_rows_gets_advice_that_works(tmp_path, data, caplog):
    zarr.create_array(str(tmp_path / "T.zarr"), data=data["S"], chunks=(32, 32))
    tiles = load_matrix(tmp_path / "T.zarr")
    advice = layout_advice(tiles, "S")
    assert advice is not None and "(32, 32)" in advice and "(1, 200)" in advice
    recipe = advice[advice.index("dask.array.") :].replace("S_rows.zarr", str(tmp_path / "R.zarr"))
    eval(recipe, {"dask": __import__("dask.array")})  # the advice, run as given
    rows = zarr.open_array(str(tmp_path / "R.zarr"), mode="r")
    assert tuple(rows.chunks) == (1, 200)
    np.testing.assert_array_equal(rows[...], data["S"])
    assert layout_advice(load_matrix(tmp_path / "R.zarr"), "S") is None
    assert layout_advice(data["S"], "S") is None
    with execution("synchronous"), caplog.at_level("WARNING", logger="distforest"):
        SimilarityForestClassifier(n_estimators=1).fit(tmp_path / "T.zarr", data["y"])
    assert "cut its rows" in caplog.text


def test_named_measure_and_function_match_the_precomputed_matrix(data, fitted):
    expected = fitted.predict_proba(data["Q"])
    with execution("synchronous"):
        named = SimilarityForestClassifier(
            n_estimators=12, random_state=3, metric="rbf", metric_params={"gamma": GAMMA}
        ).fit(data["X"], data["y"])
        np.testing.assert_allclose(named.predict_proba(data["Xt"]), expected, atol=1e-12)

        def rbf(a, b):
            return rbf_kernel(a, b, gamma=GAMMA)

        func = SimilarityForestClassifier(n_estimators=12, random_state=3)
        func.fit(data["X"], data["y"], similarity=rbf)
        np.testing.assert_allclose(func.predict_proba(data["Xt"], similarity=rbf), expected,
                                   atol=1e-12)  # fmt: skip
    assert named.kind_ == "similarity"
    euclid = SimilarityForestClassifier(n_estimators=3, metric="euclidean")
    with execution("synchronous"):
        assert euclid.fit(data["X"], data["y"]).kind_ == "distance"


def test_function_is_asked_only_for_what_the_trees_need(data):
    """Per tree at most c n log2 n evaluations, and the count is the function's own."""
    asked = []

    def rbf(a, b):
        asked.append(len(a) * len(b))
        return rbf_kernel(a, b, gamma=GAMMA)

    n = data["X"].shape[0]
    with execution("synchronous"):
        forest = SimilarityForestClassifier(n_estimators=5, random_state=0)
        forest.fit(data["X"], data["y"], similarity=rbf)
    assert sum(asked) == forest.n_similarity_evaluations_
    assert forest.n_similarity_evaluations_ / 5 <= 4 * n * math.log2(n)
    asked.clear()
    n_test = data["Xt"].shape[0]
    with execution("synchronous"):
        forest.predict_proba(data["Xt"], similarity=rbf)
    depth = max(int(t.depth.max()) for t in forest.trees_)
    assert sum(asked) <= 5 * 2 * n_test * depth  # two per level per tree


def test_stored_q_is_read_only_in_the_pair_objects_columns(tmp_path, data, fitted):
    """NaN outside the pair objects' columns changes nothing: those columns are never read."""
    Q = data["Q"].copy()
    unused = np.setdiff1d(np.arange(Q.shape[1]), fitted.pair_ids_)
    assert unused.size > 0
    Q[:, unused] = np.nan
    Q[:, fitted.pair_ids_[:1]] = data["Q"][:, fitted.pair_ids_[:1]]
    np.testing.assert_array_equal(fitted.predict_proba(Q), fitted.predict_proba(data["Q"]))


def test_save_and_load_predict_identically_without_pickle(tmp_path, data, fitted):
    fitted.save(tmp_path / "model.zarr")
    assert not list(tmp_path.rglob("*.pkl"))
    back = SimilarityForestClassifier.load(tmp_path / "model.zarr")
    assert back.get_params() == fitted.get_params()
    np.testing.assert_array_equal(back.predict_proba(data["Q"]), fitted.predict_proba(data["Q"]))
    np.testing.assert_array_equal(back.predict(data["Q"]), fitted.predict(data["Q"]))
    with execution("synchronous"):
        named = SimilarityForestClassifier(n_estimators=6, metric="cosine").fit(
            data["X"], data["y"]
        )
    named.save(tmp_path / "named.zarr")
    back = SimilarityForestClassifier.load(tmp_path / "named.zarr")
    assert back.pair_objects_.shape == (len(named.pair_ids_), data["X"].shape[1])
    np.testing.assert_array_equal(back.predict_proba(data["Xt"]), named.predict_proba(data["Xt"]))


def _dense_proximity(leaves, inbag, method):
    same = leaves[:, None, :] == leaves[None, :, :]
    if method == "original":
        return same.mean(axis=2)
    oob = inbag == 0
    both = oob[:, None, :] & oob[None, :, :]
    return (same & both).sum(axis=2) / np.maximum(both.sum(axis=2), 1)


@pytest.mark.parametrize("method", ["original", "oob"])
def test_proximity_equals_a_dense_oracle_from_the_leaves(tmp_path, data, fitted, method):
    expected = _dense_proximity(fitted.leaves_, fitted.inbag_, method)
    in_memory = fitted.proximity(method).values
    np.testing.assert_allclose(in_memory, expected, atol=1e-6)
    with execution("synchronous"):
        other_tiles = clone(fitted).set_params(tile_size=48).fit(data["S"], data["y"])
        stored = other_tiles.proximity(method, store=tmp_path / "prox.zarr").values
    np.testing.assert_array_equal(stored, in_memory)


def test_outliers_and_mds_from_a_simforest(fitted):
    P = _dense_proximity(fitted.leaves_, fitted.inbag_, "original")
    with execution("synchronous"):
        scores = outlier_scores(fitted)
        coords, eig = mds(fitted, 2)
    same_class = fitted.y_[:, None] == fitted.y_[None, :]
    sums = (P**2 * same_class).sum(axis=1)  # the matrix-free path must give the dense sums
    np.testing.assert_allclose(scores, scores_from_square_sums(sums, fitted.y_), rtol=1e-9)
    D = np.sqrt(np.clip(1 - P, 0, None))
    J = np.eye(len(P)) - 1.0 / len(P)
    B = -0.5 * J @ (D**2) @ J
    top = np.sort(np.linalg.eigvalsh(B))[::-1][:2]
    np.testing.assert_allclose(eig, top, rtol=1e-6)
    assert coords.shape == (len(P), 2)


def test_bad_inputs_are_refused_with_the_reason(data):
    S, y = data["S"], data["y"]
    forest = SimilarityForestClassifier(n_estimators=2)
    with execution("synchronous"):
        with pytest.raises(InputError, match="square"):
            forest.fit(S[:, :50], y)
        with pytest.raises(InputError, match="labels but there are"):
            forest.fit(S, y[:-1])
        bad = S.copy()
        bad[7] = np.nan
        with pytest.raises(InputError, match="row 7 has no observed entry"):
            forest.fit(bad, y)
        bad = S.copy()
        bad[3, 4] = np.inf
        with pytest.raises(ValueError, match="inf"):
            forest.fit(bad, y)
        with pytest.raises(InputError, match="one class"):
            forest.fit(S, np.full(len(y), "a"))
        with pytest.raises(NotFittedError):
            forest.predict(data["Q"])
        forest.fit(S, y)
        with pytest.raises(InputError, match="one column per training object"):
            forest.predict(data["Q"][:, :-1])
        with pytest.raises(ParameterError, match="missing"):
            SimilarityForestClassifier(missing="ignore").fit(S, y)
        with pytest.raises(ParameterError, match="metric"):
            SimilarityForestClassifier(metric="manhattan").fit(data["X"], y)


def test_nan_entries_are_not_observed_and_every_rule_predicts(data):
    rng = np.random.default_rng(1)
    S = data["S"].copy()
    mask = np.triu(rng.random(S.shape) < 0.15, 1)
    S[mask | mask.T] = np.nan
    Q = data["Q"].copy()
    Q[rng.random(Q.shape) < 0.15] = np.nan
    with execution("synchronous"):
        for missing in ("stay", "both", "larger"):
            forest = SimilarityForestClassifier(n_estimators=10, missing=missing).fit(S, data["y"])
            proba = forest.predict_proba(Q)
            np.testing.assert_allclose(proba.sum(axis=1), 1.0)
            assert (forest.predict(Q) == data["yt"]).mean() > 0.8, missing
