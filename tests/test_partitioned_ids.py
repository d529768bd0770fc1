"""``--id`` on a table read by partitions: the ID column, read by the partitions' tasks,
becomes the stores' row coordinates and the outputs' first column, as in memory."""

from __future__ import annotations

from pathlib import Path

import dask
import numpy as np
import pandas as pd
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.store.run_store import RunStore


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _export(tmp_path: Path, ids: np.ndarray, csv: bool = False) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    n = len(ids)
    df = pd.DataFrame({"pid": ids})
    for c in "abcd":
        df[c] = rng.standard_normal(n)
    df["label"] = np.where(df["a"] + rng.standard_normal(n) > 0, "pos", "neg")
    df.loc[::13, "c"] = np.nan
    folder = tmp_path / "parts"
    folder.mkdir()
    for k in range(4):
        piece = df.iloc[k * 75 : (k + 1) * 75]
        if csv:
            piece.to_csv(folder / f"day-{k}.csv", index=False)
        else:
            piece.to_parquet(folder / f"part-{k}.parquet", index=False)
    whole = tmp_path / ("whole.csv" if csv else "whole.parquet")
    df.to_csv(whole, index=False) if csv else df.to_parquet(whole, index=False)
    return (folder / "day-*.csv" if csv else folder), whole


def test_outliers_with_text_ids_by_partitions_equal_the_in_memory_ones(tmp_path, cluster_address):
    parts, whole = _export(tmp_path, np.array([f"P{k:04d}" for k in range(300)][::-1]))
    # on the session's cluster (worker processes, as --workers would start)
    common = ("--target", "label", "--id", "pid", "--trees", "8", "--seed", "5",
              "--scheduler", cluster_address)  # fmt: skip
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        by_parts = invoke("-q", "outliers", parts, *common, "--out", tmp_path / "p.csv")
    assert by_parts.exit_code == 0, by_parts.output
    whole_run = invoke("-q", "outliers", whole, *common, "--out", tmp_path / "w.csv")
    assert whole_run.exit_code == 0, whole_run.output
    got = (tmp_path / "p.csv").read_text()
    assert got == (tmp_path / "w.csv").read_text()
    assert got.splitlines()[1].startswith("P0299,")  # the IDs first, not the row numbers
    assert "pid" not in pd.read_csv(tmp_path / "p.csv").columns[1:]  # not a feature either


def test_proximity_job_with_integer_ids_from_a_csv_glob_equals_the_whole_file(tmp_path):
    ids = np.arange(300) * 7 + 1000
    parts, whole = _export(tmp_path, ids, csv=True)
    common = ("--target", "label", "--id", "pid", "--trees", "6", "--seed", "1",
              "--tile-size", "128")  # fmt: skip
    a = invoke("-q", "proximity", parts, *common, "--out", tmp_path / "parts.zarr")
    assert a.exit_code == 0, a.output
    b = invoke("-q", "proximity", whole, *common, "--out", tmp_path / "whole.zarr")
    assert b.exit_code == 0, b.output
    by_parts = RunStore.open(tmp_path / "parts.zarr", require_complete=True)
    in_memory = RunStore.open(tmp_path / "whole.zarr", require_complete=True)
    assert "input" in by_parts.group and "input" not in in_memory.group
    assert by_parts.array("input/id").dtype == np.int64
    for name in ("sample", "sample_i", "sample_j", "proximity", "leaves"):
        np.testing.assert_array_equal(by_parts.read(name), in_memory.read(name), err_msg=name)
    np.testing.assert_array_equal(by_parts.read("sample"), ids)
    assert by_parts.array_attrs("sample")["id_name"] == "pid"
    ds = by_parts.dataset()
    assert list(ds["proximity"].sample_i.values[:3]) == [1000, 1007, 1014]


def test_an_empty_id_in_a_part_is_refused_with_its_row(tmp_path):
    ids = np.array([f"r{k}" for k in range(300)], dtype=object)
    ids[160] = None  # row 161 of the table, in the third part
    parts, _ = _export(tmp_path, ids)
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        result = invoke("-q", "outliers", parts, "--target", "label", "--id", "pid",
                        "--trees", "4", "--workers", "1", "--out", tmp_path / "o.csv")  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "'pid' is empty in 1 row(s)" in result.output and "row 161" in result.output
    assert "part-2.parquet" in result.output, result.output
