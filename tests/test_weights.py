"""Row weights, class weights, per-class sampling and scikit-learn's tree parameters
(issue 44, points 1 and 2): each reaches every tree task, the command line and pipelines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import make_classification
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from sklearn.utils.class_weight import compute_sample_weight

from distforest import execution, open_store
from distforest.cli.main import cli
from distforest.errors import ParameterError
from distforest.forests.proximity_forest import ProximityForest

X, Y = make_classification(240, 5, n_informative=3, weights=[0.85, 0.15], random_state=1)


def fit(**params) -> ProximityForest:
    with execution("synchronous"):
        return ProximityForest(12, random_state=0, **params).fit(X, Y)


def roots(forest: ProximityForest) -> np.ndarray:
    """Row index of each tree's root node in the concatenated nodes."""
    return np.concatenate([[0], np.cumsum(forest.node_counts_)[:-1]])


def test_unit_weights_give_the_unweighted_forest_bit_for_bit():
    plain = fit()
    with execution("synchronous"):
        weighted = ProximityForest(12, random_state=0).fit(X, Y, sample_weight=np.ones(len(Y)))
    assert np.array_equal(plain.leaves_, weighted.leaves_)
    assert np.array_equal(plain.inbag_, weighted.inbag_)
    for field, values in plain.nodes_.items():
        assert np.array_equal(values, weighted.nodes_[field]), field


@pytest.mark.parametrize("class_weight", [None, "balanced", "balanced_subsample", {1: 4.0}])
def test_each_tree_weighs_its_rows_as_scikit_learns_forests(class_weight):
    """A tree's root weight is the sum of what scikit-learn's forest gives it:
    bootstrap count x sample_weight x class weight (of the whole target, or of the
    tree's own bootstrap sample for balanced_subsample)."""
    w = np.random.default_rng(2).uniform(0.5, 3.0, len(Y))
    with execution("synchronous"):
        forest = ProximityForest(12, random_state=0, class_weight=class_weight).fit(
            X, Y, sample_weight=w
        )
    root_weight = forest.nodes_["weighted_n_node_samples"][roots(forest)]
    for k in range(12):
        counts = forest.inbag_[:, k].astype(float)
        if class_weight == "balanced_subsample":
            drawn = np.repeat(np.arange(len(Y)), forest.inbag_[:, k])
            cw = compute_sample_weight("balanced", Y, indices=drawn)
        elif class_weight is None:
            cw = np.ones(len(Y))
        else:
            cw = compute_sample_weight(class_weight, Y)
        np.testing.assert_allclose(root_weight[k], (counts * w * cw).sum(), rtol=1e-6)


def test_weights_reach_the_out_of_bag_estimates_and_importances():
    """Weighing the rare class up moves the out-of-bag votes towards it (leaves of at
    least 10 rows: pure leaves would not move), as in scikit-learn's forest with the
    same weights (the oracle for the direction)."""
    from sklearn.ensemble import RandomForestClassifier

    plain = fit(min_samples_leaf=10)
    heavy = fit(min_samples_leaf=10, class_weight={0: 1.0, 1: 50.0})
    rare = (heavy.oob_decision_function_[:, 1] > 0.5).sum()
    assert rare > (plain.oob_decision_function_[:, 1] > 0.5).sum() + 10
    assert not np.allclose(plain.feature_importances_, heavy.feature_importances_)
    kw = {"n_estimators": 12, "oob_score": True, "random_state": 0, "min_samples_leaf": 10}
    sk_plain = RandomForestClassifier(**kw).fit(X, Y).oob_decision_function_
    sk_heavy = RandomForestClassifier(class_weight={0: 1.0, 1: 50.0}, **kw).fit(X, Y)
    assert (sk_heavy.oob_decision_function_[:, 1] > 0.5).sum() > (sk_plain[:, 1] > 0.5).sum()


def test_per_class_rows_per_tree_like_r_sampsize():
    forest = fit(max_samples={0: 20, 1: 20})
    for code in (0, 1):
        assert (forest.inbag_[Y == code].sum(axis=0) == 20).all()
    assert fit(max_samples=50).inbag_.sum(axis=0).tolist() == [50] * 12


def test_weights_are_checked():
    with pytest.raises(ParameterError, match="gives no value for class"):
        fit(max_samples={0: 20})
    with pytest.raises(ParameterError, match="names class 7"):
        fit(class_weight={7: 2.0})
    with pytest.raises(Exception, match=r"(?i)sample_weight.*negative.*one per row"):
        ProximityForest(3).fit(X, Y, sample_weight=-np.ones(len(Y)))
    with pytest.raises(ParameterError, match="needs a classification forest"):
        ProximityForest(3, task="regression", class_weight="balanced").fit(X, Y * 1.5)


@pytest.mark.parametrize(
    "params, sk_params",
    [
        ({"criterion": "entropy"}, {"criterion": "entropy"}),
        ({"min_samples_split": 40}, {"min_samples_split": 40}),
        ({"min_samples_split": 0.3}, {"min_samples_split": 0.3}),
        ({"max_leaf_nodes": 4}, {"max_leaf_nodes": 4}),
        ({"min_impurity_decrease": 0.01}, {"min_impurity_decrease": 0.01}),
    ],
)
def test_scikit_learn_tree_parameters_give_scikit_learns_trees(params, sk_params):
    """Without bootstrap and with every feature tried, a tree is scikit-learn's tree
    on the same rows: the same number of nodes, the same root split."""
    forest = fit(bootstrap=False, max_features=None, **params)
    sk = DecisionTreeClassifier(random_state=0, **sk_params).fit(X.astype(np.float32), Y)
    assert set(forest.node_counts_) == {sk.tree_.node_count}
    assert forest.nodes_["feature"][0] == sk.tree_.feature[0]
    assert forest.nodes_["threshold"][0] == sk.tree_.threshold[0]


def test_regression_criterion():
    y = X[:, 0] * 2 + X[:, 1]
    with execution("synchronous"):
        forest = ProximityForest(3, bootstrap=False, max_features=None, criterion="absolute_error",
                                 max_depth=3, random_state=0).fit(X, y)  # fmt: skip
    sk = DecisionTreeRegressor(criterion="absolute_error", max_depth=3).fit(X.astype(np.float32), y)
    assert forest.nodes_["threshold"][0] == sk.tree_.threshold[0]
    with pytest.raises(ParameterError, match="criterion='gini' is for classification"):
        ProximityForest(3, task="regression", criterion="gini").fit(X, y)


def test_command_line_and_pipeline_take_the_same_settings(tmp_path):
    data = tmp_path / "d.csv"
    labels = np.where(Y == 1, "yes", "no")
    rows = ["a,b,c,d,e,label"] + [
        ",".join(f"{v:.5f}" for v in x) + f",{t}" for x, t in zip(X, labels, strict=True)
    ]
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "p.zarr"
    result = CliRunner().invoke(cli, [
        "-q", "proximity", str(data), "--target", "label", "--trees", "6", "--out", str(out),
        "--max-samples", "no:15,yes:15", "--class-weight", "balanced", "--criterion", "entropy",
        "--min-samples-split", "4", "--max-leaf-nodes", "9", "--min-impurity-decrease", "0",
    ], catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    inbag = open_store(out)["inbag"].values
    assert (inbag[Y == 1].sum(axis=0) == 15).all() and (inbag[Y == 0].sum(axis=0) == 15).all()
    pf = ProximityForest.load(out)
    assert pf.params_["class_weight"] == "balanced" and pf.params_["max_leaf_nodes"] == 9
    assert pf.node_counts_.max() <= 2 * 9 - 1
    q = str(tmp_path / "q.zarr")
    bad = CliRunner().invoke(
        cli, ["proximity", str(data), "--target", "label", "--out", q, "--class-weight", "balance"]
    )
    assert bad.exit_code != 0 and "'balanced'" in bad.output

    yaml = tmp_path / "run.yaml"
    yaml.write_text(
        f"input: {{path: {data}, target: label}}\n"
        "forest: {n_estimators: 6, random_state: 0, class_weight: {'yes': 3, 'no': 1},\n"
        "         max_samples: {'no': 10, 'yes': 10}, min_samples_split: 0.1}\n"
        f"output: {{dir: {tmp_path / 'run'}, store: run.zarr}}\n"
    )
    run = CliRunner().invoke(cli, ["-q", "run", str(yaml)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    inbag = open_store(tmp_path / "run" / "run.zarr")["inbag"].values
    assert (inbag[Y == 1].sum(axis=0) == 10).all()
    assert math.isclose(ProximityForest.load(tmp_path / "run" / "run.zarr")
                        .params_["min_samples_split"], 0.1)  # fmt: skip
