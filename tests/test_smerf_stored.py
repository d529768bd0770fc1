"""SMERF on a D given as a file: the same model as from memory, and the driver never holds D.

A Zarr (or ``.npy``) D is checked block by block in the driver and then only
referred to; each process that grows trees or predicts reads it once
(:class:`distforest.io.distances.StoredDistances`).
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from distforest import execution
from distforest.errors import InputError
from distforest.forests.smerf import SMERF
from distforest.io import distances
from distforest.io.distances import StoredDistances, clear_cache, load_distances
from distforest.kernels import smerf as K


def _data(n: int, d: int = 5, seed: int = 0, missing: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    g = X[:, 0] ** 2 + X[:, 1]
    D = ((g[:, None] - g[None, :]) ** 2 / 2).astype(np.float32)
    hole = np.triu(rng.random((n, n)) < missing, 1)
    D[hole | hole.T] = np.nan
    return X, D


def _zarr(path, D: np.ndarray, chunk: int = 16) -> str:
    arr = zarr.create_array(str(path), shape=D.shape, chunks=(chunk, chunk), dtype=D.dtype)
    arr[...] = D
    return str(path)


def _same_model(a: SMERF, b: SMERF) -> None:
    np.testing.assert_array_equal(a.leaves_, b.leaves_)
    np.testing.assert_array_equal(a.inbag_, b.inbag_)
    for col in K.NODE_COLUMNS:
        np.testing.assert_array_equal(a.forest_.nodes[col], b.forest_.nodes[col])
    np.testing.assert_array_equal(a.forest_.leaf_members, b.forest_.leaf_members)
    np.testing.assert_array_equal(a.tree_importances_, b.tree_importances_)
    assert a.mean_distance_ == b.mean_distance_


def test_fit_from_a_zarr_path_equals_fit_from_memory(client, tmp_path, monkeypatch):
    n = 120
    X, D = _data(n)
    path = _zarr(tmp_path / "D.zarr", D)
    Q = np.random.default_rng(3).uniform(-1, 1, size=(30, 5))
    with execution("synchronous"):
        memory = SMERF(n_estimators=8, random_state=2).fit(X, D)
        want = memory.predict_distance(Q).values
        want_oob = memory.oob_distance().values
    assert isinstance(memory.distances_, np.ndarray)
    # blocks of 16 rows here (one per chunk row), one block of every row in memory: same mean
    monkeypatch.setattr(distances, "BLOCK_BYTES", 16 * n * 4)
    stored = SMERF(n_estimators=8, random_state=2).set_execution(client).fit(X, path)
    assert isinstance(stored.distances_, StoredDistances)
    _same_model(memory, stored)
    got = stored.predict_distance(Q, store=tmp_path / "p.zarr", tile_size=32)
    np.testing.assert_array_equal(got.values, want)
    np.testing.assert_array_equal(stored.oob_distance().values, want_oob)
    np.testing.assert_array_equal(np.asarray(stored.distances_), D)
    # the saved models hold the same D; a loaded one predicts the same without the file
    stored.save(tmp_path / "stored.zarr", tile_size=32)
    memory.save(tmp_path / "memory.zarr", tile_size=32)
    a = zarr.open_group(str(tmp_path / "stored.zarr"), mode="r")["train_distance"][...]
    b = zarr.open_group(str(tmp_path / "memory.zarr"), mode="r")["train_distance"][...]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, D)
    back = SMERF.load(tmp_path / "stored.zarr")
    _same_model(memory, back)
    with execution("synchronous"):
        np.testing.assert_array_equal(back.predict_distance(Q).values, want)
    clear_cache()


def test_the_driver_never_reads_the_whole_stored_d(client, tmp_path, monkeypatch):
    n, rows = 200, 16
    X, D = _data(n, seed=1)
    path = _zarr(tmp_path / "D.zarr", D, chunk=rows)
    monkeypatch.setattr(distances, "BLOCK_BYTES", rows * n * 4)
    cells: list[int] = []
    getitem = zarr.Array.__getitem__

    def counting(self, key):
        out = getitem(self, key)
        cells.append(int(np.size(out)))
        return out

    def refuse(self):
        raise AssertionError("the driver read all of D")

    monkeypatch.setattr(zarr.Array, "__getitem__", counting)
    monkeypatch.setattr(StoredDistances, "_read", refuse)
    model = SMERF(n_estimators=6, random_state=0).set_execution(client)
    model.fit(X, path)
    Q = np.random.default_rng(0).uniform(-1, 1, size=(20, 5))
    model.predict_distance(Q, store=tmp_path / "p.zarr", tile_size=64)
    model.oob_distance(store=tmp_path / "oob.zarr", tile_size=64)
    model.save(tmp_path / "model.zarr", tile_size=64)
    back = SMERF.load(tmp_path / "model.zarr").set_execution(client)
    back.predict_distance(Q, store=tmp_path / "p2.zarr", tile_size=64)
    # row blocks (rows x n) and column strips (n x rows) of D, and saved blocks of 64 rows
    assert cells and max(cells) <= 64 * n
    # the workers read it: the matrices are those of the in-memory D
    with execution("synchronous"):
        memory = SMERF(n_estimators=6, random_state=0).fit(X, D)
        want = memory.predict_distance(Q).values
    monkeypatch.undo()
    got = zarr.open_group(str(tmp_path / "p2.zarr"), mode="r")["distance"][...]
    np.testing.assert_array_equal(got, want)


def test_a_d_file_changed_after_the_fit_is_refused(tmp_path):
    X, D = _data(60)
    path = _zarr(tmp_path / "D.zarr", D)
    with execution("synchronous"):
        model = SMERF(n_estimators=3).fit(X, path)
        clear_cache()
        arr = zarr.open_array(path, mode="r+")
        arr[0:16, 0:16] = arr[0:16, 0:16] + 1
        with pytest.raises(InputError, match="changed or was removed after it was checked"):
            model.predict_distance(X[:4])


def test_npy_path_is_memory_mapped_and_checked_like_memory(tmp_path):
    _, D = _data(50)
    np.save(tmp_path / "D.npy", D)
    ref = load_distances(str(tmp_path / "D.npy"), fingerprint=True)
    here = load_distances(D, fingerprint=True)
    assert (ref.mean, ref.observed, ref.fingerprint) == (here.mean, here.observed, here.fingerprint)
    assert ref.observed == pytest.approx(np.mean(~np.isnan(D)))
    assert ref.mean == pytest.approx(float(np.nanmean(D.astype(np.float64))), rel=1e-12)
    values = ref.values.load()
    assert isinstance(values.base, np.memmap) and not values.flags.writeable
    np.testing.assert_array_equal(values, D)
    clear_cache()
    with pytest.raises(InputError, match=r"not symmetric: \[3, 7\]"):
        bad = D.copy()
        bad[3, 7] += 1
        np.save(tmp_path / "bad.npy", bad)
        load_distances(str(tmp_path / "bad.npy"))
