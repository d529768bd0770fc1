"""Bounds: every size-like option has an upper bound checked before any work.

Sizes are checked with the estimates the proximity command uses
(``distforest/jobs/estimates.py``: ``check_size``, the CPU-hour cap
``DISTFOREST_MAX_CPU_HOURS`` and the machine's memory); counts that cannot
exceed the data (``k`` clusters, features to select) are checked against it.
Each case is exit 2 in one line, at once, with nothing written.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli

ION = Path(__file__).resolve().parents[1] / "distforest" / "data" / "ionosphere.csv"


def refused(args: list[object], *words: str) -> str:
    start = time.perf_counter()
    result = CliRunner().invoke(cli, ["-q", *map(str, args)])
    seconds = time.perf_counter() - start
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [x for x in result.output.splitlines() if x.startswith("distforest: error:")]
    assert len(lines) == 1, result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert seconds < 60, seconds  # refused before the work, not after hours
    return lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bounds")
    frame = pd.read_csv(ION).iloc[:80]
    frame.to_csv(root / "train.csv", index=False)
    result = CliRunner().invoke(cli, ["-q", "xforest", str(root / "train.csv"), "--target",
                                      "Class", "--out", str(root / "x.zarr"), "--trees", "2",
                                      "--tile-size", "64"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return {"root": root, "train": root / "train.csv", "store": root / "x.zarr"}


def test_local_workers_beyond_the_machine(data):
    refused(["proximity", data["train"], "--target", "Class", "--out", data["root"] / "p.zarr",
             "--trees", 2, "--workers", 100000], "100,000 local workers", "per CPU")  # fmt: skip
    assert not (data["root"] / "p.zarr").exists()


def test_knn_forest_metric_trees(data):
    refused(["knn", "fit", data["train"], "--target", "Class", "--metric", "rf-proximity",
             "--trees", 100_000_000, "--out", data["root"] / "k.zarr"],
            "too large to start", "--trees (100,000,000)")  # fmt: skip
    assert not (data["root"] / "k.zarr").exists()


def test_knn_select_more_features_than_the_table_has(data):
    refused(["knn", "fit", data["train"], "--target", "Class", "--select", "forward",
             "--n-features", 99, "--out", data["root"] / "k2.zarr"],
            "--n-features 99", "34 feature(s)")  # fmt: skip


def test_simforest_trees(data):
    refused(["simforest", "fit", data["train"], "--target", "Class", "--trees", 1_000_000_000,
             "--out", data["root"] / "s.zarr"], "too large to start", "--trees")  # fmt: skip
    assert not (data["root"] / "s.zarr").exists()


def test_xforest_directions(data):
    refused(["xforest", data["train"], "--target", "Class", "--x", 1_000_000_000, "--trees", 2,
             "--out", data["root"] / "sub" / "x2.zarr"], "too large to start",
            "--x 1,000,000,000")  # fmt: skip
    assert not (data["root"] / "sub" / "x2.zarr").exists()


def test_cluster_restarts(data):
    out = data["root"] / "c.csv"
    refused(["cluster", data["store"], "--method", "kernel-kmeans", "--k", 2, "--n-init",
             1_000_000_000, "--out", out], "too large to start", "n_init")  # fmt: skip
    assert not out.exists()


@pytest.mark.parametrize(
    "how", [["--method", "spectral"], ["--method", "kernel-kmeans", "--matrix-free"]]
)
def test_cluster_k_above_the_rows(data, how):
    out = data["root"] / "c2.csv"
    refused(["cluster", data["store"], *how, "--k", 1000, "--out", out], "k=1,000", "80 rows")
    assert not out.exists()
