"""`distforest smerf fit / predict / importances` end to end, and bad input refused whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

from distforest import SMERF, execution
from distforest.cli.main import cli


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _write(tmp_path: Path, n: int = 80, d: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    r = np.sqrt(X[:, 0] ** 2 + X[:, 1] ** 2)
    D = (r[:, None] - r[None, :]) ** 2
    names = [f"x{k}" for k in range(d)]
    pd.DataFrame(X, columns=names).to_csv(tmp_path / "X.csv", index=False)
    np.save(tmp_path / "D.npy", D)
    A = rng.uniform(-1, 1, size=(30, d))
    pd.DataFrame(A, columns=names).to_csv(tmp_path / "A.csv", index=False)
    pd.DataFrame(A[:12], columns=names).to_csv(tmp_path / "B.csv", index=False)
    return X, D, A


def test_fit_predict_importances(client, tmp_path):
    X, D, A = _write(tmp_path)
    address = client.scheduler.address
    model = tmp_path / "model.zarr"
    result = invoke("-q", "smerf", "fit", tmp_path / "X.csv", "--distances", tmp_path / "D.npy",
                    "--trees", 15, "--max-features", "sqrt", "--seed", 3, "--out", model,
                    "--tile-size", 32, "--scheduler", address)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "15 trees on 80 rows x 6 features" in result.output
    assert (model / "feature_importances").exists()
    (tmp_path / "D.npy").unlink()  # the model predicts without it
    out = tmp_path / "pred.zarr"
    result = invoke("-q", "smerf", "predict", model, tmp_path / "A.csv", "--out", out,
                    "--tile-size", 16, "--scheduler", address)  # fmt: skip
    assert result.exit_code == 0, result.output
    got = xr.open_zarr(out)["distance"]
    assert got.shape == (30, 80) and got.dims == ("sample_i", "sample_j")
    assert got.encoding["chunks"] == (16, 16)
    with execution("synchronous"):
        ref = SMERF(n_estimators=15, random_state=3).fit(X, D)
    np.testing.assert_array_equal(got.values, ref.predict_distance(A).values)
    out_b = tmp_path / "pred_b.zarr"
    result = invoke("-q", "smerf", "predict", model, tmp_path / "A.csv", "--against",
                    tmp_path / "B.csv", "--out", out_b, "--scheduler", address)  # fmt: skip
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(
        xr.open_zarr(out_b)["distance"].values, ref.predict_distance(A, A[:12]).values
    )
    # One new row is a table to predict (a file read whole needs 2 rows only to fit)
    pd.DataFrame(A[:1], columns=[f"x{k}" for k in range(6)]).to_csv(tmp_path / "one.csv",
                                                                     index=False)  # fmt: skip
    out_1 = tmp_path / "pred_1.zarr"
    result = invoke("-q", "smerf", "predict", model, tmp_path / "one.csv", "--out", out_1,
                    "--scheduler", address)  # fmt: skip
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(xr.open_zarr(out_1)["distance"].values, got.values[:1])
    result = invoke("smerf", "importances", model, "--plot", tmp_path / "imp.png")
    assert result.exit_code == 0, result.output
    lines = [ln.split() for ln in result.output.splitlines() if ln.strip().startswith("x")]
    assert {lines[0][0], lines[1][0]} == {"x0", "x1"}  # the radial distance's dimensions
    assert float(lines[0][1]) == pytest.approx(ref.feature_importances_.max(), abs=1e-4)
    assert (tmp_path / "imp.png").stat().st_size > 1000


def _bad(D: np.ndarray, case: str) -> np.ndarray:
    if case == "not-square":
        return D[:, :-3]
    if case == "length":
        return D[:-1, :-1]
    if case == "all-nan":
        return np.full_like(D, np.nan)
    if case == "inf":
        D = D.copy()
        D[4, 9] = D[9, 4] = np.inf
        return D
    D = D.copy()
    D[2, 7] += 1.0  # non-symmetric: refused, not symmetrised
    return D


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("not-square", "a square matrix"),
        ("length", "but X has 80 rows"),
        ("all-nan", "no observed entry"),
        ("inf", "must be finite"),
        ("asymmetric", "not symmetric"),
    ],
)
def test_bad_distances_are_refused_and_nothing_is_written(tmp_path, case, message):
    _, D, _ = _write(tmp_path)
    np.save(tmp_path / "bad.npy", _bad(D, case))
    out = tmp_path / "model.zarr"
    result = CliRunner().invoke(cli, ["smerf", "fit", str(tmp_path / "X.csv"), "--distances",
                                      str(tmp_path / "bad.npy"), "--out", str(out)])  # fmt: skip
    assert result.exit_code == 3, result.output
    assert message in result.output
    assert not out.exists()
    assert not list(tmp_path.glob(".model.zarr*"))


def test_bad_rows_and_stores_are_refused(client, tmp_path):
    X, D, _ = _write(tmp_path, n=40)
    with execution("synchronous"):
        SMERF(n_estimators=3).fit(X, D).save(tmp_path / "model.zarr")
    pd.DataFrame(np.zeros((5, 4))).to_csv(tmp_path / "narrow.csv", index=False)
    out = tmp_path / "pred.zarr"
    result = CliRunner().invoke(cli, ["smerf", "predict", str(tmp_path / "model.zarr"),
                                      str(tmp_path / "narrow.csv"), "--out", str(out)])  # fmt: skip
    assert result.exit_code == 3 and "has 4 features" in result.output
    assert not out.exists()
    result = CliRunner().invoke(cli, ["smerf", "importances", str(tmp_path / "X.csv")])
    assert result.exit_code == 6, result.output
    result = CliRunner().invoke(cli, ["smerf", "fit", str(tmp_path / "X.csv"), "--distances",
                                      str(tmp_path / "D.npy"), "--out",
                                      str(tmp_path / "model.zarr")])  # fmt: skip
    assert result.exit_code == 6 and "already exists" in result.output


def test_fit_and_predict_refuse_outputs_that_do_not_fit_on_the_disk(client, tmp_path, monkeypatch):
    from distforest.jobs import estimates

    X, D, _ = _write(tmp_path, n=40)
    with execution("synchronous"):
        SMERF(n_estimators=3).fit(X, D).save(tmp_path / "model.zarr")
    free = 40 * 40 * 8 - 1  # less than the training distances the model keeps
    monkeypatch.setattr(estimates, "free_space", lambda directory: free)
    out = tmp_path / "new_model.zarr"
    result = CliRunner().invoke(cli, ["smerf", "fit", str(tmp_path / "X.csv"), "--distances",
                                      str(tmp_path / "D.npy"), "--out", str(out)])  # fmt: skip
    assert result.exit_code == 6 and "not enough disk space" in result.output, result.output
    assert not out.exists() and not list(tmp_path.glob(".new_model.zarr*"))
    monkeypatch.setattr(estimates, "free_space", lambda directory: 30 * 40 * 4 - 1)  # < the matrix
    pred = tmp_path / "pred.zarr"
    result = CliRunner().invoke(cli, ["smerf", "predict", str(tmp_path / "model.zarr"),
                                      str(tmp_path / "A.csv"), "--out", str(pred)])  # fmt: skip
    assert result.exit_code == 6 and "not enough disk space" in result.output, result.output
    assert not pred.exists()
    monkeypatch.setattr(estimates, "free_space", lambda directory: 10**12)
    result = CliRunner().invoke(cli, ["-q", "smerf", "predict", str(tmp_path / "model.zarr"),
                                      str(tmp_path / "A.csv"), "--out", str(pred),
                                      "--scheduler", client.scheduler.address])  # fmt: skip
    assert result.exit_code == 0, result.output
