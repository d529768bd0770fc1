"""SMERF pipelines (`distforest run` with a ``smerf`` section) end to end, and their mistakes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

from distforest import SMERF, execution
from distforest.cli.main import cli
from distforest.io import load_table
from distforest.jobs.smerf import class_distances
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "pipelines" / "smerf.yaml"
IONOSPHERE = ROOT / "distforest" / "data" / "ionosphere.csv"


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_shipped_pipeline_runs_resumes_and_is_not_repeated(tmp_path):
    out = tmp_path / "out"
    args = ("-q", "run", PIPELINE, "--set", f"output.dir={out}", "--set", "smerf.n_estimators=12")
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "distance 351 x 351" in result.output and "12 trees" in result.output
    stored = xr.open_zarr(out / "distance.zarr")["distance"]
    assert stored.encoding["chunks"] == (256, 256)
    table = load_table(IONOSPHERE, target="Class")
    with execution("synchronous"):  # the oracle: the estimator itself, same parameters
        ref = SMERF(n_estimators=12, random_state=0).fit(table, class_distances(table.y))
        expected = ref.oob_distance().values
    np.testing.assert_array_equal(stored.values, expected)
    model = SMERF.load(out / "model.zarr")
    np.testing.assert_array_equal(model.leaves_, ref.leaves_)
    assert (out / "report.json").exists()
    again = invoke(*args)
    assert again.exit_code == 0 and "already complete" in again.output, again.output
    # killed before its last stage: the rerun keeps the model and writes only the distances
    RunStore.open(out / "model.zarr", mode="r+").mark_running()
    import shutil

    shutil.rmtree(out / "distance.zarr")
    resumed = invoke(*args)
    assert resumed.exit_code == 0 and "resumed" in resumed.output, resumed.output
    assert SMERF.load(out / "model.zarr").fit_id_ == model.fit_id_
    np.testing.assert_array_equal(xr.open_zarr(out / "distance.zarr")["distance"].values, expected)


def _files(tmp_path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(60, 4))
    r = np.sqrt(X[:, 0] ** 2 + X[:, 1] ** 2)
    D = (r[:, None] - r[None, :]) ** 2
    D[3, 8] = D[8, 3] = np.nan  # a pair not observed
    A, B = rng.uniform(-1, 1, size=(25, 4)), rng.uniform(-1, 1, size=(9, 4))
    names = ["a", "b", "c", "d"]
    for name, rows in (("X", X), ("A", A), ("B", B)):
        pd.DataFrame(rows, columns=names).to_csv(tmp_path / f"{name}.csv", index=False)
    np.save(tmp_path / "D.npy", D)
    return X, D, A, B


def _yaml(tmp_path: Path, smerf: str, distance: str = "", inp: str = "") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"input: {{path: {tmp_path / 'X.csv'}{inp}}}\n"
        f"smerf: {{{smerf}}}\n" + (f"distance: {{{distance}}}\n" if distance else "")
        + f"output: {{dir: {tmp_path / 'out'}, store: m.zarr}}\n"
    )  # fmt: skip
    return path


def test_new_rows_against_other_rows_from_a_distance_file(tmp_path):
    X, D, A, B = _files(tmp_path)
    smerf = f"distances: {tmp_path / 'D.npy'}, n_estimators: 7, random_state: 5, tile_size: 16"
    distance = f"rows: {tmp_path / 'A.csv'}, against: {tmp_path / 'B.csv'}, out: d.zarr"
    result = invoke("-q", "run", _yaml(tmp_path, smerf, distance))
    assert result.exit_code == 0, result.output
    got = xr.open_zarr(tmp_path / "out" / "d.zarr")["distance"]
    with execution("synchronous"):
        ref = SMERF(n_estimators=7, random_state=5).fit(X, D)
    np.testing.assert_array_equal(got.values, ref.predict_distance(A, B).values)
    assert got.shape == (25, 9) and got.encoding["chunks"] == (16, 9)


def test_a_pipeline_without_distance_section_writes_the_model_only(tmp_path):
    X, D, _, _ = _files(tmp_path)
    result = invoke("-q", "run", _yaml(tmp_path, f"distances: {tmp_path / 'D.npy'}, "
                                                 "n_estimators: 4"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.suffix == ".zarr") == ["m.zarr"]
    with execution("synchronous"):
        ref = SMERF(n_estimators=4).fit(X, D)
    np.testing.assert_array_equal(SMERF.load(tmp_path / "out" / "m.zarr").leaves_, ref.leaves_)


@pytest.mark.parametrize(
    ("smerf", "distance", "inp", "message"),
    [
        ("n_estimators: 3", "", "", "not neither"),
        ("distances: D.npy", "", ", target: a", "not both"),
        ("distances: /no/such.npy", "", "", "does not exist"),
        ("distances: D.npy, n_estimator: 3", "", "", "did you mean 'n_estimators'"),
        ("distances: D.npy, n_estimators: 0", "", "", "n_estimators"),
        ("distances: D.npy, max_features: half", "", "", "max_features"),
        ("distances: D.npy", "oob: true, rows: A.csv", "", "remove distance.rows"),
        ("distances: D.npy, bootstrap: false", "oob: true", "", "smerf.bootstrap is false"),
        ("distances: D.npy", "out: m.zarr", "", "name two stores"),
        ("distances: D.npy", "oob: yes please", "", "distance.oob"),
    ],
)
def test_pipeline_mistakes_are_reported(tmp_path, monkeypatch, smerf, distance, inp, message):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    path = _yaml(tmp_path, smerf, distance, inp)
    result = invoke("validate", path)
    assert result.exit_code == 4, result.output
    assert "INVALID" in result.output and message in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_other_pipeline_sections_are_refused(tmp_path):
    _files(tmp_path)
    path = _yaml(tmp_path, f"distances: {tmp_path / 'D.npy'}")
    path.write_text(path.read_text() + "outliers: {out: o.csv}\n")
    result = invoke("validate", path)
    assert result.exit_code == 4 and "remove outliers" in result.output, result.output
