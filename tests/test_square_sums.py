"""Within-class sums of squared proximities: the tree-pair kernel, both methods, both paths."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from distforest import ProximityForest, execution
from distforest.apps.outliers import outlier_scores
from distforest.forests import square_sums as ss
from distforest.kernels.pairsums import pair_square_sums
from distforest.store.inputs import ingest
from distforest.store.run_store import RunStore


def dense_square_sums(leaves: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Oracle: the co-leaf counts c_ij from the (n, T) leaves, sum of c_ij^2 within a class."""
    counts = sum(
        (leaves[:, t, None] == leaves[None, :, t]).astype(np.int64) for t in range(leaves.shape[1])
    )
    return ((counts**2) * (codes[:, None] == codes[None, :])).sum(axis=1)


def blocked(leaves_t: np.ndarray, codes: np.ndarray, size: int) -> np.ndarray:
    edges = [*range(0, leaves_t.shape[0], size), leaves_t.shape[0]]
    blocks = [slice(a, b) for a, b in itertools.pairwise(edges)]
    total = np.zeros(codes.size, dtype=np.int64)
    for k, a in enumerate(blocks):
        for b in blocks[k:]:
            total += pair_square_sums(leaves_t[a], leaves_t[b], codes, a == b)
    return total


@pytest.mark.parametrize("classes", [1, 3])
@pytest.mark.parametrize("max_samples", [None, 0.1])  # 0.1: trees on a sample, large leaves
def test_pair_kernel_equals_dense_oracle(classes: int, max_samples: float | None) -> None:
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=400, n_features=5, n_informative=3, n_classes=3,
                               random_state=2)  # fmt: skip
    with execution(client="synchronous"):
        forest = ProximityForest(n_estimators=9, max_samples=max_samples, random_state=4)
        forest.fit_leaves(X, y)
    leaves = np.asarray(forest.leaves_)
    codes = y if classes > 1 else np.zeros_like(y)
    expected = dense_square_sums(leaves, codes)
    assert expected.min() >= leaves.shape[1] ** 2  # every row shares all its trees with itself
    for size in (1, 2, 4, 9):  # the split into blocks changes nothing (integers)
        np.testing.assert_array_equal(blocked(leaves.T.copy(), codes, size), expected)


def test_pair_kernel_random_leaves_and_unsorted_codes() -> None:
    rng = np.random.default_rng(0)
    leaves = rng.integers(0, 12, size=(150, 5)).astype(np.int32)
    codes = rng.integers(0, 4, 150)
    expected = dense_square_sums(leaves, codes)
    np.testing.assert_array_equal(blocked(leaves.T.copy(), codes, 2), expected)


@pytest.fixture(scope="module")
def sampled_forest() -> tuple[ProximityForest, np.ndarray]:
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=500, n_features=6, n_informative=4, n_classes=3,
                               random_state=0)  # fmt: skip
    with execution(client="synchronous"):
        forest = ProximityForest(n_estimators=10, max_samples=0.2, random_state=1).fit(X, y)
    return forest, y


def test_both_methods_give_the_same_floats(sampled_forest) -> None:
    forest, y = sampled_forest
    leaves = np.asarray(forest.leaves_)
    expected = dense_square_sums(leaves, y) * (1.0 / leaves.shape[1] ** 2)
    with execution(client="synchronous"):
        walk = ss.square_sums(forest, y, method="leaf-mates")
        pairs = [ss.square_sums(forest, y, method="tree-pairs", block=b) for b in (1, 3, 10)]
        one = ss.square_sums(forest, np.zeros_like(y), method="tree-pairs")
        one_walk = ss.square_sums(forest, np.zeros_like(y), method="leaf-mates")
    np.testing.assert_array_equal(walk, expected)
    for p in pairs:
        np.testing.assert_array_equal(p, walk)
    np.testing.assert_array_equal(one, one_walk)
    assert (one > walk).any()  # one class: the other classes' rows count too


def test_choose_method_follows_leaf_crowding() -> None:
    trees = 100
    small_leaves = np.full(trees, 2 * 5_000 - 1)  # 5,000 leaves a tree
    assert ss.choose_method(10_000, small_leaves) == "leaf-mates"  # 2 rows a leaf
    assert ss.choose_method(10_000_000, small_leaves) == "tree-pairs"  # 2,000 rows a leaf
    assert ss.coleaf_events(100, np.array([199, 99])) == pytest.approx(ss.COLEAF_SKEW * (100 + 200))


def test_store_path_and_cluster_give_the_memory_results(
    client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=600, n_features=5, n_informative=3, n_classes=3,
                               random_state=7)  # fmt: skip
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(5)])
    df["cls"] = np.array(["a", "b", "c"])[y]
    folder = tmp_path / "parts"
    folder.mkdir()
    for k in range(3):
        df.iloc[k * 200 : (k + 1) * 200].to_parquet(folder / f"p{k}.parquet", index=False)
    params = {"n_estimators": 9, "max_samples": 0.2, "random_state": 3}
    with execution(client="synchronous"):
        mem = ProximityForest(**params).fit(df.drop(columns="cls"), df["cls"])
        expected = ss.square_sums(mem, mem.y_, method="leaf-mates")
    with execution(client=client):
        stored = ingest(folder, tmp_path / "run.zarr", target="cls", rows=128)
        sto = ProximityForest(**params).fit(stored)
        on_store = ss.square_sums(sto, sto.y_, method="tree-pairs", block=2)
        on_cluster = ss.square_sums(mem, mem.y_, method="tree-pairs", block=4)
        scores = outlier_scores(sto)

        def read_only(*args: object) -> None:
            raise PermissionError("read-only store")

        monkeypatch.setattr(ss, "_copy_by_tree", read_only)  # no copy: columns of the leaves
        uncopied = ss.square_sums(sto, sto.y_, method="tree-pairs", block=4)
    np.testing.assert_array_equal(on_store, expected)
    np.testing.assert_array_equal(on_cluster, expected)
    np.testing.assert_array_equal(uncopied, expected)
    with execution(client="synchronous"):
        np.testing.assert_array_equal(scores, outlier_scores(mem))
    rs = RunStore.open(stored.path)
    assert "scratch" not in rs.group  # the copy by trees is gone


def test_plan_before_the_fit() -> None:
    big = ss.plan(10_000_000, 100, 200_000)  # the default forest on 10,000,000 rows
    assert big["method"] == "tree-pairs"
    assert big["worker_bytes"] < 2e9  # two blocks of trees, not all leaves and their index
    assert big["cpu_seconds"] == pytest.approx(ss.SECONDS_PER_PAIR_ROW * 1e7 * 5050)
    many_trees = ss.plan(10_000, 500, 10_000)  # small leaves, many trees
    assert many_trees["method"] == "leaf-mates"
    assert many_trees["worker_bytes"] >= 13 * 10_000 * 500


@pytest.mark.parametrize("labels", [
    np.array([0, 2, 1, 1, 0, 2]),  # already codes: used as they are
    np.array([0, 2, 2, 0]),  # a gap: coded as np.unique does
    np.array([3, 5, 3, 9]),
    np.array([-1, 4, -1, 0]),
    np.array([0.5, 2.0, 0.5]),
    np.array(["b", "a", "c", "a"]),
    np.array([7, 7, 7], dtype=np.uint8),
])  # fmt: skip
def test_class_codes_are_numpy_unique_inverse(labels):
    from distforest.apps.outliers import _labels_or_one_class

    codes = _labels_or_one_class(labels, labels.size)
    expected = np.unique(labels, return_inverse=True)[1]
    np.testing.assert_array_equal(codes, expected)
    assert codes.dtype == np.int64


def test_codes_of_a_forest_target_are_not_copied():
    from distforest.apps.outliers import _labels_or_one_class

    y = np.array([0, 1, 2, 1, 0], dtype=np.int64)
    assert _labels_or_one_class(y, y.size) is y


@pytest.mark.parametrize("chunk", [None, 7])
def test_scores_from_square_sums_equal_numpy_medians(monkeypatch, chunk):
    """The chunked scores of sums held in memory (one chunk, or many) leave the input alone
    and equal, bit for bit, ``(raw - np.median) / (1.4826 * np.median |raw - median|)``
    computed class by class."""
    from distforest.apps.outliers import MAD_SCALE, scores_from_square_sums
    from distforest.store import scratch

    if chunk:
        monkeypatch.setattr(scratch, "ROWS_PER_CHUNK", chunk)
    rng = np.random.default_rng(3)
    sums = rng.random(50) * 4
    sums[[3, 17]] = 0.0
    labels = rng.integers(0, 3, 50)
    got = scores_from_square_sums(sums, labels)
    assert sums[3] == 0.0  # the input left alone
    raw = 50 / np.where(sums == 0, 1.0, sums)  # the formula
    expected = np.empty(50)
    for level in range(3):
        values = raw[labels == level]
        median = np.median(values)
        mad = MAD_SCALE * np.median(np.abs(values - median))
        expected[labels == level] = (values - median) / (mad if mad > 0 else 1.0)
    assert np.array_equal(got.view(np.uint64), expected.view(np.uint64))
