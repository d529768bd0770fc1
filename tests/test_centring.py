"""Double centring of distance matrices (SimForest's ``--distances``) against numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner
from scipy.spatial.distance import cdist

from distforest.cli.main import cli
from distforest.errors import InputError
from distforest.io import centring
from distforest.io.centring import centre_new_rows, double_centre


def _points(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 4)) * [1.0, 2.0, 0.5, 3.0] + 7.0


def _oracle(D: np.ndarray) -> np.ndarray:
    n = D.shape[0]
    J = np.eye(n) - np.ones((n, n)) / n
    return -0.5 * J @ (D**2) @ J


@pytest.mark.parametrize("block_rows", [None, 1, 5])
def test_double_centring_equals_numpy_whatever_the_blocks(tmp_path, monkeypatch, block_rows):
    X = _points(37)
    D = cdist(X, X)
    D = (D + D.T) / 2  # exactly symmetric
    np.save(tmp_path / "D.npy", D)
    if block_rows is not None:  # blocks of rows read, and chunks of rows written
        monkeypatch.setattr(centring, "BLOCK_BYTES", 8 * 37 * block_rows)
        monkeypatch.setattr(centring, "CHUNK_BYTES", 8 * 37 * (block_rows + 2))
    out = str(tmp_path / "S.zarr")
    stats = double_centre(str(tmp_path / "D.npy"), out)
    S = zarr.open_array(out, mode="r")[...]
    np.testing.assert_allclose(S, _oracle(D), rtol=1e-10, atol=1e-9)
    # classical scaling: for Euclidean distances S is the Gram matrix of the centred points
    Xc = X - X.mean(axis=0)
    np.testing.assert_allclose(S, Xc @ Xc.T, rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(stats.column_means, (D**2).mean(axis=0), rtol=1e-12)
    assert np.isclose(stats.grand_mean, (D**2).mean(), rtol=1e-12)
    if block_rows is not None:  # the same bits as with the default blocks
        monkeypatch.undo()
        other = str(tmp_path / "S2.zarr")
        double_centre(str(tmp_path / "D.npy"), other)
        np.testing.assert_array_equal(S, zarr.open_array(other, mode="r")[...])


def test_new_objects_follow_gowers_rule(tmp_path):
    X, new = _points(30, 1), _points(9, 2)
    D = cdist(X, X)
    D = (D + D.T) / 2
    stats = double_centre(D, str(tmp_path / "S.zarr"))
    m = centre_new_rows(cdist(new, X), stats, str(tmp_path / "Q.zarr"))
    Q = zarr.open_array(str(tmp_path / "Q.zarr"), mode="r")[...]
    mu = X.mean(axis=0)
    assert m == 9
    np.testing.assert_allclose(Q, (new - mu) @ (X - mu).T, rtol=1e-9, atol=1e-8)
    # a training object as a new one gets its own row of S
    centre_new_rows(D[:4], stats, str(tmp_path / "T.zarr"))
    S = zarr.open_array(str(tmp_path / "S.zarr"), mode="r")[...]
    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "T.zarr"))[...], S[:4], atol=1e-9)


def test_refuses_missing_asymmetric_and_misshaped(tmp_path):
    D = cdist(_points(12), _points(12))
    D = (D + D.T) / 2
    holes = D.copy()
    holes[3, 5] = holes[5, 3] = np.nan
    with pytest.raises(InputError, match=r"\[3, 5\] is NaN; double centring needs every"):
        double_centre(holes, str(tmp_path / "a.zarr"))
    skew = D.copy()
    skew[2, 7] += 1.0
    with pytest.raises(InputError, match="not symmetric"):
        double_centre(skew, str(tmp_path / "b.zarr"))
    stats = double_centre(D, str(tmp_path / "c.zarr"))
    with pytest.raises(InputError, match="trained on 12 objects"):
        centre_new_rows(D[:, :10], stats, str(tmp_path / "d.zarr"))


def test_cli_fit_and_predict_with_distances(tmp_path):
    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal(0, 1, (40, 3)), rng.normal(2.5, 1, (40, 3))])
    y = np.repeat(["a", "b"], 40)
    train, test = np.arange(0, 80, 2), np.arange(1, 80, 2)
    D = cdist(X[train], X[train])
    np.save(tmp_path / "D.npy", (D + D.T) / 2)
    np.save(tmp_path / "Q.npy", cdist(X[test], X[train]))
    mu = X[train].mean(axis=0)
    np.save(tmp_path / "S.npy", (X[train] - mu) @ (X[train] - mu).T)  # the centred matrix
    np.save(tmp_path / "QS.npy", (X[test] - mu) @ (X[train] - mu).T)
    pd.DataFrame({"label": y[train]}).to_csv(tmp_path / "labels.csv", index=False)

    def run(*args):
        result = CliRunner().invoke(cli, ["-q", *map(str, args)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    common = ("--labels", tmp_path / "labels.csv", "--trees", 15, "--seed", 2)
    run("simforest", "fit", "--distances", tmp_path / "D.npy", *common, "--out", tmp_path / "m")
    run("simforest", "predict", tmp_path / "m", "--distances", tmp_path / "Q.npy",
        "--out", tmp_path / "p.csv")  # fmt: skip
    run("simforest", "fit", "--similarity", tmp_path / "S.npy", *common, "--out", tmp_path / "s")
    run("simforest", "predict", tmp_path / "s", "--similarity", tmp_path / "QS.npy",
        "--out", tmp_path / "q.csv")  # fmt: skip
    got, expected = pd.read_csv(tmp_path / "p.csv"), pd.read_csv(tmp_path / "q.csv")
    pd.testing.assert_frame_equal(got, expected, rtol=1e-9)
    assert (got["prediction"].to_numpy() == y[test]).mean() > 0.8
    assert not list(tmp_path.glob(".centred-*"))  # the temporary similarities are gone
    args = ["simforest", "predict", tmp_path / "m", "--similarity", tmp_path / "QS.npy", "--out",
            tmp_path / "x.csv"]  # fmt: skip
    bad = CliRunner().invoke(cli, [str(a) for a in args])
    assert bad.exit_code == 2 and "give --distances Q.npy" in bad.output
