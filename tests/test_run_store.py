"""The run store's array creation: the same files as zarr's own ``create_array``.

:func:`~distforest.store.run_store.create_arrays` writes a set of arrays with one
:func:`zarr.create_hierarchy` pass (zarr's ``create_array`` checks every parent group
of each array again, a request each on object storage); the files must be exactly
those ``create_array`` writes, for new arrays, for arrays replaced (a retried task, a
resumed run) and for new parent groups.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from distforest.store.run_store import RunStore, create_arrays, write_group

SPECS = {
    "x": {"shape": (7, 3), "chunks": (4, 3), "dtype": "float32", "dimension_names": ("a", "b"),
          "attributes": {"units": "m", "scale_factor": 0.5}},
    "fit/nodes_0/feature": {"shape": (5,), "chunks": (5,), "dtype": "int64"},
    "fit/nodes_0/value": {"shape": (5, 1, 2), "chunks": (5, 1, 2), "dtype": "float64"},
    "done/x": {"shape": (2, 1), "chunks": (1, 1), "dtype": "uint8", "fill_value": 0},
    "empty": {"shape": (0,), "chunks": (1,), "dtype": "int32"},
}  # fmt: skip


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the root group's metadata (its time stamps)."""
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*"))
            if f.is_file() and f.relative_to(root) != Path("zarr.json")}  # fmt: skip


def by_zarr(path: Path) -> None:
    group = zarr.open_group(str(path), mode="r+", use_consolidated=False)
    for name, kw in SPECS.items():
        arr = group.create_array(name, overwrite=True, **kw)
        if arr.size:
            arr[...] = np.arange(arr.size).reshape(arr.shape)


def by_run_store(path: Path) -> None:
    for arr in create_arrays(str(path), SPECS).values():
        if arr.size:
            arr[...] = np.arange(arr.size).reshape(arr.shape)


@pytest.mark.parametrize("twice", [False, True], ids=["new", "replaced"])
def test_create_arrays_writes_what_zarr_create_array_writes(tmp_path, twice):
    stores = {}
    for how, make in (("zarr", by_zarr), ("run_store", by_run_store)):
        rs = RunStore.create(tmp_path / f"{how}.zarr", attrs={"n": 1})
        for _ in range(2 if twice else 1):
            make(Path(rs.path))
        stores[how] = files(Path(rs.path))
    assert "fit/nodes_0/zarr.json" in stores["zarr"] and "done/x/c/1/0" in stores["zarr"]
    assert stores["run_store"] == stores["zarr"]


def test_a_replaced_array_takes_its_new_shape_and_keeps_its_neighbours(tmp_path):
    rs = RunStore.create(tmp_path / "s.zarr", attrs={})
    write_group(rs.path, "fit/nodes_0", {"a": np.arange(6), "b": np.ones(3)})
    write_group(rs.path, "fit/nodes_0", {"a": np.arange(4, dtype=np.int32)})  # a retried task
    group = zarr.open_group(rs.path, mode="r")
    np.testing.assert_array_equal(group["fit/nodes_0/a"][...], np.arange(4, dtype=np.int32))
    assert group["fit/nodes_0/a"].dtype == np.int32
    np.testing.assert_array_equal(group["fit/nodes_0/b"][...], np.ones(3))


def test_arrays_created_after_completion_are_seen_by_the_store(tmp_path):
    rs = RunStore.create(tmp_path / "s.zarr", attrs={})
    rs.write_array("first", np.arange(3), ("sample",))
    rs.mark_complete()  # the group now lists its members from consolidated metadata
    rs.write_array("later", np.arange(2), ("tree",))
    np.testing.assert_array_equal(rs.read("later"), np.arange(2))
    assert "later" in rs.group
