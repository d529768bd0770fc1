"""k-NN: the worked examples of Kelleher, Mac Namee & D'Arcy, chapter 5, and oracles.

The small tables below were typed in by hand for these tests.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_iris, make_regression
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

from distforest.apps.knn import KNNClassifier, KNNRegressor, load_model, save_model, vote_weights
from distforest.errors import InputError, NotFittedError, ParameterError
from distforest.forests.forest_similarity import ProximitySimilarity
from distforest.forests.pairwise import pairwise
from distforest.parallel.execution import execution

# Salary, age and whether the customer bought the pension plan (IDs 1..10).
SALARY_AGE = np.array(
    [
        [53700, 41],
        [65300, 37],
        [48900, 45],
        [64800, 49],
        [44200, 30],
        [55900, 57],
        [48600, 26],
        [72800, 60],
        [45300, 34],
        [73200, 52],
    ],
    dtype=float,
)
PURCHASED = np.array(["no", "no", "yes", "yes", "no", "yes", "no", "yes", "no", "yes"])
SALARY_QUERY = np.array([[56000.0, 35.0]])

# Whiskey: age (years), rating (1-5) and price, IDs 1..20.
WHISKEY = np.array(
    [
        [0, 2, 30],
        [12, 3.5, 40],
        [10, 4, 55],
        [21, 4.5, 550],
        [12, 3.0, 35],
        [15, 3.5, 45],
        [16, 4, 70],
        [18, 3.0, 85],
        [18, 3.5, 78],
        [16, 3.0, 75],
        [19, 5, 500],
        [6, 4.5, 200],
        [8, 3.5, 65],
        [22, 4, 120],
        [6, 2, 12],
        [8, 4.5, 250],
        [10, 2, 18],
        [30, 4.5, 450],
        [1, 1, 10],
        [4, 3, 30],
    ]
)
WHISKEY_QUERY = np.array([[2.0, 5.0]])


def _inverse_square(d: np.ndarray) -> np.ndarray:
    return 1.0 / d**2


#: scikit-learn's "distance" weights are 1/d; the textbook's (and ours) are 1/d^2.
SKLEARN_WEIGHTS = {"uniform": "uniform", "distance": _inverse_square}


def test_salary_age_distances_before_normalisation():
    D = pairwise(SALARY_QUERY, SALARY_AGE, metric="euclidean").values[0]
    assert D[0] == pytest.approx(2300.0078, abs=1e-4)
    assert D[5] == pytest.approx(102.3914, abs=1e-4)
    model = KNNClassifier(n_neighbors=1).fit(SALARY_AGE, PURCHASED)
    _, idx = model.kneighbors(SALARY_QUERY)
    assert idx[0, 0] == 5  # ID 6: salary dominates, age hardly counts
    assert model.predict(SALARY_QUERY)[0] == "yes"


def test_salary_age_nearest_neighbour_changes_after_range_normalisation():
    model = KNNClassifier(n_neighbors=1, normalize="range").fit(SALARY_AGE, PURCHASED)
    dist, idx = model.kneighbors(SALARY_QUERY)
    assert idx[0, 0] == 0  # ID 1 once both features count equally
    lo, hi = SALARY_AGE.min(axis=0), SALARY_AGE.max(axis=0)
    scaled = (SALARY_AGE - lo) / (hi - lo)
    q = (SALARY_QUERY[0] - lo) / (hi - lo)
    assert dist[0, 0] == pytest.approx(np.sqrt(((scaled[0] - q) ** 2).sum()), rel=1e-12)
    assert dist[0, 0] == pytest.approx(0.1935, abs=1e-4)
    assert model.predict(SALARY_QUERY)[0] == "no"


def test_range_normalisation_to_another_interval_keeps_neighbours():
    a = KNNClassifier(n_neighbors=3, normalize="range").fit(SALARY_AGE, PURCHASED)
    b = KNNClassifier(n_neighbors=3, normalize="range", feature_range=(-1, 1))
    b.fit(SALARY_AGE, PURCHASED)
    da, ia = a.kneighbors(SALARY_QUERY)
    db, ib = b.kneighbors(SALARY_QUERY)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_allclose(db, 2 * da)


def test_whiskey_three_nearest_mean_after_range_normalisation():
    X, price = WHISKEY[:, :2], WHISKEY[:, 2]
    model = KNNRegressor(n_neighbors=3, normalize="range").fit(X, price)
    _, idx = model.kneighbors(WHISKEY_QUERY)
    assert sorted(idx[0] + 1) == [3, 12, 16]
    assert model.predict(WHISKEY_QUERY)[0] == pytest.approx(168.33, abs=0.005)


@pytest.mark.parametrize("k", [3, 20])
def test_whiskey_distance_weighted_prediction(k):
    X, price = WHISKEY[:, :2], WHISKEY[:, 2]
    model = KNNRegressor(n_neighbors=k, weights="distance", normalize="range").fit(X, price)
    lo, hi = X.min(axis=0), X.max(axis=0)
    d = np.sqrt((((X - lo) / (hi - lo) - (WHISKEY_QUERY[0] - lo) / (hi - lo)) ** 2).sum(axis=1))
    nearest = np.argsort(d)[:k]
    w = 1 / d[nearest] ** 2
    expected = (w * price[nearest]).sum() / w.sum()
    assert model.predict(WHISKEY_QUERY)[0] == pytest.approx(expected, rel=1e-12)
    oracle = KNeighborsRegressor(n_neighbors=k, weights=_inverse_square)
    oracle.fit((X - lo) / (hi - lo), price)
    assert model.predict(WHISKEY_QUERY)[0] == pytest.approx(
        oracle.predict((WHISKEY_QUERY - lo) / (hi - lo))[0], rel=1e-12
    )


def test_exact_matches_take_the_whole_weighted_vote():
    d = np.array([[0.0, 0.5, 1.0], [0.5, 1.0, 2.0]])
    w = vote_weights(d, "distance")
    np.testing.assert_array_equal(w[0], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(w[1], [4.0, 1.0, 0.25])
    X = np.array([[0.0], [0.0], [1.0], [1.1]])
    y = np.array([1.0, 3.0, 100.0, 100.0])
    model = KNNRegressor(n_neighbors=4, weights="distance").fit(X, y)
    assert model.predict(np.array([[0.0]]))[0] == 2.0


def test_weighted_vote_can_overturn_majority():
    X = np.array([[0.0], [1.0], [1.1], [1.2]])
    y = np.array(["a", "b", "b", "b"])
    q = np.array([[0.1]])
    assert KNNClassifier(n_neighbors=4).fit(X, y).predict(q)[0] == "b"
    assert KNNClassifier(n_neighbors=4, weights="distance").fit(X, y).predict(q)[0] == "a"


@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev", "minkowski:3"])
def test_classifier_matches_scikit_learn(weights, metric):
    X, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(0)
    X = X + rng.normal(scale=1e-6, size=X.shape)  # no exactly tied distances
    train, test = np.arange(0, 150, 2), np.arange(1, 150, 2)
    name, _, p = metric.partition(":")
    oracle = KNeighborsClassifier(
        n_neighbors=7,
        weights=SKLEARN_WEIGHTS[weights],
        metric=name,
        **({"p": float(p)} if p else {}),
    ).fit(X[train], y[train])
    for algorithm in ("kd_tree", "brute"):
        model = KNNClassifier(n_neighbors=7, weights=weights, metric=metric, algorithm=algorithm)
        model.fit(X[train], y[train])
        np.testing.assert_array_equal(model.predict(X[test]), oracle.predict(X[test]))
        np.testing.assert_allclose(model.predict_proba(X[test]), oracle.predict_proba(X[test]))


def test_regressor_matches_scikit_learn_with_zscores():
    from sklearn.preprocessing import StandardScaler

    X, y = make_regression(n_samples=200, n_features=5, noise=1.0, random_state=0)
    scaler = StandardScaler().fit(X[:150])
    for weights in ("uniform", "distance"):
        oracle = KNeighborsRegressor(n_neighbors=5, weights=SKLEARN_WEIGHTS[weights])
        oracle.fit(scaler.transform(X[:150]), y[:150])
        model = KNNRegressor(n_neighbors=5, weights=weights, normalize="zscore").fit(
            X[:150], y[:150]
        )
        np.testing.assert_allclose(
            model.predict(X[150:]), oracle.predict(scaler.transform(X[150:])), rtol=1e-10
        )


def test_cosine_and_mahalanobis_metrics_agree_with_brute_oracle():
    X, y = load_iris(return_X_y=True)
    for metric in ("cosine", "mahalanobis"):
        model = KNNClassifier(n_neighbors=5, metric=metric).fit(X[::2], y[::2])
        kw = (
            {"metric_params": {"VI": np.linalg.inv(np.cov(X[::2].T))}} if metric != "cosine" else {}
        )
        oracle = KNeighborsClassifier(n_neighbors=5, metric=metric, algorithm="brute", **kw)
        oracle.fit(X[::2], y[::2])
        agree = (model.predict(X[1::2]) == oracle.predict(X[1::2])).mean()
        assert agree == 1.0


def test_forest_similarity_metrics_classify_iris(client):
    X, y = load_iris(return_X_y=True)
    for metric in ("rf-proximity", "rfgap"):
        # no client= parameter: the forests find the session's client as the default
        # client (scikit-learn's clone, in cross_val_score, cannot copy a client)
        model = KNNClassifier(n_neighbors=5, metric=metric, n_estimators=30, random_state=0)
        model.fit(X[::2], y[::2])
        assert (model.predict(X[1::2]) == y[1::2]).mean() > 0.9, metric


def test_rf_similarities_against_dense_oracle(client):
    X, y = load_iris(return_X_y=True)
    Xq = X[::10] + 0.05
    for kind in ("rf-proximity", "rfgap"):
        with execution(client):
            sim = ProximitySimilarity(kind, n_estimators=20, random_state=1).fit(X, y)
        S = sim.cross_similarity(Xq)
        forest = sim.forest_
        lq, lf, c = forest.apply(Xq), forest.leaves_, forest.inbag_.astype(float)
        same = lq[:, None, :] == lf[None, :, :]
        if kind == "rf-proximity":
            expected = same.mean(axis=2)
        else:
            mass = np.einsum("qjt,jt->qt", same, c)
            expected = (same * c[None] / mass[:, None, :]).mean(axis=2)
            np.testing.assert_allclose(S.sum(axis=1), 1.0)
        np.testing.assert_allclose(S, expected, rtol=1e-6, atol=1e-7)


def test_callable_metric():
    X, y = load_iris(return_X_y=True)

    def manhattan(A, B):
        return np.abs(A[:, None, :] - B[None, :, :]).sum(axis=2)

    a = KNNClassifier(n_neighbors=5, metric=manhattan).fit(X[::2], y[::2])
    b = KNNClassifier(n_neighbors=5, metric="manhattan", algorithm="brute").fit(X[::2], y[::2])
    np.testing.assert_array_equal(a.kneighbors(X[1::2])[1], b.kneighbors(X[1::2])[1])


def test_beta_similarity_metric(client):
    X, y = load_iris(return_X_y=True)
    model = KNNClassifier(n_neighbors=5, metric="beta", n_estimators=30, random_state=0)
    model.fit(X[::2], y[::2])
    assert (model.predict(X[1::2]) == y[1::2]).mean() > 0.85


def test_sequential_feature_selection_finds_the_informative_features():
    rng = np.random.default_rng(0)
    n = 200
    informative = rng.normal(size=(n, 2))
    y = (informative[:, 0] + informative[:, 1] > 0).astype(int)
    X = np.column_stack([rng.normal(size=(n, 2)), informative, rng.normal(size=(n, 2))])
    for direction in ("forward", "backward"):
        model = KNNClassifier(n_neighbors=5, select=direction, n_features_to_select=2)
        model.fit(X, y)
        np.testing.assert_array_equal(np.flatnonzero(model.support_), [2, 3])
        assert model.predict(X).shape == (n,)


def test_saved_model_predicts_the_same(tmp_path):
    X, y = load_iris(return_X_y=True)
    for model in (
        KNNClassifier(n_neighbors=3, weights="distance", normalize="range", metric="mahalanobis"),
        KNNRegressor(n_neighbors=4, normalize="zscore", metric="minkowski:3"),
    ):
        target = y if isinstance(model, KNNClassifier) else X[:, 0]
        model.fit(X[::2, 1:], target[::2])
        path = tmp_path / f"{type(model).__name__}.zarr"
        save_model(model, path)
        again = load_model(path)
        np.testing.assert_array_equal(again.predict(X[1::2, 1:]), model.predict(X[1::2, 1:]))
        assert not list(path.rglob("*.pkl"))


def test_bad_parameters_and_inputs_are_clear():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ParameterError, match="n_neighbors"):
        KNNClassifier(n_neighbors=0).fit(X, y)
    with pytest.raises(ParameterError, match="weights"):
        KNNClassifier(weights="inverse").fit(X, y)
    with pytest.raises(ParameterError, match="unknown metric 'cosin'"):
        KNNClassifier(metric="cosin").fit(X, y)
    with pytest.raises(ParameterError, match="only 10 training rows"):
        KNNClassifier(n_neighbors=11).fit(X[:10], y[:10])
    with pytest.raises(ParameterError, match="needs a Minkowski distance"):
        KNNClassifier(metric="cosine", algorithm="kd_tree").fit(X, y).predict(X)
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(InputError, match="missing or infinite"):
        KNNClassifier().fit(bad, y)
    with pytest.raises(NotFittedError):
        KNNClassifier().predict(X)
    with pytest.raises(InputError, match="expecting 4 features"):
        KNNClassifier().fit(X, y).predict(X[:, :3])


@pytest.mark.parametrize("metric", ["rf-proximity", "rfgap", "beta"])
def test_forest_metric_model_from_the_command_line(tmp_path, client, metric):
    import pandas as pd
    from click.testing import CliRunner

    from distforest.apps.knn import FOREST_GROUP
    from distforest.cli.main import cli

    X, y = load_iris(return_X_y=True)
    names = ["sl", "sw", "pl", "pw"]
    frame = pd.DataFrame(X, columns=names).assign(kind=np.array(["a", "b", "c"])[y])
    frame.iloc[::2].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[1::2, ::-1].to_csv(tmp_path / "test.csv", index=False)  # columns in another order
    model_path = tmp_path / "model.zarr"

    def invoke(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    invoke("-q", "knn", "fit", tmp_path / "train.csv", "--target", "kind", "--metric", metric,
           "--k", "5", "--weights", "distance", "--trees", "15", "--seed", "3",
           "--out", model_path, "--scheduler", client.scheduler.address)  # fmt: skip
    assert (model_path / FOREST_GROUP).is_dir()
    assert not [p for p in model_path.rglob("*") if p.suffix in (".pkl", ".pickle")]
    invoke("-q", "knn", "predict", model_path, tmp_path / "test.csv", "--out", tmp_path / "p.csv")
    got = pd.read_csv(tmp_path / "p.csv")["kind"].to_numpy()
    # oracle: the same model fitted in Python (same seed: the same trees)
    oracle = KNNClassifier(n_neighbors=5, weights="distance", metric=metric, n_estimators=15,
                           random_state=3).fit(X[::2], frame["kind"].to_numpy()[::2])  # fmt: skip
    np.testing.assert_array_equal(got, oracle.predict(X[1::2]))
    assert (got == frame["kind"].to_numpy()[1::2]).mean() > 0.85
    loaded = load_model(model_path)
    d_a, i_a = loaded.kneighbors(X[1::2])
    d_b, i_b = oracle.kneighbors(X[1::2])
    np.testing.assert_array_equal(i_a, i_b)
    np.testing.assert_allclose(d_a, d_b, rtol=1e-6)


def test_models_with_code_as_metric_are_not_saved(tmp_path):
    X, y = load_iris(return_X_y=True)

    def manhattan(A, B):
        return np.abs(A[:, None, :] - B[None, :, :]).sum(axis=2)

    model = KNNClassifier(n_neighbors=3, metric=manhattan).fit(X, y)
    with pytest.raises(ParameterError, match="cannot be saved"):
        save_model(model, tmp_path / "m.zarr")
    assert not (tmp_path / "m.zarr").exists()


def test_knn_pipeline_runs_and_matches_oracles(tmp_path, client, monkeypatch):
    import pandas as pd
    import xarray as xr
    from click.testing import CliRunner
    from scipy.spatial.distance import cdist
    from sklearn.preprocessing import StandardScaler

    from distforest.cli.main import cli
    from distforest.io import load_table

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)  # the shipped pipeline's input paths are relative to the repository
    out = tmp_path / "knn"
    args = ["pipelines/knn.yaml", "--set", f"output.dir={out}"]
    result = CliRunner().invoke(cli, ["validate", *args[:1]])
    assert result.exit_code == 0 and result.output.startswith("ok"), result.output
    result = CliRunner().invoke(cli, ["-q", "run", *args, "--scheduler", client.scheduler.address],
                                catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "k-NN classification model" in result.output and "predictions:" in result.output

    table = load_table(root / "distforest/data/ionosphere.csv", target="Class")
    Z = StandardScaler().fit_transform(table.X)
    D = cdist(Z, Z)
    np.fill_diagonal(D, np.inf)
    # exact oracle, ties to the smaller row number (the data have duplicated rows)
    idx = np.lexsort((np.broadcast_to(np.arange(len(Z)), D.shape), D), axis=1)[:, :10]
    stored = xr.open_zarr(out / "neighbors.zarr")
    np.testing.assert_array_equal(stored["neighbor_index"].values, idx)
    np.testing.assert_allclose(stored["neighbor_distance"].values,
                               np.take_along_axis(D, idx, 1), rtol=1e-12)  # fmt: skip
    oracle = KNNClassifier(n_neighbors=5, weights="distance", normalize="range")
    expected = oracle.fit(table.X, table.y).predict(table.X)
    predictions = pd.read_csv(out / "predictions.csv")
    np.testing.assert_array_equal(predictions["Class"].to_numpy(), expected)
    assert load_model(out / "knn_model.zarr").n_neighbors == 5


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"neighbors": "{metric: cosin}"}, "unknown metric 'cosin'"),
        ({"knn": "{metric: rf-proximty}"}, "or a forest metric"),
        ({"knn": "{k: 3}", "input": "{path: INPUT}"}, "knn needs the column to predict"),
        ({"knn": "{weights: inverse}"}, "key 'knn.weights' must be one of uniform, distance"),
        ({"knn": "{predict: {input: INPUT, output: p.csv}}"}, "unknown key knn.predict.'output'"),
        ({"knn": "{predict: {input: /no/such.csv, out: p.csv}}"}, "does not exist"),
        ({"knn": "{k: 0}"}, "knn.k must be at least 1"),
        ({"xforest": "{n_estimators: 10}"}, "remove xforest"),
        ({"output": "{dir: DIR, store: s.zarr}"}, "output.store does not apply"),
    ],
)
def test_knn_pipeline_errors_are_clear(tmp_path, edit, message):
    from distforest.errors import ConfigError
    from distforest.jobs.pipeline import load_pipeline

    data = str(Path(__file__).resolve().parents[1] / "distforest/data/ionosphere.csv")
    sections = {"input": f"{{path: {data}, target: Class}}", "knn": "{k: 3}",
                "output": f"{{dir: {tmp_path}}}", **edit}  # fmt: skip
    text = "".join(f"{k}: {v}\n" for k, v in sections.items())
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("INPUT", data).replace("DIR", str(tmp_path)))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_pipeline(path)


@pytest.mark.parametrize("metric", ["rfgap", "beta"])
def test_forest_metric_search_on_the_cluster_equals_in_process(client, metric):
    # the similarity travels to the workers; the client stays with the driver
    X, y = load_iris(return_X_y=True)
    params = {"n_neighbors": 5, "metric": metric, "n_estimators": 12, "random_state": 2}
    here = KNNClassifier(**params).fit(X[::2], y[::2])
    there = KNNClassifier(**params, batch_size=20).set_execution(client).fit(X[::2], y[::2])
    d_a, i_a = here.kneighbors(X[1::2])
    d_b, i_b = there.kneighbors(X[1::2])
    np.testing.assert_array_equal(i_a, i_b)
    np.testing.assert_array_equal(d_a, d_b)
    assert there._current_execution().client is client  # the model keeps its execution
    copy = pickle.loads(pickle.dumps(there))  # ... but it does not travel with it
    assert "_execution" not in vars(copy)
    np.testing.assert_array_equal(copy.kneighbors(X[1::2])[1], i_a)


def test_a_forest_metric_predicts_a_single_row():
    """A search batch of one query row: the forest's apply() took at least two rows."""
    X, y = load_iris(return_X_y=True)
    model = KNNClassifier(metric="rf-proximity", n_estimators=5, random_state=0).fit(X, y)
    np.testing.assert_array_equal(model.predict(X[:1]), model.predict(X[:3])[:1])
