"""The column-aware imputer on large tables: row-subsampled trees, forests not kept.

``max_samples`` draws each tree's rows from the column's observed rows; with
the cap forced low on small data, a missing cell must still equal the
per-column forest's prediction and the dense RF-GAP estimate of the same
trees (the oracle of ``test_impute_column``).  Forests dropped after fit and
grown again from their seeds must route new rows to the same bits.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import no_default_client
from test_impute import structured
from test_impute_column import assert_matches_dense, oracle_first_iteration

import distforest.apps.impute as impute_module
from distforest.apps.column_impute import (
    AUTO_ROWS_PER_TREE,
    LARGE_TABLE_ROWS,
    LARGE_TABLE_TOLERANCE,
    ColumnSettings,
    impute_by_column,
    resolve_max_samples,
    stopping_tolerance,
)
from distforest.apps.impute import ProximityImputer
from distforest.errors import ParameterError
from distforest.kernels.column_trees import inbag_counts
from distforest.kernels.trees import TreeParams
from distforest.parallel import placement
from distforest.parallel.execution import current_execution, in_process


def _params(kind: str) -> TreeParams:
    return TreeParams("regression", kind, 1.0, 1, None, kind == "random-forest", None, 0)


# -- the draw ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["extra-trees", "random-forest"])
def test_inbag_counts_draw_max_rows(kind):
    params = _params(kind)
    counts = inbag_counts(np.random.default_rng(0), 1000, params, 120)
    assert counts.shape == (1000,) and counts.sum() == 120
    if kind == "extra-trees":  # distinct rows, once each
        assert set(np.unique(counts)) == {0, 1}
    else:  # a bootstrap sample of 120: some rows twice
        assert counts.max() >= 2
    other = inbag_counts(np.random.default_rng(1), 1000, params, 120)
    assert not np.array_equal(counts, other)
    # a cap at or above the rows draws as without one (the same generator state after)
    for cap in (None, 1000, 5000):
        rng = np.random.default_rng(3)
        got = inbag_counts(rng, 1000, params, cap)
        ref_rng = np.random.default_rng(3)
        ref = inbag_counts(ref_rng, 1000, params, None)
        np.testing.assert_array_equal(got, ref)
        assert rng.integers(0, 2**31) == ref_rng.integers(0, 2**31)


def test_auto_subsamples_only_large_tables():
    assert resolve_max_samples("auto", LARGE_TABLE_ROWS) is None
    assert resolve_max_samples("auto", LARGE_TABLE_ROWS + 1) == AUTO_ROWS_PER_TREE
    assert resolve_max_samples(0.5, 10) == 0.5 and resolve_max_samples(None, 10**7) is None
    s = ColumnSettings(50, "extra-trees", 0.33, 1, None, False, None, max_samples=0.25)
    assert s.rows_per_tree(400) == 100 and s.rows_per_tree(2) == 1
    s = ColumnSettings(50, "extra-trees", 0.33, 1, None, False, None, max_samples=300)
    assert s.rows_per_tree(400) == 300 and s.rows_per_tree(300) is None
    missing = np.zeros((1000, 3), dtype=bool)
    missing[:100, 0] = missing[:400, 2] = True
    assert s.forest_cells(missing) == (300 + 300) * 50  # column 1 has no forest


def test_large_tables_also_stop_when_the_change_levels_off():
    assert stopping_tolerance(LARGE_TABLE_ROWS) == 0.0
    assert stopping_tolerance(LARGE_TABLE_ROWS + 1) == LARGE_TABLE_TOLERANCE
    _, Xm, _, _ = structured(300, seed=3)
    start = np.where(np.isnan(Xm), np.nanmedian(Xm, axis=0), Xm)
    categorical = np.zeros(Xm.shape[1], dtype=bool)
    runs = {}
    for tol in (0.0, 0.2):
        settings = ColumnSettings(10, "extra-trees", 0.33, 1, None, False, None, tolerance=tol)
        with in_process(current_execution(), 1) as runner:
            runs[tol] = impute_by_column(runner, Xm, start, categorical, None, settings,
                                         max_iter=10, entropy=1)  # fmt: skip
    plain, early = runs[0.0], runs[0.2]
    changes = [h["change"]["numeric"] for h in early.history]
    # it ran while the change shrank by 20 % or more, stopped at the first that shrank
    # less (but did shrink: the plain rule would have gone on), and kept it
    assert len(changes) >= 3
    assert all(b < 0.8 * a for a, b in itertools.pairwise(changes[:-1]))
    assert 0.8 * changes[-2] <= changes[-1] < changes[-2]
    assert all(h["kept"] for h in early.history) and len(early.history) < len(plain.history)
    # the same iterations as the plain rule up to there
    k = len(early.history)
    assert [h["change"] for h in plain.history[:k]] == [h["change"] for h in early.history]


# -- the oracle ----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "max_features"), [("extra-trees", 0.33), ("random-forest", 2)])
def test_subsampled_trees_equal_the_dense_oracle(kind, max_features):
    _, Xm, y, mask = structured(160, seed=1, missing=0.15)
    categorical = np.array([False] * 5 + [True])
    kw = {"n_estimators": 9, "kind": kind, "max_features": max_features,
          "categorical_features": [5], "random_state": 7}  # fmt: skip
    imp = ProximityImputer(1, max_samples=40, **kw)
    got = imp.fit_transform(Xm, y)
    expected, dense = oracle_first_iteration(Xm, y, categorical, imp.random_state_, 9, kind,
                                             max_features, max_rows=40)  # fmt: skip
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    assert_matches_dense(got, mask, dense)
    # the cap did subsample (another imputation), and a share is the same as its count
    full = ProximityImputer(1, max_samples=None, **kw).fit_transform(Xm, y)
    assert not np.array_equal(full, got)
    n_obs = (~mask).sum(axis=0)
    assert n_obs.min() > 40
    # max_samples >= every column's observed rows: the very same bits as no cap
    same = ProximityImputer(1, max_samples=int(n_obs.max()), **kw).fit_transform(Xm, y)
    assert same.tobytes() == full.tobytes()


# -- forests dropped after fit, determinism -----------------------------------------------


def _fit(Xm, y, keep: bool, monkeypatch, client=None, **kw):
    monkeypatch.setattr(impute_module, "KEEP_NODES_CELLS", 10**12 if keep else 0)
    imp = ProximityImputer(n_estimators=8, max_samples=0.5, categorical_features=[5],
                           random_state=4, **kw)  # fmt: skip
    if client is not None:
        imp.set_execution(client)
    return imp, imp.fit_transform(Xm, y)


def test_forests_dropped_and_regrown_give_the_same_bits(monkeypatch):
    _, Xm, y, _ = structured(260, seed=6)
    train, new = slice(0, 200), slice(200, 260)
    kept, a = _fit(Xm[train], y[train], True, monkeypatch)
    dropped, b = _fit(Xm[train], y[train], False, monkeypatch)
    assert a.tobytes() == b.tobytes()
    assert [h["change"] for h in dropped.history_] == [h["change"] for h in kept.history_]
    assert kept.column_forests_ and not dropped.column_forests_  # no tree kept after fit
    assert dropped._column_regrow is not None
    assert dropped.transform(Xm[new]).tobytes() == kept.transform(Xm[new]).tobytes()
    # grown again: the same trees as those kept
    assert set(dropped.column_forests_) == set(kept.column_forests_)
    for j, forest in kept.column_forests_.items():
        again = dropped.column_forests_[j]
        np.testing.assert_array_equal(again.trees.node_counts, forest.trees.node_counts)
        for f, v in forest.trees.nodes.items():
            np.testing.assert_array_equal(again.trees.nodes[f], v)
        np.testing.assert_array_equal(again.trees.leaf_values, forest.trees.leaf_values)
    assert dropped._column_regrow is None  # grown once
    assert dropped.transform(Xm[new]).tobytes() == kept.transform(Xm[new]).tobytes()


def test_subsampled_same_bits_on_any_number_of_workers(client, monkeypatch):
    _, Xm, y, _ = structured(200, seed=7)
    new = Xm[:20].copy()
    new[:, 0] = np.nan
    with no_default_client():  # in process, not on the session's cluster
        runs = [_fit(Xm, y, False, monkeypatch), _fit(Xm, y, True, monkeypatch)]
        assert not placement.cluster_named()
    runs.append(_fit(Xm, y, False, monkeypatch, client=client))
    monkeypatch.setattr(placement, "in_process_threads", lambda: 1)  # one thread in process
    with no_default_client():
        runs.append(_fit(Xm, y, False, monkeypatch))
    assert len({out.tobytes() for _, out in runs}) == 1
    assert len({imp.transform(new).tobytes() for imp, _ in runs}) == 1
    other = ProximityImputer(n_estimators=8, max_samples=0.5, categorical_features=[5],
                             random_state=5).fit_transform(Xm, y)  # fmt: skip
    assert other.tobytes() != runs[0][1].tobytes()


# -- parameters ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -5, 1.5, 0.0, "half", True, [100]])
def test_bad_max_samples_is_refused_with_the_value(bad):
    _, Xm, y, _ = structured(40, seed=8)
    with pytest.raises(ParameterError, match=r"max_samples must be 'auto', None.*got"):
        ProximityImputer(max_samples=bad).fit(Xm, y)


def test_max_samples_is_for_the_column_proximity_only():
    _, Xm, y, _ = structured(40, seed=8)
    with pytest.raises(ParameterError, match="remove max_samples or use proximity='column'"):
        ProximityImputer(proximity="rfimpute", max_samples=100).fit(Xm, y)
    ProximityImputer(proximity="rfgap", n_estimators=5, iterations=1).fit(Xm, y)  # auto


def test_cli_and_pipeline_take_max_samples(breast_cancer_csv, tmp_path):
    import pandas as pd

    from distforest.cli.main import cli
    from distforest.errors import ConfigError
    from distforest.jobs.pipeline import load_pipeline

    base = ["-q", "impute", str(breast_cancer_csv), "--target", "Class", "--drop", "Id",
            "--trees", "6", "--seed", "2", "--iterations", "2"]  # fmt: skip
    outs = {}
    for value in ("50", "0.1", "all"):
        out = tmp_path / f"{value}.csv"
        result = CliRunner().invoke(cli, [*base, "--max-samples", value, "--out", str(out)])
        assert result.exit_code == 0, result.output
        outs[value] = pd.read_csv(out)
    assert not outs["50"].equals(outs["all"])
    result = CliRunner().invoke(cli, [*base, "--max-samples", "2.5", "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "max_samples must be 'auto'" in result.output
    assert "got 2.5" in result.output
    path = tmp_path / "p.yaml"
    head = (f"input: {{path: {breast_cancer_csv}, target: Class, drop: [Id]}}\n"
            f"output: {{dir: {tmp_path}}}\n")  # fmt: skip
    path.write_text(head + "impute: {out: i.csv, max_samples: 5000}\n")
    assert load_pipeline(path).impute["max_samples"] == 5000
    path.write_text(head + "impute: {out: i.csv, max_samples: 0}\n")
    with pytest.raises(ConfigError, match="max_samples must be"):
        load_pipeline(path)


def test_the_runner_drops_what_it_shared_once_the_handle_is_gone(client):
    """A column sweep shares the table once per column: the driver must not keep them all."""
    import gc

    from distforest.parallel.execution import Runner

    runner = Runner(client)
    kept = runner.share(np.arange(1000.0))
    for k in range(5):
        handle = runner.share(np.full(1000, float(k)))
        assert len(runner._shared) == 2
        np.testing.assert_array_equal(runner.gather(handle), np.full(1000, float(k)))
        del handle
        gc.collect()
        assert len(runner._shared) == 1  # only the live handle's value
    assert runner.gather(kept)[-1] == 999.0
