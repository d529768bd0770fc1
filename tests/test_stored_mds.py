"""MDS by row chunks, in a store or in memory: the dense eigendecomposition, the same floats
whatever the chunk size and wherever the scratch is, a CSV written by tasks, a small driver."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import zarr
from conftest import no_default_client
from tracing import traced_peak

from distforest import ProximityForest
from distforest.apps import mds as chunked
from distforest.apps.mds import mds
from distforest.apps.outliers import stored_path
from distforest.jobs.outputs import write_mds
from distforest.store.inputs import ingest


def _table(n: int, ids: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 5))
    label = (X[:, 0] + rng.standard_normal(n) > 0).astype(int) + (X[:, 1] > 1)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(5)])
    frame["label"] = np.array(["a", "b", "c"])[label]
    if ids:
        frame.insert(0, "key", [f"r{i:05d}" for i in range(n)])
    return frame


def _stored_forest(tmp_path, n: int, ids: bool = False, trees: int = 10) -> ProximityForest:
    frame = _table(n, ids)
    frame.to_csv(tmp_path / "t.csv", index=False)
    source = ingest(str(tmp_path / "t.csv"), tmp_path / "run.zarr", target="label",
                    id="key" if ids else None)  # fmt: skip
    return ProximityForest(n_estimators=trees, random_state=0).fit(source)


def _signed(vectors: np.ndarray) -> np.ndarray:
    """mds's sign convention: each column's first largest absolute entry positive."""
    where = np.abs(vectors).argmax(axis=0)
    return vectors * np.sign(vectors[where, np.arange(vectors.shape[1])])


def _spy(calls: list[bool], real):
    """``real`` recording whether each call keeps its scratch in a store."""

    def spy(*args, **kwargs):
        calls.append(args[1] is not None)
        return real(*args, **kwargs)

    return spy


def _by_chunks(forest, tmp_path, k: int, dissimilarity: str, tol: float = 1e-8):
    return chunked.mds_by_chunks(forest, str(tmp_path / "run.zarr"), k,
                                    dissimilarity=dissimilarity, tol=tol)  # fmt: skip


@pytest.mark.parametrize("dissimilarity", ["sqrt", "linear"])
def test_equals_dense_eigendecomposition(tmp_path, monkeypatch, dissimilarity: str) -> None:
    """At n = 60 (the basis reaches n - 1 columns: restarts and the cap both happen with a
    small basis): B built from the dense proximity, numpy's eigh."""
    monkeypatch.setattr(chunked, "GRAIN", 8)
    monkeypatch.setattr(chunked, "ROWS_PER_CHUNK", 16)
    monkeypatch.setattr(chunked, "MAX_BASIS", 24)
    forest = _stored_forest(tmp_path, 60, trees=6)
    leaves = np.asarray(forest.leaves_)
    P = (leaves[:, None, :] == leaves[None, :, :]).mean(axis=2)
    J = np.eye(60) - 1.0 / 60
    B = 0.5 * J @ P @ J if dissimilarity == "sqrt" else J @ P @ J - 0.5 * J @ (P * P) @ J
    values, vectors = np.linalg.eigh(B)
    values, vectors = values[::-1][:4], vectors[:, ::-1][:, :4]
    expected = _signed(vectors) * np.sqrt(np.clip(values, 0, None))
    coordinates, eigenvalues = _by_chunks(forest, tmp_path, 4, dissimilarity, tol=1e-12)
    np.testing.assert_allclose(eigenvalues, values, rtol=1e-10)
    np.testing.assert_allclose(coordinates, expected, atol=1e-8 * np.abs(expected).max())
    assert "scratch" not in zarr.open_group(str(tmp_path / "run.zarr"), mode="r")


@pytest.fixture(scope="module")
def forests_of_600(tmp_path_factory) -> tuple[ProximityForest, str, ProximityForest]:
    """600 rows: the forest fitted from a store (and its store's path) and the same forest
    fitted on the numpy array, fitted once for both dissimilarities."""
    where = tmp_path_factory.mktemp("mds600")
    forest = _stored_forest(where, 600)
    frame = _table(600)
    in_memory = ProximityForest(n_estimators=10, random_state=0).fit(
        frame.drop(columns="label").to_numpy(), frame["label"].to_numpy()
    )
    return forest, str(where / "run.zarr"), in_memory


@pytest.mark.parametrize("dissimilarity", ["sqrt", "linear"])
def test_same_floats_in_memory_in_a_store_and_by_any_chunks(forests_of_600, monkeypatch,
                                                           dissimilarity: str) -> None:  # fmt: skip
    """600 rows: the dense eigendecomposition's eigenvalues to rtol 1e-6 and coordinates to
    1e-6 of their scale (the default tol 1e-8), and the same floats with the scratch in the
    store (chunks of 100 and 300 rows and one chunk, a grain of 100 rows), held in memory
    for the same forest, and for the forest fitted on the numpy array (the parity of the
    former in-memory ARPACK solver and this one, folded in: one method now)."""
    monkeypatch.setattr(chunked, "GRAIN", 100)
    forest, store, in_memory = forests_of_600
    leaves = np.asarray(forest.leaves_)
    P = (leaves[:, None, :] == leaves[None, :, :]).mean(axis=2)
    J = np.eye(600) - 1.0 / 600
    B = 0.5 * J @ P @ J if dissimilarity == "sqrt" else J @ P @ J - 0.5 * J @ (P * P) @ J
    dense_values, vectors = np.linalg.eigh(B)
    reference_values = dense_values[::-1][:3]
    reference = _signed(vectors[:, ::-1][:, :3]) * np.sqrt(reference_values)
    results = []
    for rows in (100, 300, 1 << 20):
        monkeypatch.setattr(chunked, "ROWS_PER_CHUNK", rows)
        results.append(chunked.mds_by_chunks(forest, store, 3, dissimilarity=dissimilarity))
    assert "scratch" not in zarr.open_group(store, mode="r")
    results.append(chunked.mds_by_chunks(forest, None, 3, dissimilarity=dissimilarity))
    results.append(mds(in_memory, 3, dissimilarity=dissimilarity))
    coordinates, values = results[0]
    np.testing.assert_allclose(values, reference_values, rtol=1e-6)
    scale = np.abs(reference).max()
    np.testing.assert_allclose(coordinates, reference, atol=1e-6 * scale)
    for other, other_values in results[1:]:
        assert np.array_equal(other, coordinates)
        assert np.array_equal(other_values, values)


def test_csv_written_by_tasks(tmp_path, monkeypatch) -> None:
    """write_mds on a stored forest has tasks write the CSV: the CSV's ID, label and dims
    columns are those of the coordinates returned, to 1e-6 of their scale."""
    monkeypatch.setattr(chunked, "GRAIN", 64)
    monkeypatch.setattr(chunked, "ROWS_PER_CHUNK", 256)
    forest = _stored_forest(tmp_path, 900, ids=True)
    assert stored_path(forest) is not None
    calls: list[int] = []
    real = chunked.mds_by_chunks
    monkeypatch.setattr(chunked, "mds_by_chunks",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))  # fmt: skip
    out = tmp_path / "mds.csv"
    assert write_mds(forest, str(out), None, components=2) == {"MDS coordinates": str(out)}
    assert calls == [1]
    got = pd.read_csv(out)
    frame = _table(900, ids=True)
    assert list(got.columns) == ["key", "label", "dim1", "dim2"]
    assert got["key"].tolist() == frame["key"].tolist()
    assert got["label"].tolist() == frame["label"].tolist()
    expected, _ = mds(forest, 2)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got[["dim1", "dim2"]].to_numpy(), expected, atol=1e-6 * scale)
    assert "scratch" not in zarr.open_group(str(tmp_path / "run.zarr"), mode="r")
    assert not list(tmp_path.glob(".mds.csv*"))  # no pieces or partial file left


def test_driver_holds_no_vector_of_n(tmp_path, client) -> None:
    """On a cluster, the driver's traced allocations (the scheduler's included) while the
    scratch in the store solves and writes the CSV peak at less than a third of the same
    method's with its scratch held in memory on the same forest (the basis, blocks and
    product: vectors of n); the CSV is the same bytes run again."""
    from distforest import execution

    n = 20_000  # measured: 3.1 MB by chunks against 24.7 MB held (the bound: a third)
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.standard_normal((n, 3)), columns=["a", "b", "c"])
    frame["label"] = np.where(frame["a"] + 0.5 * rng.standard_normal(n) > 0, "x", "y")
    frame.to_parquet(tmp_path / "t.parquet", index=False)

    with execution(client=client):
        stored = ingest(str(tmp_path / "t.parquet"), tmp_path / "run.zarr", target="label")
        forest = ProximityForest(n_estimators=3, max_depth=6, random_state=0).fit(stored)
        write_mds(forest, str(tmp_path / "warm.csv"), None)  # imports, numba
        held = traced_peak(lambda: chunked.mds_by_chunks(forest, None, 2))
        by_chunks = traced_peak(lambda: write_mds(forest, str(tmp_path / "m.csv"), None))
    assert by_chunks < held / 3, (by_chunks, held)
    assert (tmp_path / "m.csv").read_bytes() == (tmp_path / "warm.csv").read_bytes()
    with no_default_client():  # the tasks in this process instead of two workers
        write_mds(forest, str(tmp_path / "here.csv"), None)
    assert (tmp_path / "here.csv").read_bytes() == (tmp_path / "warm.csv").read_bytes()


def test_cli_on_a_parquet_folder_writes_the_in_memory_csv(tmp_path, monkeypatch, client) -> None:
    """``distforest mds`` on a folder of Parquet parts (fitted from a store: its scratch
    there) writes the CSV of the same command on the whole file (fitted in memory: its
    scratch held in memory), the same floats."""
    from click.testing import CliRunner

    from distforest.cli.main import cli

    frame = _table(300, ids=True)
    (tmp_path / "parts").mkdir()
    for k in range(3):
        frame.iloc[k * 100 : (k + 1) * 100].to_parquet(tmp_path / f"parts/p{k}.parquet")
    frame.to_parquet(tmp_path / "whole.parquet", index=False)
    calls: list[int] = []
    real = chunked.mds_by_chunks
    monkeypatch.setattr(chunked, "mds_by_chunks", _spy(calls, real))
    common = ["--target", "label", "--id", "key", "--trees", "5", "--components", "3",
              "--scheduler", client.scheduler.address]  # fmt: skip
    for name, source in (("p.csv", "parts"), ("w.csv", "whole.parquet")):
        result = CliRunner().invoke(cli, ["-q", "mds", str(tmp_path / source), *common,
                                          "--out", str(tmp_path / name)])  # fmt: skip
        assert result.exit_code == 0, result.output
    assert calls == [True, False]  # the folder's scratch in its store, the file's in memory
    by_parts, whole = pd.read_csv(tmp_path / "p.csv"), pd.read_csv(tmp_path / "w.csv")
    assert list(by_parts.columns) == ["key", "label", "dim1", "dim2", "dim3"]
    pd.testing.assert_frame_equal(by_parts, whole, check_exact=True)


def test_no_convergence_is_an_error_and_leaves_no_scratch(tmp_path, monkeypatch) -> None:
    from distforest.errors import ParameterError

    monkeypatch.setattr(chunked, "MAX_PRODUCTS", 1)
    forest = _stored_forest(tmp_path, 200, trees=4)
    with pytest.raises(ParameterError, match="did not converge to tol=1e-08 in 1 block"):
        _by_chunks(forest, tmp_path, 2, "sqrt")
    assert "scratch" not in zarr.open_group(str(tmp_path / "run.zarr"), mode="r")


def test_pipeline_mds_stage_on_a_parquet_folder(tmp_path, monkeypatch) -> None:
    """A job's mds stage on a folder of Parquet parts keeps its scratch in the store and
    writes the CSV of the same job on the whole file (its scratch in memory), the same
    floats."""
    from click.testing import CliRunner

    from distforest.cli.main import cli

    frame = _table(300)
    (tmp_path / "parts").mkdir()
    for k in range(3):
        frame.iloc[k * 100 : (k + 1) * 100].to_parquet(tmp_path / f"parts/p{k}.parquet")
    frame.to_parquet(tmp_path / "whole.parquet", index=False)
    calls: list[int] = []
    real = chunked.mds_by_chunks
    monkeypatch.setattr(chunked, "mds_by_chunks", _spy(calls, real))
    for name, source in (("parts", "parts"), ("whole", "whole.parquet")):
        job = tmp_path / f"{name}.yaml"
        job.write_text(
            f"input: {{path: {tmp_path / source}, target: label}}\n"
            "forest: {n_estimators: 5, random_state: 0}\n"
            "mds: {out: mds.csv}\n"
            f"output: {{dir: {tmp_path / ('out-' + name)}, store: run.zarr}}\n"
        )
        result = CliRunner().invoke(cli, ["-q", "run", str(job)])
        assert result.exit_code == 0, result.output
    assert calls == [True, False]  # the folder's scratch in its store, the file's in memory
    by_parts = pd.read_csv(tmp_path / "out-parts/mds.csv")
    whole = pd.read_csv(tmp_path / "out-whole/mds.csv")
    assert list(by_parts.columns) == ["row", "label", "dim1", "dim2"]
    pd.testing.assert_frame_equal(by_parts, whole, check_exact=True)


def test_scratch_estimate_is_the_scratch_made(tmp_path, monkeypatch) -> None:
    """The dry run's MDS scratch (``scratch_bytes``) is the bytes of the arrays the run
    makes; a dry run on a folder of parts lists it beside the temporary store."""
    from click.testing import CliRunner

    from distforest.cli.main import cli
    from distforest.jobs.estimates import size_text

    made: list[int] = []
    create = chunked.Scratch.create

    def counted(s, width, block, batches):
        create(s, width, block, batches)
        group = zarr.open_group(str(tmp_path / "run.zarr"), mode="r")["scratch"]
        made.append(sum(8 * int(np.prod(a.shape)) for _, a in group.arrays()))

    monkeypatch.setattr(chunked.Scratch, "create", counted)
    forest = _stored_forest(tmp_path, 900, trees=7)
    write_mds(forest, str(tmp_path / "m.csv"), None, components=3)
    assert made == [chunked.scratch_bytes(900, 3, 7)]
    parts = tmp_path / "parts"
    parts.mkdir()
    for k, cut in enumerate(np.array_split(np.arange(900), 3)):
        _table(900).iloc[cut].to_parquet(parts / f"p{k}.parquet")
    args = ["mds", str(parts), "--target", "label", "--out", str(tmp_path / "d.csv"),
            "--trees", "7", "--components", "3", "--dry-run"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"MDS scratch (removed after) {size_text(made[0])}" in " ".join(result.output.split())
    assert "temporary store" in result.output
    one_file = CliRunner().invoke(cli, [*args[:1], str(tmp_path / "t.csv"), *args[2:]])
    assert one_file.exit_code == 0, one_file.output
    assert "MDS scratch" not in one_file.output  # fitted in memory
