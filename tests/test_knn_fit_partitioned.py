"""``knn fit`` of a TRAIN read by partitions: the one-file fit's model, written by tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from bad_parts import write_bad_parts
from click.testing import CliRunner

from distforest.cli.main import cli


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("knnfit")
    rng = np.random.default_rng(7)
    n = 400
    frame = pd.DataFrame(rng.standard_normal((n, 3)) * [1.0, 30.0, 0.01], columns=["a", "b", "c"])
    frame["kind"] = rng.choice(["w", "u", "v"], n)  # a categorical feature
    frame["k"] = 1000.1  # a constant: left as it is by both scalers
    frame["y"] = np.where(frame["a"] + (frame["kind"] == "u") > 0.3, "yes", "no")
    frame["price"] = frame["a"] * 3 + rng.standard_normal(n)  # a numeric target
    frame["grade"] = rng.integers(0, 4, n)  # an integer target of few values
    frame.to_csv(root / "train.csv", index=False)
    # SMERF's observed distances of the rows (a fifth not observed), in TRAIN's order
    points = frame[["a", "c"]].to_numpy() * [1.0, 100.0]
    D = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))
    hidden = np.triu(rng.random((n, n)) < 0.2, 1)
    D[hidden | hidden.T] = np.nan
    np.save(root / "D.npy", D)
    frame.iloc[280:].to_csv(root / "data.csv", index=False)
    (root / "parts").mkdir()
    (root / "text").mkdir()
    for k, cut in enumerate(np.array_split(np.arange(n), 4)):
        frame.iloc[cut].to_parquet(root / "parts" / f"chunk-{k}.pq.data")  # of any name
        frame.iloc[cut].to_csv(root / "text" / f"day-{k}.csv", index=False)
    return {"root": root, "train": root / "train.csv", "data": root / "data.csv",
            "parts": root / "parts", "glob": root / "text" / "day-*.csv",
            "D.npy": root / "D.npy"}  # fmt: skip


def _arrays(model: Path) -> dict[str, np.ndarray]:
    """Every array of a store, its groups' too (a forest metric's forest)."""
    group = zarr.open_group(str(model), mode="r")
    return {name: np.asarray(arr[...]) for name, arr in group.arrays()} | {
        f"{name}/{key}": values
        for name, sub in group.groups()
        for key, values in _arrays(model / name).items()
    }


def _attrs(model: Path) -> dict:
    attrs = dict(zarr.open_group(str(model), mode="r").attrs)
    keep = ("model", "params", "measure", "classes", "feature_names", "target", "categories")
    return {k: v for k, v in attrs.items() if k in keep}


@pytest.fixture
def driver_writes(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """What this process writes into stores: arrays it holds (``written``: name and
    shape) and arrays copied from another store by tasks (``copied``: names)."""
    from distforest.store.run_store import RunStore

    seen: dict[str, list] = {"written": [], "copied": []}
    for method in ("write_named", "write_array"):
        original = getattr(RunStore, method)

        def spy(self, name, values, *args, _original=original, **kwargs):
            seen["written"].append((name, np.shape(values)))
            return _original(self, name, values, *args, **kwargs)

        monkeypatch.setattr(RunStore, method, spy)
    copy = RunStore.copy_named

    def copy_spy(self, name, source, **kwargs):
        seen["copied"].append(name)
        return copy(self, name, source, **kwargs)

    monkeypatch.setattr(RunStore, "copy_named", copy_spy)
    return seen


CASES = [  # (target, options, the inputs read by partitions)
    ("y", ["--metric", "euclidean"], ("parts", "glob")),
    ("y", ["--metric", "manhattan", "--normalize", "range", "--weights", "distance"], ("parts",)),
    ("price", ["--metric", "rbf", "--k", "3"], ("glob",)),
    (
        "grade",
        ["--metric", "cosine", "--normalize", "range", "--feature-range", "-1", "2"],
        ("parts",),
    ),
    ("y", ["--metric", "rf-proximity", "--trees", "6", "--seed", "3"], ("parts", "glob")),
    (
        "price",
        ["--metric", "rfgap", "--trees", "5", "--seed", "1", "--normalize", "range"],
        ("parts",),
    ),
    # X-Forest (unsupervised: a numeric target too) and SimForest (class labels: text,
    # or integers) grown from float64 rows in a store
    (
        "price",
        ["--metric", "beta", "--trees", "5", "--seed", "2", "--normalize", "range"],
        ("parts",),
    ),
    ("y", ["--metric", "simforest", "--trees", "5", "--seed", "4"], ("parts",)),
    # SMERF: its distances stay the user's file (copied into the model by blocks)
    ("y", ["--metric", "smerf", "--distances", "D.npy", "--trees", "4", "--seed", "6"], ("parts",)),
    (
        "grade",
        ["--metric", "simforest", "--trees", "4", "--seed", "5", "--normalize", "range"],
        ("parts",),
    ),
]


@pytest.mark.parametrize(("target", "options", "sources"), CASES)
def test_parts_fit_the_one_file_model(tables, client, driver_writes, target: str,
                                      options: list[str],
                                      sources: tuple[str, ...]) -> None:  # fmt: skip
    root = tables["root"]
    options = [str(tables[o]) if o == "D.npy" else o for o in options]
    tag = f"{target}-{options[1]}-{len(options)}"
    whole = root / f"whole-{tag}.zarr"
    fit = invoke("-q", "knn", "fit", tables["train"], "--target", target, "--out", whole, *options)
    assert fit.exit_code == 0, fit.output
    expected = root / f"whole-{tag}.csv"
    assert invoke("-q", "knn", "predict", whole, tables["data"], "--out", expected).exit_code == 0
    for source in sources:
        model = root / f"{source}-{tag}.zarr"
        driver_writes["written"].clear()
        driver_writes["copied"].clear()
        result = invoke("-q", "knn", "fit", tables[source], "--target", target, "--out", model,
                        *options, "--scheduler", client.scheduler.address)  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "read by partitions" in result.output
        if (model / "metric_forest").exists():  # the forest's (n, T) arrays copied by tasks
            assert {"leaves", "inbag" if "beta" not in options else "path"} <= set(
                driver_writes["copied"]
            ), driver_writes
            per_row = (
                len(pd.read_csv(tables["train"])),
                int(options[options.index("--trees") + 1]),
            )
            held = [w for w in driver_writes["written"] if w[1][:2] == per_row]
            assert not held and driver_writes["written"], held
        saved, reference = _arrays(model), _arrays(whole)
        assert sorted(saved) == sorted(reference)
        for name, values in reference.items():  # the same saved arrays, bit for bit
            # (a forest grown from a store keeps its class codes in the smallest type)
            if name != "metric_forest/target":
                assert saved[name].dtype == values.dtype, name
            np.testing.assert_array_equal(saved[name], values, err_msg=name)
        assert _attrs(model) == _attrs(whole)
        predicted = root / f"{source}-{tag}.csv"
        assert invoke("-q", "knn", "predict", model, tables["data"], "--out",
                      predicted).exit_code == 0  # fmt: skip
        assert predicted.read_bytes() == expected.read_bytes()


@pytest.mark.parametrize(
    "options", [["--normalize", "zscore"], ["--metric", "mahalanobis", "--normalize", "range"]]
)
def test_merged_moments_match_to_rounding(tables, client, options: list[str]) -> None:
    root = tables["root"]
    whole, parts = root / f"m-whole-{options[1]}.zarr", root / f"m-parts-{options[1]}.zarr"
    assert invoke("-q", "knn", "fit", tables["train"], "--target", "y", *options,
                  "--out", whole).exit_code == 0  # fmt: skip
    result = invoke("-q", "knn", "fit", tables["parts"], "--target", "y", *options,
                    "--out", parts, "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0, result.output
    saved, reference = _arrays(parts), _arrays(whole)
    assert sorted(saved) == sorted(reference)
    for name, values in reference.items():
        # (atol: the constant column 1000.1 centred is 1e-13 or 1e-12, by the sums' rounding)
        np.testing.assert_allclose(saved[name], values, rtol=1e-10, atol=1e-10, err_msg=name)
    expected, got = root / f"m-whole-{options[1]}.csv", root / f"m-parts-{options[1]}.csv"
    for model, out in ((whole, expected), (parts, got)):
        assert invoke("-q", "knn", "predict", model, tables["data"], "--out", out).exit_code == 0
    assert got.read_bytes() == expected.read_bytes()


def test_bad_value_in_a_part_names_file_column_row(tables, client) -> None:
    root = tables["root"]
    bad = root / "bad"
    frame = pd.read_csv(tables["train"])
    # euclidean needs complete rows
    first = write_bad_parts(frame, bad, column="b", row=7, value=np.nan)
    out = root / "bad.zarr"
    result = invoke("-q", "knn", "fit", bad, "--target", "y", "--out", out,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "part-3.parquet" in result.output and "'b'" in result.output
    assert f"row {first}" in result.output
    assert not out.exists()  # no half-written model
    text = root / "bad-text"  # a stray string in a numeric column
    write_bad_parts(frame, text, column="c", row=2, value="oops", kind="csv")
    result = invoke("-q", "knn", "fit", text / "t-*.csv", "--target", "y", "--out", out,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "t-3.csv" in result.output and "'c'" in result.output and "oops" in result.output
    assert not out.exists()


def test_select_by_parts_fits_the_one_file_model(tables, client) -> None:
    """``--select`` (formerly refused by partitions): the same features, rows and
    predictions as from one file."""
    root = tables["root"]
    options = ["--target", "y", "--select", "forward", "--n-features", "2", "--k", "3"]
    whole, parts = root / "select-whole.zarr", root / "select-parts.zarr"
    assert invoke("-q", "knn", "fit", tables["train"], *options, "--out", whole).exit_code == 0
    result = invoke("-q", "knn", "fit", tables["parts"], *options, "--out", parts,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0 and "read by partitions" in result.output, result.output
    saved, reference = _arrays(parts), _arrays(whole)
    assert sorted(saved) == sorted(reference) and reference["support"].sum() == 2
    for name, values in reference.items():
        np.testing.assert_array_equal(saved[name], values, err_msg=name)
    assert _attrs(parts) == _attrs(whole)
    expected, got = root / "select-whole.csv", root / "select-parts.csv"
    for model, out in ((whole, expected), (parts, got)):
        assert invoke("-q", "knn", "predict", model, tables["data"], "--out", out).exit_code == 0
    assert got.read_bytes() == expected.read_bytes()


def test_smerf_with_select_is_refused_as_from_one_file(tables, client) -> None:
    options = ["--target", "y", "--metric", "smerf", "--distances", str(tables["D.npy"]),
               "--select", "forward"]  # fmt: skip
    out = tables["root"] / "refused.zarr"
    whole = invoke("-q", "knn", "fit", tables["train"], *options, "--out", out)
    parts = invoke("-q", "knn", "fit", tables["parts"], *options, "--out", out,
                   "--scheduler", client.scheduler.address)  # fmt: skip
    assert whole.exit_code == parts.exit_code == 2, (whole.output, parts.output)
    assert "remove select" in parts.output and not out.exists()


def test_every_forest_metric_has_its_row_type() -> None:
    from distforest.apps.knn import STORED_FORESTS
    from distforest.forests.constraints import FOREST_METRICS

    assert sorted(STORED_FORESTS) == sorted(FOREST_METRICS)


def test_smerf_distances_of_other_rows_are_refused(tables, client) -> None:
    """D must have one row per training row: exit 3, and no model left behind."""
    root = tables["root"]
    short = root / "D-short.npy"
    np.save(short, np.load(tables["D.npy"])[:399, :399])
    out = root / "smerf-short.zarr"
    result = invoke("-q", "knn", "fit", tables["parts"], "--target", "y", "--metric", "smerf",
                    "--distances", short, "--trees", "2", "--out", out,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "D is 399 x 399" in result.output and "400 rows" in result.output, result.output
    assert not out.exists()


def test_simforest_regression_is_refused_as_from_one_file(tables, client) -> None:
    """A numeric target: SimForest needs class labels, by partitions as from one file."""
    root = tables["root"]
    options = ["--target", "price", "--task", "regression", "--metric", "simforest"]
    whole = invoke("-q", "knn", "fit", tables["train"], *options, "--out", root / "sf-r1.zarr")
    parts = invoke("-q", "knn", "fit", tables["parts"], *options, "--out", root / "sf-r2.zarr",
                   "--scheduler", client.scheduler.address)  # fmt: skip
    assert whole.exit_code == parts.exit_code == 2, (whole.output, parts.output)
    assert "needs class labels" in parts.output and "KNNRegressor" in parts.output
    assert not (root / "sf-r2.zarr").exists()


PIPELINE = """kind: knn
input:
  path: {input}
  target: y
knn:
  k: 4
  weights: distance
  metric: euclidean
  normalize: range
  model: model.zarr
  predict:
    input: {data}
    out: predictions.csv
output:
  dir: {out}
"""


def test_pipeline_model_from_parts_is_the_one_file_model(tables, client) -> None:
    root = tables["root"]
    outputs = {}
    for source in ("train", "parts"):
        out = root / f"pipeline-{source}"
        path = root / f"{source}.yaml"
        path.write_text(PIPELINE.format(input=tables[source], data=tables["data"], out=out))
        result = invoke("-q", "run", path, "--scheduler", client.scheduler.address)
        assert result.exit_code == 0, result.output
        outputs[source] = out
    saved, reference = _arrays(outputs["parts"] / "model.zarr"), _arrays(outputs["train"] /
                                                                         "model.zarr")  # fmt: skip
    assert sorted(saved) == sorted(reference)
    for name, values in reference.items():
        np.testing.assert_array_equal(saved[name], values, err_msg=name)
    expected = (outputs["train"] / "predictions.csv").read_bytes()
    assert (outputs["parts"] / "predictions.csv").read_bytes() == expected
    again = invoke("-q", "run", root / "parts.yaml", "--scheduler", client.scheduler.address)
    assert again.exit_code == 0 and "already complete" in again.output, again.output
    plan = invoke("run", root / "parts.yaml", "--dry-run")
    assert plan.exit_code == 0 and "400 rows" in plan.output, plan.output
    # the neighbours stage (formerly refused by partitions): the one-file stage's store
    stores = {}
    for source in ("train", "parts"):
        text = PIPELINE.format(input=tables[source], data=tables["data"], out=root / f"nb-{source}")
        (root / f"nb-{source}.yaml").write_text(text + "neighbors:\n  k: 3\n  normalize: range\n")
        done = invoke("-q", "run", root / f"nb-{source}.yaml", "--scheduler",
                      client.scheduler.address)  # fmt: skip
        assert done.exit_code == 0, done.output
        stores[source] = _arrays(root / f"nb-{source}" / "neighbors.zarr")
    assert sorted(stores["parts"]) == sorted(stores["train"])
    for name, values in stores["train"].items():
        np.testing.assert_array_equal(stores["parts"][name], values, err_msg=name)


def test_a_model_of_many_rows_predicts_by_partitions(tables, client, monkeypatch) -> None:
    """A model whose rows are larger than a file read by partitions is read by the
    workers, whatever the size of DATA (here the bound is lowered to 0 bytes)."""
    from distforest.jobs import knn_model

    root = tables["root"]
    model = root / "many-rows.zarr"
    assert invoke("-q", "knn", "fit", tables["train"], "--target", "y", "--out",
                  model).exit_code == 0  # fmt: skip
    expected, got = root / "many-rows-whole.csv", root / "many-rows-parts.csv"
    first = invoke("-q", "knn", "predict", model, tables["data"], "--out", expected)
    assert first.exit_code == 0 and "by partitions" not in first.output, first.output
    monkeypatch.setattr(knn_model, "MODEL_BYTES", 0)
    result = invoke("-q", "knn", "predict", model, tables["data"], "--out", got,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0 and "by partitions" in result.output, result.output
    assert got.read_bytes() == expected.read_bytes()


def test_a_hive_partitioned_folder_fits(tables, client) -> None:
    """``day=.../`` folders: the partition key becomes a (categorical) feature column."""
    root = tables["root"]
    hive = root / "hive"
    frame = pd.read_csv(tables["train"])[["a", "b", "y"]]
    for k, cut in enumerate(np.array_split(np.arange(len(frame)), 3)):
        (hive / f"day=d{k}").mkdir(parents=True)
        frame.iloc[cut].to_parquet(hive / f"day=d{k}" / "part.parquet")
    out = root / "hive.zarr"
    plan = invoke("knn", "fit", hive, "--target", "y", "--out", out, "--dry-run")
    assert plan.exit_code == 0 and "3 tasks" in plan.output and not out.exists(), plan.output
    result = invoke("-q", "knn", "fit", hive, "--target", "y", "--out", out,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0, result.output
    from distforest.store.run_store import RunStore

    attrs = RunStore.open(out).attrs
    assert attrs["feature_names"] == ["a", "b", "day"]
    assert attrs["categories"] == {"day": ["d0", "d1", "d2"]}
    X_fit = np.asarray(zarr.open_group(str(out), mode="r")["X_fit"][...])
    np.testing.assert_array_equal(X_fit[:, :2], frame[["a", "b"]].to_numpy())
    days = np.repeat([0.0, 1.0, 2.0], [len(c) for c in np.array_split(np.arange(len(frame)), 3)])
    np.testing.assert_array_equal(X_fit[:, 2], days)


def test_forest_metric_within_the_computing_limit(tables, client) -> None:
    import dask

    out = tables["root"] / "too-big.zarr"
    with dask.config.set({"distforest.max-cpu-hours": 1e-9}):
        result = invoke("-q", "knn", "fit", tables["parts"], "--target", "y", "--metric",
                        "rf-proximity", "--out", out, "--scheduler",
                        client.scheduler.address)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--trees" in result.output and "400 rows" in result.output
    assert not out.exists()
