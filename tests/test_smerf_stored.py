"""SMERF out of core: D given as a file, and features read from a run store.

A Zarr (or ``.npy``) D is checked block by block in the driver and then only
referred to; each process that grows trees or predicts reads it once
(:class:`distforest.io.distances.StoredDistances`).  Features in a run store
(a folder of parts ingested, a dask DataFrame, ``smerf fit`` and SMERF
pipelines on a folder) give the same model, bit for bit, with ``leaves_`` and
``inbag_`` left in the store.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner

from distforest import execution
from distforest.cli.main import cli
from distforest.errors import InputError
from distforest.forests import constraints as C
from distforest.forests.smerf import SMERF
from distforest.io import distances
from distforest.io.distances import StoredDistances, clear_cache, load_distances
from distforest.kernels import smerf as K
from distforest.store.inputs import ingest


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


# -- features in a run store ----------------------------------------------------------


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """240 rows (float64 values that are not float32's, one categorical column) as one CSV
    and as a folder of 4 Parquet parts; D as .npy; 30 new rows."""
    root = tmp_path_factory.mktemp("smerfparts")
    rng = np.random.default_rng(5)
    n = 240
    X = np.round(rng.uniform(-1, 1, size=(n, 4)), 6)  # short decimals: the CSV reads them exactly
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    frame["kind"] = rng.choice(["u", "v", "w"], n)
    g = X[:, 0] ** 2 + X[:, 1] + (frame["kind"] == "u")
    D = (g.to_numpy()[:, None] - g.to_numpy()[None, :]) ** 2
    D[2, 9] = D[9, 2] = np.nan
    frame.to_csv(root / "X.csv", index=False)
    (root / "parts").mkdir()
    for k, cut in enumerate(np.array_split(np.arange(n), 4)):
        frame.iloc[cut].to_parquet(root / "parts" / f"chunk-{k}.pq.data")  # of any name
    np.save(root / "D.npy", D)
    frame.iloc[:30].to_csv(root / "A.csv", index=False)
    return {"root": root, "csv": root / "X.csv", "parts": root / "parts", "D": root / "D.npy"}


def _model_arrays(model: SMERF) -> dict[str, np.ndarray]:
    f = model.forest_
    return {"leaves": np.asarray(model.leaves_), "inbag": np.asarray(model.inbag_),
            "leaf_members": f.leaf_members, "proj_feature": f.proj_feature,
            "proj_weight": f.proj_weight, "node_offset": f.node_offset,
            "tree_importances": model.tree_importances_,
            "feature_importances": model.feature_importances_, "seeds": model.seeds_,
            **{f"nodes/{c}": f.nodes[c] for c in K.NODE_COLUMNS}}  # fmt: skip


def _same_fit(a: SMERF, b: SMERF) -> None:
    want, got = _model_arrays(a), _model_arrays(b)
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)
    assert (a.mean_distance_, a.n_samples_, a.feature_names_in_) == (
        b.mean_distance_, b.n_samples_, b.feature_names_in_)  # fmt: skip


def test_fit_from_a_folder_of_parts_is_the_in_memory_fit(parts, client, tmp_path):
    D = np.load(parts["D"])
    params = {"n_estimators": 5, "random_state": 4, "min_samples_leaf": 2}
    from distforest.io import load_table

    table = load_table(parts["csv"], allow_missing=False)
    with execution("synchronous"):
        memory = SMERF(**params).fit(table, D)
        want_oob = memory.oob_distance().values
        want = memory.predict_distance(table.X[:30]).values
    with execution(client), client.as_current():
        stored = ingest(parts["parts"], tmp_path / "run.zarr", allow_missing=False,
                        dtype=np.float64, rows=64)  # fmt: skip
        model = SMERF(**params).fit(stored, str(parts["D"]))
        assert isinstance(model.leaves_, zarr.Array) and isinstance(model.inbag_, zarr.Array)
        assert model.leaves_.chunks[0] == model.n_samples_  # (one chunk at 240 rows)
        _same_fit(memory, model)
        oob = model.oob_distance(store=tmp_path / "oob.zarr", tile_size=64)
        np.testing.assert_array_equal(oob.values, want_oob)
        np.testing.assert_array_equal(model.predict_distance(table.X[:30]).values, want)
        # saved: the store's leaves copied chunk by chunk; the same model files
        model.save(tmp_path / "m.zarr", tile_size=64)
        memory.save(tmp_path / "w.zarr", tile_size=64)
    saved = zarr.open_group(str(tmp_path / "m.zarr"), mode="r")
    whole = zarr.open_group(str(tmp_path / "w.zarr"), mode="r")
    for name in ("leaves", "inbag", "feature_importances", "train_distance"):
        assert saved[name].dtype == whole[name].dtype, name
        np.testing.assert_array_equal(saved[name][...], whole[name][...], err_msg=name)
    _same_fit(memory, SMERF.load(tmp_path / "m.zarr"))
    clear_cache()


def test_dask_dataframe_fit_and_the_checks_of_a_stored_table(parts, client, tmp_path):
    import dask.dataframe as dd

    D = np.load(parts["D"])
    frame = pd.read_csv(parts["csv"]).drop(columns="kind")
    params = {"n_estimators": 4, "random_state": 1}
    with execution("synchronous"):
        memory = SMERF(**params).fit(frame, D)
    with execution(client), client.as_current():
        model = SMERF(**params).fit(dd.from_pandas(frame, npartitions=3), D)
        _same_fit(memory, model)
        where = Path(str(model.leaves_.store).removeprefix("file://")).parent
        assert where.exists()
        # D's rows must be the table's
        stored = ingest(frame, tmp_path / "run.zarr", dtype=np.float64)
        with pytest.raises(InputError, match=r"D must have|rows"):
            SMERF(**params).fit(stored, D[:-1, :-1])
        holes = frame.copy()
        holes.iloc[5, 1] = np.nan
        stored = ingest(holes, tmp_path / "holes.zarr", dtype=np.float64)
        with pytest.raises(InputError, match=r"complete features.*'b' \(1\)"):
            SMERF(**params).fit(stored, D)
    del model
    import gc

    gc.collect()
    assert not where.exists()  # the temporary store went with its model


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _store_arrays(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(path), mode="r")
    out = {name: np.asarray(arr[...]) for name, arr in group.arrays()}
    for name, _ in group.groups():
        out |= {f"{name}/{k}": v for k, v in _store_arrays(path / name).items()}
    return out


def test_smerf_fit_on_a_folder_writes_the_one_file_model(parts, client):
    root = parts["root"]
    common = ("--distances", parts["D"], "--trees", 4, "--seed", 3, "--tile-size", 64)
    one = invoke("-q", "smerf", "fit", parts["csv"], "--out", root / "one.zarr", *common)
    assert one.exit_code == 0, one.output
    dry = invoke("smerf", "fit", parts["parts"], "--out", root / "dry.zarr", *common, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "240" in dry.output and not (root / "dry.zarr").exists()
    result = invoke("-q", "smerf", "fit", parts["parts"], "--out", root / "parts.zarr", *common,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "read by partitions" in result.output
    want, got = _store_arrays(root / "one.zarr"), _store_arrays(root / "parts.zarr")
    assert sorted(got) == sorted(want)
    for name, values in want.items():
        assert got[name].dtype == values.dtype, name
        np.testing.assert_array_equal(got[name], values, err_msg=name)
    outputs = []
    for model in ("one", "parts"):
        out = root / f"pred-{model}.zarr"
        assert invoke("-q", "smerf", "predict", root / f"{model}.zarr", root / "A.csv",
                      "--out", out).exit_code == 0  # fmt: skip
        outputs.append(zarr.open_group(str(out), mode="r")["distance"][...])
    np.testing.assert_array_equal(outputs[1], outputs[0])


def test_a_bad_value_in_a_part_names_file_column_row(parts, client):
    root = parts["root"]
    bad = root / "bad"
    bad.mkdir()
    frame = pd.read_csv(parts["csv"]).astype({"c": object})
    cuts = np.array_split(np.arange(len(frame)), 5)
    for k, cut in enumerate(cuts):
        part = frame.iloc[cut].copy()
        if k == 3:
            part.loc[part.index[4], "c"] = "1,5"  # a decimal comma in a numeric column
        part.to_csv(bad / f"part-{k}.csv", index=False)
    out = root / "bad.zarr"
    result = invoke("-q", "smerf", "fit", bad / "part-*.csv", "--distances", parts["D"],
                    "--out", out, "--trees", 2, "--scheduler",
                    client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "part-3.csv" in result.output and "'c'" in result.output
    assert f"row {int(cuts[3][0]) + 5} of the table" in result.output  # counted from 1
    assert not out.exists()  # no model, not even a half-written one
    holes = root / "holes"
    holes.mkdir()
    for k, cut in enumerate(cuts):
        part = frame.iloc[cut].astype({"c": float})
        if k == 3:
            part.loc[part.index[1], "b"] = np.nan
        part.to_parquet(holes / f"p-{k}.parquet")
    result = invoke("-q", "smerf", "fit", holes, "--distances", parts["D"], "--out", out,
                    "--trees", 2, "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "p-3.parquet" in result.output and "'b'" in result.output
    assert f"row {int(cuts[3][0]) + 2} of the table" in result.output
    assert not out.exists()


PIPELINE = """input: {{path: {input}, target: kind}}
smerf: {{n_estimators: 4, random_state: 2, tile_size: 64}}
distance: {{oob: true, out: oob.zarr}}
output: {{dir: {out}, store: model.zarr}}
"""


def test_pipeline_on_a_folder_is_the_one_file_pipeline(parts):
    root = parts["root"]
    stores = {}
    for source in ("csv", "parts"):
        path = root / f"{source}.yaml"
        path.write_text(PIPELINE.format(input=parts[source], out=root / f"run-{source}"))
        result = invoke("-q", "run", path)
        assert result.exit_code == 0, result.output
        stores[source] = {
            f"{store}/{k}": v
            for store in ("model.zarr", "oob.zarr")
            for k, v in _store_arrays(root / f"run-{source}" / store).items()
        }
    assert sorted(stores["parts"]) == sorted(stores["csv"])
    for name, values in stores["csv"].items():
        np.testing.assert_array_equal(stores["parts"][name], values, err_msg=name)


def test_the_driver_never_reads_a_whole_per_row_array(client, tmp_path, monkeypatch):
    n, trees = 300, 6
    monkeypatch.setattr(C, "SMERF_TILE", 64)  # chunks of 64 rows of leaves and inbag
    X, D = _data(n, seed=2, missing=0.0)
    stored = ingest(pd.DataFrame(X, columns=list("abcde")), tmp_path / "run.zarr",
                    dtype=np.float64, rows=100)  # fmt: skip
    reads: dict[str, int] = {}
    getitem = zarr.Array.__getitem__

    def counting(self, key):
        out = getitem(self, key)
        reads[self.path] = max(reads.get(self.path, 0), int(np.size(out)))
        return out

    monkeypatch.setattr(zarr.Array, "__getitem__", counting)
    with execution(client):
        model = SMERF(n_estimators=trees, random_state=0).fit(stored, D)
        model.oob_distance(store=tmp_path / "oob.zarr", tile_size=128)
        model.save(tmp_path / "model.zarr", tile_size=128)
    monkeypatch.undo()
    assert "leaves" in reads  # opened here (shapes, the save's copy plan) ...
    # ... but read in chunks of rows by the tasks, never whole in this process
    assert max(reads.get(name, 0) for name in ("leaves", "inbag")) < n * trees
    assert reads.get("input/X", 0) == 0  # the features: only the workers read them
    with execution("synchronous"):
        memory = SMERF(n_estimators=trees, random_state=0).fit(X, D)
        want = memory.oob_distance().values
    got = zarr.open_group(str(tmp_path / "oob.zarr"), mode="r")["distance"][...]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(SMERF.load(tmp_path / "model.zarr").leaves_, memory.leaves_)


def test_joining_batches_frees_each_part_as_it_goes():
    X, D = _data(80, seed=4)
    batches = [np.array([1, 2], dtype=np.uint64), np.array([3], dtype=np.uint64)]

    def grown() -> list[K.FlatForest]:
        return [K.grow_batch(X, D, seeds, {"oblique": True}) for seeds in batches]

    want = K.concatenate(grown())
    parts = grown()
    got = K.concatenate(parts, consume=True)
    for col in K.NODE_COLUMNS:
        np.testing.assert_array_equal(got.nodes[col], want.nodes[col])
        assert all(p.nodes[col].size == 0 for p in parts)  # dropped once joined
    for name in ("node_offset", "proj_feature", "proj_weight", "leaf_members", "importances"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    assert all(p.leaf_members.size == 0 and p.importances.shape == (0, 5) for p in parts)
