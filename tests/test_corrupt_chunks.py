"""Corrupt chunks: a garbled or truncated chunk file is exit 6 naming the array and chunk.

On every reader: ``cluster`` (stored matrix and matrix-free), ``knn predict``,
``simforest predict``, ``smerf predict`` and a resumed ``proximity`` run.  The
one check is zarr's codec pipeline (``distforest/store/chunks.py``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.errors import StoreError
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
ION = ROOT / "distforest" / "data" / "ionosphere.csv"
BC = ROOT / "distforest" / "data" / "breast_cancer.csv"


def ok(address: str, *args: object) -> None:
    result = CliRunner().invoke(cli, ["-q", *map(str, args), "--scheduler", address])
    assert result.exit_code == 0, result.output


def refused(address: str, *args: object, array: str) -> str:
    result = CliRunner().invoke(cli, ["-q", *map(str, args), "--scheduler", address])
    assert result.exit_code == StoreError.exit_code, result.output
    assert "Traceback" not in result.output, result.output
    lines = [x for x in result.output.splitlines() if x.startswith("distforest: error:")]
    assert len(lines) == 1, result.output
    assert f"of array {array!r}" in lines[0] and "chunk 'c/" in lines[0], lines[0]
    assert "damaged" in lines[0]
    return lines[0]


def damage(store: Path, array: str, how: str) -> Path:
    """Garble or truncate the first chunk file of ``array`` (in a copy of ``store``)."""
    copy = store.with_name(f"{store.stem}_{array.replace('/', '_')}_{how}.zarr")
    shutil.copytree(store, copy)
    chunk = sorted(p for p in (copy / array / "c").rglob("*") if p.is_file())[0]
    data = chunk.read_bytes()
    if how == "garbled":
        chunk.write_bytes(bytes(b ^ 0x5A for b in data))
    else:
        chunk.write_bytes(data[: max(1, len(data) // 3)])
    return copy


@pytest.fixture(scope="module")
def data(tmp_path_factory, client) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("corrupt")
    address = client.scheduler.address
    frame = pd.read_csv(ION)
    frame.iloc[:120].to_csv(root / "train.csv", index=False)
    frame.iloc[120:160].drop(columns=["Class"]).to_csv(root / "new.csv", index=False)
    X = frame.drop(columns=["Class"]).iloc[:60, :4].to_numpy()
    pd.DataFrame(X, columns=list("abcd")).to_csv(root / "X.csv", index=False)
    np.save(
        root / "D.npy",
        np.abs(X[:, None, 0] - X[None, :, 0]) + np.abs(X[:, None, 1] - X[None, :, 1]),
    )
    ok(address, "xforest", root / "train.csv", "--target", "Class", "--out", root / "x.zarr",
       "--trees", 4, "--tile-size", 32)  # fmt: skip
    ok(address, "knn", "fit", root / "train.csv", "--target", "Class", "--out", root / "knn.zarr")
    ok(address, "simforest", "fit", root / "train.csv", "--target", "Class", "--trees", 4,
       "--out", root / "sf.zarr")  # fmt: skip
    ok(address, "smerf", "fit", root / "X.csv", "--distances", root / "D.npy", "--trees", 4,
       "--out", root / "sm.zarr")  # fmt: skip
    return {"root": root, "address": address}


@pytest.mark.parametrize("how", ["garbled", "truncated"])
def test_cluster_on_a_damaged_matrix(data, how):
    root = data["root"]
    store = damage(root / "x.zarr", "beta_similarity", how)
    refused(data["address"], "cluster", store, "--method", "spectral", "--k", 2,
            "--out", root / f"c_{how}.csv", array="beta_similarity")  # fmt: skip
    assert not (root / f"c_{how}.csv").exists()


def test_matrix_free_cluster_on_damaged_leaves(data):
    root = data["root"]
    store = damage(root / "x.zarr", "leaves", "garbled")
    refused(data["address"], "cluster", store, "--method", "kernel-kmeans", "--k", 2,
            "--matrix-free", "--out", root / "cmf.csv", array="leaves")  # fmt: skip


def _first_array(store: Path) -> str:
    """The largest array of a model store (the one every prediction reads)."""
    sizes = {
        str(p.parent.relative_to(store)): sum(f.stat().st_size for f in p.rglob("*"))
        for p in store.rglob("c")
        if p.is_dir() and (p.parent / "zarr.json").exists()
    }
    return max(sizes, key=lambda k: sizes[k])


@pytest.mark.parametrize(
    ("command", "model", "table", "out"),
    [
        ("knn", "knn.zarr", "new.csv", "p.csv"),
        ("simforest", "sf.zarr", "new.csv", "p.csv"),
        ("smerf", "sm.zarr", "X.csv", "p.zarr"),
    ],
)
def test_predict_from_a_damaged_model(data, command, model, table, out):
    root = data["root"]
    array = _first_array(root / model)
    store = damage(root / model, array, "garbled")
    target = root / f"{command}_{out}"
    refused(data["address"], command, "predict", store, root / table, "--out", target, array=array)
    if target.suffix == ".zarr" and target.exists():
        assert not RunStore.open(target).is_complete
    else:
        assert not target.exists()


def test_resumed_proximity_with_damaged_leaves(tmp_path, client):
    address = client.scheduler.address
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        f"input: {{path: {BC}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 4, random_state: 5, tile_size: 128}\n"
        f"output: {{dir: {tmp_path / 'out'}, store: run.zarr, report: false}}\n"
    )
    ok(address, "run", pipeline)
    store = tmp_path / "out" / "run.zarr"
    rs = RunStore.open(store, mode="r+")
    stages = {k: v for k, v in dict(rs.attrs["stages"]).items() if k == "fit"}
    rs.update_attrs(status="running", stages=stages)  # as if killed during the tiles
    shutil.rmtree(store / "done")  # no tile done yet
    chunk = sorted(p for p in (store / "leaves" / "c").rglob("*") if p.is_file())[0]
    chunk.write_bytes(b"\x00garbage" * 3)
    refused(address, "run", pipeline, array="leaves")
    assert not RunStore.open(store).is_complete
