"""Models fitted elsewhere on a folder of parts: the same bytes as on one table, the
driver never holding the rows' (n, T) arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import make_classification
from tracing import traced_peak

pd = pytest.importorskip("pandas")
lgb = pytest.importorskip("lightgbm")


def _folder(tmp_path: Path, X: np.ndarray, y: np.ndarray, parts: int = 3) -> Path:
    """The rows as a folder of Parquet parts (columns f0.., then ``label``)."""
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(label=y)
    folder = tmp_path / "parts"
    folder.mkdir()
    for p, rows in enumerate(np.array_split(np.arange(len(frame)), parts)):
        frame.iloc[rows].to_parquet(folder / f"part-{p}.parquet", index=False)
    return folder


def test_weighted_tiles_from_a_folder_keep_the_driver_flat(tmp_path, client) -> None:
    """KeRF and boosted tiles of a model's forest read from a folder: the driver's traced
    allocations stay under half of the rows' (n, T) weights (float64), which the driver
    built whole before (measured: 0.83 MB here against 4.8 MB of weights, 2,000 rows and
    300 trees: few rows keep the (n, n) tiles cheap, many trees keep the weights large; the
    code before peaked at 19.1 MB with 250 trees); the matrices are those of the rows in
    memory, bit for bit."""
    from distforest import ProximityForest, execution
    from distforest.forests.products import stored_location
    from distforest.store.run_store import RunStore

    n, trees = 2_000, 300
    X, y = make_classification(n, 5, n_informative=3, n_redundant=0, random_state=0)
    model = lgb.LGBMClassifier(n_estimators=trees, num_leaves=31, max_bin=31, n_jobs=1,
                               verbose=-1).fit(X, y)  # fmt: skip
    folder = _folder(tmp_path, X, y)
    with execution(client=client):
        by_parts = ProximityForest.from_model(model, str(folder), "label")
        where = stored_location(by_parts.leaves_)
        assert where is not None  # the rows' arrays are in the store, not the driver
        rs = RunStore.open(where[0], mode="r+")
        by_parts.write_proximity(rs, "boosted")  # imports, kernels, the cluster warmed up
        peak = traced_peak(lambda: by_parts.write_proximity(rs, "kerf"))
    weights_bytes = 8 * n * trees
    assert peak < weights_bytes / 2, (peak, weights_bytes)
    in_memory = ProximityForest.from_model(model, X, y)
    for method in ("kerf", "boosted"):
        stored = np.asarray(rs.read(f"proximity_{method}"))
        np.testing.assert_array_equal(stored, in_memory.proximity(method).values)
    leaves = model.predict(X, pred_leaf=True)  # the oracle: the model's own routing
    kerf = np.zeros((50, n))  # 50 rows against all, tree by tree
    for t in range(trees):
        same = leaves[:50, t, None] == leaves[None, :, t]
        kerf += same / same.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(rs.read("proximity_kerf"))[:50], kerf / trees,
                               atol=1e-6)  # fmt: skip


def _invoke(*args: object):
    from click.testing import CliRunner

    from distforest.cli.main import cli

    return CliRunner().invoke(cli, ["-q", *[str(a) for a in args]])


@pytest.fixture(scope="module")
def model_on_parts(tmp_path_factory):
    """One table as a CSV and as a folder of parts, and a LightGBM model file fitted on it."""
    folder = tmp_path_factory.mktemp("parts_model")
    X, y = make_classification(300, 5, n_informative=3, n_redundant=0, random_state=4)
    X[::13, 1] = np.nan  # missing values routed by the model's own branches
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)]).assign(label=y)
    frame.to_csv(folder / "train.csv", index=False)
    parts = _folder(folder, X, y)
    model = lgb.LGBMClassifier(n_estimators=6, num_leaves=8, verbose=-1).fit(X, y)
    model.booster_.save_model(str(folder / "model.txt"))
    return folder, parts, X, model


@pytest.mark.parametrize("command", ["outliers", "mds"])
def test_answers_with_a_model_file_on_a_folder_same_bytes(command, model_on_parts, tmp_path):
    """``outliers`` / ``mds --model`` on a folder of parts (routed by partitions) write the
    bytes they write for the one file; the outlier scores are R's from the model's leaves."""
    folder, parts, X, model = model_on_parts
    written = {}
    for name, source in (("file", folder / "train.csv"), ("parts", parts)):
        written[name] = tmp_path / f"{name}.csv"
        result = _invoke(command, source, "--target", "label", "--model", folder / "model.txt",
                         "--out", written[name])  # fmt: skip
        assert result.exit_code == 0, (name, result.output)
    assert written["parts"].read_bytes() == written["file"].read_bytes()
    if command == "outliers":  # the oracle: raw = n / sum_j P_ij^2 within the class
        leaves = model.booster_.predict(X, pred_leaf=True)
        P = (leaves[:, None, :] == leaves[None, :, :]).mean(axis=2)
        y = pd.read_csv(folder / "train.csv")["label"].to_numpy()
        scores = pd.read_csv(written["parts"])["outlier"].to_numpy()
        for label in np.unique(y):
            members = y == label
            raw = members.sum() / (P[np.ix_(members, members)] ** 2).sum(axis=1)
            med = np.median(raw)
            mad = 1.4826 * np.median(np.abs(raw - med))
            np.testing.assert_allclose(scores[members], (raw - med) / mad, rtol=1e-5)
