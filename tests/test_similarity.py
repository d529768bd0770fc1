"""Similarity and distance measures, tiled matrices in Zarr, top-k neighbours.

Oracles: scipy.spatial.distance, scikit-learn's pairwise functions and
NearestNeighbors, and plain numpy for the running top-k merge.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy.spatial.distance import cdist
from sklearn.metrics.pairwise import cosine_similarity, rbf_kernel
from sklearn.neighbors import NearestNeighbors

from distforest.errors import InputError, ParameterError, StoreError
from distforest.forests.measures import parse_metric
from distforest.forests.neighbors import top_k_neighbors
from distforest.forests.pairwise import pairwise
from distforest.kernels.metrics import (
    binary_similarity,
    empty_top_k,
    finish_top_k,
    merge_top_k,
)

# Five binary features of a query customer and two others (typed in for this test):
# q and d1 share two 1s and one 0; q and d2 share one 1 and three 0s.
Q_BIN = np.array([[1, 0, 1, 0, 0]])
D_BIN = np.array([[1, 0, 1, 1, 1], [1, 0, 0, 0, 0]])


@pytest.mark.parametrize(
    ("name", "expected"),
    [("russell-rao", [0.4, 0.2]), ("sokal-michener", [0.6, 0.8]), ("jaccard", [0.5, 0.5])],
)
def test_binary_similarities_of_the_textbook(name, expected):
    S = pairwise(Q_BIN, D_BIN, metric=name)
    assert S.name == "similarity"
    np.testing.assert_allclose(S.values[0], expected)


def test_cosine_similarity_of_the_textbook():
    S = pairwise(
        np.array([[97.0, 21.0]]), np.array([[181.0, 184.0], [194.0, 42.0]]), metric="cosine"
    ).values[0]
    assert S[0] == pytest.approx(0.8362, abs=1e-4)
    assert S[1] == pytest.approx(1.0, abs=1e-12)


def test_binary_kernels_against_scipy():
    rng = np.random.default_rng(0)
    A = rng.integers(0, 2, size=(40, 13)).astype(bool)
    B = rng.integers(0, 2, size=(30, 13)).astype(bool)
    np.testing.assert_allclose(
        binary_similarity("russell-rao", A, B), 1 - cdist(A, B, "russellrao")
    )
    np.testing.assert_allclose(binary_similarity("jaccard", A, B), 1 - cdist(A, B, "jaccard"))
    # Sokal-Michener as the textbook defines it is the simple matching coefficient
    np.testing.assert_allclose(
        binary_similarity("sokal-michener", A, B), 1 - cdist(A, B, "hamming")
    )
    zeros = np.zeros((1, 13))
    assert binary_similarity("jaccard", zeros, zeros)[0, 0] == 1.0


def _oracle(metric: str, A: np.ndarray, B: np.ndarray, ref: np.ndarray) -> np.ndarray:
    if metric == "minkowski:3":
        return cdist(A, B, "minkowski", p=3)
    if metric == "mahalanobis":
        return cdist(A, B, "mahalanobis", VI=np.linalg.inv(np.cov(ref.T)))
    if metric == "cosine":
        return cosine_similarity(A, B)
    if metric == "rbf":
        return rbf_kernel(A, B)  # gamma = 1 / n_features, as ours
    return cdist(A, B, {"manhattan": "cityblock"}.get(metric, metric))


@pytest.mark.parametrize(
    "metric",
    ["euclidean", "manhattan", "chebyshev", "minkowski:3", "mahalanobis", "cosine", "rbf"],
)
def test_measures_against_oracles(metric):
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(37, 5)), rng.normal(size=(23, 5))
    got = pairwise(A, B, metric=metric, tile_size=16).values
    np.testing.assert_allclose(got, _oracle(metric, A, B, B), rtol=1e-10, atol=1e-12)
    sym = pairwise(A, metric=metric, tile_size=16).values
    np.testing.assert_allclose(sym, _oracle(metric, A, A, A), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(sym, sym.T)


def test_metric_names_and_kinds():
    assert parse_metric("minkowski:3").p == 3.0
    assert parse_metric("rbf:0.5").gamma == 0.5
    assert parse_metric("cityblock").name == "manhattan"
    assert parse_metric("euclidean").kind == "distance"
    assert parse_metric("jaccard").kind == "similarity"
    with pytest.raises(ParameterError, match="unknown metric 'eucliden'"):
        parse_metric("eucliden")
    with pytest.raises(ParameterError, match="p >= 1"):
        parse_metric("minkowski:0.5")
    with pytest.raises(ParameterError, match="not a number"):
        parse_metric("minkowski:x")


def test_bad_inputs_are_reported():
    with pytest.raises(InputError, match="binary 0/1"):
        pairwise(np.array([[0.0, 2.0]]), np.array([[1.0, 0.0]]), metric="jaccard")
    with pytest.raises(InputError, match="missing or infinite"):
        pairwise(np.array([[np.nan, 2.0], [1.0, 1.0]]), metric="euclidean")
    with pytest.raises(ParameterError, match="features"):
        pairwise(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ParameterError, match="store="):
        pairwise(np.ones((200, 2)), max_in_memory=100)


def test_running_merge_equals_sorting_everything():
    rng = np.random.default_rng(2)
    D = rng.integers(0, 20, size=(50, 300)).astype(float)  # many ties
    D[3, 7] = np.nan
    k = 9
    for tile in (1, 7, 64, 300):
        best_d, best_i = empty_top_k(50, k)
        for start in range(0, 300, tile):
            merge_top_k(D[:, start : start + tile], start, 1000, False, best_d, best_i)
        best_d, best_i = finish_top_k(best_d, best_i)
        filled = np.where(np.isnan(D), np.inf, D)
        order = np.lexsort((np.broadcast_to(np.arange(300), D.shape), filled), axis=1)[:, :k]
        np.testing.assert_array_equal(best_i, order)
        np.testing.assert_array_equal(best_d, np.take_along_axis(filled, order, 1))
    best_d, best_i = finish_top_k(*empty_top_k(1, 3))
    assert list(best_i[0]) == [-1, -1, -1]


def test_pairwise_store_is_tiled_mirrored_and_independent_of_tiles(tmp_path, client):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(150, 4))
    stored = {}
    for tile in (32, 64):
        path = tmp_path / f"m{tile}.zarr"
        S = pairwise(X, metric="cosine", store=path, tile_size=tile, client=client)
        assert S.dims == ("sample_i", "sample_j") and S.name == "similarity"
        ds = xr.open_zarr(path)
        assert ds.attrs["status"] == "complete"
        assert ds["similarity"].encoding["chunks"] == (tile, tile)
        stored[tile] = S.values
    np.testing.assert_array_equal(stored[32], stored[64])
    np.testing.assert_allclose(stored[32], cosine_similarity(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(stored[32], stored[32].T)
    rect = pairwise(
        X[:50], X, metric="euclidean", store=tmp_path / "r.zarr", tile_size=32, client="synchronous"
    )
    np.testing.assert_allclose(rect.values, cdist(X[:50], X), rtol=1e-6)
    with pytest.raises(StoreError, match="already exists"):
        pairwise(X, store=tmp_path / "r.zarr", client="synchronous")


def test_normalisation_is_fitted_on_the_reference_rows():
    X = np.array([[0.0, 10.0], [10.0, 20.0], [5.0, 15.0]])
    D = pairwise(X, metric="manhattan", normalize="range").values
    assert D[0, 1] == pytest.approx(2.0)
    Z = pairwise(X[:1], X, metric="euclidean", normalize="zscore").values
    scaled = (X - X.mean(axis=0)) / X.std(axis=0)
    np.testing.assert_allclose(Z, cdist(scaled[:1], scaled))


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "minkowski:3", "chebyshev"])
def test_top_k_matches_nearest_neighbors(metric):
    rng = np.random.default_rng(4)
    X, Y = rng.normal(size=(300, 3)), rng.normal(size=(120, 3))
    name, _, p = metric.partition(":")
    nn = NearestNeighbors(n_neighbors=6, metric=name, **({"p": float(p)} if p else {})).fit(X)
    d_ref, i_ref = nn.kneighbors(Y)
    d_self, i_self = nn.kneighbors()  # each row's own pair left out
    for algorithm in ("kd_tree", "ball_tree", "brute"):
        got = top_k_neighbors(
            Y, X, k=6, metric=metric, algorithm=algorithm, tile_size=50, client="synchronous"
        )
        np.testing.assert_array_equal(got.indices, i_ref)
        np.testing.assert_allclose(got.distances, d_ref, rtol=1e-12)
        own = top_k_neighbors(
            X,
            k=6,
            metric=metric,
            algorithm=algorithm,
            tile_size=64,
            batch_size=70,
            client="synchronous",
        )
        np.testing.assert_array_equal(own.indices, i_self)
        np.testing.assert_allclose(own.distances, d_self, rtol=1e-12)


def test_top_k_with_similarity_and_ties_is_deterministic(client, tmp_path):
    rng = np.random.default_rng(5)
    X = rng.integers(0, 2, size=(400, 12))  # binary: many exactly tied similarities
    runs = [
        top_k_neighbors(X, k=7, metric="jaccard", tile_size=t, batch_size=b, client=c)
        for t, b, c in ((400, 400, "synchronous"), (33, 50, client), (128, 17, client))
    ]
    for other in runs[1:]:
        np.testing.assert_array_equal(other.indices, runs[0].indices)
        np.testing.assert_array_equal(other.distances, runs[0].distances)
    D = 1 - (1 - cdist(X, X, "jaccard"))
    np.fill_diagonal(D, np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(400), D.shape), D), axis=1)[:, :7]
    np.testing.assert_array_equal(runs[0].indices, order)
    ds = top_k_neighbors(X, k=7, metric="jaccard", store=tmp_path / "knn.zarr", client=client)
    assert ds["neighbor_index"].dims == ("sample", "neighbor")
    np.testing.assert_array_equal(ds["neighbor_index"].values, order)
    assert ds.attrs["params"]["distance"] == "1 - similarity"


def test_kd_tree_on_the_cluster_matches_in_process(client):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(5000, 3))
    a = top_k_neighbors(X, k=10, client=client, batch_size=700)
    b = top_k_neighbors(X, k=10, client="synchronous", batch_size=5000)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)
    with pytest.raises(ParameterError, match="only 4999 candidate rows"):
        top_k_neighbors(X, k=5000, client="synchronous")


def test_command_line_end_to_end(tmp_path, client):
    from click.testing import CliRunner

    from distforest.cli.main import cli

    def invoke(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    rng = np.random.default_rng(7)
    X = rng.normal(size=(60, 3))
    frame = {"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "label": np.where(X[:, 0] > 0, "p", "n")}
    data = tmp_path / "data.csv"
    pd.DataFrame(frame).to_csv(data, index=False)
    where = ("--scheduler", client.scheduler.address)
    invoke(
        "-q",
        "similarity",
        data,
        "--drop",
        "label",
        "--metric",
        "minkowski:3",
        "--normalize",
        "range",
        "--tile-size",
        "32",
        "--out",
        tmp_path / "S.zarr",
        *where,
    )
    S = xr.open_zarr(tmp_path / "S.zarr")["distance"].values
    lo, hi = X.min(axis=0), X.max(axis=0)
    scaled = (X - lo) / (hi - lo)
    np.testing.assert_allclose(S, cdist(scaled, scaled, "minkowski", p=3), rtol=1e-6)
    invoke(
        "-q",
        "neighbors",
        data,
        "--drop",
        "label",
        "--k",
        "4",
        "--out",
        tmp_path / "knn.zarr",
        *where,
    )
    _, idx = NearestNeighbors(n_neighbors=4).fit(X).kneighbors()
    np.testing.assert_array_equal(xr.open_zarr(tmp_path / "knn.zarr")["neighbor_index"], idx)
    invoke(
        "-q",
        "knn",
        "fit",
        data,
        "--target",
        "label",
        "--k",
        "3",
        "--weights",
        "distance",
        "--normalize",
        "zscore",
        "--out",
        tmp_path / "model.zarr",
    )
    query = tmp_path / "query.csv"
    pd.DataFrame({"c": [0.0], "a": [2.0], "b": [0.0]}).to_csv(query, index=False)
    invoke("-q", "knn", "predict", tmp_path / "model.zarr", query, "--out", tmp_path / "p.csv")
    assert pd.read_csv(tmp_path / "p.csv")["label"].tolist() == ["p"]
    bad = CliRunner().invoke(
        cli,
        [
            "knn",
            "fit",
            str(data),
            "--target",
            "label",
            "--metric",
            "cosin",
            "--out",
            str(tmp_path / "m2.zarr"),
        ],
    )
    assert bad.exit_code == 2 and "unknown metric 'cosin'" in bad.output
    assert not (tmp_path / "m2.zarr").exists()


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, np.inf])
def test_fused_minkowski_kernel_equals_distance_tile_then_merge(p):
    from distforest.kernels.metrics import minkowski_finish, minkowski_top_k

    rng = np.random.default_rng(8)
    Q, R = rng.normal(size=(40, 4)), rng.normal(size=(90, 4))
    R[5] = R[6]  # a tie
    a_d, a_i = empty_top_k(40, 6)
    b_d, b_i = empty_top_k(40, 6)
    for start in range(0, 90, 25):
        minkowski_top_k(Q, R[start : start + 25], p, start, 0, False, a_d, a_i)
        metric = "chebyshev" if np.isinf(p) else "minkowski"
        D = cdist(Q, R[start : start + 25], metric, **({} if np.isinf(p) else {"p": p}))
        merge_top_k(D, start, 0, False, b_d, b_i)
    np.testing.assert_array_equal(a_i, b_i)
    np.testing.assert_allclose(minkowski_finish(a_d, p), b_d, rtol=1e-12)


def _exact_top_k(D: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Oracle: the k smallest of each row by (distance, index); NaN last."""
    index = np.broadcast_to(np.arange(D.shape[1]), D.shape)
    order = np.lexsort((index, np.where(np.isnan(D), np.inf, D)), axis=1)[:, :k]
    return np.take_along_axis(D, order, 1), order


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_matrix_product_path_equals_exact_oracle_with_ties(metric):
    from distforest.forests.neighbors import GRAM_MIN_FEATURES, uses_gram

    rng = np.random.default_rng(9)
    d = GRAM_MIN_FEATURES + 3
    # small integers: many exactly tied Euclidean distances; duplicated rows tie in both
    X = rng.integers(-2, 3, size=(260, d)).astype(float)
    X[200:230] = X[:30]
    X[250] = 0.0  # cosine: an all-zero row is nobody's neighbour
    if metric == "cosine":
        X[:200] += rng.normal(scale=0.1, size=(200, d))
        X[200:230] = X[:30]
    Y = np.vstack([X[:40], rng.normal(size=(20, d))])
    assert uses_gram(parse_metric(metric), d)
    assert not uses_gram(parse_metric("euclidean"), GRAM_MIN_FEATURES - 1)
    name = {"cosine": "cosine"}.get(metric, "euclidean")
    D = cdist(Y, X, name)
    d_ref, i_ref = _exact_top_k(D, 9)
    runs = [
        top_k_neighbors(Y, X, k=9, metric=metric, algorithm="brute", tile_size=t,
                        batch_size=b, client="synchronous")
        for t, b in ((16, 7), (100, 60), (8192, 1024))
    ]  # fmt: skip
    for got in runs:
        np.testing.assert_array_equal(got.indices, runs[0].indices)
        np.testing.assert_array_equal(got.distances, runs[0].distances)
    np.testing.assert_array_equal(runs[0].indices, i_ref)
    np.testing.assert_allclose(runs[0].distances, d_ref, rtol=1e-12, atol=1e-15)
    # every row among the others: the row itself excluded, its duplicate kept
    own = top_k_neighbors(X, k=5, metric=metric, algorithm="brute", tile_size=50,
                          batch_size=33, client="synchronous")  # fmt: skip
    D = cdist(X, X, name)
    np.fill_diagonal(D, np.nan)
    d_own, i_own = _exact_top_k(D, 5)
    if metric == "cosine":  # the zero row has no neighbours at all
        assert (own.indices[250] == -1).all() and np.isinf(own.distances[250]).all()
        keep = np.arange(len(X)) != 250
        own_i, i_own, own_d, d_own = (
            own.indices[keep],
            i_own[keep],
            own.distances[keep],
            d_own[keep],
        )
    else:
        own_i, own_d = own.indices, own.distances
    np.testing.assert_array_equal(own_i, i_own)
    np.testing.assert_allclose(own_d, d_own, rtol=1e-12, atol=1e-15)
    assert own.indices[0, 0] == 200 and own.indices[200, 0] == 0  # a duplicate: distance 0


def test_morton_order_against_bit_interleaving_oracle():
    from distforest.kernels.metrics import morton_order

    rng = np.random.default_rng(10)
    X = rng.normal(size=(500, 3))
    X[7] = X[3]  # equal codes keep the input order
    order = morton_order(X)
    bits = int(np.ceil(np.log2(500) / 3)) + 2
    lo, hi = X.min(axis=0), X.max(axis=0)
    cells = np.minimum(((X - lo) / (hi - lo) * 2**bits).astype(int), 2**bits - 1)

    def code(row):
        text = "".join(format(int(c), f"0{bits}b") for c in row)  # per feature, high bit first
        return int("".join(text[f * bits + b] for b in range(bits) for f in range(3)), 2)

    expected = sorted(range(500), key=lambda i: (code(cells[i]), i))
    np.testing.assert_array_equal(order, expected)
    assert list(order).index(3) < list(order).index(7)
    np.testing.assert_array_equal(morton_order(X[:1]), [0])
