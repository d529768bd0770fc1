"""Top-k proximity neighbours: the top k of the dense matrix, without the matrix."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from sklearn.datasets import make_classification

import distforest
from distforest.errors import ParameterError
from distforest.forests import proximity_neighbors as pn
from distforest.forests.proximity_forest import ProximityForest
from distforest.parallel.execution import Runner
from distforest.store.run_store import RunStore

N = 400


@pytest.fixture(scope="module")
def forest() -> ProximityForest:
    X, y = make_classification(N, 8, n_informative=5, n_classes=3, random_state=1)
    with distforest.execution(client="synchronous"):
        return ProximityForest(40, random_state=3).fit(X, y)


@pytest.fixture(scope="module")
def dense(forest: ProximityForest) -> dict[str, np.ndarray]:
    with distforest.execution(client="synchronous"):
        return {m: forest.proximity(m).values for m in ("original", "oob", "rfgap")}


def dense_top_k(P: np.ndarray, k: int, include_self: bool) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: each row of the dense matrix sorted by (-value, column), first k."""
    n = P.shape[0]
    found = np.empty((n, k), dtype=np.int64)
    values = np.empty((n, k), dtype=np.float32)
    for i in range(n):
        cols = np.arange(n) if include_self else np.delete(np.arange(n), i)
        order = np.lexsort((cols, -P[i, cols]))[:k]
        found[i], values[i] = cols[order], P[i, cols[order]]
    return found, values


def assert_same(ds, oracle) -> None:
    found, values = oracle
    np.testing.assert_array_equal(ds["index"].values, found)
    # bit for bit: the same float32 as the dense matrix
    np.testing.assert_array_equal(ds["proximity"].values.view(np.uint32), values.view(np.uint32))


@pytest.mark.parametrize("method", ["original", "oob", "rfgap"])
@pytest.mark.parametrize("k", [10, 50])
def test_top_k_equals_dense(forest, dense, method, k) -> None:
    with distforest.execution(client="synchronous"):
        ds = forest.proximity_neighbors(k, method, block_rows=97)
    assert ds["index"].dims == ("sample", "neighbor") and ds["index"].dtype == np.int64
    assert ds["proximity"].dtype == np.float32
    assert_same(ds, dense_top_k(dense[method], k, include_self=False))
    assert (ds["index"].values != np.arange(N)[:, None]).all()  # self excluded


def test_more_than_254_trees(forest) -> None:
    """From 255 trees on, the kernel counts trees in 16 bits, not 8: the same top k."""
    X, y = make_classification(80, 5, n_informative=3, random_state=2)
    with distforest.execution(client="synchronous"):
        big = ProximityForest(300, random_state=4).fit(X, y)
        for method in ("original", "oob", "rfgap"):
            ds = big.proximity_neighbors(20, method)
            assert_same(ds, dense_top_k(big.proximity(method).values, 20, include_self=False))
    assert big.leaves_.shape[1] == 300


def test_ties_and_zero_fill(forest, dense) -> None:
    """k beyond the non-zero proximities: the zero rows follow by row number."""
    k = N - 1
    with distforest.execution(client="synchronous"):
        ds = forest.proximity_neighbors(k, "oob")
    oracle = dense_top_k(dense["oob"], k, include_self=False)
    assert (oracle[1] == 0).sum() > 0 and len(np.unique(oracle[1][0])) < 50  # ties exist
    assert_same(ds, oracle)


@pytest.mark.parametrize("method", ["original", "oob", "rfgap"])
def test_include_self(forest, dense, method) -> None:
    with distforest.execution(client="synchronous"):
        ds = forest.proximity_neighbors(10, method, include_self=True)
    assert_same(ds, dense_top_k(dense[method], 10, include_self=True))


def test_bad_k(forest) -> None:
    with pytest.raises(ParameterError, match="k must be an integer from 1 to 399"):
        forest.proximity_neighbors(N, "original")
    with pytest.raises(ParameterError, match="from 1 to 400"):
        forest.proximity_neighbors(0, include_self=True)


def test_threads_and_blocks_bit_identical(forest) -> None:
    results = []
    for threads, block in ((1, 4096), (2, 33), (2, 128)):
        runner = Runner(None, threads)
        try:
            results.append(pn.compute_neighbors(runner, forest.leaves_, forest.inbag_, "rfgap",
                                                25, block_rows=block))  # fmt: skip
        finally:
            runner.close()
    for found, values in results[1:]:
        np.testing.assert_array_equal(found, results[0][0])
        np.testing.assert_array_equal(values.view(np.uint32), results[0][1].view(np.uint32))


def test_store_round_trip_and_cluster(forest, dense, tmp_path, client) -> None:
    """Stored names, dtypes and dims; two worker processes give the in-process bits."""
    path = tmp_path / "run.zarr"
    with distforest.execution(client=client):
        ds = forest.proximity_neighbors(10, "oob", store=path, block_rows=64)
    assert_same(ds, dense_top_k(dense["oob"], 10, include_self=False))
    group = zarr.open_group(path, mode="r")
    for name, dtype in (("neighbors_index", "int64"), ("neighbors_proximity", "float32")):
        arr = group[name]
        assert arr.dtype == np.dtype(dtype)
        assert tuple(arr.metadata.dimension_names) == ("sample", "neighbor")
        assert arr.shape == (N, 10) and arr.chunks == (64, 10)
    with distforest.execution(client=client):  # in memory: the index shared with the workers
        assert_same(forest.proximity_neighbors(10, "oob", block_rows=64),
                    dense_top_k(dense["oob"], 10, include_self=False))  # fmt: skip
    stored = RunStore.open(path).dataset()
    assert stored["neighbors_index"].dims == ("sample", "neighbor")
    np.testing.assert_array_equal(stored["neighbors_index"].values, ds["index"].values)


def test_resume_after_partial_blocks(forest, tmp_path) -> None:
    path = tmp_path / "run.zarr"
    with distforest.execution(client="synchronous"):
        first = forest.proximity_neighbors(12, "original", store=path, block_rows=50)
        expected = first["index"].values.copy(), first["proximity"].values.copy()
        rs = RunStore.open(path, mode="r+")
        # a run killed after some blocks: three blocks lost, garbage in one of them
        done = rs.array("done/neighbors_index")
        done[[1, 4, 7], 0] = 0
        rs.array("neighbors_index")[50:100] = -7
        runner = Runner(None)
        stats = pn.write_neighbors(runner, rs, "original", 12, block_rows=50,
                                   identity={"fit_id": forest.fit_id_})  # fmt: skip
    assert stats == {"blocks": 8, "skipped": 5, "bytes": 3 * 50 * 12 * 12}
    again = pn.stored_neighbors(RunStore.open(path))
    np.testing.assert_array_equal(again["index"].values, expected[0])
    np.testing.assert_array_equal(again["proximity"].values, expected[1])


@pytest.mark.parametrize("method", ["original", "oob", "rfgap"])
def test_store_from_memory_rows_is_the_same(forest, tmp_path, monkeypatch, method) -> None:
    """In process, the index built from the forest's rows in memory writes the bits that
    tasks building it from the store write (two threads, small blocks)."""
    written = []
    for name, rows in (("store", None), ("memory", (forest.leaves_, forest.inbag_))):
        rs = forest.save(tmp_path / f"{name}.zarr")
        if rows is not None:  # the store's leaves are then never read
            monkeypatch.setattr(pn, "read_rows", None)
        runner = Runner(None, 2)
        try:
            stats = pn.write_neighbors(runner, rs, method, 15, block_rows=61, rows=rows,
                                       identity={"fit_id": forest.fit_id_})  # fmt: skip
        finally:
            runner.close()
        assert stats["blocks"] == 7 and stats["skipped"] == 0
        written.append(pn.stored_neighbors(RunStore.open(tmp_path / f"{name}.zarr")))
    np.testing.assert_array_equal(written[1]["index"].values, written[0]["index"].values)
    np.testing.assert_array_equal(written[1]["proximity"].values.view(np.uint32),
                                  written[0]["proximity"].values.view(np.uint32))  # fmt: skip


def test_to_csr(forest, dense) -> None:
    with distforest.execution(client="synchronous"):
        ds = forest.proximity_neighbors(N - 1, "oob")
    csr = pn.neighbors_to_csr(ds)
    P = dense["oob"].copy()
    np.fill_diagonal(P, 0)
    np.testing.assert_array_equal(csr.toarray(), P)  # every non-zero of the row, no zeros
    np.testing.assert_array_equal(ds.neighbors.to_scipy_sparse().toarray(), P)  # the method
    full = pn.neighbors_to_csr(ds.isel(neighbor=slice(0, 5)), keep_zeros=True)
    assert isinstance(full, sp.csr_matrix) and (np.diff(full.indptr) == 5).all()


# -- command line -------------------------------------------------------------


def cli(*args: object):
    from click.testing import CliRunner

    from distforest.cli.main import cli as main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_top_k_end_to_end(breast_cancer_csv, tmp_path) -> None:
    """--top-k writes the neighbours of the same forest as the dense run; --dense both."""
    common = ("--target", "Class", "--drop", "Id", "--trees", 30, "--seed", 5)
    top = tmp_path / "top.zarr"
    result = cli("-q", "proximity", breast_cancer_csv, *common, "--method", "oob",
                 "--top-k", 20, "--out", top)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "neighbors_index 699 x 20" in result.output
    group = zarr.open_group(top, mode="r")
    assert "proximity_oob" not in group  # no n x n matrix
    both = tmp_path / "both.zarr"
    result = cli("-q", "proximity", breast_cancer_csv, *common, "--method", "oob",
                 "--top-k", 20, "--dense", "--out", both)  # fmt: skip
    assert result.exit_code == 0, result.output
    stored = RunStore.open(both).dataset()
    oracle = dense_top_k(stored["proximity_oob"].values, 20, include_self=False)
    for path in (top, both):
        ds = pn.stored_neighbors(RunStore.open(path))
        assert ds.attrs == {"method": "oob", "k": 20, "include_self": False}
        assert_same(ds, oracle)
    info = cli("info", top)
    assert info.exit_code == 0, info.output
    assert "neighbors_index" in info.output and "neighbors_proximity" in info.output
    assert "dims (sample, neighbor)" in info.output
    status = cli("status", top)
    assert "neighbors_index: 3 of 3 written" in status.output
    bad = cli("-q", "proximity", breast_cancer_csv, *common, "--dense", "--out", tmp_path / "x")
    assert bad.exit_code == 2 and "--dense goes with --top-k" in bad.output


def test_pipeline_top_k_and_dry_run(breast_cancer_csv, tmp_path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"input: {{path: {breast_cancer_csv}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 10, random_state: 0}\n"
        "proximity: {method: original, top_k: 7}\n"
        f"output: {{dir: {tmp_path / 'out'}, store: run.zarr}}\n"
    )
    dry = cli("run", path, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "no n x n matrix; the top 7 neighbours of every row" in dry.output
    assert "top-k neighbours (index, proximity)" in dry.output and "of computing" in dry.output
    assert "proximity matrix" not in dry.output
    run = cli("-q", "run", path)
    assert run.exit_code == 0, run.output
    ds = pn.stored_neighbors(RunStore.open(tmp_path / "out" / "run.zarr"))
    assert ds["index"].shape == (699, 7)
    path.write_text(path.read_text().replace("top_k: 7", "top_k: 0"))
    bad = cli("run", path, "--dry-run")
    assert (
        bad.exit_code == 4
        and "proximity.top_k must be an integer >= 1 or None, got 0" in bad.output
    )


def test_readme_spectral_embedding(forest) -> None:
    """The README's embedding from the proximity graph runs and separates nothing silly."""
    from sklearn.manifold import SpectralEmbedding

    with distforest.execution(client="synchronous"):
        nb = forest.proximity_neighbors(15)
    graph = nb.neighbors.to_scipy_sparse()
    affinity = graph.maximum(graph.T)
    assert (affinity != affinity.T).nnz == 0
    xy = SpectralEmbedding(
        n_components=2, affinity="precomputed", eigen_solver="amg", random_state=0
    ).fit_transform(affinity)
    assert xy.shape == (N, 2) and np.isfinite(xy).all() and xy.std(axis=0).min() > 0
    # the classes sit apart in the embedding: a 5-NN vote on it recovers most labels
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    assert cross_val_score(KNeighborsClassifier(5), xy, forest.y_, cv=3).mean() > 0.8


@pytest.mark.parametrize("method", ["original", "oob", "rfgap"])
def test_index_read_block_by_block_is_the_same(tmp_path, monkeypatch, method) -> None:
    """A worker's index built from the store in blocks equals the one built in memory."""
    rng = np.random.default_rng(0)
    leaves = rng.integers(0, 300, (1000, 7)).astype(np.int32)
    inbag = rng.integers(0, 3, (1000, 7)).astype(np.uint8)
    rs = RunStore.create(tmp_path / "s.zarr", attrs={})
    rs.write_named("leaves", leaves, rows=100)
    rs.write_named("inbag", inbag, rows=100)
    monkeypatch.setattr(pn, "READ_ROWS", 128)  # eight blocks, the last one short
    whole, blocks = pn.build_index(leaves, inbag, method), pn.build_stored_index(rs.path, method)
    for a, b in zip(whole.parts, blocks.parts, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(whole.masks, blocks.masks)


@pytest.mark.parametrize("metric", ["rf-proximity", "rfgap"])
def test_knn_training_rows_use_the_exact_neighbours(metric) -> None:
    from distforest.apps.knn import KNNClassifier

    X, y = make_classification(150, 5, random_state=2)
    model = KNNClassifier(n_neighbors=6, metric=metric, n_estimators=20, random_state=0)
    with distforest.execution(client="synchronous"):
        model.fit(X, y)
        distances, found = model.kneighbors()
        forest = model.similarity_.forest_
        P = forest.proximity("original" if metric == "rf-proximity" else "rfgap").values
    oracle_found, oracle_values = dense_top_k(P, 6, include_self=False)
    np.testing.assert_array_equal(found, oracle_found)
    np.testing.assert_array_equal(distances, 1.0 - oracle_values.astype(np.float64))
    with pytest.raises(ParameterError, match="needs metric='rf-proximity' or 'rfgap'"):
        KNNClassifier(n_neighbors=3).fit(X, y).kneighbors()


def test_out_of_bag_methods_need_a_bootstrap_forest(tmp_path) -> None:
    X, y = make_classification(60, 4, random_state=0)
    with distforest.execution(client="synchronous"):
        forest = ProximityForest(5, bootstrap=False, random_state=0).fit(X, y)
        rs = forest.save(tmp_path / "s.zarr")
        for call in (lambda: forest.proximity_neighbors(3, "oob"),
                     lambda: pn.write_forest_neighbors(forest, rs, "rfgap", 3)):  # fmt: skip
            with pytest.raises(ParameterError, match="bootstrap"):
                call()
