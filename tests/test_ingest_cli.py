"""The CLI reads a folder of part files by partitions: same answers, clear refusals."""

from __future__ import annotations

from pathlib import Path

import dask
import numpy as np
import pandas as pd
from click.testing import CliRunner

from distforest import ProximityForest, execution
from distforest.apps.outliers import outlier_scores
from distforest.cli.main import cli


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _export(tmp_path: Path, bad: bool = False) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame(rng.standard_normal((n, 4)), columns=["a", "b", "c", "d"])
    df["label"] = np.where(df["a"] + rng.standard_normal(n) > 0, "pos", "neg")
    df.loc[::11, "c"] = np.nan
    if bad:
        df["b"] = df["b"].map(repr)
        df.loc[250, "b"] = "#REF!"
    folder = tmp_path / "export"
    folder.mkdir()
    for k in range(5):
        df.iloc[k * 80 : (k + 1) * 80].to_parquet(folder / f"chunk-{k}.snappy", index=False)
    whole = tmp_path / "whole.parquet"
    df.to_parquet(whole, index=False)
    return folder, whole


def test_outliers_of_a_folder_equal_the_in_memory_ones(tmp_path: Path, cluster_address) -> None:
    folder, whole = _export(tmp_path)
    # on the session's cluster (worker processes, as --workers would start)
    common = ("--target", "label", "--trees", "12", "--seed", "3", "--scheduler", cluster_address)
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        by_parts = invoke("-q", "outliers", folder, *common, "--out", tmp_path / "p.csv")
    assert by_parts.exit_code == 0, by_parts.output
    df = pd.read_parquet(whole)
    with execution(client="synchronous"):  # what the command does with a table in memory
        forest = ProximityForest(n_estimators=12, random_state=3).fit(
            df.drop(columns="label"), df["label"]
        )
        expected = outlier_scores(forest)
    scores = pd.read_csv(tmp_path / "p.csv")
    assert list(scores["label"]) == list(df["label"])
    np.testing.assert_array_equal(scores["outlier"].to_numpy(), expected)
    assert not list(tmp_path.glob("distforest-input-*"))  # the temporary store is gone


def test_bad_value_in_partition_3_of_5_exits_3(tmp_path: Path) -> None:
    folder, _ = _export(tmp_path, bad=True)
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        result = invoke("-q", "outliers", folder, "--target", "label", "--trees", "5",
                        "--workers", "1", "--out", tmp_path / "o.csv")  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "chunk-3.snappy" in result.output and "'b'" in result.output, result.output
    assert "row 251 of the table" in result.output and "'#REF!'" in result.output
    assert not (tmp_path / "o.csv").exists()
    assert not list(tmp_path.glob("distforest-input-*"))  # no store left, complete or not


def test_proximity_job_on_a_folder(tmp_path: Path) -> None:
    from distforest.store.run_store import RunStore

    folder, whole = _export(tmp_path)
    out = tmp_path / "p.zarr"
    args = ("-q", "proximity", folder, "--target", "label", "--trees", "6", "--seed", "1",
            "--out", out)  # fmt: skip
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    df = pd.read_parquet(whole)
    with execution(client="synchronous"):
        forest = ProximityForest(n_estimators=6, random_state=1).fit(
            df.drop(columns="label"), df["label"]
        )
        expected = forest.proximity().values
    stored = RunStore.open(out, require_complete=True).dataset()["proximity"].values
    np.testing.assert_array_equal(stored, expected)
    assert "input" in RunStore.open(out).group  # the rows the trees read, in the job's store
    again = invoke(*args)
    assert again.exit_code == 0 and "already complete" in again.output


def test_job_impute_stage_on_parts(tmp_path: Path) -> None:
    """A job's impute stage reads a folder of parts by partitions (column proximity)."""
    from distforest.jobs.proximity import ProximityJob, run_proximity_job

    folder, whole = _export(tmp_path)
    job = ProximityJob(input=str(folder), out=str(tmp_path / "p.zarr"), target="label",
                       forest={"n_estimators": 4, "random_state": 1},
                       impute={"out": str(tmp_path / "i.csv"), "n_estimators": 4,
                               "iterations": 2})  # fmt: skip
    run_proximity_job(job)
    got = pd.read_csv(tmp_path / "i.csv")
    df = pd.read_parquet(whole)
    assert list(got.columns) == list(df.columns) and len(got) == len(df)
    assert got.drop(columns="label").notna().all().all()
