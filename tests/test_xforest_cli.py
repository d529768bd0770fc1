"""`distforest xforest`, `distforest cluster` and X-Forest pipelines, end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.errors import ConfigError
from distforest.forests.xforest import XForest
from distforest.jobs.pipeline import load_pipeline
from distforest.store import open_store

DATA = Path(__file__).resolve().parents[1] / "distforest" / "data" / "ionosphere.csv"
PIPELINE = Path(__file__).resolve().parents[1] / "pipelines" / "xforest_cluster.yaml"


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_xforest_then_cluster_with_truth(client, tmp_path):
    address = client.scheduler.address
    out = tmp_path / "sim.zarr"
    result = invoke(
        "-q",
        "xforest",
        DATA,
        "--trees",
        "40",
        "--x",
        "2",
        "--leaf-size",
        "10",
        "--beta",
        "0.9",
        "--tile-size",
        "128",
        "--drop",
        "Class",
        "--out",
        out,
        "--scheduler",
        address,
        "--plot",
        tmp_path / "sim.png",
    )
    assert result.exit_code == 0, result.output
    ds = open_store(out)
    S = ds["beta_similarity"]
    assert S.shape == (351, 351) and S.encoding["chunks"] == (128, 128)
    assert ds.attrs["params"]["n_directions"] == 2 and (tmp_path / "sim.png").exists()
    # the stored matrix is the one the Python API gives with the same seed
    X = pd.read_csv(DATA).drop(columns="Class").to_numpy(dtype=float)
    forest = XForest(40, n_directions=2, leaf_size=10, random_state=0).set_execution(client).fit(X)
    np.testing.assert_array_equal(S.values, forest.similarity().values)

    labels = tmp_path / "labels.csv"
    result = invoke(
        "cluster",
        out,
        "--method",
        "kernel-kmeans",
        "--k",
        "2",
        "--out",
        labels,
        "--truth",
        f"{DATA}:Class",
        "--plot",
        tmp_path / "by_cluster.png",
    )
    assert result.exit_code == 0, result.output
    assert "accuracy" in result.output and (tmp_path / "by_cluster.png").exists()
    frame = pd.read_csv(labels)
    assert list(frame.columns) == ["row", "cluster", "truth"] and len(frame) == 351
    free = tmp_path / "free.csv"
    result = invoke(
        "cluster",
        out,
        "--method",
        "kernel-kmeans",
        "--k",
        "2",
        "--out",
        free,
        "--n-init",
        "1",
        "--matrix-free",
        "--scheduler",
        address,
    )
    assert result.exit_code == 0, result.output
    assert set(pd.read_csv(free)["cluster"]) == {0, 1}
    result = invoke("cluster", out, "--method", "dbscan", "--eps", "0.9", "--out", labels)
    assert result.exit_code == 6 and "already exists" in result.output
    result = invoke(
        "cluster", out, "--method", "dbscan", "--eps", "0.9", "--out", labels, "--overwrite"
    )
    assert result.exit_code == 0, result.output


def test_cluster_errors(client, tmp_path):
    def run(store: Path, *more: object):
        return invoke("cluster", store, "--method", "spectral", "--k", "2",
                      "--out", tmp_path / "l.csv", *more)  # fmt: skip

    result = run(tmp_path / "none.zarr")
    assert result.exit_code == 6 and "no such store" in result.output
    store = tmp_path / "s.zarr"
    XForest(5, random_state=0).set_execution(client).fit(np.eye(6)).similarity(store=store)
    result = run(store, "--truth", "nocolon")
    assert result.exit_code == 3 and "FILE:COLUMN" in result.output
    result = run(store, "--kind", "basic")
    assert result.exit_code == 6 and "no basic_similarity" in result.output
    assert not (tmp_path / "l.csv").exists()


def test_pipeline_file_is_valid_and_runs(client, tmp_path, monkeypatch):
    job = load_pipeline(PIPELINE)
    assert job.forest["n_estimators"] == 1000 and job.clustering["method"] == "kernel-kmeans"
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    result = invoke(
        "-q",
        "run",
        PIPELINE,
        "--scheduler",
        client.scheduler.address,
        "--set",
        "xforest.n_estimators=30",
        "--set",
        f"output.dir={tmp_path}",
    )
    assert result.exit_code == 0, result.output
    assert "accuracy" in result.output
    assert len(pd.read_csv(tmp_path / "clusters.csv")) == 351


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"xforest": {"modee": "x"}}, "did you mean 'mode'"),
        ({"xforest": {"beta": 2.0}}, "beta must be a number in"),
        ({"xforest": {"mode": "fast"}}, "xforest.mode must be one of 'x', 'standard'"),
        ({"forest": {"n_estimators": 3}}, "remove forest"),
        ({"clustering": {"method": "spectral", "out": "l.csv"}}, "clustering.k is required"),
        ({"clustering": {"method": "dbscan", "out": "l.csv"}}, "clustering.eps is required"),
    ],
)
def test_bad_xforest_pipelines(tmp_path, change, match):
    data = yaml.safe_load(PIPELINE.read_text())
    data["input"]["path"] = str(DATA)
    for section, values in change.items():
        if section == "xforest":
            data[section] = {**data[section], **values}
        else:
            data[section] = values
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=match):
        load_pipeline(path)


def test_dry_run_of_an_xforest_pipeline_plans_and_writes_nothing(tmp_path):
    result = invoke("run", PIPELINE, "--dry-run", "--set", f"output.dir={tmp_path / 'out'}")
    assert result.exit_code == 0, result.output
    assert "1,000 trees, beta similarity in 3 tiles of 256 x 256" in result.output
    assert "kernel-kmeans" in result.output and "(ok)" in result.output
    assert not (tmp_path / "out").exists()
