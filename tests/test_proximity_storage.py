"""Breiman's proximity stored as integer counts of trees: every reader sees today's floats.

The store keeps ``uint8`` (T < 255) or ``uint16`` counts with a CF
``scale_factor`` of 1/T; xarray decodes them to float64, the project's own
readers to float32.  Both must give the values of the float oracle (the dense
count over the forest's leaves), and old float32 stores must read as before.
"""

from __future__ import annotations

import json

import dask.config
import numpy as np
import pytest
import xarray as xr
import zarr
from click.testing import CliRunner
from oracles import dense_original_proximity

from distforest import ProximityForest, open_store
from distforest.cli.main import cli
from distforest.errors import StoreError
from distforest.io.matrices import StoredMatrix, decode, load_matrix, open_matrix, row_blocks
from distforest.kernels.proximity import original_proximity_tile, shared_leaf_counts
from distforest.store.run_store import SCHEMA_VERSION, RunStore, write_tile
from distforest.store.schema import count_dtype, matrix_encoding


@pytest.fixture(scope="module")
def forest(client, small_classification):
    X, y = small_classification
    return ProximityForest(n_estimators=30, random_state=0).set_execution(client).fit(X, y)


@pytest.fixture(scope="module")
def stored(forest, tmp_path_factory):
    path = tmp_path_factory.mktemp("prox") / "p.zarr"
    forest.proximity(store=path)
    return path


def _oracle(forest) -> np.ndarray:
    """float32(count / T), the float32 matrix distforest stored before schema_version 2."""
    return dense_original_proximity(forest.leaves_, forest.leaves_).astype(np.float32)


def test_stored_as_counts_with_cf_attributes(forest, stored):
    arr = zarr.open_array(str(stored), path="proximity", mode="r")
    assert arr.dtype == np.uint8
    assert arr.attrs["scale_factor"] == 1 / 30
    assert arr.attrs["_FillValue"] == 255
    counts = np.asarray(arr[...])
    leaves = forest.leaves_
    expected = (leaves[:, None, :] == leaves[None, :, :]).sum(axis=2)
    np.testing.assert_array_equal(counts, expected)
    assert RunStore.open(stored).attrs["schema_version"] == SCHEMA_VERSION == 2


def test_project_readers_see_the_float32_values(forest, stored):
    expected = _oracle(forest)
    read = RunStore.open(stored).read("proximity")
    assert read.dtype == np.float32
    np.testing.assert_array_equal(read, expected)
    for da in (RunStore.open(stored).dataset()["proximity"], open_store(stored)["proximity"]):
        assert da.dtype == np.float32
        assert da.encoding["chunks"] == (300, 300) and "scale_factor" not in da.encoding
        np.testing.assert_array_equal(da.values, expected)
    in_memory = forest.proximity().values
    np.testing.assert_array_equal(in_memory, expected)


def test_xarray_decodes_floats_equal_to_the_oracle(forest, stored):
    da = xr.open_zarr(stored)["proximity"]
    assert np.issubdtype(da.dtype, np.floating)
    values = da.values
    # the scikit-learn recipe: a float64 mean of leaf matches over trees
    leaves = forest.leaves_
    recipe = (leaves[:, None, :] == leaves[None, :, :]).mean(axis=2)
    np.testing.assert_allclose(values, recipe, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(values.astype(np.float32), _oracle(forest))


def test_stored_matrix_readers_decode(forest, stored):
    expected = _oracle(forest)
    matrix = load_matrix(f"{stored}/proximity")
    assert isinstance(matrix, StoredMatrix)
    reader = open_matrix(matrix)
    rows = np.array([0, 5, 299, 17])
    cols = np.array([3, 5, 0, 250])
    got = reader[rows, cols]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected[rows, cols])
    np.testing.assert_array_equal(
        reader[10:][rows[:2], cols[:2]], expected[rows[:2] + 10, cols[:2]]
    )
    blocks = np.concatenate([b for _, b in row_blocks(matrix, 128)])
    np.testing.assert_array_equal(blocks, expected.astype(np.float64))
    arr = zarr.open_array(str(stored), path="proximity", mode="r")
    np.testing.assert_array_equal(load_matrix(arr[...]), np.asarray(arr[...], dtype=np.float64))


def test_info_reports_the_decoded_type(stored):
    result = CliRunner().invoke(cli, ["info", str(stored), "--json"])
    assert result.exit_code == 0, result.output
    prox = json.loads(result.output)["arrays"]["proximity"]
    assert prox["dtype"] == "float32"
    assert prox["stored"].startswith("uint8")
    text = CliRunner().invoke(cli, ["info", str(stored)]).output
    assert "proximity" in text and "float32" in text


def test_many_trees_are_stored_as_uint16(client, small_classification, tmp_path):
    X, y = small_classification
    pf = ProximityForest(n_estimators=260, max_depth=3, random_state=1, tile_size=128)
    pf.set_execution(client).fit(X[:150], y[:150])
    P = pf.proximity(store=tmp_path / "p.zarr")
    assert zarr.open_array(str(tmp_path / "p.zarr"), path="proximity").dtype == np.uint16
    assert P.dtype == np.float32
    np.testing.assert_array_equal(P.values, _oracle(pf))


def test_count_types_keep_a_free_fill_value():
    assert count_dtype(1) == count_dtype(254) == "uint8"
    assert count_dtype(255) == count_dtype(65534) == "uint16"
    assert count_dtype(65535) is None
    assert matrix_encoding("proximity", n_trees=65535).dtype == "float32"
    assert matrix_encoding("proximity").dtype == "float32"
    for name in ("proximity_oob", "proximity_rfgap", "beta_similarity"):  # not counts over T
        enc = matrix_encoding(name, n_trees=100)
        assert enc.dtype == "float32" and not enc.is_counts


@pytest.mark.parametrize("n_trees", [1, 3, 7, 10, 30, 100, 254, 255, 1000, 65534])
def test_decoding_a_count_gives_float32_of_the_fraction(n_trees):
    counts = np.arange(n_trees + 1)
    if n_trees > 300:
        counts = np.unique(np.r_[np.random.default_rng(n_trees).integers(0, n_trees, 500), n_trees])
    dtype = count_dtype(n_trees)
    assert dtype is not None
    stored = counts.astype(dtype)
    attrs = matrix_encoding("proximity", n_trees=n_trees).attrs()
    got = decode(stored, attrs)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, (counts / n_trees).astype(np.float32))
    # the fill value (never written) reads as NaN; plain floats are left alone
    assert np.isnan(decode(np.array([np.iinfo(dtype).max], dtype=dtype), attrs)).all()
    floats = np.array([0.5, np.nan], dtype=np.float32)
    assert decode(floats, attrs) is floats or np.shares_memory(decode(floats, attrs), floats)


def test_count_kernel_matches_the_float_kernel(forest):
    leaves = forest.leaves_
    li, lj = leaves[:200], leaves[100:]
    for dtype in ("uint8", "uint16", "int32"):
        counts = shared_leaf_counts(li, lj, dtype)
        assert counts.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(
            (counts / leaves.shape[1]).astype(np.float32), original_proximity_tile(li, lj)
        )
    with pytest.raises(ValueError, match="do not fit in uint8"):
        shared_leaf_counts(np.zeros((2, 300), np.int32), np.zeros((2, 300), np.int32), "uint8")


def test_unwritten_tiles_read_as_nan_and_fractions_are_refused(tmp_path):
    rs = RunStore.create(tmp_path / "s.zarr", attrs={})
    enc = matrix_encoding("proximity", n_trees=10)
    rs.create_matrix("proximity", 4, 4, 2, encoding=enc)
    rs.create_done_record("proximity", (2, 2))
    write_tile(rs.path, "proximity", (0, 1), (slice(0, 2), slice(2, 4)),
               np.array([[1, 2], [3, 10]], dtype=np.uint8), mirror=True)  # fmt: skip
    P = rs.dataset()["proximity"].values
    assert P.dtype == np.float32
    np.testing.assert_array_equal(P[0:2, 2:4], np.float32([[0.1, 0.2], [0.3, 1.0]]))
    np.testing.assert_array_equal(P[2:4, 0:2], P[0:2, 2:4].T)
    assert np.isnan(P[0:2, 0:2]).all() and np.isnan(P[2:4, 2:4]).all()
    assert np.isnan(xr.open_zarr(rs.path, consolidated=False)["proximity"].values[0, 0])
    with pytest.raises(StoreError, match="return the counts, not fractions"):
        write_tile(rs.path, "proximity", (0, 0), (slice(0, 2), slice(0, 2)),
                   np.ones((2, 2), dtype=np.float32))  # fmt: skip


def test_old_float32_stores_still_read(tmp_path):
    """A schema_version 1 store (float32 proximity, no CF attributes) reads as before."""
    rs = RunStore.create(tmp_path / "old.zarr", attrs={"schema_version": 1})
    values = np.float32([[1.0, 0.25], [0.25, 1.0]])
    rs.create_matrix("proximity", 2, 2, 2, dtype="float32")
    rs.array("proximity")[...] = values
    rs.mark_complete()
    old = RunStore.open(rs.path)
    assert old.attrs["schema_version"] == 1
    assert old.dataset()["proximity"].dtype == np.float32
    np.testing.assert_array_equal(old.dataset()["proximity"].values, values)
    np.testing.assert_array_equal(xr.open_zarr(rs.path)["proximity"].values, values)
    reader = open_matrix(load_matrix(f"{rs.path}/proximity"))
    np.testing.assert_array_equal(
        reader[np.array([0, 1]), np.array([1, 1])], values[[0, 1], [1, 1]]
    )


def test_a_newer_schema_is_refused_clearly(tmp_path):
    rs = RunStore.create(tmp_path / "new.zarr", attrs={})
    rs.update_attrs(schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=r"newer than this distforest.*upgrade distforest"):
        RunStore.open(rs.path)


@pytest.mark.parametrize(
    ("shape", "largest"),
    [((1, 1), 1), ((3, 0), 5), ((7, 2048), 30_000), ((4, 700), 2**31 - 1), ((5, 900), 3)],
)
def test_leaf_order_equals_a_stable_argsort(shape, largest):
    # the radix sort must order ties (rows of one leaf) exactly as a stable sort
    from distforest.kernels.proximity import leaf_order

    leaves = np.random.default_rng(1).integers(0, largest, size=shape).astype(np.int32)
    order, sorted_leaves = leaf_order(leaves)
    want = np.argsort(leaves, axis=1, kind="stable")
    np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(sorted_leaves, np.take_along_axis(leaves, want, axis=1))
    with pytest.raises(ValueError, match="negative"):
        leaf_order(np.array([[3, -1]], dtype=np.int32))


@pytest.mark.parametrize(("shape", "largest"), [((1, 1), 1), ((3, 0), 5), ((6, 500), 40)])
def test_leaf_runs_are_each_trees_distinct_leaves_and_their_rows(shape, largest):
    from distforest.kernels.proximity import leaf_order, leaf_runs

    leaves = np.random.default_rng(2).integers(0, largest, size=shape).astype(np.int32)
    _, sorted_leaves = leaf_order(leaves)
    leaf, start, n_runs = leaf_runs(sorted_leaves)
    for t in range(shape[0]):
        values, first, sizes = np.unique(sorted_leaves[t], return_index=True, return_counts=True)
        k = n_runs[t]
        assert k == len(values)
        np.testing.assert_array_equal(leaf[t, :k], values)
        np.testing.assert_array_equal(start[t, :k], first)
        np.testing.assert_array_equal(np.diff(start[t, : k + 1]), sizes)


def test_count_tiles_equal_the_float_tiles(forest):
    from distforest.forests import tiles

    a, b = forest.leaves_[:100], forest.leaves_[100:200]
    np.testing.assert_array_equal(
        (tiles.compute_tile("original", {"leaves": a}, {"leaves": b}, "uint8") / 30).astype(
            np.float32
        ),
        original_proximity_tile(a, b),
    )


@pytest.mark.parametrize(
    "shape", [(1, 1), (3, 130), (8, 8), (64, 64), (200, 65), (129, 257), (1344, 2048), (13, 9)]
)
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32"])
def test_transposed_copy_equals_the_transpose(shape, dtype):
    from distforest.kernels.transpose import transposed

    values = np.random.default_rng(0).integers(0, 255, size=shape).astype(dtype)
    for v in (values, values[:, ::-1]):  # contiguous or not
        got = transposed(v)
        assert got.flags.c_contiguous and got.dtype == v.dtype
        np.testing.assert_array_equal(got, v.T)


def _counts(leaves: np.ndarray, rows: slice, cols: slice) -> np.ndarray:
    return (leaves[rows, None, :] == leaves[None, cols, :]).sum(axis=2)


@pytest.mark.parametrize("budget", [None, 0], ids=["kept", "over-budget"])
def test_a_process_reads_and_sorts_each_row_block_once(forest, tmp_path, monkeypatch, budget):
    from distforest.forests import tiles

    path = str(tmp_path / "f.zarr")
    forest.save(path)
    if budget is not None:  # nothing fits: only the row block of a task's tiles is shared
        monkeypatch.setitem(dask.config.config["distforest"], "block-cache-bytes", budget)
    reads, sorts = [], []
    real_read, real_sort = tiles.read_rows, tiles.sort_block
    monkeypatch.setattr(tiles, "read_rows", lambda p, n, r: reads.append(r) or real_read(p, n, r))
    monkeypatch.setattr(tiles, "sort_block", lambda b: sorts.append(b.shape) or real_sort(b))
    rows = slice(0, 64)
    blocks = (slice(64, 128), slice(128, 192), slice(192, 256))
    for _ in range(2):  # the same tiles twice: e.g. two tasks' rows meeting the same columns
        for cols in blocks:  # one task's tiles of a row
            got = tiles.store_tile(path, "original", "uint8", "write-1", rows, cols)
            np.testing.assert_array_equal(got, _counts(forest.leaves_, rows, cols))
    assert reads.count(rows) == 1
    assert len(reads) == len(sorts) == (4 if budget is None else 7)
    tiles.forget_blocks("write-1")  # the write is over: its blocks are freed
    assert tiles._blocks.nbytes == 0 and not tiles._blocks.blocks
    tiles.store_tile(path, "original", "uint8", "write-1", rows, blocks[0])
    assert len(reads) == (6 if budget is None else 9)


def test_a_new_write_at_the_same_path_is_not_served_old_rows(small_classification, tmp_path):
    from distforest.forests import tiles

    X, y = small_classification
    path = str(tmp_path / "f.zarr")
    rows, cols = slice(0, 64), slice(64, 128)
    for seed, write in ((0, "write-a"), (1, "write-b")):  # the same thread, path and rows
        fitted = ProximityForest(n_estimators=20, random_state=seed).fit(X, y)
        fitted.save(path, overwrite=True)
        got = tiles.store_tile(path, "original", "uint8", write, rows, cols)
        np.testing.assert_array_equal(got, _counts(fitted.leaves_, rows, cols))
