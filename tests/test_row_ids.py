"""Row IDs: an ID column or a DataFrame's index names the rows of every output."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

from distforest import ProximityForest, execution, open_store
from distforest.cli.main import cli
from distforest.io import load_table

DATA = Path(__file__).resolve().parents[1] / "distforest" / "data"


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    out = pd.DataFrame(X, columns=["a", "b", "c"], index=[f"p{i:02d}" for i in range(60)])
    out.index.name = "patient"
    return out.assign(label=np.where(X[:, 0] > 0, "hi", "lo"))


def test_id_column_and_index_become_ids(frame):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing looks like an ID among the features
        table = load_table(frame, target="label")
    assert table.id_name == "patient" and table.ids[0] == "p00"
    assert table.feature_names == ("a", "b", "c")
    flat = frame.reset_index()
    by_column = load_table(flat, target="label", id="patient")
    assert by_column.feature_names == ("a", "b", "c")
    np.testing.assert_array_equal(by_column.ids, table.ids)
    assert load_table(flat.drop(columns="patient"), target="label").ids is None


def test_id_like_features_are_named_in_a_warning():
    with pytest.warns(UserWarning, match=r"column 'Id' looks like a row ID.*--id Id"):
        load_table(DATA / "breast_cancer.csv", target="Class")
    rows = pd.DataFrame({"row": np.arange(10, 30), "v": np.linspace(0, 1, 20)})
    with pytest.warns(UserWarning, match="'row' looks like a row ID .consecutive"):
        load_table(rows)
    fluid = pd.DataFrame({"fluid": np.linspace(0, 1, 20) ** 2, "acid": np.arange(20) * 0.5})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_table(fluid)


def test_stores_and_matrices_carry_the_ids(frame, tmp_path):
    with execution("synchronous"):
        pf = ProximityForest(8, random_state=0).fit(frame.drop(columns="label"), frame["label"])
        small = pf.proximity()
        pf.proximity(store=tmp_path / "p.zarr")
    assert list(small.sample_i.values[:2]) == ["p00", "p01"]
    ds = open_store(tmp_path / "p.zarr")
    np.testing.assert_array_equal(ds["sample_j"].values, frame.index.to_numpy())
    np.testing.assert_allclose(ds["proximity"].sel(sample_i="p03").values, small.values[3],
                               atol=1e-6)  # fmt: skip
    assert ds["sample"].attrs["id_name"] == "patient"
    back = ProximityForest.load(tmp_path / "p.zarr")
    np.testing.assert_array_equal(back.sample_ids_, frame.index.to_numpy())
    xr.open_zarr(tmp_path / "p.zarr").to_netcdf(tmp_path / "p.nc", engine="h5netcdf")
    assert list(xr.open_dataset(tmp_path / "p.nc").sample_i.values[:1]) == ["p00"]


def test_outputs_start_with_the_id_column(tmp_path):
    common = ["--target", "Class", "--id", "Id", "--trees", "10"]
    for command in ("outliers", "mislabels"):
        out = tmp_path / f"{command}.csv"
        result = CliRunner().invoke(cli, ["-q", command, str(DATA / "breast_cancer.csv"),
                                          *common, "--out", str(out)])  # fmt: skip
        assert result.exit_code == 0, result.output
        written = pd.read_csv(out)
        assert written.columns[0] == "Id" and "row" not in written.columns
        raw = pd.read_csv(DATA / "breast_cancer.csv")
        assert sorted(written["Id"]) == sorted(raw["Id"])
    scores = pd.read_csv(tmp_path / "outliers.csv")
    np.testing.assert_array_equal(scores["Id"], raw["Id"])  # in the input's order


def test_proximity_command_stores_the_ids(tmp_path):
    out = tmp_path / "bc.zarr"
    result = CliRunner().invoke(cli, ["-q", "proximity", str(DATA / "breast_cancer.csv"),
                                      "--target", "Class", "--id", "Id", "--trees", "5",
                                      "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    ds = open_store(out)
    raw = pd.read_csv(DATA / "breast_cancer.csv")
    np.testing.assert_array_equal(ds["sample_i"].values, raw["Id"].to_numpy())
    assert ds.attrs["input"]["id_name"] == "Id" and "Id" not in ds.attrs["input"]["feature_names"]


def test_pipeline_input_id(tmp_path):
    from distforest.jobs.pipeline import load_pipeline

    data = tmp_path / "t.csv"
    data.write_text("key,a,b\nk1,1,2\nk2,3,4\n")
    good = tmp_path / "p.yaml"
    good.write_text(f"input: {{path: {data}, id: key}}\noutput: {{dir: {tmp_path}}}\n")
    assert load_pipeline(good).id == "key"
    other = tmp_path / "q.yaml"  # a kind whose outputs follow the rows: the ID is no feature
    other.write_text(f"input: {{path: {data}, id: key}}\noutput: {{dir: {tmp_path}}}\n"
                     "xforest: {n_estimators: 3}\n")  # fmt: skip
    assert load_pipeline(other).drop == ("key",)
