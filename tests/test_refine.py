"""The refined forest: crowded leaves split further, bounded leaves, exact neighbours."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression

import distforest
from distforest.errors import ParameterError
from distforest.forests.proximity_forest import ProximityForest
from distforest.kernels.refine import poisson_counts

N_EXACT = 6_000


def largest_leaf(leaves: np.ndarray) -> int:
    return max(int(np.bincount(leaves[:, t]).max()) for t in range(leaves.shape[1]))


def top_k_of_dense(P: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: each dense row sorted by (-value, column), self left out, first k."""
    n = P.shape[0]
    found = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, 1024):
        block = np.array(P[start : start + 1024], dtype=np.float64)
        rows = np.arange(start, start + block.shape[0])
        block[rows - start, rows] = -np.inf  # self last
        found[rows] = np.argsort(-block, axis=1, kind="stable")[:, :k]  # ties: smaller column
    return found, np.take_along_axis(P, found, axis=1).astype(np.float32)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return make_classification(N_EXACT, 10, n_informative=6, n_classes=3, random_state=4)


@pytest.fixture(scope="module")
def refined(data) -> ProximityForest:
    X, y = data
    with distforest.execution(client="synchronous"):
        return ProximityForest(12, max_samples=0.05, leaf_bound=6, random_state=2).fit(X, y)


@pytest.mark.parametrize("method", ["original", "oob", "rfgap"])
def test_top_k_is_the_dense_matrix_of_the_refined_forest(refined, method) -> None:
    """6,000 rows, trees on 300 rows each, leaves refined to 6 rows: the neighbours are
    the top k of the dense tiles computed from the same refined leaves, bit for bit."""
    assert refined.leaf_bound_ == 6 and largest_leaf(refined.leaves_) <= 6
    with distforest.execution(client="synchronous"):
        ds = refined.proximity_neighbors(15, method)
        P = refined.proximity(method, max_in_memory=N_EXACT).values
    found, values = top_k_of_dense(P, 15)
    del P
    np.testing.assert_array_equal(ds["index"].values, found)
    np.testing.assert_array_equal(ds["proximity"].values.view(np.uint32), values.view(np.uint32))


def test_refined_tree_routes_new_rows_to_the_refined_leaves(refined, data) -> None:
    """The refinements are grafted into the trees: apply() gives the training leaves."""
    X, y = data
    np.testing.assert_array_equal(refined.apply(X[:3000]), refined.leaves_[:3000])
    # predictions come from refined leaves that hold in-bag rows
    assert refined.score(X[:3000], y[:3000]) > 0.9


def test_refinement_changes_only_crowded_leaves(data) -> None:
    """Rows in leaves at or under the bound keep leaf and in-bag count; the others move
    into new leaves (ids past the grown tree's nodes) and gain a Poisson(1) count."""
    X, y = data
    with distforest.execution(client="synchronous"):
        grown = ProximityForest(4, max_samples=0.05, leaf_bound=None, random_state=2).fit(X, y)
        refined = ProximityForest(4, max_samples=0.05, leaf_bound=6, random_state=2).fit(X, y)
    assert largest_leaf(grown.leaves_) > 6
    for t in range(4):
        pop = np.bincount(grown.leaves_[:, t])
        crowded = pop[grown.leaves_[:, t]] > 6
        kept = ~crowded
        np.testing.assert_array_equal(refined.leaves_[kept, t], grown.leaves_[kept, t])
        np.testing.assert_array_equal(refined.inbag_[kept, t], grown.inbag_[kept, t])
        moved = refined.leaves_[crowded, t]
        # (a crowded leaf the splits cannot divide, rows of equal features, keeps its id)
        assert (moved >= grown.node_counts_[t]).mean() > 0.99
        rows = np.flatnonzero(crowded)
        added = poisson_counts(np.uint64(refined.seeds_[t]), rows.astype(np.int64))
        expected = np.minimum(grown.inbag_[rows, t].astype(int) + added, 255)
        np.testing.assert_array_equal(refined.inbag_[rows, t], expected)


def test_poisson_counts_are_keyed_by_row_not_by_chunk() -> None:
    rows = np.arange(200_000, dtype=np.int64)
    whole = poisson_counts(np.uint64(7), rows)
    parts = np.concatenate([poisson_counts(np.uint64(7), rows[s : s + 999])
                            for s in range(0, rows.size, 999)])  # fmt: skip
    np.testing.assert_array_equal(whole, parts)
    # Poisson(1): mean 1, P(0) = e^-1
    assert abs(whole.mean() - 1) < 0.01 and abs((whole == 0).mean() - np.exp(-1)) < 0.005
    assert not np.array_equal(whole, poisson_counts(np.uint64(8), rows))


def test_same_forest_whatever_the_batches_and_workers(data, client) -> None:
    X, y = data
    X, y = X[:4000], y[:4000]
    with distforest.execution(client="synchronous"):
        one = ProximityForest(6, max_samples=0.1, leaf_bound=5, random_state=9,
                              batch_size=6).fit(X, y)  # fmt: skip
    with distforest.execution(client=client):
        two = ProximityForest(6, max_samples=0.1, leaf_bound=5, random_state=9,
                              batch_size=1).fit(X, y)  # fmt: skip
    np.testing.assert_array_equal(one.leaves_, two.leaves_)
    np.testing.assert_array_equal(one.inbag_, two.inbag_)
    for name in one.nodes_:
        np.testing.assert_array_equal(one.nodes_[name], two.nodes_[name])


def test_memory_bound_makes_smaller_batches_of_the_same_trees(refined, data, caplog) -> None:
    """``distforest.fit-task-bytes`` caps the trees a fit task grows (by the rows and the
    refined forest's bytes a row and tree): more tasks, the same forest bit for bit."""
    import dask.config

    from distforest.forests.refine import refine_rule
    from distforest.parallel.tasks import most_trees_a_task

    X, y = data
    rule, _ = refine_rule(6, ProximityForest._tree_params(
        refined._validated(), "classification", [0, 1, 2], len(X)), len(X), X.shape[1])  # fmt: skip
    assert rule is not None
    per_tree = len(X) * rule.row_tree_bytes()
    budget = 1.5 * per_tree  # room for one tree a task (the default plan: 3 a task)
    with dask.config.set({"distforest.fit-task-bytes": int(budget)}):
        assert most_trees_a_task(len(X), rule.row_tree_bytes()) == 1
        with distforest.execution(client="synchronous"), caplog.at_level("INFO", "distforest"):
            small = ProximityForest(12, max_samples=0.05, leaf_bound=6, random_state=2).fit(X, y)
    planned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fitting")]
    assert planned and planned[-1].endswith("in 12 tasks"), planned  # one tree a task
    np.testing.assert_array_equal(small.leaves_, refined.leaves_)
    np.testing.assert_array_equal(small.inbag_, refined.inbag_)
    for name in refined.nodes_:
        np.testing.assert_array_equal(small.nodes_[name], refined.nodes_[name])


@pytest.mark.parametrize("kind", ["random-forest", "extra-trees"])
def test_regression_and_extra_trees_are_refined(kind) -> None:
    X, y = make_regression(3000, 6, noise=1.0, random_state=0)
    with distforest.execution(client="synchronous"):
        f = ProximityForest(5, kind=kind, max_samples=0.1, leaf_bound=4, random_state=0).fit(X, y)
    assert largest_leaf(f.leaves_) <= 4
    np.testing.assert_array_equal(f.apply(X), f.leaves_)
    assert f.score(X, y) > 0.8


def test_auto_refines_only_forests_grown_on_a_sample(data) -> None:
    X, y = data
    with distforest.execution(client="synchronous"):
        whole = ProximityForest(3, random_state=0, leaf_bound="auto").fit(X[:2000], y[:2000])
        plain = ProximityForest(3, random_state=0).fit(X[:2000], y[:2000])
        sampled = ProximityForest(3, max_samples=0.05, random_state=0, leaf_bound="auto")
        sampled.fit(X, y)
        default = ProximityForest(3, max_samples=0.05, random_state=0).fit(X, y)
    assert default.leaf_bound_ is None  # the default (None) never refines
    assert largest_leaf(default.leaves_) > 8
    assert whole.leaf_bound_ is None  # all rows drawn: the forest of before, bit for bit
    np.testing.assert_array_equal(whole.leaves_, plain.leaves_)
    np.testing.assert_array_equal(whole.inbag_, plain.inbag_)
    from distforest.forests.refine import AUTO_LEAF_BOUND

    assert sampled.leaf_bound_ == AUTO_LEAF_BOUND
    assert largest_leaf(sampled.leaves_) <= AUTO_LEAF_BOUND


def test_bad_leaf_bound_and_unsupported_forests(data) -> None:
    X, y = data
    with pytest.raises(ParameterError, match="leaf_bound must be None"):
        ProximityForest(2, leaf_bound=0).fit(X[:100], y[:100])
    with distforest.execution(client="synchronous"):
        with pytest.raises(ParameterError, match="cannot refine an unsupervised forest"):
            ProximityForest(2, leaf_bound=4).fit(X[:100])
        with pytest.raises(ParameterError, match="max_depth"):
            ProximityForest(2, leaf_bound=4, max_depth=3).fit(X[:100], y[:100])
        auto = ProximityForest(2, max_samples=0.2, max_depth=3, random_state=0)
        auto.fit(X[:500], y[:500])
    assert auto.leaf_bound_ is None  # auto leaves a forest it cannot refine as grown


def cli(*args: object):
    from click.testing import CliRunner

    from distforest.cli.main import cli as main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_leaf_bound_and_the_dry_run_line(breast_cancer_csv, tmp_path) -> None:
    """--leaf-bound reaches the forest; the dry run says which forest it grows and why."""
    common = ("proximity", breast_cancer_csv, "--target", "Class", "--drop", "Id", "--trees", 5,
              "--top-k", 5, "--out", tmp_path / "p.zarr")  # fmt: skip
    dry = cli(*common, "--dry-run")  # top-k: 'auto' unless given
    assert dry.exit_code == 0, dry.output
    assert "leaves as grown: the trees are grown on all the rows (leaf_bound='auto')" in dry.output
    dry = cli(*common, "--leaf-bound", "none", "--dry-run")
    assert "leaf_bound=None: leaves as grown" in dry.output
    dry = cli(*common, "--max-samples", 0.2, "--leaf-bound", 3, "--dry-run")
    assert "refined: leaves split further to at most 3 rows (leaf_bound=3)" in dry.output
    bad = cli(*common, "--leaf-bound", "many", "--dry-run")
    assert bad.exit_code == 2 and "give auto, none or a number of rows" in bad.output
    run = cli("-q", *common, "--max-samples", 0.2, "--leaf-bound", 3)
    assert run.exit_code == 0, run.output
    forest = ProximityForest.load(tmp_path / "p.zarr")
    assert forest.params_["leaf_bound"] == 3
    # a leaf of more than 3 rows holds rows of the same observed values only (the
    # refinement's thresholds lie between observed values: no split can part them)
    import pandas as pd

    X = pd.read_csv(breast_cancer_csv).drop(columns=["Id", "Class"]).to_numpy(dtype=float)
    leaves = np.asarray(forest.leaves_)
    for t in range(leaves.shape[1]):
        pop = np.bincount(leaves[:, t])
        for leaf in np.flatnonzero(pop > 3):
            rows = X[leaves[:, t] == leaf]
            with np.errstate(invalid="ignore"):
                spread = np.nanmax(rows, axis=0) - np.nanmin(rows, axis=0)
            assert not (spread > 0).any()


@pytest.mark.parametrize("n", [0, 1, 2, 15, 16, 17, 33, 100, 257])
def test_stable_sort_is_numpys_stable_argsort(n) -> None:
    """The refinement's allocation-free sort puts values and rows in the order of
    ``np.argsort(kind="mergesort")``: ties (few distinct values) keep their order."""
    from distforest.kernels.refine import _stable_sort

    rng = np.random.default_rng(n)
    keys = rng.integers(0, max(n // 4, 1), n).astype(np.float32)
    keys[::7] = -0.0  # equal to 0.0: a tie, not an order
    ids = rng.permutation(n).astype(np.int64)
    expected = np.argsort(keys, kind="mergesort")
    got_keys, got_ids = keys.copy(), ids.copy()
    _stable_sort(got_keys, got_ids, n, np.empty(n, np.float32), np.empty(n, np.int64))
    np.testing.assert_array_equal(got_ids, ids[expected])
    np.testing.assert_array_equal(got_keys.view(np.uint32), keys[expected].view(np.uint32))


def test_top_k_jobs_refine_where_it_is_faster() -> None:
    """A top-k job's forest is leaf_bound='auto' unless given: refined from 1,000,000
    rows with the default sample (5x crowded leaves), as grown below; a dense job's
    forest and a given leaf_bound are left alone."""
    from distforest.jobs.proximity import ProximityJob

    top_k = ProximityJob(input="x.csv", out="o.zarr", target="y", top_k=50)
    assert top_k.forest["leaf_bound"] == "auto"
    plan = ProximityForest.refinement_plan
    rule, why = plan(top_k.forest, True, 1_000_000, 20)
    assert rule is not None and rule.bound == 8
    assert why.startswith("refined: trees grown on 200,000 of 1,000,000 rows")
    rule, why = plan(top_k.forest, True, 999_999, 20)
    assert rule is None and "under the 5 at which refining them is faster" in why
    dense = ProximityJob(input="x.csv", out="o.zarr", target="y")
    assert "leaf_bound" not in dense.forest
    assert plan(dense.forest, True, 1_000_000, 20)[0] is None
    given = ProximityJob(input="x.csv", out="o.zarr", target="y", top_k=50,
                         forest={"leaf_bound": None})  # fmt: skip
    assert given.forest["leaf_bound"] is None
