"""k-NN with SMERF's learned distance as metric: the search, saved models, the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.spatial.distance import cdist

from distforest.apps.knn import FOREST_GROUP, KNNClassifier, KNNRegressor, load_model, save_model
from distforest.cli.main import cli
from distforest.errors import ParameterError
from distforest.forests.forest_similarity import FOREST_METRICS, SMERFDistance
from distforest.forests.smerf import SMERF
from distforest.parallel.execution import execution


@pytest.fixture(autouse=True)
def _in_process():
    with execution("synchronous"):
        yield


def _data(n: int = 70, seed: int = 0):
    """Five features; the observed distance (and the target) use the first two only."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    D = cdist(X[:, :2], X[:, :2])
    return X, D, X[:, 0] + X[:, 1]


def test_neighbours_are_the_smallest_learned_distances():
    assert "smerf" in FOREST_METRICS
    X, D, y = _data()
    train, test = np.arange(0, 70, 2), np.arange(1, 70, 2)
    params = {"n_estimators": 12, "random_state": 5}
    model = KNNRegressor(4, metric="smerf", metric_params={"distances": D[np.ix_(train, train)]},
                         **params).fit(X[train], y[train])  # fmt: skip
    dist, idx = model.kneighbors(X[test])
    # oracle: the same SMERF (same seed, same trees), its full predicted matrix, sorted
    smerf = SMERF(**params).fit(X[train], D[np.ix_(train, train)])
    full = np.asarray(smerf.predict_distance(X[test]).values, dtype=np.float64)
    np.testing.assert_array_equal(smerf.leaves_, model.similarity_.forest_.leaves_)
    np.testing.assert_allclose(dist, np.sort(full, axis=1)[:, :4], rtol=1e-12)
    np.testing.assert_allclose(np.take_along_axis(full, idx, axis=1), dist, rtol=1e-12)
    np.testing.assert_allclose(model.predict(X[test]), y[train][idx].mean(axis=1))
    # the learned distance ignores the noise features: better neighbours than Euclidean
    plain = KNNRegressor(4).fit(X[train], y[train])
    err = np.abs(model.predict(X[test]) - y[test]).mean()
    assert err < np.abs(plain.predict(X[test]) - y[test]).mean()


def test_saved_model_predicts_identically_without_the_original_distances(tmp_path):
    X, D, y = _data(60, seed=1)
    labels = np.where(y > 0, "up", "down")
    np.save(tmp_path / "D.npy", D[::2, ::2])
    model = KNNClassifier(3, weights="distance", metric="smerf", n_estimators=10,
                          metric_params={"distances": str(tmp_path / "D.npy")},
                          random_state=2).fit(X[::2], labels[::2])  # fmt: skip
    save_model(model, tmp_path / "knn.zarr")
    proba, distances = model.predict_proba(X[1::2]), model.kneighbors(X[1::2])[0]
    (tmp_path / "D.npy").unlink()  # the model keeps the SMERF's own copy of D
    assert (tmp_path / "knn.zarr" / FOREST_GROUP).is_dir()
    assert not [p for p in (tmp_path / "knn.zarr").rglob("*") if p.suffix in (".pkl", ".pickle")]
    again = load_model(tmp_path / "knn.zarr")
    assert isinstance(again.similarity_, SMERFDistance)
    np.testing.assert_array_equal(again.predict_proba(X[1::2]), proba)
    np.testing.assert_array_equal(again.kneighbors(X[1::2])[0], distances)


def test_refusals():
    X, D, y = _data(30)
    with pytest.raises(ParameterError, match=r"metric_params=\{'distances': D\}"):
        KNNRegressor(metric="smerf", n_estimators=3).fit(X, y)
    with pytest.raises(ParameterError, match="not \\['gamma'\\]"):
        KNNRegressor(metric="smerf", metric_params={"distances": D, "gamma": 1}).fit(X, y)
    with pytest.raises(ParameterError, match="remove select"):
        KNNRegressor(metric="smerf", metric_params={"distances": D}, select="forward").fit(X, y)


def test_cli_knn_fit_and_predict_with_smerf(tmp_path):
    X, D, y = _data(60, seed=3)
    names = [f"f{j}" for j in range(5)]
    frame = pd.DataFrame(X, columns=names).assign(target=y)
    frame.iloc[::2].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[1::2].drop(columns="target").to_csv(tmp_path / "test.csv", index=False)
    np.save(tmp_path / "D.npy", D[::2, ::2])
    fit = ["-q", "knn", "fit", tmp_path / "train.csv", "--target", "target", "--task",
           "regression", "--metric", "smerf", "--k", 3, "--trees", 8, "--seed", 4]  # fmt: skip
    runner = CliRunner()
    result = runner.invoke(cli, [str(a) for a in [*fit, "--distances", tmp_path / "D.npy",
                                                  "--out", tmp_path / "m.zarr"]])  # fmt: skip
    assert result.exit_code == 0, result.output
    predict = ["-q", "knn", "predict", tmp_path / "m.zarr", tmp_path / "test.csv", "--out",
               tmp_path / "p.csv"]  # fmt: skip
    result = runner.invoke(cli, [str(a) for a in predict])
    assert result.exit_code == 0, result.output
    oracle = KNNRegressor(3, metric="smerf", metric_params={"distances": D[::2, ::2]},
                          n_estimators=8, random_state=4).fit(X[::2], y[::2])  # fmt: skip
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["target"],
                               oracle.predict(X[1::2]), rtol=1e-12)  # fmt: skip
    missing = runner.invoke(cli, [str(a) for a in [*fit, "--out", tmp_path / "x.zarr"]])
    assert missing.exit_code == 2 and "--metric smerf needs --distances" in missing.output
    wrong = [*fit[:9], "euclidean", *fit[10:], "--distances", tmp_path / "D.npy", "--out",
             tmp_path / "y"]  # fmt: skip
    result = runner.invoke(cli, [str(a) for a in wrong])
    assert result.exit_code == 2 and "--distances is for --metric smerf" in result.output
    assert not (tmp_path / "x.zarr").exists() and not (tmp_path / "y").exists()


def test_knn_pipeline_refuses_smerf_naming_the_command(tmp_path):
    """A k-NN pipeline cannot pass SMERF's distance matrix: exit 4 naming `knn fit`."""
    from pathlib import Path

    import yaml

    source = Path(__file__).resolve().parents[1] / "pipelines" / "knn.yaml"
    config = yaml.safe_load(source.read_text())
    config["knn"]["metric"] = "smerf"
    config["input"]["path"] = str(source.parents[1] / config["input"]["path"])
    path = tmp_path / "knn_smerf.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 4, result.output
    assert "knn.metric" in result.output and "--metric smerf --distances" in result.output
