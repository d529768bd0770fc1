"""The command line end to end, on the bundled data and on broken inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner
from oracles import dense_original_proximity

from distforest import open_store
from distforest.cli.main import cli
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_proximity_end_to_end_on_bundled_data(breast_cancer_csv, tmp_path):
    out = tmp_path / "bc.zarr"
    png = tmp_path / "bc.png"
    result = invoke("-q", "proximity", breast_cancer_csv, "--target", "Class", "--drop", "Id",
                    "--trees", "20", "--tile-size", "200", "--workers", "2", "--out", out,
                    "--plot", png)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert str(out.resolve()) in result.output and "699 x 699" in result.output
    assert png.stat().st_size > 10_000
    ds = open_store(out)  # provenance decoded (JSON text on disk, for netCDF)
    assert ds.attrs["status"] == "complete"
    assert ds.attrs["classes"] == ["benign", "malignant"]
    P = ds["proximity"].values  # counts of trees decoded by xarray (CF scale_factor 1/T)
    assert np.issubdtype(P.dtype, np.floating)
    leaves = ds["leaves"].values
    expected = dense_original_proximity(leaves, leaves).astype(np.float32)
    np.testing.assert_array_equal(P.astype(np.float32), expected)

    info = invoke("info", out)
    assert info.exit_code == 0
    assert "status:  complete" in info.output and "proximity" in info.output
    desc = json.loads(invoke("info", out, "--json").output)
    assert desc["arrays"]["proximity"]["chunks"] == [200, 200]
    assert desc["arrays"]["leaves"]["dims"] == ["sample", "tree"]

    again = invoke("-q", "proximity", breast_cancer_csv, "--target", "Class", "--out", out)
    assert again.exit_code == 6 and "already exists" in again.output


def test_same_seed_same_matrix_from_the_cli(tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "d.npy"
    np.save(data, np.column_stack([rng.normal(size=(150, 3)), rng.integers(0, 2, 150)]))
    runs = []
    for k, extra in enumerate([("--workers", "1", "--tile-size", "16"),
                               ("--workers", "2", "--tile-size", "64")]):  # fmt: skip
        out = tmp_path / f"{k}.zarr"
        r = invoke("-q", "proximity", data, "--target", "3", "--trees", "12", "--out", out, *extra)
        assert r.exit_code == 0, r.output
        runs.append(xr.open_zarr(out)["proximity"].values)
    np.testing.assert_array_equal(runs[0], runs[1])


def _bad(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, ("--target", "y"), "no such file"),
        ("a,b,y\n1,2,0\n3,4,1\n", ("--target", "Y"), "'y'"),
        ("a,b,y\n1,x2,0\n" + "3,4,1\n" * 40, ("--target", "y"), "x2"),
        ("a,b,y\n1,inf,0\n3,4,1\n", ("--target", "y"), "inf"),
        ("a,b,y\n", ("--target", "y"), "no data rows"),
        ("a,b,y\n1,2,0\n", ("--target", "y"), "at least 2"),
        ("a,b,y\n1,2,0\n3,4,0\n", ("--target", "y"), "single value"),
        ("a,b,y\n1,2,\n3,4,1\n5,6,0\n", ("--target", "y"), "missing"),
        ("a,a,y\n1,2,0\n3,4,1\n", ("--target", "y"), "duplicate"),
        ("a,b,y\n1,2,0\n3,4,1\n", ("--target", "y", "--drop", "Id"), "Id"),
    ],
    ids=["missing-file", "unknown-target", "garbage", "inf", "empty", "one-row",
         "constant-target", "nan-target", "duplicate-columns", "unknown-drop"],
)  # fmt: skip
def test_bad_input_exits_nonzero_with_clear_message(tmp_path, content, args, message):
    data = tmp_path / "missing.csv" if content is None else _bad(tmp_path, "d.csv", content)
    out = tmp_path / "out.zarr"
    result = invoke("-q", "proximity", data, "--out", out, *args)
    assert result.exit_code == 3, result.output
    assert "error" in result.output and message in result.output
    assert not out.exists()


def test_info_on_incomplete_store_says_so(tmp_path):
    rs = RunStore.create(tmp_path / "half.zarr", attrs={"input": {}})
    result = invoke("info", rs.path)
    assert result.exit_code == 1
    assert "INCOMPLETE" in result.output


def test_info_on_missing_store(tmp_path):
    result = invoke("info", tmp_path / "nothing.zarr")
    assert result.exit_code == 6 and "no such store" in result.output


def test_run_pipeline_and_its_validation(tmp_path, breast_cancer_csv):
    good = tmp_path / "p.yaml"
    good.write_text(
        f"input: {{path: {breast_cancer_csv}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 8, random_state: 0, tile_size: 256}\n"
        "impute: {out: imputed.csv, iterations: 1, n_estimators: 5}\n"
        "outliers: {out: outliers.csv}\n"
        f"output: {{dir: '{tmp_path}/out-{{date}}', store: s.zarr, plot: p.png}}\n"
        "cluster: " + str(ROOT / "cluster_configs" / "local.yaml") + "\n"
    )
    result = invoke("-q", "run", good)
    assert result.exit_code == 0, result.output
    stores = list(tmp_path.glob("out-*/s.zarr"))
    assert len(stores) == 1 and RunStore.open(stores[0]).is_complete
    imputed = pd.read_csv(stores[0].parent / "imputed.csv")
    assert imputed.shape == (699, 11) and not imputed.isna().any().any()
    assert len(pd.read_csv(stores[0].parent / "outliers.csv")) == 699

    typo = tmp_path / "typo.yaml"
    typo.write_text(good.read_text().replace("n_estimators", "n_estimator"))
    result = invoke("-q", "run", typo)
    assert result.exit_code == 4
    assert "unknown key 'forest.n_estimator' in section 'forest'" in result.output
    assert "did you mean 'n_estimators'" in result.output

    wrong_type = tmp_path / "type.yaml"
    wrong_type.write_text(good.read_text().replace("n_estimators: 8", "n_estimators: many"))
    result = invoke("-q", "run", wrong_type)
    assert result.exit_code == 4
    assert "type.yaml: forest.n_estimators must be an integer >= 1, got 'many'" in result.output


@pytest.mark.parametrize("path", sorted((ROOT / "pipelines").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_pipelines_parse(path):
    from distforest.jobs.pipeline import load_pipeline

    job = load_pipeline(path)
    assert job.input and job.out


def test_console_script_and_module_help():
    out = subprocess.run([sys.executable, "-m", "distforest", "--help"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    for command in ("proximity", "info", "run"):
        assert command in out
    help_text = invoke("proximity", "--help").output
    assert "--scheduler" in help_text and "--cluster" in help_text and "--trees" in help_text


def test_existing_scheduler_is_used_and_left_running(client, tmp_path):
    rng = np.random.default_rng(1)
    data = tmp_path / "d.npy"
    np.save(data, rng.normal(size=(80, 4)))
    out = tmp_path / "s.zarr"
    address = client.scheduler.address
    result = invoke("-q", "proximity", data, "--trees", "6", "--scheduler", address, "--out", out)
    assert result.exit_code == 0, result.output
    assert xr.open_zarr(out).attrs["task"] == "unsupervised"
    assert client.submit(sum, [1, 2]).result() == 3  # the cluster still runs


def test_unreachable_scheduler_fails_fast(tmp_path):
    rng = np.random.default_rng(1)
    data = tmp_path / "d.npy"
    np.save(data, rng.normal(size=(20, 2)))
    result = invoke("-q", "proximity", data, "--scheduler", "tcp://127.0.0.1:1", "--out",
                    tmp_path / "x.zarr")  # fmt: skip
    assert result.exit_code == 5 and "could not reach" in result.output
    assert not (tmp_path / "x.zarr").exists()


def test_outliers_mds_and_mislabels_commands(breast_cancer_csv, tmp_path, cluster_address):
    # on the session's cluster: --workers (the CLI's own LocalCluster) is
    # test_proximity_end_to_end_on_bundled_data's and test_same_seed_same_matrix_from_the_cli's
    common = ("--target", "Class", "--drop", "Id", "--trees", "30", "--scheduler", cluster_address)
    result = invoke("-q", "outliers", breast_cancer_csv, *common, "--out", tmp_path / "o.csv",
                    "--plot", tmp_path / "o.png")  # fmt: skip
    assert result.exit_code == 0, result.output
    scores = pd.read_csv(tmp_path / "o.csv")
    assert list(scores.columns) == ["row", "label", "outlier", "outlier_flag"]
    assert len(scores) == 699
    # per class, the median score is 0 by construction
    assert np.allclose(scores.groupby("label")["outlier"].median(), 0.0)

    result = invoke("-q", "mds", breast_cancer_csv, *common, "--out", tmp_path / "m.csv",
                    "--plot", tmp_path / "m.png", "--components", "3")  # fmt: skip
    assert result.exit_code == 0, result.output
    coords = pd.read_csv(tmp_path / "m.csv")
    assert list(coords.columns) == ["row", "label", "dim1", "dim2", "dim3"]
    assert (tmp_path / "m.png").stat().st_size > 10_000

    result = invoke("-q", "mislabels", breast_cancer_csv, *common, "--out", tmp_path / "s.csv")
    assert result.exit_code == 0, result.output
    ranked = pd.read_csv(tmp_path / "s.csv")
    assert ranked["score"].is_monotonic_decreasing and len(ranked) == 699

    again = invoke("-q", "mds", breast_cancer_csv, *common, "--out", tmp_path / "m.csv")
    assert again.exit_code == 6 and "already exists" in again.output
    missing = invoke("-q", "mislabels", breast_cancer_csv, "--out", tmp_path / "x.csv")
    assert missing.exit_code == 2 and "--target" in missing.output
