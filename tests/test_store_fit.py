"""A forest grown from the run store is the in-memory forest, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from distforest import ProximityForest, execution
from distforest.apps.mislabels import mislabel_scores
from distforest.apps.outliers import outlier_scores
from distforest.store.inputs import ingest
from distforest.store.run_store import RunStore, chunk_aligned
from distforest.store.sink import StoredNodes


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=600, n_features=6, n_informative=4, n_classes=3,
                               random_state=0)  # fmt: skip
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(6)])
    df.loc[::9, "f2"] = np.nan
    df["kind"] = np.where(X[:, 0] > 0, "up", "down")
    df["cls"] = np.array(["a", "b", "c"])[y]
    folder = tmp_path_factory.mktemp("parts") / "export"
    folder.mkdir()
    edges = np.linspace(0, len(df), 5).astype(int)
    for k in range(4):
        df.iloc[edges[k] : edges[k + 1]].to_parquet(folder / f"p{k}.parquet", index=False)
    return df, folder


@pytest.mark.parametrize("params", [
    {"n_estimators": 7},
    {"n_estimators": 5, "task": "unsupervised", "kind": "extra-trees"},
    {"n_estimators": 6, "max_samples": 0.3},
    {"n_estimators": 6, "max_samples": 0.2, "leaf_bound": 4},  # refined in the growing task
])  # fmt: skip
def test_same_trees_from_memory_and_store(table, tmp_path: Path, params: dict) -> None:
    df, folder = table
    unsupervised = params.get("task") == "unsupervised"
    stored = ingest(folder, tmp_path / "run.zarr", target=None if unsupervised else "cls",
                    drop=["cls"] if unsupervised else (), rows=128)  # fmt: skip
    X, y = df.drop(columns="cls"), (None if unsupervised else df["cls"])
    with execution(client="synchronous"):
        mem = ProximityForest(**params, random_state=5, tile_size=100).fit(X, y)
        sto = ProximityForest(**params, random_state=5, tile_size=100).fit(stored)
    np.testing.assert_array_equal(np.asarray(sto.leaves_), mem.leaves_)
    np.testing.assert_array_equal(np.asarray(sto.inbag_), mem.inbag_)
    assert isinstance(sto.nodes_, StoredNodes)  # read from the store on use, not held here
    for name, values in mem.nodes_.items():
        np.testing.assert_array_equal(sto.nodes_[name], values, err_msg=name)
    assert sto.classes_ == mem.classes_
    # the scikit-learn forest API of a forest fitted from a store gives the same answers
    np.testing.assert_array_equal(sto.feature_importances_, mem.feature_importances_)
    if not unsupervised:
        with execution(client="synchronous"):
            np.testing.assert_array_equal(sto.predict_proba(X), mem.predict_proba(X))
        assert sto.oob_score_ == mem.oob_score_
    # the store holds what save() writes, chunked the same way
    rs = RunStore.open(stored.path)
    assert rs.array("leaves").chunks == (100, params["n_estimators"])
    assert "fit" not in rs.group  # the per-batch in-bag arrays are gone


def test_proximity_outliers_mislabels_identical(table, client, tmp_path: Path) -> None:
    df, folder = table
    with execution(client=client):
        stored = ingest(folder, tmp_path / "run.zarr", target="cls", rows=100)
        mem = ProximityForest(n_estimators=8, random_state=1, tile_size=128).fit(
            df.drop(columns="cls"), df["cls"]
        )
        sto = ProximityForest(n_estimators=8, random_state=1, tile_size=128).fit(stored)
        np.testing.assert_array_equal(np.asarray(sto.leaves_), mem.leaves_)
        np.testing.assert_array_equal(outlier_scores(sto), outlier_scores(mem))
        pd.testing.assert_frame_equal(mislabel_scores(sto), mislabel_scores(mem))
        p_mem = mem.proximity(store=tmp_path / "mem.zarr").values
        p_sto = sto.proximity(store=stored.path).values  # written into the input's store
    np.testing.assert_array_equal(p_sto, p_mem)
    assert RunStore.open(stored.path).is_complete


def test_products_reading_batches_of_trees(table, tmp_path: Path, monkeypatch) -> None:
    """A stored forest too large to keep whole in a worker: each product task reads its
    batch of trees from the store, with the same results."""
    from distforest.forests import products
    from distforest.store import inputs

    df, folder = table
    with execution(client="synchronous"):
        stored = ingest(folder, tmp_path / "run.zarr", target="cls", rows=100)
        mem = ProximityForest(n_estimators=9, random_state=2).fit(df.drop(columns="cls"),
                                                                  df["cls"])  # fmt: skip
        sto = ProximityForest(n_estimators=9, random_state=2).fit(stored)
        monkeypatch.setattr(products, "WHOLE_FOREST_BYTES", 0)
        inputs.forget_inputs()
        pd.testing.assert_frame_equal(mislabel_scores(sto), mislabel_scores(mem))
        for method in ("original", "oob"):
            np.testing.assert_array_equal(
                sto.predict_proximity(df.drop(columns="cls"), method),
                mem.predict_proximity(df.drop(columns="cls"), method),
            )
    # in-bag counts are read by the products only: never kept whole here
    assert not [key for key in inputs._cache if key[1] == "inbag"]


def test_rows_per_tree_default_on_large_tables() -> None:
    from distforest.forests.proximity_forest import AUTO_ROWS_PER_TREE, LARGE_FOREST_ROWS
    from distforest.kernels.trees import bootstrap_counts

    params = ProximityForest()._validated()
    small = ProximityForest._tree_params(params, "classification", [0, 1], LARGE_FOREST_ROWS)
    assert small.max_samples is None  # today's bootstrap of n rows, unchanged
    n = 3 * LARGE_FOREST_ROWS
    large = ProximityForest._tree_params(params, "classification", [0, 1], n)
    assert bootstrap_counts(np.random.default_rng(0), n, large).sum() == AUTO_ROWS_PER_TREE
    chosen = ProximityForest._tree_params({**params, "max_samples": 0.5}, "regression", [], n)
    assert chosen.max_samples == 0.5  # the user's choice wins
    whole = ProximityForest._tree_params({**params, "bootstrap": False}, "regression", [], n)
    assert whole.max_samples is None  # no bootstrap: every row once


def test_fit_on_a_dask_frame_never_computes_it_here(table, client) -> None:
    import dask
    import dask.dataframe as dd
    from dask.sizeof import sizeof

    df, _ = table
    frame = dd.from_pandas(df, npartitions=3)
    sizes: list[int] = []

    def guard(dsk, keys, **kwargs):  # every compute of the fit goes through here
        result = client.get(dsk, keys, **kwargs)
        sizes.append(sizeof(result))
        assert sizes[-1] < sizeof(df) / 4, f"a compute brought {sizes[-1]} bytes back"
        return result

    with dask.config.set(scheduler=guard), execution(client=client):
        sto = ProximityForest(n_estimators=4, random_state=2).fit(frame, "cls")
    assert sizes
    with execution(client="synchronous"):
        mem = ProximityForest(n_estimators=4, random_state=2).fit(df.drop(columns="cls"), df["cls"])
    np.testing.assert_array_equal(np.asarray(sto.leaves_), mem.leaves_)
    where = Path(RunStore.open(Path(sto.leaves_.store.root)).path)
    del sto
    import gc

    gc.collect()
    assert not where.exists()  # the temporary store went with the forest


def test_a_later_fit_on_the_same_store_is_not_read_silently(table, tmp_path: Path) -> None:
    from distforest.errors import StoreError

    _, folder = table
    stored = ingest(folder, tmp_path / "run.zarr", target="cls")
    with execution(client="synchronous"):
        first = ProximityForest(n_estimators=3, random_state=0).fit(stored)
        ProximityForest(n_estimators=3, random_state=1).fit(stored)  # replaces the leaves
        with pytest.raises(StoreError, match="belong to another fit"):
            outlier_scores(first)
        with pytest.raises(StoreError, match="belongs to another fit"):
            first.nodes_["threshold"]  # its trees were replaced too


def test_proximity_neighbors_from_the_store(table, tmp_path: Path) -> None:
    df, folder = table
    stored = ingest(folder, tmp_path / "run.zarr", target="cls")
    with execution(client="synchronous"):
        sto = ProximityForest(n_estimators=6, random_state=3).fit(stored)
        mem = ProximityForest(n_estimators=6, random_state=3).fit(df.drop(columns="cls"), df["cls"])
        found = sto.proximity_neighbors(5, store=stored.path)  # the workers read the store
        expected = mem.proximity_neighbors(5)
    np.testing.assert_array_equal(found["index"].values, expected["index"].values)
    np.testing.assert_array_equal(found["proximity"].values, expected["proximity"].values)


@pytest.mark.parametrize("sizes", [[3, 4, 9, 1], [5, 5], [12], [1, 1, 1], [0, 6, 0, 4]])
def test_chunk_aligned_blocks_cover_the_pieces_in_whole_chunks(sizes: list[int]) -> None:
    pieces = [np.arange(sum(sizes[:k]), sum(sizes[: k + 1])) for k in range(len(sizes))]
    blocks = list(chunk_aligned(iter(pieces), 5))
    lengths = [len(b) for _, b in blocks]
    assert [start for start, _ in blocks] == [sum(lengths[:i]) for i in range(len(blocks))]
    assert all(start % 5 == 0 for start, _ in blocks)
    assert all(len(b) % 5 == 0 for _, b in blocks[:-1])
    joined = np.concatenate([b for _, b in blocks]) if blocks else np.empty(0)
    np.testing.assert_array_equal(joined, np.arange(sum(sizes)))


def test_joined_forest_equals_the_forest_written_whole(tmp_path: Path) -> None:
    """Batches joined a few nodes at a time give the arrays ``write_forest`` writes."""
    rng = np.random.default_rng(0)
    counts = np.array([7, 3, 11, 5, 2])
    batches = [counts[:2], counts[2:3], counts[3:]]
    whole = {"threshold": rng.normal(size=counts.sum()),
             "value": rng.normal(size=(counts.sum(), 3)).astype(np.float32),
             "feature": rng.integers(0, 9, counts.sum()).astype(np.int32)}  # fmt: skip
    a = RunStore.create(tmp_path / "a.zarr", attrs={})
    a.write_forest(whole, counts, np.arange(5))
    b = RunStore.create(tmp_path / "b.zarr", attrs={})
    edges = np.concatenate([[0], np.cumsum([c.sum() for c in batches])])
    for k in range(len(batches)):
        b.group.require_group("fit").require_group(f"nodes_{k}")
        for name, values in whole.items():
            b.group[f"fit/nodes_{k}"].create_array(name, data=values[edges[k] : edges[k + 1]])
    b.join_forest([f"fit/nodes_{k}" for k in range(3)], counts, np.arange(5), chunk=4)
    left, right = a.read_forest(), b.read_forest()
    assert left.keys() == right.keys()
    for name in left:
        np.testing.assert_array_equal(right[name], left[name], err_msg=name)
        assert right[name].dtype == left[name].dtype
    assert b.array("forest/value").chunks == (4, 3)
