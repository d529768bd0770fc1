"""Outlier scores of a stored forest by row chunks: exact medians, the same scores and CSV."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import zarr
from tracing import traced_peak

from distforest import ProximityForest
from distforest.apps import outliers
from distforest.apps.outliers import MAD_SCALE, outlier_scores
from distforest.forests import square_sums
from distforest.jobs.outputs import write_outliers
from distforest.kernels import order_stats
from distforest.parallel.execution import Runner
from distforest.store import scratch
from distforest.store.inputs import ingest
from distforest.store.scratch import HeldColumn, StoredColumn


def test_sortable_keys_order_as_the_floats() -> None:
    values = np.array([-np.inf, -3.5, -1e-300, -0.0, 0.0, 1e-300, 2.0, 2.0, 7e10, np.inf])
    keys = order_stats.sortable_keys(values)
    assert np.all(np.diff(keys.astype(object)) >= 0)
    assert keys[3] < keys[4]  # -0.0 before 0.0
    back = order_stats.key_values(keys)
    assert np.array_equal(back.view(np.uint64), values.view(np.uint64))


def test_narrow_finds_the_bucket_of_a_rank() -> None:
    counts = np.zeros(order_stats.BUCKETS, dtype=np.int64)
    counts[[3, 10, 11]] = [2, 5, 1]
    assert order_stats.narrow(counts, 0) == (3, 0, 2)
    assert order_stats.narrow(counts, 2) == (10, 0, 5)
    assert order_stats.narrow(counts, 7) == (11, 0, 1)


def _sums_store(tmp_path, sums: np.ndarray, codes: np.ndarray) -> square_sums.StoredCodes:
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    root.create_array(square_sums.SUMS_ARRAY, data=sums, chunks=(97,))
    root.create_array("target", data=codes.astype(np.int16), chunks=(97,))
    return square_sums.StoredCodes(str(tmp_path / "s.zarr"), "target", codes.size)


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("gather", [1, 40, 1 << 18])
def test_class_medians_equal_numpy(tmp_path, monkeypatch, gather: int, held: bool) -> None:
    """Several rounds of buckets (a tiny gather limit), ties, odd and even class sizes,
    a class of one row and an absent class, the values in a store or held in memory:
    np.median's values, bit for bit."""
    monkeypatch.setattr(outliers, "GATHER_LIMIT", gather)
    monkeypatch.setattr(scratch, "ROWS_PER_CHUNK", 97)
    rng = np.random.default_rng(3)
    n = 1001
    codes = rng.choice([0, 1, 3], size=n, p=[0.6, 0.399, 0.001])
    codes[:2] = [4, 1]  # class 4: one row; class 2: none
    sums = rng.integers(1, 60, size=n) / 400.0  # many ties
    sums[5] = 0.0  # counted as 1
    source: Any = _sums_store(tmp_path, sums, codes)
    sums_column: Any = StoredColumn(source.path, square_sums.SUMS_ARRAY)
    if held:
        source, sums_column = HeldColumn(codes), HeldColumn(sums)
    values = outliers.RawValues(sums_column, source, n)
    sizes = np.bincount(codes, minlength=5)
    medians = outliers.class_medians(Runner(None), values, sizes)
    raw = n / np.where(sums == 0, 1.0, sums)
    for c in range(5):
        if sizes[c]:
            assert medians[c] == np.median(raw[codes == c]), c
    deviations = outliers.class_medians(
        Runner(None), outliers.RawValues(sums_column, source, n, medians), sizes
    )
    for c in np.flatnonzero(sizes):
        expected = np.median(np.abs(raw[codes == c] - np.median(raw[codes == c])))
        assert deviations[c] == expected, c
    assert sizes[2] == 0 and medians[2] == 0.0


def _table(n: int = 1500, ids: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 5))
    label = (X[:, 0] + rng.standard_normal(n) > 0).astype(int) + (X[:, 1] > 1)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(5)])
    frame["label"] = np.array(["a", "b", "c"])[label]
    if ids:
        frame.insert(0, "key", [f"r{i:05d}" for i in range(n)])
    return frame


@pytest.mark.parametrize("method", ["tree-pairs", "leaf-mates"])
def test_stored_scores_and_csv_equal_in_memory(tmp_path, monkeypatch, method: str) -> None:
    """Scores of a forest fitted from a store (by chunks) equal the in-memory forest's,
    and the CSV written by tasks is byte for byte the one written from memory."""
    monkeypatch.setattr(outliers, "GATHER_LIMIT", 50)
    monkeypatch.setattr(scratch, "ROWS_PER_CHUNK", 400)
    monkeypatch.setattr(square_sums, "choose_method", lambda n, counts: method)
    frame = _table(ids=True)
    frame.to_csv(tmp_path / "t.csv", index=False)
    stored = ProximityForest(n_estimators=12, random_state=0).fit(
        ingest(str(tmp_path / "t.csv"), tmp_path / "run.zarr", target="label", id="key")
    )
    memory = ProximityForest(n_estimators=12, random_state=0).fit(
        frame.drop(columns=["label", "key"]), frame["label"]
    )
    assert outliers.stored_path(stored) is not None
    assert outliers.stored_path(memory) is None
    expected = outlier_scores(memory)
    assert np.array_equal(outlier_scores(stored), expected)
    flags = outliers.outlier_flags(memory)
    assert np.array_equal(outliers.outlier_flags(stored).flags, flags.flags)
    out = tmp_path / "scores.csv"
    assert write_outliers(stored, str(out), None, "t") == {"outlier scores": str(out)}
    reference = pd.DataFrame({"key": frame["key"], "label": frame["label"], "outlier": expected,
                              "outlier_flag": flags.flags})  # fmt: skip
    assert out.read_text() == reference.to_csv(index=False)
    assert "scratch" not in zarr.open_group(str(tmp_path / "run.zarr"), mode="r")
    assert not list(tmp_path.glob(".scores.csv*"))  # no pieces or partial file left


def test_stored_scores_unsupervised_and_median_formula(tmp_path, monkeypatch) -> None:
    """One class (no target): scores by chunks against the formula on the dense proximity."""
    monkeypatch.setattr(scratch, "ROWS_PER_CHUNK", 128)
    frame = _table(300).drop(columns="label")
    frame.to_csv(tmp_path / "t.csv", index=False)
    forest = ProximityForest(n_estimators=8, random_state=1).fit(
        ingest(str(tmp_path / "t.csv"), tmp_path / "run.zarr")
    )
    leaves = np.asarray(forest.leaves_)
    P = (leaves[:, None, :] == leaves[None, :, :]).mean(axis=2)
    raw = 300 / (P**2).sum(axis=1)
    median = np.median(raw)
    expected = (raw - median) / (MAD_SCALE * np.median(np.abs(raw - median)))
    np.testing.assert_allclose(outlier_scores(forest), expected, rtol=1e-12)


def test_driver_holds_no_vector_of_n(tmp_path, client, monkeypatch) -> None:
    """Scoring a stored forest on a cluster and writing its CSV: the driver's traced
    allocations (the scheduler's included) peak at less than half of what scoring the same
    forest in memory takes (codes, integer sums, raw values, scores: vectors of n; the
    chunked path's own part is fixed: 65,536 bucket counts a class and round)."""
    from distforest import execution

    monkeypatch.setattr(square_sums, "choose_method", lambda n, counts: "tree-pairs")
    monkeypatch.setattr(outliers, "GATHER_LIMIT", 1000)  # at scale: 262,144 a class
    n = 300_000
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.standard_normal((n, 3)), columns=["a", "b", "c"])
    frame["label"] = np.where(frame["a"] > 0, "x", "y")
    frame.to_parquet(tmp_path / "t.parquet", index=False)

    with execution(client=client):
        stored = ingest(str(tmp_path / "t.parquet"), tmp_path / "run.zarr", target="label")
        forest = ProximityForest(n_estimators=3, max_depth=6, random_state=0).fit(stored)
        write_outliers(forest, str(tmp_path / "warm.csv"), None, "t")  # imports, numba
        labels = np.asarray(forest.y_)  # given labels: scored in memory
        in_memory = traced_peak(lambda: outlier_scores(forest, labels))
        by_chunks = traced_peak(lambda: write_outliers(forest, str(tmp_path / "o.csv"), None, "t"))
    assert by_chunks < in_memory / 2, (by_chunks, in_memory)
    assert (tmp_path / "o.csv").read_bytes() == (tmp_path / "warm.csv").read_bytes()
