"""Column-aware proximity imputation (``ProximityImputer(proximity="column")``).

Oracle: the same per-column forests refitted with scikit-learn's public API
(one tree per seed, the in-bag counts as sample weights, ``predict`` /
``predict_proba`` averaged) and, independently, the dense RF-GAP proximities
of the missing rows to the observed ones built from those trees' leaves.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.tree import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreeClassifier,
    ExtraTreeRegressor,
)
from test_impute import structured

from distforest.apps.column_impute import column_order, tree_seeds
from distforest.apps.impute import ProximityImputer
from distforest.kernels.column_trees import inbag_counts
from distforest.kernels.imputation import change_statistics
from distforest.kernels.trees import TreeParams


def oracle_first_iteration(Xm, y, categorical, entropy, n_trees, kind, max_features,
                           max_rows=None):  # fmt: skip
    """One Gauss-Seidel pass of per-column forests, with scikit-learn's public API.

    Returns the imputed data and, per column, the dense RF-GAP estimate of
    its missing cells (``P @ x_observed``) from the same trees' leaves.
    ``max_rows``: each tree's in-bag rows are drawn by ``inbag_counts`` (the
    rows it leaves out get weight 0 in ``P``).
    """
    missing = np.isnan(Xm)
    start = np.nanmedian(Xm, axis=0)
    for j in np.flatnonzero(categorical):
        levels, counts = np.unique(Xm[~missing[:, j], j], return_counts=True)
        start[j] = levels[np.argmax(counts)]
    X = np.where(missing, start, Xm)
    bootstrap = kind == "random-forest"
    dense = {}
    for j in column_order(missing):
        obs = ~missing[:, j]
        F = np.column_stack([np.delete(X, j, axis=1), y]).astype(np.float32)
        levels, target = np.unique(Xm[obs, j], return_inverse=True)
        cat = bool(categorical[j])
        params = TreeParams("classification" if cat else "regression", kind, max_features,
                            1, None, bootstrap, None, levels.size if cat else 0)  # fmt: skip
        votes = np.zeros((int((~obs).sum()), levels.size if cat else 1))
        P = np.zeros(((~obs).sum(), obs.sum()))  # dense RF-GAP: missing rows x observed rows
        for seed in tree_seeds(entropy, 0, j, n_trees):
            rng = np.random.default_rng(int(seed))
            inbag = inbag_counts(rng, int(obs.sum()), params, max_rows)
            cls = {
                (True, True): DecisionTreeClassifier,
                (True, False): ExtraTreeClassifier,
                (False, True): DecisionTreeRegressor,
                (False, False): ExtraTreeRegressor,
            }[(cat, kind == "random-forest")]
            tree = cls(max_features=max_features, random_state=int(rng.integers(0, 2**31 - 1)))
            used = inbag > 0
            tree.fit(F[obs][used], (target if cat else Xm[obs, j])[used],
                     sample_weight=inbag[used].astype(float))  # fmt: skip
            if cat:
                proba = np.zeros((votes.shape[0], levels.size))
                proba[:, tree.classes_.astype(int)] = tree.predict_proba(F[~obs])
                votes += proba
            else:
                votes[:, 0] += tree.predict(F[~obs])
            leaf_obs, leaf_miss = tree.apply(F[obs]), tree.apply(F[~obs])
            same = leaf_miss[:, None] == leaf_obs[None, :]
            weighted = same * inbag[None, :]
            P += weighted / weighted.sum(axis=1, keepdims=True)
        P /= n_trees
        if cat:
            onehot = (Xm[obs, j][:, None] == levels[None, :]).astype(float)
            dense[j] = (P @ onehot, levels)
            X[~obs, j] = levels[np.argmax(votes, axis=1)]
        else:
            dense[j] = (P @ Xm[obs, j], None)
            X[~obs, j] = votes[:, 0] / n_trees
    return X, dense


def assert_matches_dense(got, mask, dense):
    """Imputed cells equal the dense RF-GAP estimates ``P @ V`` (votes: untied argmax)."""
    for j, (PV, levels) in dense.items():
        cells = mask[:, j]
        if levels is None:
            np.testing.assert_allclose(got[cells, j], PV, rtol=1e-6, atol=1e-9)
        else:
            top = PV.max(axis=1, keepdims=True)
            tied = np.isclose(PV, top, rtol=1e-12, atol=0).sum(axis=1) > 1
            np.testing.assert_array_equal(got[cells, j][~tied], levels[PV.argmax(axis=1)][~tied])


@pytest.mark.parametrize(("kind", "max_features"), [("extra-trees", 0.33), ("random-forest", 2)])
def test_missing_cell_equals_the_column_forest_prediction(kind, max_features):
    _, Xm, y, mask = structured(120, seed=1, missing=0.15)
    categorical = np.array([False] * 5 + [True])
    imp = ProximityImputer(1, n_estimators=9, kind=kind, max_features=max_features,
                           categorical_features=[5], random_state=7)  # fmt: skip
    got = imp.fit_transform(Xm, y)
    expected, dense = oracle_first_iteration(Xm, y, categorical, imp.random_state_, 9, kind,
                                             max_features)  # fmt: skip
    assert mask.sum() > 60 and not np.isnan(got).any()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    # the same cells from the dense RF-GAP proximities of the missing rows to the observed
    assert_matches_dense(got, mask, dense)
    assert set(np.unique(got[:, 5])) <= {5.0, 15.0, 25.0}
    assert imp.task_ == "classification" and set(imp.column_forests_) == set(range(6))


def test_iterations_stop_on_the_rule_and_return_the_previous_imputation():
    _, Xm, y, _ = structured(200, seed=2)
    imp = ProximityImputer(n_estimators=10, random_state=3)
    out = imp.fit_transform(Xm, y)
    hist = imp.history_
    assert 2 <= imp.n_iter_ < 10 and len(hist) == imp.n_iter_
    changes = [h["change"]["numeric"] for h in hist]
    # kept iterations shrink the change; the last one did not and was discarded
    assert all(b < a for a, b in itertools.pairwise(changes[:-1]))
    assert changes[-1] >= changes[-2] and hist[-1]["kept"] is False
    assert all(h["kept"] for h in hist[:-1])
    # the result is the imputation after the last kept iteration (seeds are per iteration)
    capped = ProximityImputer(imp.n_iter_ - 1, n_estimators=10, random_state=3)
    np.testing.assert_array_equal(out, capped.fit_transform(Xm, y))
    assert capped.history_[-1]["kept"] is True
    # a cap below the rule's stop: exactly that many iterations, all kept
    two = ProximityImputer(2, n_estimators=10, random_state=3).fit(Xm, y)
    assert two.n_iter_ == 2 and all(h["kept"] for h in two.history_)


def test_result_is_the_mean_of_the_kept_passes_after_the_first(monkeypatch):
    import distforest.apps.column_impute as column_impute

    _, Xm, y, mask = structured(200, seed=6)
    passes = []  # each pass's imputed cells, recorded where the stopping rule reads them

    def record(before, after, kinds):
        passes.append(after[0].copy())
        return change_statistics(before, after, kinds)

    monkeypatch.setattr(column_impute, "change_statistics", record)
    imp = ProximityImputer(n_estimators=10, max_features=0.33, categorical_features=[5],
                           random_state=4)  # fmt: skip
    out = imp.fit_transform(Xm, y)
    kept = [p for p, h in zip(passes, imp.history_, strict=True) if h["kept"]]
    assert len(kept) >= 3  # the mean has at least two passes
    order = column_order(np.isnan(Xm))
    cells = mask[:, order]
    got = out[:, order][cells]
    kinds = np.broadcast_to(np.arange(6)[order] == 5, cells.shape)[cells]
    stacked = np.array(kept[1:])  # the first pass starts from the medians: left out
    np.testing.assert_allclose(got[~kinds], stacked[:, ~kinds].mean(axis=0), rtol=1e-12)
    # categorical cells: a level most passes gave; where all of them agree, that level
    (labels,) = imp.categories_.values()  # the passes hold level codes, the output labels
    cat = np.asarray(labels, dtype=float)[stacked[:, kinds].astype(int)]
    for value, column in zip(got[kinds], cat.T, strict=True):
        levels, counts = np.unique(column, return_counts=True)
        assert value in levels[counts == counts.max()]
    assert (cat.min(axis=0) != cat.max(axis=0)).any()  # the passes did disagree somewhere
    # its squared error is at most the passes' mean squared error (convexity), and not equal
    X, _, _, _ = structured(200, seed=6)
    truth = X[:, order][cells][~kinds]
    per_pass = np.mean((stacked[:, ~kinds] - truth) ** 2, axis=1)
    assert np.mean((got[~kinds] - truth) ** 2) < per_pass.mean()


def test_same_seed_same_bits_in_process_and_on_a_cluster(client):
    _, Xm, y, _ = structured(150, seed=3)
    kw = {"n_estimators": 12, "categorical_features": [5], "random_state": 5}
    here = ProximityImputer(**kw).fit_transform(Xm, y)
    again = ProximityImputer(**kw).fit_transform(Xm, y)
    there = ProximityImputer(**kw).set_execution(client).fit_transform(Xm, y)
    assert here.tobytes() == again.tobytes() == there.tobytes()
    other = ProximityImputer(**{**kw, "random_state": 6}).fit_transform(Xm, y)
    assert other.tobytes() != here.tobytes()


def test_transform_new_rows():
    X, Xm, y, mask = structured(300, seed=4)
    train, new = slice(0, 240), slice(240, 300)
    imp = ProximityImputer(n_estimators=20, categorical_features=[5], random_state=1)
    fitted = imp.fit_transform(Xm[train], y[train])
    np.testing.assert_array_equal(imp.transform(Xm[train]), fitted)  # the fit's result
    out = imp.transform(Xm[new])
    m = mask[new]
    np.testing.assert_array_equal(out[~m], X[new][~m])
    assert not np.isnan(out).any()
    assert set(np.unique(out[:, 5])) <= {5.0, 15.0, 25.0}
    median = np.where(m, imp.statistics_, Xm[new])
    num = m[:, :5]
    err = np.abs(out[:, :5] - X[new][:, :5])[num].mean()
    assert err < 0.6 * np.abs(median[:, :5] - X[new][:, :5])[num].mean()
    # a new row equal to a training row with one cell removed gets a value near it
    row = X[:1].copy()
    row[0, 1] = np.nan
    assert abs(imp.transform(row)[0, 1] - X[0, 1]) < 0.5 * abs(imp.statistics_[1] - X[0, 1]) + 0.2


def test_categorical_columns_come_back_as_labels():
    X, Xm, y, mask = structured(300, seed=5, missing=0.15)
    colour = np.array(["red", "green", "blue"], dtype=object)[(X[:, 5] // 10).astype(int)]
    df = pd.DataFrame({"a": Xm[:, 0], "b": Xm[:, 1], "c": Xm[:, 2], "d": Xm[:, 3],
                       "e": Xm[:, 4], "colour": pd.Series(colour).where(~mask[:, 5], None),
                       "label": np.where(y == 1, "yes", "no")})  # fmt: skip
    imp = ProximityImputer(n_estimators=20, random_state=0)
    out = imp.fit_transform(df, y="label")
    assert list(out.columns) == list(df.columns) and out["colour"].notna().all()
    assert set(out["colour"]) <= {"red", "green", "blue"}
    pd.testing.assert_series_equal(out["label"], df["label"])
    cells = mask[:, 5]
    right = (out["colour"][cells] == colour[cells]).mean()
    mode = pd.Series(colour[~cells]).mode()[0]
    assert right > (colour[cells] == mode).mean() + 0.2  # the vote beats the most frequent
    new = df.iloc[:5].drop(columns="label").copy()
    new.loc[new.index[0], "colour"] = None
    assert set(imp.transform(new)["colour"]) <= {"red", "green", "blue"}


# -- the command line and pipelines -------------------------------------------------------


def test_cli_small_table_runs_in_process(breast_cancer_csv, tmp_path, monkeypatch):
    import distforest.parallel.cluster as cluster_module  # impute imports connect on use
    from distforest.cli.main import cli

    def no_cluster(**kwargs):
        raise AssertionError(f"a cluster was started for a small table: {kwargs}")

    monkeypatch.setattr(cluster_module, "connect", no_cluster)
    out = tmp_path / "imputed.csv"
    args = ["-q", "impute", str(breast_cancer_csv), "--target", "Class", "--drop", "Id",
            "--proximity", "column", "--trees", "10", "--seed", "2", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "column proximity" in result.output and "10 trees per column" in result.output
    written = pd.read_csv(out)
    original = pd.read_csv(breast_cancer_csv)
    filled = written.loc[original["Bare.nuclei"].isna(), "Bare.nuclei"]
    assert len(filled) == 16 and filled.between(1, 10).all()
    # a cluster asked for is used
    monkeypatch.setattr(cluster_module, "connect", no_cluster)
    result = CliRunner().invoke(cli, [*args[:-1], str(tmp_path / "b.csv"), "--workers", "1"])
    assert result.exit_code != 0 and "a cluster was started" in str(result.exception)


def test_pipeline_impute_proximity_choices(tmp_path, breast_cancer_csv):
    from distforest.errors import ConfigError
    from distforest.jobs.pipeline import load_pipeline

    base = (f"input: {{path: {breast_cancer_csv}, target: Class, drop: [Id]}}\n"
            f"output: {{dir: {tmp_path}}}\n")  # fmt: skip
    path = tmp_path / "p.yaml"
    for value in ("column", "rfimpute", "original"):
        path.write_text(base + f"impute: {{out: i.csv, proximity: {value}}}\n")
        assert load_pipeline(path).impute["proximity"] == value
    path.write_text(base + "impute: {out: i.csv, proximity: columns}\n")
    with pytest.raises(ConfigError, match="did you mean 'column'"):
        load_pipeline(path)
