"""Design (b) of column-aware imputation (``benchmarks/multi_impute.py``, a prototype).

Oracle: the same trees refitted with scikit-learn's public API (``fit`` on the
rows where the tree's whole group is observed, ``predict`` on the others) and,
independently, the dense RF-GAP weighted mean of each column's observed
values over the leaves the missing rows fall into.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor, ExtraTreeRegressor
from test_impute import structured

from distforest.apps.column_impute import column_order
from distforest.kernels.trees import TreeParams, bootstrap_counts
from distforest.parallel.execution import Runner

PROTOTYPE = Path(__file__).resolve().parent.parent / "benchmarks" / "multi_impute.py"
sys.path.insert(0, str(PROTOTYPE.parent))

from multi_impute import (  # noqa: E402  (benchmarks/ is not a package)
    MultiSettings,
    draw_groups,
    forest_plan,
    impute_multi,
    make_outputs,
    multi_output_impute,
)


def start_fill(Xm, categorical):
    missing = np.isnan(Xm)
    start = np.nanmedian(Xm, axis=0)
    for j in np.flatnonzero(categorical):
        levels, counts = np.unique(Xm[~missing[:, j], j], return_counts=True)
        start[j] = levels[np.argmax(counts)]
    return np.where(missing, start, Xm)


def oracle_first_iteration(Xm, y, categorical, entropy, settings):
    """One forest of multi-output trees, with scikit-learn's public API.

    Returns the imputed data and, per numeric column, the dense RF-GAP
    weighted mean of its observed values for its missing cells.
    """
    missing = np.isnan(Xm)
    X = start_fill(Xm, categorical)
    columns = np.array(column_order(missing))
    groups, seeds = forest_plan(entropy, 0, columns.size, settings)
    sums = {int(c): 0.0 for c in columns}
    rfgap = {int(c): 0.0 for c in columns if not categorical[c]}
    count = dict.fromkeys(sums, 0)
    for group, seed in zip(groups, seeds, strict=True):
        cols = columns[group]
        train = ~missing[:, cols].any(axis=1)
        F = np.column_stack([np.delete(X, cols, axis=1), y]).astype(np.float32)
        blocks = []
        for c in cols:
            obs = ~missing[:, c]
            if categorical[c]:
                levels = np.unique(Xm[obs, c])
                blocks.append((Xm[:, c][:, None] == levels[None, :]).astype(float))
            else:
                mean, std = Xm[obs, c].mean(), Xm[obs, c].std()
                blocks.append(((Xm[:, c] - mean) / std)[:, None])
        Y = np.concatenate(blocks, axis=1)
        rng = np.random.default_rng(int(seed))
        params = MultiSettings(kind=settings.kind).tree_params()
        inbag = bootstrap_counts(rng, int(train.sum()), params)
        cls = ExtraTreeRegressor if settings.kind == "extra-trees" else DecisionTreeRegressor
        tree = cls(max_features=settings.max_features,
                   random_state=int(rng.integers(0, 2**31 - 1)))  # fmt: skip
        used = inbag > 0
        tree.fit(F[train][used], Y[train][used], sample_weight=inbag[used].astype(float))
        at = 0
        for c, block in zip(cols, blocks, strict=True):
            rows = missing[:, c]
            pred = tree.predict(F[rows]).reshape(rows.sum(), -1)[:, at : at + block.shape[1]]
            at += block.shape[1]
            count[int(c)] += 1
            if categorical[c]:
                sums[int(c)] = sums[int(c)] + pred
                continue
            obs = ~missing[:, c]
            sums[int(c)] = sums[int(c)] + pred[:, 0] * Xm[obs, c].std() + Xm[obs, c].mean()
            # RF-GAP: in-bag weighted mean of the column's observed values over the leaf
            leaf_train = tree.apply(F[train][used])
            leaf_rows = tree.apply(F[rows])
            w = (leaf_rows[:, None] == leaf_train[None, :]) * inbag[used][None, :]
            rfgap[int(c)] = rfgap[int(c)] + (w @ Xm[train][used][:, c]) / w.sum(axis=1)
    out = X.copy()
    for c, total in sums.items():
        rows = missing[:, c]
        if categorical[c]:
            levels = np.unique(Xm[~rows, c])
            out[rows, c] = levels[np.argmax(total, axis=1)]
        else:
            out[rows, c] = total / count[c]
            rfgap[c] = rfgap[c] / count[c]
    assert len(set(count.values())) == 1  # every column has the same number of trees
    return out, rfgap


@pytest.mark.parametrize(("kind", "group_size"), [("extra-trees", 2), ("random-forest", 3)])
def test_missing_cell_equals_the_mean_of_its_trees(kind, group_size):
    _, Xm, y, mask = structured(120, seed=1, missing=0.15)
    categorical = np.array([False] * 5 + [True])
    settings = MultiSettings(rounds=7, group_size=group_size, kind=kind, max_features=0.6)
    runner = Runner(None, threads=2)
    got, history = impute_multi(runner, Xm, start_fill(Xm, categorical), categorical, y,
                                settings, max_iter=1, entropy=11)  # fmt: skip
    runner.close()
    expected, rfgap = oracle_first_iteration(Xm, y, categorical, 11, settings)
    assert mask.sum() > 60 and not np.isnan(got).any() and len(history) == 1
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    for c, values in rfgap.items():
        np.testing.assert_allclose(got[mask[:, c], c], values, rtol=1e-6, atol=1e-9)
    assert set(np.unique(got[:, 5])) <= {5.0, 15.0, 25.0}
    np.testing.assert_array_equal(got[~mask], Xm[~mask])


def test_groups_cover_every_column_once_per_round():
    groups = draw_groups(7, 3, rounds=4, seed=0)
    assert [len(g) for g in groups] == [3, 3, 1] * 4
    for r in range(4):
        assert sorted(np.concatenate(groups[3 * r : 3 * r + 3]).tolist()) == list(range(7))
    assert [len(g) for g in draw_groups(2, 5, rounds=1, seed=0)] == [2]  # capped


def test_imputes_better_than_the_start():
    X, Xm, y, mask = structured(300, seed=2)
    out = multi_output_impute(Xm, y, [5], rounds=10, group_size=2, max_iter=3, random_state=3)
    num = mask[:, :5]
    start = start_fill(Xm, np.array([False] * 5 + [True]))
    err = np.abs(out[:, :5] - X[:, :5])[num].mean()
    assert err < 0.6 * np.abs(start[:, :5] - X[:, :5])[num].mean()
    assert np.mean(out[mask[:, 5], 5] == X[mask[:, 5], 5]) > 0.6
    assert set(np.unique(out[:, 5])) <= {5.0, 15.0, 25.0}


def test_iterations_stop_on_the_rule_and_return_the_previous_imputation():
    _, Xm, y, _ = structured(200, seed=2)
    history: list = []
    out = multi_output_impute(Xm, y, rounds=10, group_size=2, random_state=3, history=history)
    assert 2 <= len(history) < 10
    changes = [h["change"]["numeric"] for h in history]
    # kept iterations shrink the change; the last one did not and was discarded
    assert all(b < a for a, b in itertools.pairwise(changes[:-1]))
    assert changes[-1] >= changes[-2] and history[-1]["kept"] is False
    assert all(h["kept"] for h in history[:-1])
    # the result is the kept iteration's: the same as stopping there by the cap
    capped = multi_output_impute(Xm, y, rounds=10, group_size=2, random_state=3,
                                 max_iter=len(history) - 1)  # fmt: skip
    np.testing.assert_array_equal(out, capped)


def test_same_seed_same_bits_on_any_threads_and_on_a_cluster(client):
    _, Xm, y, _ = structured(150, seed=3)
    categorical = np.array([False] * 5 + [True])
    start = start_fill(Xm, categorical)
    settings = MultiSettings(rounds=6, group_size=2)

    def run(runner, entropy=5):
        return impute_multi(runner, Xm, start, categorical, y, settings, max_iter=3,
                            entropy=entropy)[0]  # fmt: skip

    one, two = Runner(None, threads=1), Runner(None, threads=2)
    here, threads = run(one), run(two)
    two.close()
    client.upload_file(str(PROTOTYPE))  # the workers import the tasks' module from it
    there = run(Runner(client))
    assert here.tobytes() == threads.tobytes() == there.tobytes()
    assert run(one, entropy=6).tobytes() != here.tobytes()


def test_columns_never_observed_together_are_refused():
    X = np.arange(40.0).reshape(20, 2) % 7
    X = np.column_stack([X, np.arange(20.0)])
    X[:10, 0] = np.nan
    X[10:, 1] = np.nan
    with pytest.raises(ValueError, match=r"columns \[0, 1\] are never observed in the same row"):
        multi_output_impute(X, group_size=2, rounds=2, random_state=0)
    out = multi_output_impute(X, group_size=1, rounds=2, random_state=0)  # one per tree works
    assert not np.isnan(out).any()


def test_outputs_standardise_numeric_and_one_hot_categorical():
    Xm = np.array([[1.0, 0.0], [3.0, 2.0], [np.nan, 2.0], [5.0, np.nan]])
    out = make_outputs(Xm, np.array([0, 1]), np.array([False, True]))
    np.testing.assert_allclose(out.targets[0][:, 0] * out.scale[0] + out.center[0],
                               [1.0, 3.0, out.center[0], 5.0])  # fmt: skip
    np.testing.assert_array_equal(out.targets[1], [[1, 0], [0, 1], [0, 1], [0, 0]])
    np.testing.assert_array_equal(out.levels[1], [0.0, 2.0])


def test_tree_params_are_regression_trees():
    assert MultiSettings().tree_params() == TreeParams(
        "regression", "extra-trees", 0.33, 1, None, False, None, 0
    )
