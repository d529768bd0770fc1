"""Tests of the input adapters in ``distforest.io``."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from distforest.errors import InputError
from distforest.io import Table, load_table

DATA = Path(__file__).resolve().parents[1] / "distforest" / "data"
NAMES = ("a", "b", "c")


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "a": [1.0, 2.5, np.nan, 4.0, 5.0],
            "b": [10, 20, 30, 40, 50],
            "c": [0.5, -1.0, 2.0, 3.0, 7.25],
            "t": [0, 1, 0, 1, 1],
        }
    )


def expected(frame: pd.DataFrame) -> np.ndarray:
    return frame[list(NAMES)].to_numpy(dtype=np.float64)


def check(t: Table, frame: pd.DataFrame, source: str | None = None) -> None:
    np.testing.assert_array_equal(t.X, expected(frame))
    assert t.X.dtype == np.float64 and t.X.flags.c_contiguous
    assert t.feature_names == NAMES
    np.testing.assert_array_equal(t.y, frame["t"].to_numpy())
    assert (t.n_samples, t.n_features) == (5, 3)
    if source is not None:
        assert t.source == source


# --- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("sep,suffix", [(",", ".csv"), ("\t", ".tsv"), (";", ".txt")])
def test_delimited_round_trip(tmp_path: Path, frame: pd.DataFrame, sep: str, suffix: str) -> None:
    path = tmp_path / f"data{suffix}"
    frame.to_csv(path, sep=sep, index=False)
    check(load_table(path, target="t"), frame, str(path))
    check(load_table(str(path), target="t"), frame)


def test_parquet_round_trip(tmp_path: Path, frame: pd.DataFrame) -> None:
    path = tmp_path / "data.parquet"
    frame.to_parquet(path)
    check(load_table(path, target="t"), frame)


def test_npy_round_trip(tmp_path: Path, frame: pd.DataFrame) -> None:
    path = tmp_path / "data.npy"
    np.save(path, frame.to_numpy())
    t = load_table(path, target="3")
    np.testing.assert_array_equal(t.X, expected(frame))
    assert t.feature_names == ("0", "1", "2")
    np.testing.assert_array_equal(t.y, frame["t"].to_numpy(dtype=float))


def test_zarr_array_round_trip(tmp_path: Path, frame: pd.DataFrame) -> None:
    arr = frame.to_numpy()
    z = zarr.create_array(str(tmp_path / "x.zarr"), shape=arr.shape, dtype="f8", chunks=(2, 2))
    z[...] = arr
    for src in (tmp_path / "x.zarr", z):
        t = load_table(src, target="3")
        np.testing.assert_array_equal(t.X, expected(frame))
        assert t.feature_names == ("0", "1", "2")


def test_zarr_group_round_trip(tmp_path: Path, frame: pd.DataFrame) -> None:
    g = zarr.open_group(str(tmp_path / "store"), mode="w")
    x = g.create_array("X", shape=(5, 3), dtype="f8")
    x[...] = expected(frame)
    x.attrs["feature_names"] = list(NAMES)
    y = g.create_array("y", shape=(5,), dtype="i8")
    y[...] = frame["t"].to_numpy()
    for src in (tmp_path / "store", g):
        t = load_table(src)
        check(t, frame)
        assert t.target_name is None
    assert load_table(g, y=np.arange(5)).y.tolist() == [0, 1, 2, 3, 4]


def test_xarray_to_zarr_round_trip(tmp_path: Path, frame: pd.DataFrame) -> None:
    path = tmp_path / "ds.zarr"
    reordered = frame[["t", "c", "b", "a"]]  # a store keeps no order: columns come sorted
    xr.Dataset.from_dataframe(reordered).to_zarr(path, zarr_format=3, consolidated=False)
    check(load_table(path, target="t"), frame, str(path))
    check(load_table(zarr.open_group(str(path), mode="r"), target="t"), frame)


def test_both_readers_find_a_zarr_tables_columns_alike(tmp_path: Path, frame: pd.DataFrame) -> None:
    """The in-memory and the partitioned reader share one Zarr table opener (io/zarr_tables)."""
    from distforest.io.partitions import open_partitions

    path = tmp_path / "ds.zarr"
    xr.Dataset.from_dataframe(frame[["t", "c", "b", "a"]]).to_zarr(
        path, zarr_format=3, consolidated=False
    )
    group = zarr.open_group(str(path), mode="r+")
    group.attrs["columns"] = ["c", "a", "t", "b"]  # the writer's order wins over sorting
    parts = open_partitions(group)
    assert parts.columns == ("c", "a", "t", "b")
    whole = load_table(group)
    assert tuple(whole.feature_names) == ("c", "a", "t", "b")
    np.testing.assert_array_equal(
        parts.frame.compute().to_numpy(dtype=float), whole.X.astype(float)
    )
    bad = zarr.open_group(str(tmp_path / "bad.zarr"), mode="w")
    bad.create_array("a", shape=(3,), dtype="f8")
    bad.create_array("b", shape=(4,), dtype="f8")  # not one table: lengths differ
    for read in (open_partitions, load_table):
        with pytest.raises(InputError, match="without an 'X' array could not be opened"):
            read(bad)


def test_in_memory_objects(frame: pd.DataFrame) -> None:
    check(load_table(frame, target="t"), frame, "<pandas.DataFrame>")
    check(load_table(frame[list(NAMES)], y=frame["t"]), frame)
    check(load_table(frame[list(NAMES)], y=frame["t"].tolist()), frame)
    check(load_table(frame[list(NAMES)], y=da.from_array(frame["t"].to_numpy())), frame)
    check(load_table(xr.Dataset.from_dataframe(frame), target="t"), frame)
    arr = expected(frame)
    dx = xr.DataArray(arr, dims=("sample", "feature"), coords={"feature": list(NAMES)})
    check(load_table(dx, y=frame["t"].to_numpy()), frame, "<xarray.DataArray>")
    t = load_table(da.from_array(arr, chunks=2), drop=["1"])
    assert t.feature_names == ("0", "2") and t.y is None
    np.testing.assert_array_equal(t.X, arr[:, [0, 2]])
    t = load_table(np.array([[True, False], [False, False]]))
    np.testing.assert_array_equal(t.X, [[1.0, 0.0], [0.0, 0.0]])


def test_encoding_and_drop(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "Id": ["r1", "r2", "r3", "r4"],
            "flag": [True, False, True, False],
            "num_as_str": ["1", "2.5", None, "4"],
            "colour": ["red", "blue", None, "red"],
            "size": pd.Categorical(["S", "M", "L", "M"], categories=["S", "M", "L", "XL"]),
            "y": ["u", "v", "u", "v"],
        }
    )
    t = load_table(df, target="y", drop=["Id"])
    assert t.feature_names == ("flag", "num_as_str", "colour", "size")
    np.testing.assert_array_equal(t.X[:, 0], [1, 0, 1, 0])
    np.testing.assert_array_equal(t.X[:, 1], [1, 2.5, np.nan, 4])
    np.testing.assert_array_equal(t.X[:, 2], [1, 0, np.nan, 1])
    np.testing.assert_array_equal(t.X[:, 3], [2, 1, 0, 1])
    assert t.categories == {"colour": ("blue", "red"), "size": ("L", "M", "S", "XL")}
    assert t.y.tolist() == ["u", "v", "u", "v"]
    path = tmp_path / "q.csv"
    path.write_text("a,b\n1,?\n2,3\n3,4\n")
    t = load_table(path, na_values=["?"])
    np.testing.assert_array_equal(t.X[:, 1], [np.nan, 3, 4])


def test_fingerprint(frame: pd.DataFrame) -> None:
    a = load_table(frame, target="t")
    b = load_table(frame.copy(), target="t")
    assert a.fingerprint() == b.fingerprint() and len(a.fingerprint()) == 32
    assert load_table(frame, target="b").fingerprint() != a.fingerprint()
    assert load_table(frame, y=frame["t"].astype(str)).fingerprint() != a.fingerprint()


def test_breast_cancer() -> None:
    t = load_table(DATA / "breast_cancer.csv", target="Class", drop=["Id"])
    assert t.X.shape == (699, 9)
    assert "Id" not in t.feature_names and "Class" not in t.feature_names
    assert int(np.isnan(t.X[:, t.feature_names.index("Bare.nuclei")]).sum()) == 16
    assert int(np.isnan(t.X).sum()) == 16
    assert set(t.y.tolist()) == {"benign", "malignant"} and t.categories == {}
    with pytest.raises(InputError, match=r"Bare.nuclei.*\(16\).*distforest impute"):
        load_table(DATA / "breast_cancer.csv", target="Class", allow_missing=False)


def test_ionosphere() -> None:
    t = load_table(DATA / "ionosphere.csv", target="Class")
    assert t.X.shape == (351, 34) and not np.isnan(t.X).any()
    assert set(np.unique(t.X[:, 0])) == {0.0, 1.0}
    assert set(np.unique(t.X[:, 1])) == {0.0}
    assert set(t.y.tolist()) == {"good", "bad"}


# --- errors -----------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "d.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_missing_and_unsupported_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no such file: .*nope\.csv"):
        load_table(tmp_path / "nope.csv")
    with pytest.raises(InputError, match=r"'\.xlsx'.*\.csv.*\.parquet"):
        load_table(write(tmp_path, "x", "d.xlsx"))
    with pytest.raises(InputError, match=r"bad\.parquet: cannot read"):
        load_table(write(tmp_path, "not parquet", "bad.parquet"))
    with pytest.raises(InputError, match=r"d\.csv: cannot parse"):
        load_table(write(tmp_path, 'a,b\n1,2\n3,"4\n'))
    np.save(tmp_path / "o.npy", np.array([[1, "x"]], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match=r"o\.npy.*object arrays"):
        load_table(tmp_path / "o.npy")
    with pytest.raises(InputError, match=r"cannot read a dict"):
        load_table({"a": [1, 2]})


def test_empty_tables(tmp_path: Path, frame: pd.DataFrame) -> None:
    with pytest.raises(InputError, match=r"d\.csv: the file is empty"):
        load_table(write(tmp_path, ""))
    with pytest.raises(InputError, match=r"d\.csv: the table has no data rows"):
        load_table(write(tmp_path, "a,b\n"))
    with pytest.raises(InputError, match=r"single row"):
        load_table(write(tmp_path, "a,b\n1,2\n"))
    with pytest.raises(InputError, match=r"no feature columns left"):
        load_table(frame[["a", "t"]], target="t", drop=["a"])


def test_duplicate_header(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"duplicate column names.*\['a'\]"):
        load_table(write(tmp_path, "a,b,a\n1,2,3\n4,5,6\n"))


def test_unknown_columns(frame: pd.DataFrame) -> None:
    with pytest.raises(InputError, match=r"no column 'T'.*'a', 'b'.*did you mean 't'\?"):
        load_table(frame, target="T")
    with pytest.raises(InputError, match=r"no column 'bb'.*did you mean 'b'\?"):
        load_table(frame, drop=["bb"])
    with pytest.raises(InputError, match=r"not both"):
        load_table(frame, target="t", y=[0, 1, 0, 1, 1])


def test_garbage_values(tmp_path: Path) -> None:
    rows = "\n".join(f"{i},{'?' if i in (3, 12) else i}" for i in range(1, 31))
    with pytest.raises(InputError) as err:
        load_table(write(tmp_path, "a,age\n" + rows + "\n"))
    msg = str(err.value)
    assert "d.csv" in msg and "'age'" in msg and "'?' (row 3)" in msg and "(row 12)" in msg
    assert "--na-values ?" in msg


def test_infinite_and_missing(frame: pd.DataFrame) -> None:
    bad = frame.assign(c=[1.0, np.inf, 2.0, -np.inf, 0.0])
    with pytest.raises(InputError, match=r"column 'c' holds infinite values \(data rows \[2, 4\]"):
        load_table(bad)
    with pytest.raises(InputError, match=r"'a' \(1\).*impute them first"):
        load_table(frame, allow_missing=False)


def test_bad_targets(frame: pd.DataFrame) -> None:
    with pytest.raises(
        InputError, match=r"target 'a' is missing in 1 row.*\[3\] counted from 1.*drop"
    ):
        load_table(frame, target="a")
    with pytest.raises(InputError, match=r"target 'k' has the single value 'x'.*unsupervised"):
        load_table(frame.assign(k="x"), target="k")
    with pytest.raises(InputError, match=r"y has 4 values but the table has 5 rows"):
        load_table(frame, y=[0, 1, 0, 1])
    with pytest.raises(InputError, match=r"y must be 1-D, got shape \(5, 2\)"):
        load_table(frame, y=np.zeros((5, 2)))


def test_bad_arrays(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"2-D array.*1-D with shape \(4,\)"):
        load_table(np.arange(4.0))
    with pytest.raises(InputError, match=r"3-D with shape \(2, 2, 2\)"):
        load_table(xr.DataArray(np.zeros((2, 2, 2))))
    with pytest.raises(InputError, match=r"dtype <U1 is not numeric"):
        load_table(np.array([["a", "b"], ["c", "d"]]))
    z = zarr.create_array(str(tmp_path / "s.zarr"), shape=(2, 2), dtype="c16")
    with pytest.raises(InputError, match=r"s\.zarr: Complex data not supported"):
        load_table(tmp_path / "s.zarr")
    assert z.shape == (2, 2)
