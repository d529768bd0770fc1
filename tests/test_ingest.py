"""Reading tables by partitions: dask's readers, summaries on the workers, input/X in the store."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

from distforest.errors import InputError
from distforest.io import load_table
from distforest.io.ingest import read_partitioned
from distforest.store.inputs import StoredTable, ingest
from distforest.store.run_store import RunStore


def _frame(n: int = 500, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(rng.standard_normal((n, 3)), columns=["a", "b", "c"])
    df.loc[::7, "b"] = np.nan
    df["colour"] = rng.choice(["red", "green", "blue"], n)
    df["label"] = rng.choice(["yes", "no"], n)
    return df


def _parts(df: pd.DataFrame, k: int) -> list[pd.DataFrame]:
    edges = np.linspace(0, len(df), k + 1).astype(int)
    return [df.iloc[a:b] for a, b in itertools.pairwise(edges)]


def _stored_X(table: StoredTable) -> np.ndarray:
    return np.asarray(zarr.open_array(table.path, path="input/X", mode="r")[...])


def _same_as_memory(table: StoredTable, df: pd.DataFrame, target: str | None) -> None:
    mem = load_table(df, target=target)
    assert table.feature_names == mem.feature_names
    assert table.categories == mem.categories
    np.testing.assert_array_equal(_stored_X(table), mem.X.astype(np.float32))
    if target is not None:
        np.testing.assert_array_equal(table.read_y(), mem.y)


def test_parquet_folder_of_any_names(tmp_path: Path) -> None:
    df = _frame()
    folder = tmp_path / "exports"  # no .parquet suffix
    folder.mkdir()
    for k, part in enumerate(_parts(df, 5)):
        part.to_parquet(folder / f"day {k} of export.pq", index=False)
    table = ingest(folder, tmp_path / "run.zarr", target="label", rows=64)
    _same_as_memory(table, df, "label")
    X = zarr.open_array(table.path, path="input/X", mode="r")
    assert X.chunks == (64, 4) and X.dtype == np.float32
    assert not RunStore.open(table.path).is_complete  # only a finished run completes it


def test_csv_glob_and_blocks(tmp_path: Path) -> None:
    df = _frame(seed=1)
    for k, part in enumerate(_parts(df, 3)):
        part.to_csv(tmp_path / f"day-{k}.csv", index=False)
    # small blocks: several partitions per file
    table = ingest(str(tmp_path / "day-*.csv"), tmp_path / "run.zarr", target="label",
                   blocksize=2000)  # fmt: skip
    data = read_partitioned(str(tmp_path / "day-*.csv"), blocksize=2000)
    assert data.partitions.npartitions > 3
    _same_as_memory(table, df, "label")


def test_parquet_glob_local_and_at_a_url(tmp_path: Path) -> None:
    """A glob of Parquet files is read as Parquet (it was read as CSV text), its files
    named in messages; a glob matching Parquet and text files is refused."""
    import dask
    import fsspec

    df = _frame(90, seed=5)
    fs = fsspec.filesystem("memory")
    for k, part in enumerate(_parts(df, 3)):
        part.to_parquet(tmp_path / f"p-{k}.parquet", index=False)
        fs.put(str(tmp_path / f"p-{k}.parquet"), f"/pqglob/p-{k}.parquet")
    try:
        table = ingest(str(tmp_path / "p-*.parquet"), tmp_path / "run.zarr", target="label")
        _same_as_memory(table, df, "label")
        with dask.config.set(scheduler="synchronous"):
            remote = read_partitioned("memory://pqglob/p-*.parquet", target="label")
            np.testing.assert_array_equal(remote.X.compute(), _stored_X(table))
            assert remote.part_names[2].endswith("pqglob/p-2.parquet")
    finally:
        fs.rm("/pqglob", recursive=True)
    df.iloc[:5].to_csv(tmp_path / "p-9.csv", index=False)
    with pytest.raises(InputError, match=r"matches Parquet files and others \(e\.g\. .*p-9\.csv"):
        read_partitioned(str(tmp_path / "p-*"))


def test_semicolon_csv_with_decimal_commas(tmp_path: Path) -> None:
    path = tmp_path / "eu.csv"
    path.write_text("x;y;k\n-0,026;1;a\n3,5;2;b\n7;3;a\n")
    table = ingest(path, tmp_path / "run.zarr")
    np.testing.assert_array_equal(
        _stored_X(table)[:, :2], np.array([[-0.026, 1], [3.5, 2], [7, 3]], dtype=np.float32)
    )
    assert table.categories == {"k": ("a", "b")}


def test_hive_partitioned_folder(tmp_path: Path) -> None:
    df = _frame(seed=2)
    df["region"] = np.where(np.arange(len(df)) % 2 == 0, "north", "south")
    df.to_parquet(tmp_path / "hive", partition_cols=["region"], index=False)
    table = ingest(tmp_path / "hive", tmp_path / "run.zarr", target="label")
    assert "region" in table.feature_names
    assert table.categories["region"] == ("north", "south")
    assert table.n_samples == len(df)
    # rows come folder by folder: compare as sets of rows
    mem = load_table(pd.read_parquet(tmp_path / "hive"), target="label")
    np.testing.assert_array_equal(_stored_X(table), mem.X.astype(np.float32))


def test_bad_value_in_partition_3_of_5(tmp_path: Path) -> None:
    df = _frame(n=500)
    df["a"] = df["a"].map(repr)  # numbers as text, as exports often hold them
    df.loc[100 * 2 + 17, "a"] = "n/a?"  # partition 3 (rows 200..299), its 18th row
    folder = tmp_path / "parts"
    folder.mkdir()
    for k, part in enumerate(_parts(df, 5)):
        part.to_parquet(folder / f"part-{k:05d}.parquet", index=False)
    with pytest.raises(InputError) as info:
        ingest(folder, tmp_path / "run.zarr", target="label")
    msg = str(info.value)
    assert "part-00002.parquet" in msg, msg
    assert "'a'" in msg and "'n/a?'" in msg
    assert "row 218 of the table" in msg, msg
    assert not (tmp_path / "run.zarr").exists()  # refused before any store was made


def test_csv_error_names_file_and_rows(tmp_path: Path) -> None:
    df = _frame(n=300)
    for k, part in enumerate(_parts(df, 3)):
        part.to_csv(tmp_path / f"p{k}.csv", index=False)
    text = (tmp_path / "p1.csv").read_text().splitlines()
    fields = text[5].split(",")
    fields[0] = "1e39"  # beyond float32
    text[5] = ",".join(fields)
    (tmp_path / "p1.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(InputError, match=r"float32") as info:
        read_partitioned(str(tmp_path / "p*.csv"))
    msg = str(info.value)
    assert "row 105 of the table, row 5 of" in msg and "p1.csv" in msg, msg


@pytest.mark.parametrize(
    ("column", "match"),
    [
        ("missing", r"target 'label' is missing in 1 row\(s\) \(first: row 42"),
        ("constant", r"target 'label' has the single value 'yes'"),
    ],
)
def test_target_checks(tmp_path: Path, column: str, match: str) -> None:
    df = _frame(n=100)
    if column == "missing":
        df.loc[41, "label"] = None
    else:
        df["label"] = "yes"
    with pytest.raises(InputError, match=match):
        read_partitioned(df, target="label")


def test_empty_and_stray_strings(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("a,b\n")
    with pytest.raises(InputError, match="no data rows"):
        read_partitioned(str(empty))
    df = pd.DataFrame({"a": [str(v) for v in range(50)], "b": np.arange(50.0)})
    df.loc[30, "a"] = "?"
    with pytest.raises(InputError, match=r"na_values=\['\?'\]"):
        read_partitioned(df)


def test_category_seen_only_in_some_partitions(tmp_path: Path) -> None:
    # partition 1 holds only numbers in a text column that is categorical overall
    df = pd.DataFrame({"k": ["1", "2", "3", "4", "x", "y", "z", "w"], "v": np.arange(8.0)})
    import dask.dataframe as dd

    table = ingest(dd.from_pandas(df, npartitions=2), tmp_path / "run.zarr")
    _same_as_memory(table, df, None)


def test_zarr_and_xarray_sources(tmp_path: Path) -> None:
    import xarray as xr

    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 4))
    group = zarr.open_group(str(tmp_path / "in.zarr"), mode="w")
    group.create_array("X", data=X, chunks=(70, 4))
    group.create_array("y", data=(X[:, 0] > 0).astype(np.int64), chunks=(300,))
    table = ingest(tmp_path / "in.zarr", tmp_path / "run.zarr")
    np.testing.assert_array_equal(_stored_X(table), X.astype(np.float32))
    np.testing.assert_array_equal(table.read_y(), (X[:, 0] > 0).astype(np.int64))
    ds = xr.Dataset({c: ("row", X[:, j]) for j, c in enumerate("pqrs")}).chunk({"row": 64})
    table = ingest(ds, tmp_path / "run2.zarr", overwrite=True)
    assert table.feature_names == tuple("pqrs")
    np.testing.assert_array_equal(_stored_X(table), X.astype(np.float32))


def _refuse_in_driver(driver: int, k: int, frame: pd.DataFrame) -> pd.DataFrame:
    if os.getpid() == driver:
        raise AssertionError(f"partition {k} was computed in the driver process")
    return frame


def test_dask_frame_never_computed_on_the_driver(client, tmp_path: Path) -> None:
    """Like xarray's raise_if_dask_computes: partitions run on workers, results stay small."""
    import dask
    import dask.dataframe as dd
    from dask.sizeof import sizeof

    df = _frame(n=4000, seed=4)
    pieces = _parts(df, 4)
    frame = dd.from_map(_refuse_in_driver, [os.getpid()] * 4, range(4), pieces,
                        meta=df.iloc[:0], enforce_metadata=False)  # fmt: skip
    largest: list[int] = []

    def guard(dsk, keys, **kwargs):
        result = client.get(dsk, keys, **kwargs)
        largest.append(sizeof(result))
        # a summary per partition is small; the table would be >= its 4000 x 5 cells
        if sizeof(result) > 50_000:
            raise AssertionError(f"a compute brought {sizeof(result)} bytes to the driver")
        return result

    with dask.config.set(scheduler=guard):
        table = ingest(frame, tmp_path / "run.zarr", target="label")
    assert largest, "nothing was computed through the guard"
    _same_as_memory(table, df, "label")


def test_guard_catches_a_driver_compute(client) -> None:
    """The guard of the test above fails on what load_table does with a dask frame."""
    import dask.dataframe as dd

    df = _frame(n=400)
    frame = dd.from_map(_refuse_in_driver, [os.getpid()] * 2, range(2), _parts(df, 2),
                        meta=df.iloc[:0], enforce_metadata=False)  # fmt: skip
    with pytest.raises(AssertionError, match="computed in the driver"):
        frame.compute(scheduler="sync")


def test_overwrite_refused(tmp_path: Path) -> None:
    df = _frame(n=50)
    ingest(df, tmp_path / "run.zarr")
    from distforest.errors import StoreError

    with pytest.raises(StoreError, match="already exists"):
        ingest(df, tmp_path / "run.zarr")
    shutil.rmtree(tmp_path / "run.zarr")


def test_categories_and_booleans_as_the_in_memory_reader(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "c": pd.Categorical(["x", "y", "x", "y"], categories=["x", "y", "z"]),  # z unused
            "v": [1.0, 2.0, 3.0, 4.0],
            "b": ["True", "False", "True", "True"],
        }
    )
    _same_as_memory(ingest(df, tmp_path / "frame.zarr"), df, None)
    df.to_csv(tmp_path / "t.csv", index=False)  # in a text file True/False are booleans
    table = ingest(tmp_path / "t.csv", tmp_path / "csv.zarr")
    mem = load_table(tmp_path / "t.csv")
    assert table.categories == mem.categories == {"c": ("x", "y")}
    np.testing.assert_array_equal(_stored_X(table), mem.X.astype(np.float32))


def test_a_hive_folder_and_a_csv_glob_at_memory_urls_read_as_on_local_disk(tmp_path):
    """fsspec URLs go through dask's readers like local paths: the same rows, the part
    files named by their URLs (memory:// is in-process, so the synchronous scheduler)."""
    import dask
    import fsspec

    from distforest.store.source import by_partitions as partitioned_input

    fs = fsspec.filesystem("memory")
    df = _frame(90, seed=4)
    for k, part in enumerate(_parts(df, 3)):
        local = tmp_path / "hive" / f"year={2020 + k}"
        local.mkdir(parents=True)
        part.to_parquet(local / "part-0.parquet", index=False)
        fs.put(str(local / "part-0.parquet"), f"/urlin-hive/year={2020 + k}/part-0.parquet")
        part.to_csv(tmp_path / f"day-{k}.csv", index=False)
        fs.put(str(tmp_path / f"day-{k}.csv"), f"/urlin-csv/day-{k}.csv")
    try:
        assert partitioned_input("memory://urlin-hive")
        assert partitioned_input("memory://urlin-csv/day-*.csv")
        assert not partitioned_input("memory://urlin-csv/day-0.csv")  # small: read whole
        with dask.config.set(scheduler="synchronous"):
            pairs = [("memory://urlin-hive", tmp_path / "hive"),
                     ("memory://urlin-csv/day-*.csv", str(tmp_path / "day-*.csv"))]  # fmt: skip
            for url, path in pairs:
                remote = read_partitioned(url, target="label")
                local = read_partitioned(path, target="label")
                assert remote.encoding.features == local.encoding.features
                np.testing.assert_array_equal(remote.X.compute(), local.X.compute())
                np.testing.assert_array_equal(remote.y.compute(), local.y.compute())
            bad = df.astype({"a": object})
            bad.loc[70, "a"] = "#REF!"
            fs.pipe_file("/urlin-csv/day-2.csv", bad.iloc[60:].to_csv(index=False).encode())
            with pytest.raises(InputError, match=r"memory://urlin-csv/day-2\.csv"):
                read_partitioned("memory://urlin-csv/day-*.csv", target="label")
    finally:
        fs.rm("/urlin-hive", recursive=True)
        fs.rm("/urlin-csv", recursive=True)
