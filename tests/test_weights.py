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


# -- k-NN: a forest metric's forest grows with the weights; a measure weighs the votes --------

W = np.random.default_rng(2).uniform(0.5, 3.0, len(Y))
QUERIES = np.random.default_rng(3).normal(size=(30, X.shape[1]))


class _Grown:
    """A forest similarity grown beforehand: the k-NN model's fit keeps it as it is."""

    def __init__(self, similarity) -> None:
        self.similarity = similarity

    def fit(self, X, y=None):
        return self

    def cross_similarity(self, X_query):
        return self.similarity.cross_similarity(X_query)


@pytest.mark.parametrize("metric", ["rf-proximity", "rfgap"])
def test_knn_forest_metric_grows_its_forest_with_the_weights(metric):
    from distforest import KNNClassifier
    from distforest.forests.forest_similarity import ProximitySimilarity

    with execution("synchronous"):
        model = KNNClassifier(5, metric=metric, n_estimators=8, random_state=0)
        model.fit(X, Y, sample_weight=W)
        oracle = ProximitySimilarity(metric, 8, 0)
        oracle.forest_ = ProximityForest(8, random_state=0).fit(X, Y, sample_weight=W)
        if metric == "rfgap":
            oracle.fit(X, Y, sample_weight=W)
        grown = KNNClassifier(5, metric=_Grown(oracle)).fit(X, Y)
        plain = ProximityForest(8, random_state=0).fit(X, Y)
        expected, got = grown.predict_proba(QUERIES), model.predict_proba(QUERIES)
    forest = model.similarity_.forest_
    assert forest.leaves_.tobytes() == oracle.forest_.leaves_.tobytes()
    assert forest.inbag_.tobytes() == oracle.forest_.inbag_.tobytes()
    for field, values in oracle.forest_.nodes_.items():
        assert np.asarray(forest.nodes_[field]).tobytes() == np.asarray(values).tobytes(), field
    assert got.tobytes() == expected.tobytes()
    assert model.sample_weight_ is None  # the forest took the weights, not the votes
    # the weights did reach the trees: their root weights are not the unweighted ones
    weighted_roots = forest.nodes_["weighted_n_node_samples"][roots(forest)]
    assert not np.allclose(weighted_roots, plain.nodes_["weighted_n_node_samples"][roots(plain)])


@pytest.mark.parametrize("metric", ["euclidean", "rf-proximity"])
@pytest.mark.parametrize("kind", ["KNNClassifier", "KNNRegressor"])
def test_knn_unit_weights_give_the_unweighted_model_bit_for_bit(metric, kind):
    import distforest

    cls = getattr(distforest, kind)
    target = Y if kind == "KNNClassifier" else X[:, 0] * 2 + Y
    answer = "predict_proba" if kind == "KNNClassifier" else "predict"
    params = {"metric": metric, "n_estimators": 6, "random_state": 0, "weights": "distance"}
    with execution("synchronous"):
        plain = cls(5, **params).fit(X, target)
        unit = cls(5, **params).fit(X, target, sample_weight=np.ones(len(Y)))
        assert getattr(plain, answer)(QUERIES).tobytes() == getattr(unit, answer)(QUERIES).tobytes()
    if metric != "euclidean":
        assert (
            plain.similarity_.forest_.leaves_.tobytes()
            == unit.similarity_.forest_.leaves_.tobytes()
        )
        assert (
            plain.similarity_.forest_.inbag_.tobytes() == unit.similarity_.forest_.inbag_.tobytes()
        )


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_knn_measure_weighs_each_neighbours_vote(weights, tmp_path):
    """Oracle: scikit-learn's NearestNeighbors on the rows of weight > 0, and numpy
    sums of weight x (1 or 1/d^2) per class and per target."""
    from sklearn.neighbors import NearestNeighbors

    from distforest import KNNClassifier, KNNRegressor

    w = W.copy()
    w[::7] = 0.0  # rows of weight 0 are no one's neighbours
    kept = w > 0
    distance, index = NearestNeighbors(n_neighbors=7).fit(X[kept]).kneighbors(QUERIES)
    vote = w[kept][index] * (1.0 if weights == "uniform" else 1.0 / distance**2)
    proba = np.stack([(vote * (Y[kept][index] == c)).sum(axis=1) for c in (0, 1)], axis=1)
    proba /= proba.sum(axis=1, keepdims=True)
    target = X[:, 0] * 2 + Y
    mean = (vote * target[kept][index]).sum(axis=1) / vote.sum(axis=1)
    with execution("synchronous"):
        clf = KNNClassifier(7, weights=weights).fit(X, Y, sample_weight=w)
        reg = KNNRegressor(7, weights=weights).fit(X, target, sample_weight=w)
        np.testing.assert_allclose(clf.predict_proba(QUERIES), proba, rtol=1e-12)
        np.testing.assert_allclose(reg.predict(QUERIES), mean, rtol=1e-12)
        unweighted = KNNClassifier(7, weights=weights).fit(X[kept], Y[kept])
        assert not np.allclose(unweighted.predict_proba(QUERIES), proba)
        clf.save(tmp_path / "m.zarr")  # the votes' weights are part of the saved model
        back = KNNClassifier.load(tmp_path / "m.zarr")
        assert back.predict_proba(QUERIES).tobytes() == clf.predict_proba(QUERIES).tobytes()


def test_knn_bad_weights_are_refused():
    from distforest import KNNClassifier
    from distforest.errors import InputError

    with pytest.raises(InputError, match=r"(?i)sample_weight.*negative.*one per row"):
        KNNClassifier().fit(X, Y, sample_weight=-W)
    with pytest.raises(InputError, match=r"sample_weight.*240 finite weights"):
        KNNClassifier().fit(X, Y, sample_weight=W[:-1])
    with pytest.raises(InputError, match=r"sample_weight.*(?i:nan)"):
        KNNClassifier().fit(X, Y, sample_weight=np.where(Y == 1, np.nan, 1.0))
    with pytest.raises(InputError, match=r"(?i)sample_weight.*negative"):
        KNNClassifier(metric="rf-proximity", n_estimators=3).fit(X, Y, sample_weight=-W)
    with pytest.raises(InputError, match=r"metric='beta'.*'rf-proximity' or 'rfgap'"):
        KNNClassifier(metric="beta", n_estimators=3).fit(X, Y, sample_weight=W)


@pytest.mark.parametrize("metric", ["euclidean", "rf-proximity"])
def test_knn_weights_of_rows_read_by_partitions_as_of_rows_in_memory(metric):
    """A dask DataFrame is fitted from a temporary store: the same weighted votes and
    the same weighted forest as the rows in memory."""
    import dask.dataframe as dd
    import pandas as pd

    from distforest import KNNClassifier
    from distforest.errors import InputError

    frame = pd.DataFrame(X, columns=list("abcde")).assign(label=Y)
    parts = dd.from_pandas(frame, npartitions=3)
    params = {"metric": metric, "n_estimators": 6, "random_state": 0}
    with execution("synchronous"):
        stored = KNNClassifier(5, **params).fit(parts, "label", sample_weight=W)
        memory = KNNClassifier(5, **params).fit(X, Y, sample_weight=W)
        assert type(stored.X_fit_).__name__ == "StoredRows"
        assert stored.predict_proba(QUERIES).tobytes() == memory.predict_proba(QUERIES).tobytes()
        if metric == "euclidean":
            with pytest.raises(InputError, match="weight 0 to 1 rows of a table in a store"):
                KNNClassifier(5).fit(
                    parts, "label", sample_weight=np.where(X[:, 0] == X[0, 0], 0, W)
                )
        else:
            field = "weighted_n_node_samples"
            assert np.array_equal(np.asarray(stored.similarity_.forest_.nodes_[field]),
                                  memory.similarity_.forest_.nodes_[field])  # fmt: skip
