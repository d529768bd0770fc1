"""Kernels against their slow numpy oracles."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from oracles import dense_original_proximity, dense_weighted_matches

from distforest.kernels.proximity import leaf_match_sum, original_proximity_tile
from distforest.kernels.trees import (
    TreeParams,
    bootstrap_counts,
    fit_tree_batch,
    make_tree,
    tree_input,
)


def _leaves(draw, rows: int, trees: int, n_leaves: int) -> np.ndarray:
    return draw(hnp.arrays(np.int32, (rows, trees), elements=st.integers(0, max(0, n_leaves - 1))))


@st.composite
def leaf_blocks(draw):
    trees = draw(st.integers(1, 12))
    n_leaves = draw(st.integers(1, 6))
    ni = draw(st.integers(1, 25))
    nj = draw(st.integers(1, 25))
    return _leaves(draw, ni, trees, n_leaves), _leaves(draw, nj, trees, n_leaves)


@settings(max_examples=150, deadline=None)
@given(leaf_blocks())
def test_original_tile_matches_oracle(blocks):
    li, lj = blocks
    got = original_proximity_tile(li, lj)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, dense_original_proximity(li, lj).astype(np.float32))


@settings(max_examples=100, deadline=None)
@given(leaf_blocks(), st.integers(0, 2**32 - 1))
def test_weighted_kernel_matches_oracle(blocks, seed):
    li, lj = (np.ascontiguousarray(b.T) for b in blocks)
    rng = np.random.default_rng(seed)
    wi = rng.integers(0, 4, li.shape).astype(float)
    wj = rng.random(lj.shape)
    np.testing.assert_allclose(
        leaf_match_sum(li, lj, wi, wj), dense_weighted_matches(li, lj, wi, wj), rtol=1e-12
    )


def test_tile_is_symmetric_with_unit_diagonal_for_one_block():
    rng = np.random.default_rng(0)
    leaves = rng.integers(0, 30, size=(200, 40)).astype(np.int32)
    p = original_proximity_tile(leaves, leaves)
    np.testing.assert_array_equal(p, p.T)
    np.testing.assert_array_equal(np.diag(p), 1.0)
    assert p.min() >= 0.0 and p.max() <= 1.0


def test_large_leaf_ids_and_unsorted_input():
    rng = np.random.default_rng(1)
    li = rng.choice([5, 2**30, 7, 123456789], size=(50, 9)).astype(np.int32)
    lj = rng.choice([2**30, 7, 99], size=(31, 9)).astype(np.int32)
    np.testing.assert_array_equal(
        original_proximity_tile(li, lj), dense_original_proximity(li, lj).astype(np.float32)
    )


PARAMS = TreeParams(
    task="classification",
    kind="random-forest",
    max_features="sqrt",
    min_samples_leaf=1,
    max_depth=None,
    bootstrap=True,
    max_samples=None,
    n_classes=3,
)


def test_bootstrap_counts_sum_to_n_and_depend_only_on_seed():
    a = bootstrap_counts(np.random.default_rng(7), 1000, PARAMS)
    b = bootstrap_counts(np.random.default_rng(7), 1000, PARAMS)
    assert a.dtype == np.uint8 and a.sum() == 1000
    np.testing.assert_array_equal(a, b)
    # about 1/e of the rows are out of bag
    assert 0.32 < np.mean(a == 0) < 0.42


def test_tree_batches_do_not_depend_on_batching(small_classification):
    X, y = small_classification
    seeds = np.arange(6, dtype=np.uint64) * 1000 + 3
    whole = fit_tree_batch(X, y, seeds, PARAMS)
    first, second = fit_tree_batch(X, y, seeds[:2], PARAMS), fit_tree_batch(X, y, seeds[2:], PARAMS)
    np.testing.assert_array_equal(whole.leaves, np.hstack([first.leaves, second.leaves]))
    np.testing.assert_array_equal(whole.inbag, np.hstack([first.inbag, second.inbag]))
    for field, values in whole.nodes.items():
        np.testing.assert_array_equal(
            values, np.concatenate([first.nodes[field], second.nodes[field]])
        )


def test_leaves_are_leaves_and_inbag_rows_were_used(small_classification):
    X, y = small_classification
    batch = fit_tree_batch(X, y, np.array([11], dtype=np.uint64), PARAMS)
    left = batch.nodes["children_left"]
    assert np.all(left[batch.leaves[:, 0]] == -1)
    # weighted sample count of the root equals the bootstrap size
    assert batch.nodes["weighted_n_node_samples"][0] == batch.inbag[:, 0].sum()


def test_float32_input_gives_the_trees_sklearn_grows_on_float64(small_classification):
    # oracle: the tree scikit-learn fits on the float64 bootstrap rows, as before
    # the driver converted X to float32 once
    X, y = small_classification
    X = X * 1e3 + 1e-7  # values that float32 rounds
    seeds = np.array([5, 77, 901], dtype=np.uint64)
    X32 = tree_input(X)
    assert X32.dtype == np.float32 and X32.flags.c_contiguous
    batch = fit_tree_batch(X32, y, seeds, PARAMS)
    start = 0
    for k, seed in enumerate(seeds):
        rng = np.random.default_rng(int(seed))
        inbag = bootstrap_counts(rng, X.shape[0], PARAMS)
        used = np.flatnonzero(inbag)
        tree = make_tree(PARAMS, int(rng.integers(0, 2**31 - 1)))
        tree.fit(X[used], y[used], sample_weight=inbag[used].astype(float))
        np.testing.assert_array_equal(batch.inbag[:, k], inbag)
        np.testing.assert_array_equal(batch.leaves[:, k], tree.apply(X))
        stop = start + tree.tree_.node_count
        np.testing.assert_array_equal(batch.nodes["threshold"][start:stop], tree.tree_.threshold)
        np.testing.assert_array_equal(batch.nodes["feature"][start:stop], tree.tree_.feature)
        start = stop
    assert start == len(batch.nodes["feature"])
    # float64 input is converted in the task: the same batch
    again = fit_tree_batch(X, y, seeds, PARAMS)
    np.testing.assert_array_equal(again.leaves, batch.leaves)
    for field, values in batch.nodes.items():
        np.testing.assert_array_equal(again.nodes[field], values)
