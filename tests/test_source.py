"""One row source, one row sink, one fit driver: every input kind, either home of results."""

from __future__ import annotations

import gc
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pytest

from distforest import ProximityForest, execution
from distforest.errors import InputError
from distforest.forests.fit_driver import GrownBatch, fit_forest
from distforest.io.source import MemoryRows, RowSource
from distforest.parallel.execution import Runner
from distforest.store.inputs import StoredTable, ingest
from distforest.store.run_store import RunStore
from distforest.store.sink import StoredNodes, open_sink
from distforest.store.source import guess_opener, open_source


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 5))
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(5)])
    df.loc[::11, "f1"] = np.nan
    df["cls"] = np.where(X[:, 0] + X[:, 2] > 0, "yes", "no")
    return df


@pytest.fixture(scope="module")
def folder(frame: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("source") / "parts"
    out.mkdir()
    for k, rows in enumerate(np.array_split(np.arange(len(frame)), 3)):
        frame.iloc[rows].to_parquet(out / f"p{k}.parquet", index=False)
    return out


def test_each_kind_of_input_opens_as_its_source(frame, folder, tmp_path) -> None:
    import dask.dataframe as dd

    stored = ingest(folder, tmp_path / "run.zarr", target="cls", rows=64)
    X = frame.drop(columns="cls")
    cases = [
        (X.to_numpy(), "memory", MemoryRows),
        (X, "memory", MemoryRows),
        (stored, "source", StoredTable),
        (stored.path, "run-store", StoredTable),
    ]
    for X_in, kind, cls in cases:
        assert guess_opener(X_in).name == kind, X_in
        source = open_source(X_in, None if kind in ("source", "run-store") else frame["cls"])
        assert isinstance(source, cls) and isinstance(source, RowSource)
        assert (source.n_samples, source.n_features) == (500, 5)
    owner = type("Owner", (), {})()
    assert guess_opener(str(folder)).name == "parts"
    by_parts = open_source(str(folder), "cls", owner=owner)
    assert isinstance(by_parts, StoredTable) and by_parts.n_samples == 500
    whole = open_source(folder / "p0.parquet", target="cls")  # a small file: read whole
    assert isinstance(whole, MemoryRows) and whole.n_samples == 167
    lazy = open_source(dd.from_pandas(frame, npartitions=3), "cls", owner=owner)
    assert isinstance(lazy, StoredTable)
    assert not Path(by_parts.path).exists()  # a new temporary store of the owner replaced it
    del owner
    gc.collect()
    assert not Path(lazy.path).exists()  # removed with its owner
    alone = open_source(str(folder), "cls")  # no owner: the source owns its store
    path = Path(alone.path)
    assert path.exists()
    del alone
    gc.collect()
    assert not path.exists()


def test_a_dry_run_plan_is_the_source_it_would_open(frame, folder, tmp_path) -> None:
    """input_plan: the size open_input gives, and the partitions its tasks read (a
    folder: its three parts, counted from metadata; a file read whole: none)."""
    from distforest.store.source import input_plan, open_input

    one = tmp_path / "one.csv"
    frame.to_csv(one, index=False)
    for path, parts in ((str(folder), 3), (str(one), 0)):
        plan = input_plan(path, "cls")
        opened = open_input(path, target="cls")
        assert plan == (opened.source, opened.n_samples, opened.n_features, parts)
        assert (plan.n_samples, plan.n_features) == (500, 5)


def test_a_target_given_twice_is_refused(folder, tmp_path) -> None:
    stored = ingest(folder, tmp_path / "run.zarr", target="cls")
    with pytest.raises(InputError, match="do not pass y"):
        open_source(stored, np.zeros(500))


def test_memory_and_stored_rows_agree(frame, folder, tmp_path) -> None:
    stored = ingest(folder, tmp_path / "run.zarr", target="cls", rows=64)
    memory = open_source(frame.drop(columns="cls"), frame["cls"])
    assert memory.chunks() == [slice(0, 500)]  # rows in memory: one chunk
    assert len(stored.chunks()) == 8
    for rows in stored.chunks():
        np.testing.assert_array_equal(stored.read_rows(rows), memory.read_rows(rows))
    np.testing.assert_array_equal(
        np.asarray(stored.rows_handle(None)), memory.read_rows(slice(None))
    )
    np.testing.assert_array_equal(stored.read_y(), memory.read_y())
    labels = stored.target_classes()
    assert labels == ("no", "yes") and memory.target_classes() is None
    np.testing.assert_array_equal(
        np.asarray(labels, dtype=object)[stored.read_codes()], memory.read_y()
    )


def _count_grower(X: np.ndarray, y: np.ndarray | None, seeds: np.ndarray) -> GrownBatch:
    """A grower that knows no forest: per row and tree, a number made from the tree's seed."""
    cols = (np.nan_to_num(X[:, :1]) * 1000).astype(np.int64) % 7 + (seeds % 5).astype(np.int64)
    return GrownBatch(rows={"marks": cols.astype(np.int32)}, trees={"seed": seeds.copy()})


def test_the_driver_puts_the_same_results_in_memory_and_in_a_store(frame, folder, tmp_path) -> None:
    stored = ingest(folder, tmp_path / "run.zarr", target="cls", rows=64)
    memory = open_source(frame.drop(columns="cls"), frame["cls"])
    results = {}
    for source in (memory, stored):
        runner = Runner(None)
        sink = open_sink(source.n_samples, 11, store=source.store_path, chunk_rows=100)
        fit = fit_forest(source, _count_grower, y=None, n_trees=11, random_state=4, batch_size=3,
                         runner=runner, sink=sink,
                         row_results={"marks": ("int32", ("sample", "tree"))})  # fmt: skip
        assert len(fit.batches) == 4 and fit.nodes is None
        results[fit.store] = (np.asarray(fit.rows["marks"]), fit.trees["seed"], fit.seeds)
    (m, m_seed, seeds), (s, s_seed, s_seeds) = results[None], results[stored.path]
    np.testing.assert_array_equal(m_seed, seeds)  # per-tree results in tree order
    np.testing.assert_array_equal(s_seeds, seeds)
    np.testing.assert_array_equal(s_seed, seeds)
    np.testing.assert_array_equal(m, s)
    assert RunStore.open(stored.path).array("marks").chunks == (100, 11)
    assert "fit" not in RunStore.open(stored.path).group  # the batches' parts are gone


def test_results_too_large_for_memory_go_to_a_store(frame) -> None:
    X, y = frame.drop(columns="cls"), frame["cls"]
    with execution(client="synchronous"):
        mem = ProximityForest(n_estimators=6, random_state=2, tile_size=128).fit(X, y)
        with dask.config.set({"distforest.in-memory-cells": 1000}):  # 500 x 6 leaves: 3,000
            big = ProximityForest(n_estimators=6, random_state=2, tile_size=128).fit(X, y)
        np.testing.assert_array_equal(big.predict_proba(X), mem.predict_proba(X))
    assert isinstance(big.leaves_, np.ndarray) is False and isinstance(mem.leaves_, np.ndarray)
    assert isinstance(big.nodes_, StoredNodes)
    np.testing.assert_array_equal(np.asarray(big.leaves_), mem.leaves_)
    np.testing.assert_array_equal(np.asarray(big.inbag_), mem.inbag_)
    for name, values in mem.nodes_.items():
        np.testing.assert_array_equal(big.nodes_[name], values, err_msg=name)
    assert big.oob_score_ == mem.oob_score_
    path = big.nodes_.path
    assert Path(path).exists()
    del big
    gc.collect()
    assert not Path(path).exists()  # the forest's temporary store goes with it


def test_a_forest_fits_a_folder_of_parts_as_its_table(frame, folder) -> None:
    """A folder of parts (refused by ProximityForest.fit before the one source) and a glob
    give the forest of the DataFrame, bit for bit."""
    X, y = frame.drop(columns="cls"), frame["cls"]
    with execution(client="synchronous"):
        mem = ProximityForest(n_estimators=5, random_state=8, tile_size=128).fit(X, y)
        for given in (str(folder), str(folder / "p*.parquet")):
            parts = ProximityForest(n_estimators=5, random_state=8, tile_size=128).fit(given, "cls")
            np.testing.assert_array_equal(np.asarray(parts.leaves_), mem.leaves_)
            np.testing.assert_array_equal(np.asarray(parts.inbag_), mem.inbag_)
            np.testing.assert_array_equal(parts.predict_proba(X), mem.predict_proba(X))
            assert parts.classes_ == mem.classes_
