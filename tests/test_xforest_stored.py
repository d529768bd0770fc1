"""X-Forest fitted from a run store (a folder of parts, a dask DataFrame): the in-memory
forest, bit for bit, with the rows' (n, T) arrays kept in the store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from bad_parts import write_bad_parts
from click.testing import CliRunner

from distforest import execution
from distforest.cli.main import cli
from distforest.errors import InputError
from distforest.forests.xforest import XForest
from distforest.store.inputs import ingest
from distforest.store.run_store import RunStore

FITTED = ("leaves_", "depth_", "codes_", "nodes_", "thresholds_", "node_offset_", "directions_",
          "direction_offset_", "feature_min_", "feature_scale_", "seeds_")  # fmt: skip


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _parts(frame: pd.DataFrame, folder: Path, n_parts: int) -> Path:
    folder.mkdir()
    for k, cut in enumerate(np.array_split(np.arange(len(frame)), n_parts)):
        frame.iloc[cut].to_parquet(folder / f"part-{k}.parquet", index=False)
    return folder


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("xfstore")
    rng = np.random.default_rng(4)
    n = 360
    centers = np.array([[0.0, 0.0, 0.0], [3.0, 3.0, 0.5], [0.0, 4.0, -2.0]])
    cls = rng.integers(0, 3, n)
    # float32 values written in full: the CSV's float64 values are the stored float32 ones
    X = (centers[cls] + rng.standard_normal((n, 3))).astype(np.float32).astype(np.float64)
    blobs = pd.DataFrame(X, columns=["a", "b", "c"])
    blobs["cls"] = np.array(["p", "q", "r"])[cls]
    blobs.to_csv(root / "blobs.csv", index=False)
    # halves of ever smaller values: trees deeper than 64 levels in some batches only
    x = 0.5 ** np.random.default_rng(0).permutation(120).astype(np.float64)
    deep = pd.DataFrame({"x": x, "one": np.ones(120)})
    # float64 values no float32 holds: equal to memory from a store of float64 rows only
    noisy = pd.DataFrame(X * (1 + 1e-9 * rng.standard_normal(X.shape)), columns=["a", "b", "c"])
    assert (noisy.to_numpy(np.float32).astype(np.float64) != noisy.to_numpy()).all()
    return {"root": root, "blobs": blobs, "csv": root / "blobs.csv",
            "parts": _parts(blobs, root / "export", 4), "deep": deep,
            "deep_parts": _parts(deep, root / "deep", 3), "noisy": noisy,
            "noisy_parts": _parts(noisy, root / "noisy", 5)}  # fmt: skip


def _same_forest(stored: XForest, memory: XForest) -> None:
    for name in FITTED:
        np.testing.assert_array_equal(np.asarray(getattr(stored, name)[...]),
                                      getattr(memory, name), err_msg=name)  # fmt: skip


@pytest.mark.parametrize(
    ("data", "dtype", "params"),
    [  # (float32 rows, ingest's default, hold the float32 values of "blobs" exactly)
        ("blobs", np.float32, {"n_estimators": 7, "batch_size": 2, "tile_size": 64}),
        ("noisy", np.float64, {"n_estimators": 4, "mode": "standard", "normalize": False,
                               "tile_size": 100}),
        ("noisy", np.float64, {"n_estimators": 5, "n_directions": 3, "tile_size": 16}),
        ("deep", np.float64, {"n_estimators": 6, "batch_size": 1, "n_directions": 1,
                              "leaf_size": 1, "tile_size": 32, "random_state": 0}),
    ],
)  # fmt: skip
def test_fit_from_parts_and_dask_frame_equals_fit_in_memory(tables, tmp_path, data, dtype,
                                                            params):  # fmt: skip
    import dask.dataframe as dd

    frame = tables[data].drop(columns=["cls"], errors="ignore")
    folder = tables["parts" if data == "blobs" else f"{data}_parts"]
    params = {"random_state": 3, **params}
    with execution(client="synchronous"):
        memory = XForest(**params).fit(frame)
        table = ingest(folder, tmp_path / "run.zarr", drop=["cls"] if data == "blobs" else (),
                       rows=48, dtype=dtype)  # fmt: skip
        stored = XForest(**params).fit(table)
        lazy = XForest(**params).fit(dd.from_pandas(frame, npartitions=3))
    if data == "deep":  # batches of one tree: 1 and 2 words of path code side by side
        depth = memory.depth_.max(axis=0)
        assert memory.codes_.shape[2] == 2 and depth.min() < 60 < depth.max(), depth
    _same_forest(stored, memory)
    _same_forest(lazy, memory)
    for name in ("leaves_", "depth_", "codes_"):  # the store's arrays, not copies here
        assert isinstance(getattr(stored, name), zarr.Array)
    rs = RunStore.open(table.path)
    assert rs.array("path").chunks == (params["tile_size"], params["n_estimators"],
                                       memory.codes_.shape[2])  # fmt: skip
    assert "fit" not in rs.group  # the batches' arrays are gone


def test_missing_value_in_a_stored_table_is_named(tables, tmp_path):
    frame = tables["blobs"].drop(columns="cls")
    frame.loc[250, "c"] = np.nan
    with execution(client="synchronous"):
        table = ingest(frame, tmp_path / "run.zarr", rows=64)  # missing values allowed here
        with pytest.raises(InputError, match=r"column 'c' is missing at row 251 \(counted"):
            XForest(n_estimators=2).fit(table)


def test_store_backed_forest_serves_every_use(tables, client, tmp_path):
    frame = tables["blobs"].drop(columns="cls")
    params = {"n_estimators": 8, "tile_size": 64, "random_state": 1}
    query = frame.to_numpy()[:9] + 0.25
    V = np.random.default_rng(0).standard_normal((len(frame), 2))
    with execution(client="synchronous"):
        memory = XForest(**params).fit(frame)
        stored = XForest(**params).fit(ingest(tables["parts"], tmp_path / "run.zarr",
                                              drop=["cls"], rows=100))  # fmt: skip
    with execution(client=client):  # the workers read the stored leaves and codes
        np.testing.assert_array_equal(stored.cross_similarity(query),
                                      memory.cross_similarity(query))  # fmt: skip
        np.testing.assert_array_equal(stored.product(V), memory.product(V))
        np.testing.assert_array_equal(stored.product(V[:, 0], kind="basic"),
                                      memory.product(V[:, 0], kind="basic"))  # fmt: skip
        a = stored.similarity(store=tmp_path / "a.zarr").values
        b = memory.similarity(store=tmp_path / "b.zarr").values
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(stored.similarity(kind="basic").values,
                                      memory.similarity(kind="basic").values)  # fmt: skip
    # saved elsewhere: plain arrays, loaded whole; loaded from its own store: read on use
    saved = XForest.load(tmp_path / "a.zarr")
    own = XForest.load(tmp_path / "run.zarr")
    assert isinstance(own.codes_, zarr.Array) and isinstance(saved.codes_, np.ndarray)
    _same_forest(saved, memory)
    _same_forest(own, memory)


def _arrays(store: Path) -> dict[str, bytes]:
    group = zarr.open_group(str(store), mode="r")
    out = {name: np.asarray(arr[...]).tobytes() for name, arr in group.arrays()}
    for name, arr in zarr.open_group(str(store / "forest"), mode="r").arrays():
        out[f"forest/{name}"] = np.asarray(arr[...]).tobytes()
    return out


def test_command_on_parts_writes_the_one_file_store(tables, client):
    root = tables["root"]
    options = ["--drop", "cls", "--trees", "6", "--seed", "2", "--tile-size", "128",
               "--scheduler", client.scheduler.address]  # fmt: skip
    whole, parts = root / "whole.zarr", root / "parts.zarr"
    assert invoke("-q", "xforest", tables["csv"], "--out", whole, *options).exit_code == 0
    result = invoke("-q", "xforest", tables["parts"], "--out", parts, *options)
    assert result.exit_code == 0, result.output
    a, b = _arrays(whole), _arrays(parts)
    assert set(a) <= set(b)  # (the parts' store also keeps its encoded input/)
    for name in a:
        assert a[name] == b[name], name
    assert RunStore.open(parts).is_complete
    again = invoke("xforest", tables["parts"], "--out", parts, *options)
    assert again.exit_code == 0 and "already complete" in again.output, again.output
    # interrupted after the fit, one tile left to write: resumed from the stored forest
    rs = RunStore.open(parts, mode="r+")
    rs.update_attrs(stages={"fit": rs.attrs["stages"]["fit"]})
    rs.group["done/beta_similarity"][1, 2] = 0
    rs.group["beta_similarity"][128:256, 256:] = 0
    rs.mark_running()
    resumed = invoke("xforest", tables["parts"], "--out", parts, *options)
    assert resumed.exit_code == 0 and "resumed" in resumed.output, resumed.output
    assert RunStore.open(parts).attrs["stages"]["tiles"]["skipped"] == 5
    assert _arrays(parts)["beta_similarity"] == a["beta_similarity"]
    # matrix-free clustering: the workers read the stored leaves (the driver loads no n x T)
    assert isinstance(XForest.load(parts).leaves_, zarr.Array)
    labels = []
    for store in (whole, parts):
        out = root / f"{store.stem}-labels.csv"
        result = invoke("-q", "cluster", store, "--method", "spectral", "--k", "3",
                        "--matrix-free", "--seed", "0", "--out", out,
                        "--scheduler", client.scheduler.address)  # fmt: skip
        assert result.exit_code == 0, result.output
        labels.append(out.read_bytes())
    assert labels[0] == labels[1]
    dry = invoke("xforest", tables["parts"], "--out", root / "dry.zarr", "--dry-run", *options)
    assert dry.exit_code == 0 and "360" in dry.output, dry.output
    assert not (root / "dry.zarr").exists()


PIPELINE = """name: xf
input: {{path: {input}, target: cls}}
xforest: {{n_estimators: 5, random_state: 4, tile_size: 128}}
clustering: {{method: kernel-kmeans, k: 3, out: clusters.csv, random_state: 0}}
output: {{dir: {out}, store: sim.zarr}}
"""


def test_pipeline_on_parts_clusters_as_on_the_file(tables, client):
    root = tables["root"]
    for source in ("csv", "parts"):
        path = root / f"{source}.yaml"
        path.write_text(PIPELINE.format(input=tables[source], out=root / f"run-{source}"))
        result = invoke("-q", "run", path, "--scheduler", client.scheduler.address)
        assert result.exit_code == 0, result.output
    one, parts = (pd.read_csv(root / f"run-{s}" / "clusters.csv") for s in ("csv", "parts"))
    assert list(parts["truth"]) == list(tables["blobs"]["cls"])  # the target, read alone
    pd.testing.assert_frame_equal(parts, one)
    scores = [RunStore.open(root / f"run-{s}" / "sim.zarr").attrs["stages"]["clustering"]
              ["scores"] for s in ("csv", "parts")]  # fmt: skip
    assert scores[0] == scores[1] and scores[0]["accuracy"] > 0.5


def test_bad_value_in_a_part_names_file_column_row(tables, client):
    root = tables["root"]
    frame = tables["blobs"]
    bad = root / "bad"
    # X-Forest needs complete rows
    first = write_bad_parts(frame, bad, column="b", row=5, value=np.nan)
    out = root / "bad.zarr"
    result = invoke("-q", "xforest", bad, "--drop", "cls", "--trees", "3", "--out", out,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "part-3.parquet" in result.output and "'b'" in result.output, result.output
    assert f"row {first + 1} of the table" in result.output, result.output  # from 1
    assert not out.exists() or not RunStore.open(out).is_complete
    text = root / "bad-text"  # a stray string in a numeric column
    write_bad_parts(frame, text, column="c", row=2, value="oops", kind="csv")
    result = invoke("-q", "xforest", text / "t-*.csv", "--drop", "cls", "--trees", "3",
                    "--out", out, "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "t-3.csv" in result.output and "'c'" in result.output and "oops" in result.output
    assert not out.exists() or not RunStore.open(out).is_complete


def test_driver_holds_no_rows_arrays(client, tmp_path):
    """The stored fit's driver allocates less than a quarter of the rows' (n, T) arrays
    (leaves, depth, one word of path code: 16 bytes a row and tree); in memory, more."""
    from tracing import traced_peak

    from distforest.kernels import rptrees

    n, trees = 30_000, 24
    frame = pd.DataFrame(np.random.default_rng(1).standard_normal((n, 3)).astype(np.float32),
                         columns=["a", "b", "c"])  # fmt: skip
    params = {"n_estimators": trees, "leaf_size": 200, "random_state": 0}
    rptrees.warm_up()
    with execution(client=client):
        table = ingest(frame, tmp_path / "run.zarr")
        stored = traced_peak(lambda: XForest(**params).fit(table))
        memory = traced_peak(lambda: XForest(**params).fit(frame))
    rows_arrays = 16 * n * trees
    assert stored < rows_arrays / 4 < rows_arrays < memory, (stored, memory)
