"""Every store writes to netCDF with every xarray engine, and reads back the same.

Attributes are held as netCDF can hold them (nested values as ``json:`` text,
see distforest.io.attrs); ``open_store`` and ``RunStore.attrs`` give the
values back.  Engines: netCDF4 and h5netcdf (netCDF-4 files) and scipy
(netCDF-3), which has no unsigned integers: the count matrices (uint8 with
fill value 255) are written there as int16, one ``encoding`` entry.
"""

from __future__ import annotations

from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from sklearn.datasets import load_iris

from distforest import ProximityForest, XForest, execution, open_store
from distforest.forests.neighbors import top_k_neighbors
from distforest.forests.pairwise import pairwise
from distforest.io.attrs import JSON_PREFIX, decode_attrs, encode_attrs
from distforest.io.writers import read_zarr_table, write_table
from distforest.store.run_store import RunStore

ENGINES = ("netcdf4", "h5netcdf", "scipy")


def _engine(name: str) -> str:
    pytest.importorskip({"netcdf4": "netCDF4", "h5netcdf": "h5netcdf", "scipy": "scipy"}[name])
    return name


def _netcdf3(ds: xr.Dataset) -> tuple[xr.Dataset, dict[str, dict[str, object]]]:
    """netCDF-3 has no unsigned and no 64-bit integers: uint8/16 as the next wider signed
    type; X-Forest's 64-bit path words (bit sets) cannot be held and are left out."""
    encoding = {}
    wide = [name for name, var in ds.variables.items() if var.dtype == np.uint64]
    for name, var in ds.drop_vars(wide).variables.items():
        stored = np.dtype(var.encoding.get("dtype", var.dtype))
        if stored.kind == "u":
            kept = {k: var.encoding[k] for k in ("scale_factor", "_FillValue") if k in var.encoding}
            encoding[name] = {**kept, "dtype": f"int{2 * stored.itemsize * 8}"}
    return ds.drop_vars(wide), encoding


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """One store of each kind, written in process."""
    root = tmp_path_factory.mktemp("stores")
    X, y = load_iris(return_X_y=True)
    with execution("synchronous"):
        pf = ProximityForest(12, random_state=0).fit(X, y)
        pf.proximity(store=root / "prox.zarr")
        pf.proximity("rfgap", store=root / "prox.zarr")
        XForest(n_estimators=5, leaf_size=5, random_state=0).fit(X).similarity(
            store=root / "xforest.zarr"
        )
        pairwise(X[:40], metric="rbf", store=root / "rbf.zarr")
        top_k_neighbors(X, k=3, store=root / "knn.zarr")
    frame = pd.DataFrame({"a": [1.0, np.nan, 3.0], "cat": pd.Categorical(["u", "v", None])})
    write_table(frame, root / "table.zarr")
    return {p.stem: p for p in root.glob("*.zarr")}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", ["prox", "xforest", "rbf", "knn", "table"])
def test_every_store_round_trips_through_netcdf(stores, kind, engine, tmp_path):
    path = stores[kind]
    ds = xr.open_zarr(path)
    out = tmp_path / f"{kind}.nc"
    encoding = None
    if engine == "scipy":
        ds, encoding = _netcdf3(ds)
    # xarray's scipy writer refuses dask's distributed scheduler (a session client may be
    # the default one): write with the local scheduler, as a user without a client would
    with dask.config.set(scheduler="synchronous"):
        ds.to_netcdf(out, engine=_engine(engine), encoding=encoding)
    back = xr.open_dataset(out, engine=engine)
    for name, var in ds.data_vars.items():
        np.testing.assert_array_equal(back[name].values, var.values, err_msg=name)
        assert decode_attrs(back[name].attrs) == decode_attrs(var.attrs), name
    expected = RunStore.open(path).attrs if kind != "table" else decode_attrs(ds.attrs)
    assert decode_attrs(back.attrs) == expected
    assert isinstance(expected.get("params", {}), dict)


def test_readers_get_the_values_back(stores):
    raw = xr.open_zarr(stores["prox"]).attrs
    assert raw["params"].startswith(JSON_PREFIX)  # what netCDF holds
    ds = open_store(stores["prox"])
    assert ds.attrs["params"]["n_estimators"] == 12 and ds.attrs["classes"] == [0, 1, 2]
    assert ds["proximity"].attrs["identity"]["symmetric"] is True
    assert ProximityForest.load(stores["prox"]).n_estimators == 12
    table = read_zarr_table(stores["table"])
    assert list(table["cat"].cat.categories) == ["u", "v"] and table["cat"].isna().iloc[2]


def test_codec_keeps_plain_values_and_marks_the_rest():
    values = {
        "text": "abc",
        "int": 3,
        "float": 0.5,
        "flag": True,
        "none": None,
        "nested": {"a": [1, 2], "b": None},
        "list": ["x", "y"],
        "big": 2**100,  # random_state entropy: beyond 64 bits
        "tricky": JSON_PREFIX + "not json",
        "numpy": np.int64(7),
    }
    encoded = encode_attrs(values)
    assert encoded["text"] == "abc" and encoded["int"] == 3 and encoded["float"] == 0.5
    assert all(isinstance(encoded[k], str) for k in ("flag", "none", "nested", "list", "big"))
    assert encoded["numpy"] == 7 and type(encoded["numpy"]) is int
    assert decode_attrs(encoded) == {**values, "numpy": 7}
    old = {"params": {"a": 1}, "status": "complete"}  # a store written before the codec
    assert decode_attrs(old) == old
