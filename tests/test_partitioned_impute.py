"""``distforest impute`` by partitions: the same table as in memory, never whole here."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from distforest.apps.impute import ProximityImputer
from distforest.apps.partitioned_impute import impute_partitioned
from distforest.cli.main import cli
from distforest.parallel.execution import execution

FEATURES = ["a", "b", "c", "k"]
#: Few trees, one task per column forest, two iterations: seconds on the shared cluster.
SMALL = {"n_estimators": 4, "batch_size": 4, "iterations": 2}


def _table(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n),
                       "c": rng.choice(["x", "y", "z"], n), "k": rng.integers(0, 5, n),
                       "cls": rng.choice(["p", "q"], n)})  # fmt: skip
    df["b"] += df["a"]
    for col in ("a", "b", "c"):
        df.loc[rng.random(n) < 0.15, col] = np.nan
    return df


def _folder(df: pd.DataFrame, where: Path, parts: int = 5) -> Path:
    where.mkdir()
    for k, rows in enumerate(np.array_split(np.arange(len(df)), parts)):
        df.iloc[rows].to_parquet(where / f"day-{k}.parquet", index=False)
    return where


def _in_memory(folder: Path, seed: int) -> pd.DataFrame:
    """What the in-memory command does with the same table."""
    frame = pd.read_parquet(folder)
    with execution(client="synchronous"):
        imp = ProximityImputer(**SMALL, random_state=seed)
        filled = imp.fit_transform(frame[FEATURES], frame["cls"])
    out = frame.copy()
    for position, col in enumerate(out.columns):
        if col in filled.columns:
            out.isetitem(position, filled[col])
    return out


def test_parquet_folder_equals_in_memory(client, tmp_path: Path) -> None:
    """Sample bound >= n: the same values, dtypes and labels, bit for bit."""
    folder = _folder(_table(), tmp_path / "parts")
    expected = _in_memory(folder, seed=5)
    assert expected[FEATURES].notna().all().all()
    with client.as_current():
        for out in (tmp_path / "out/", tmp_path / "one.csv", tmp_path / "one.parquet"):
            imp = ProximityImputer(**SMALL, random_state=5).set_execution(client)
            name = f"{out}/" if out.suffix == "" else str(out)
            result = impute_partitioned(str(folder), name, imp, target="cls")
            assert result.sample_rows == 400 and result.shape == (400, 5)
            if out.suffix == ".csv":  # the same bytes as the in-memory writer's
                mem_csv = tmp_path / "mem.csv"
                expected.to_csv(mem_csv, index=False)
                assert out.read_bytes() == mem_csv.read_bytes()
                continue
            got = pd.read_parquet(out)
            if out.suffix == "":
                assert sorted(p.name for p in out.iterdir()) == [
                    f"part-{k:05d}.parquet" for k in range(5)
                ]
            pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_driver_never_holds_the_table(client, tmp_path: Path) -> None:
    """Sample bound < n: every compute brings back a sample piece or a row count only."""
    import dask
    from dask.sizeof import sizeof

    df = _table(n=4000, seed=1)
    folder = _folder(df, tmp_path / "parts")
    sizes: list[int] = []

    def guard(dsk, keys, **kwargs):
        result = client.get(dsk, keys, **kwargs)
        sizes.append(sizeof(result))
        assert sizes[-1] < sizeof(df) / 4, f"a compute brought {sizes[-1]} bytes back"
        return result

    imp = ProximityImputer(**SMALL, random_state=2).set_execution(client)
    with dask.config.set(scheduler=guard):
        result = impute_partitioned(str(folder), f"{tmp_path / 'out'}/", imp, target="cls",
                                    sample_rows=200)  # fmt: skip
    assert result.sample_rows == 200 and len(sizes) >= 2
    got = pd.read_parquet(tmp_path / "out")
    assert got.shape == df.shape and got[FEATURES].notna().all().all()
    observed = df[FEATURES].notna().to_numpy()
    np.testing.assert_array_equal(got[FEATURES].to_numpy()[observed],
                                  df[FEATURES].to_numpy()[observed])  # fmt: skip
    assert set(got["c"]) == {"x", "y", "z"}  # labels, not codes


def test_bad_value_in_partition_3_exits_3_writes_nothing(client, tmp_path: Path) -> None:
    df = _table(n=250, seed=3)
    for k, rows in enumerate(np.array_split(np.arange(len(df)), 5)):
        part = df.iloc[rows].astype({"a": object})
        if k == 3:
            part.iloc[4, 0] = "abc"
        part.to_csv(tmp_path / f"x-{k}.csv", index=False)
    out = tmp_path / "out.csv"
    res = CliRunner().invoke(
        cli,
        [
            "impute",
            str(tmp_path / "x-*.csv"),
            "--target",
            "cls",
            "--out",
            str(out),
            "--trees",
            "4",
            "--scheduler",
            client.scheduler.address,
        ],
    )
    assert res.exit_code == 3, res.output
    assert "x-3.csv" in res.output and "'a'" in res.output and "abc" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"x-{k}.csv" for k in range(5)]
    assert os.listdir(tmp_path) and not out.exists()


#: rfImpute's settings at test size (R's rules otherwise: random-forest trees, its mtry).
RF_SMALL = {"proximity": "rfimpute", "n_estimators": 6, "batch_size": 6, "iterations": 2}


def test_rfimpute_by_partitions_equals_in_memory(client, tmp_path: Path) -> None:
    """Sample bound >= n: rfImpute of a folder of parts is the in-memory result, byte for byte."""
    folder = _folder(_table(n=300, seed=4), tmp_path / "parts")
    frame = pd.read_parquet(folder)
    with execution(client="synchronous"):
        filled = ProximityImputer(**RF_SMALL, random_state=3).fit_transform(
            frame[FEATURES], frame["cls"]
        )
    expected = frame.copy()
    for position, col in enumerate(expected.columns):
        if col in filled.columns:
            expected.isetitem(position, filled[col])
    expected.to_csv(tmp_path / "mem.csv", index=False)
    imp = ProximityImputer(**RF_SMALL, random_state=3).set_execution(client)
    with client.as_current():
        result = impute_partitioned(str(folder), str(tmp_path / "one.csv"), imp, target="cls")
    assert result.sample_rows == 300
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "mem.csv").read_bytes()


@pytest.mark.parametrize("proximity", ["rfimpute", "rfgap"])
def test_one_forest_modes_above_the_sample_are_new_rows(client, tmp_path: Path,
                                                        proximity: str) -> None:  # fmt: skip
    """Sample bound < n: each partition is filled as ``transform`` fills it in memory, by
    the imputer fitted on the same sample (the oracle), and observed cells never change."""
    from distforest.apps.partitioned_impute import _sample

    df = _table(n=600, seed=6)
    folder = _folder(df, tmp_path / "parts", parts=3)
    params = {**RF_SMALL, "proximity": proximity}
    sample = df.iloc[_sample(len(df), 150, 8)].reset_index(drop=True)
    with execution(client="synchronous"):
        oracle = ProximityImputer(**params, random_state=8).fit(sample[FEATURES], sample["cls"])
        expected = pd.concat([oracle.transform(df.iloc[rows][FEATURES].reset_index(drop=True))
                              for rows in np.array_split(np.arange(len(df)), 3)],
                             ignore_index=True)  # fmt: skip
    imp = ProximityImputer(**params, random_state=8).set_execution(client)
    with client.as_current():
        result = impute_partitioned(str(folder), f"{tmp_path / 'out'}/", imp, target="cls",
                                    sample_rows=150)  # fmt: skip
    assert result.sample_rows == 150
    got = pd.read_parquet(tmp_path / "out")
    assert got[FEATURES].notna().all().all()
    pd.testing.assert_frame_equal(got[FEATURES], expected, check_exact=True)
    observed = df[FEATURES].notna().to_numpy()
    np.testing.assert_array_equal(got[FEATURES].to_numpy()[observed],
                                  df[FEATURES].to_numpy()[observed])  # fmt: skip


@pytest.mark.parametrize("out", ["o.zarr"])
def test_zarr_output_by_partitions_is_refused(tmp_path: Path, out: str) -> None:
    folder = _folder(_table(n=50), tmp_path / "parts")
    res = CliRunner().invoke(cli, ["impute", str(folder), "--out", str(tmp_path / out)])
    assert res.exit_code == 2 and "Parquet dataset folder" in res.output
