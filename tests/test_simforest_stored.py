"""SimForest with a named measure fitted from a stored table / a table read by partitions:
the in-memory forest, bit for bit, with ``leaves_``/``inbag_`` left in the store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from bad_parts import write_bad_parts
from click.testing import CliRunner

from distforest.apps.outliers import outlier_scores
from distforest.cli.main import cli
from distforest.forests.simforest import NODE_FIELDS, SimilarityForestClassifier
from distforest.store.inputs import ingest
from distforest.store.run_store import RunStore
from tests.tracing import traced_peak

N = 600


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("simstored")
    rng = np.random.default_rng(5)
    X = rng.standard_normal((N, 4)) * [1.0, 30.0, 0.01, 2.0] + [0.0, 5.0, 100.0, -1.0]
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])  # float64: CSV text round-trips
    frame["label"] = np.where(frame["a"] + frame["b"] / 30 > 0.2, "yes", "no")
    frame.loc[frame.index[::7], "label"] = "maybe"
    frame.to_csv(root / "table.csv", index=False)
    (root / "parts").mkdir()
    (root / "text").mkdir()
    for k, cut in enumerate(np.array_split(np.arange(N), 4)):
        frame.iloc[cut].to_parquet(root / "parts" / f"chunk-{k}.pq.data")  # of any name
        frame.iloc[cut].to_csv(root / "text" / f"day-{k}.csv", index=False)
    return {"root": root, "csv": root / "table.csv", "parts": root / "parts",
            "glob": root / "text" / "day-*.csv"}  # fmt: skip


def _same_forest(a: SimilarityForestClassifier, b: SimilarityForestClassifier) -> None:
    """Every fitted array of ``b`` (a stored fit) equals ``a``'s (the in-memory one)."""
    assert isinstance(b.leaves_, zarr.Array) and isinstance(b.inbag_, zarr.Array)
    np.testing.assert_array_equal(np.asarray(b.leaves_), a.leaves_)
    np.testing.assert_array_equal(np.asarray(b.inbag_), a.inbag_)
    for name in ("classes_", "y_", "pair_ids_", "pair_objects_", "seeds_"):
        np.testing.assert_array_equal(getattr(b, name), getattr(a, name), err_msg=name)
        assert getattr(b, name).dtype == getattr(a, name).dtype, name
    assert b.n_similarity_evaluations_ == a.n_similarity_evaluations_
    assert (b.kind_, b.n_samples_, b.n_features_in_) == (a.kind_, a.n_samples_, a.n_features_in_)
    assert len(b.trees_) == len(a.trees_)
    for ta, tb in zip(a.trees_, b.trees_, strict=True):
        for name in NODE_FIELDS:
            np.testing.assert_array_equal(getattr(tb, name), getattr(ta, name), err_msg=name)
        assert tb.leaves.size == 0 and tb.inbag.size == 0  # the rows' arrays stay in the store


def _arrays(store: Path) -> dict[str, np.ndarray]:
    """Every array of a store, its groups' too."""
    group = zarr.open_group(str(store), mode="r")
    return {name: np.asarray(arr[...]) for name, arr in group.arrays()} | {
        f"{name}/{key}": values
        for name, _ in group.groups()
        for key, values in _arrays(store / name).items()
    }


def _same_arrays(got: Path, expected: Path, skip: tuple[str, ...] = ()) -> None:
    saved, reference = _arrays(got), _arrays(expected)
    assert sorted(saved) == sorted(reference)
    for name, values in reference.items():
        if name not in skip:
            assert saved[name].dtype == values.dtype, name
            np.testing.assert_array_equal(saved[name], values, err_msg=name)


@pytest.mark.parametrize(("metric", "batch_size"), [("rbf", 2), ("cosine", None)])
def test_stored_table_grows_the_in_memory_forest(tables, tmp_path, metric: str,
                                                 batch_size: int | None) -> None:  # fmt: skip
    frame = pd.read_parquet(tables["parts"])  # (the folder's parts, in order)
    X, y = frame[["a", "b", "c", "d"]].to_numpy(np.float32), frame["label"].to_numpy()
    table = ingest(tables["parts"], tmp_path / "run.zarr", target="label", rows=128)
    params = {"n_estimators": 7, "metric": metric, "random_state": 3, "tile_size": 128}
    memory = SimilarityForestClassifier(**params, batch_size=3).fit(X, y)
    stored = SimilarityForestClassifier(**params, batch_size=batch_size).fit(table)
    _same_forest(memory, stored)
    np.testing.assert_array_equal(stored.predict_proba(X[:40]), memory.predict_proba(X[:40]))
    np.testing.assert_array_equal(outlier_scores(stored), outlier_scores(memory))
    for method in ("original", "oob"):  # tiles read the store's leaves
        expected = memory.proximity(method, store=tmp_path / f"m-{method}.zarr").values
        got = stored.proximity(method, store=tmp_path / f"s-{method}.zarr").values
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(stored.proximity().values, memory.proximity().values)
    # the table's store is the model's too: its matrix is written beside the leaves
    beside = stored.proximity("original", store=table.path).values
    np.testing.assert_array_equal(beside, memory.proximity().values)
    memory.save(tmp_path / "memory.zarr")
    stored.save(tmp_path / "stored.zarr")
    _same_arrays(tmp_path / "stored.zarr", tmp_path / "memory.zarr")
    loaded = SimilarityForestClassifier.load(tmp_path / "stored.zarr")
    np.testing.assert_array_equal(loaded.predict(X[:40]), memory.predict(X[:40]))


def test_dask_frame_is_read_by_partitions(tables) -> None:
    import dask.dataframe as dd

    frame = pd.read_csv(tables["csv"]).astype({c: np.float32 for c in "abcd"})  # as stored
    memory = SimilarityForestClassifier(n_estimators=4, metric="euclidean", random_state=1)
    memory.fit(frame[["a", "b", "c", "d"]].to_numpy(), frame["label"].to_numpy())
    stored = SimilarityForestClassifier(n_estimators=4, metric="euclidean", random_state=1)
    stored.fit(dd.from_pandas(frame, npartitions=3), "label")
    _same_forest(memory, stored)


def test_stored_table_mistakes(tables, tmp_path) -> None:
    from distforest.errors import InputError, ParameterError

    frame = pd.read_csv(tables["csv"])
    frame.loc[5, "c"] = np.nan
    table = ingest(frame, tmp_path / "gaps.zarr", target="label")
    with pytest.raises(InputError, match=r"missing values.*'c': 1.*rbf needs complete rows"):
        SimilarityForestClassifier(n_estimators=2, metric="rbf").fit(table)
    table = ingest(tables["parts"], tmp_path / "run.zarr", target="label")
    with pytest.raises(ParameterError, match="not a similarity matrix"):
        SimilarityForestClassifier(n_estimators=2).fit(table)  # metric="precomputed"
    with pytest.raises(InputError, match="do not pass y"):
        SimilarityForestClassifier(n_estimators=2, metric="rbf").fit(table, frame["label"])


def test_driver_does_not_hold_the_rows_arrays(tmp_path, client) -> None:
    """The driver's traced peak is a fraction of the (n, T) leaves and in-bag counts
    (5 bytes a row a tree, which the in-memory fit holds): labels and nodes only."""
    rng = np.random.default_rng(0)
    n, trees = 10_000, 120
    frame = pd.DataFrame(rng.standard_normal((n, 3)).astype(np.float32), columns=list("abc"))
    frame["label"] = np.where(frame["a"] > 0, "p", "q")
    table = ingest(frame, tmp_path / "big.zarr", target="label")
    forest = SimilarityForestClassifier(n_estimators=trees, metric="rbf", max_depth=1,
                                        batch_size=60,
                                        random_state=0).set_execution(client)  # fmt: skip
    peak = traced_peak(lambda: forest.fit(table))
    rows = n * trees * (4 + 1)  # leaves int32 + inbag uint8
    assert peak < rows / 3, (peak, rows)
    assert forest.leaves_.shape == (n, trees) and int(np.asarray(forest.inbag_).sum()) == n * trees


def test_cli_parts_fit_the_one_file_model(tables, client) -> None:
    root = tables["root"]
    options = ("--target", "label", "--trees", "6", "--seed", "2", "--metric", "rbf:0.3")
    whole = root / "whole.zarr"
    result = invoke("-q", "simforest", "fit", tables["csv"], *options, "--out", whole)
    assert result.exit_code == 0, result.output
    expected = root / "whole.csv"
    assert invoke("-q", "simforest", "predict", whole, tables["csv"], "--out",
                  expected).exit_code == 0  # fmt: skip
    whole_attrs = dict(zarr.open_group(str(whole), mode="r").attrs)
    for source in ("parts", "glob"):
        model = root / f"{source}.zarr"
        result = invoke("-q", "simforest", "fit", tables[source], *options, "--out", model,
                        "--scheduler", client.scheduler.address)  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "read by partitions" in result.output
        _same_arrays(model, whole)
        attrs = dict(zarr.open_group(str(model), mode="r").attrs)
        for key in ("params", "measure", "classes", "scaling", "feature_names", "n_features"):
            assert attrs[key] == whole_attrs[key], key
        predicted = root / f"{source}.csv"
        assert invoke("-q", "simforest", "predict", model, tables["csv"], "--out",
                      predicted).exit_code == 0  # fmt: skip
        assert predicted.read_bytes() == expected.read_bytes()
    # new rows read by partitions: one task per part writes its piece of the same CSV
    for source in ("parts", "glob"):
        predicted = root / f"by-parts-{source}.csv"
        result = invoke("-q", "simforest", "predict", whole, tables[source], "--out", predicted,
                        "--scheduler", client.scheduler.address)  # fmt: skip
        assert result.exit_code == 0 and "read by partitions" in result.output, result.output
        assert predicted.read_bytes() == expected.read_bytes()
    gaps = root / "gaps"
    gaps.mkdir()
    frame = pd.read_csv(tables["csv"])
    frame.loc[203, "d"] = np.nan
    for k, cut in enumerate(np.array_split(np.arange(N), 3)):
        frame.iloc[cut].to_parquet(gaps / f"g-{k}.parquet")
    result = invoke("-q", "simforest", "predict", whole, gaps, "--out", root / "gaps.csv",
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "g-1.parquet" in result.output and "'d'" in result.output, result.output
    assert "row 204 " in result.output and not (root / "gaps.csv").exists()
    dry = invoke("simforest", "fit", tables["parts"], *options, "--out", root / "dry.zarr",
                 "--dry-run")  # fmt: skip
    assert dry.exit_code == 0, dry.output
    assert f"{N:,} rows x 4 features" in dry.output and not (root / "dry.zarr").exists()


def test_bad_value_in_a_part_names_file_column_row(tables, client) -> None:
    root = tables["root"]
    frame = pd.read_csv(tables["csv"])
    out = root / "bad.zarr"
    bad = root / "bad"
    # a measure needs complete rows
    first = write_bad_parts(frame, bad, column="b", row=7, value=np.nan)
    result = invoke("-q", "simforest", "fit", bad, "--target", "label", "--trees", "3",
                    "--out", out, "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "part-3.parquet" in result.output and "'b'" in result.output
    assert f"row {first + 1} " in result.output  # counted from 1
    assert not out.exists()
    text = root / "bad-text"  # a stray string in a numeric column
    write_bad_parts(frame, text, column="c", row=2, value="oops", kind="csv")
    result = invoke("-q", "simforest", "fit", text / "t-*.csv", "--target", "label",
                    "--out", out, "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "t-3.csv" in result.output and "'c'" in result.output and "oops" in result.output
    assert not out.exists()


PIPELINE = """kind: simforest
input:
  path: {input}
  target: label
simforest:
  n_estimators: 5
  metric: cosine
  random_state: 4
  tile_size: 256
proximity:
  method: oob
outliers:
  out: outliers.csv
output:
  dir: {out}
  store: model.zarr
"""


def test_pipeline_on_parts_writes_the_one_file_outputs(tables, client) -> None:
    root = tables["root"]
    for source in ("csv", "parts"):
        path = root / f"{source}.yaml"
        path.write_text(PIPELINE.format(input=tables[source], out=root / f"run-{source}"))
    dry = invoke("run", root / "parts.yaml", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"{N:,} objects" in dry.output and not (root / "run-parts").exists()
    for source in ("csv", "parts"):
        result = invoke("-q", "run", root / f"{source}.yaml", "--scheduler",
                        client.scheduler.address)  # fmt: skip
        assert result.exit_code == 0, result.output
    whole, parts = root / "run-csv", root / "run-parts"
    _same_arrays(parts / "model.zarr", whole / "model.zarr")
    expected = (whole / "outliers.csv").read_bytes()
    assert (parts / "outliers.csv").read_bytes() == expected
    # killed before its last stage: resumed with the model's leaves left in its store
    RunStore.open(parts / "model.zarr", mode="r+").mark_running()
    (parts / "outliers.csv").unlink()
    result = invoke("-q", "run", root / "parts.yaml", "--scheduler", client.scheduler.address)
    assert result.exit_code == 0 and "resumed" in result.output, result.output
    assert (parts / "outliers.csv").read_bytes() == expected
    lazy = SimilarityForestClassifier.load(parts / "model.zarr", rows_in_store=True)
    assert isinstance(lazy.leaves_, zarr.Array)
    np.testing.assert_array_equal(lazy.leaves_, _arrays(whole / "model.zarr")["leaves"])
    proximity = root / "prox.zarr"  # `simforest proximity` copies the stored leaves by tasks
    result = invoke("-q", "simforest", "proximity", parts / "model.zarr", "--out", proximity,
                    "--method", "oob")  # fmt: skip
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(_arrays(proximity)["proximity_oob"],
                                  _arrays(whole / "model.zarr")["proximity_oob"])  # fmt: skip
