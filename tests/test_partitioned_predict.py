"""``knn predict`` of a DATA read by partitions: the in-memory command's CSV, by tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("predict")
    rng = np.random.default_rng(4)
    n = 900
    frame = pd.DataFrame(rng.standard_normal((n, 4)), columns=["a", "b", "c", "d"])
    frame["kind"] = rng.choice(["u", "v", "w"], n)
    frame["y"] = np.where(frame["a"] + (frame["kind"] == "u") > 0.3, "yes", "no")
    frame.iloc[:300].to_csv(root / "train.csv", index=False)
    data = frame.iloc[300:].drop(columns="y").reset_index(drop=True)
    data.to_csv(root / "data.csv", index=False)
    folder = root / "parts"
    folder.mkdir()
    (root / "text").mkdir()
    for k, cut in enumerate(np.array_split(np.arange(len(data)), 3)):
        data.iloc[cut][["d", "c", "kind", "b", "a"]].to_parquet(folder / f"p{k}.parquet")
        data.iloc[cut].to_csv(root / "text" / f"day-{k}.csv", index=False)
    return {"root": root, "train": root / "train.csv", "data": root / "data.csv",
            "parts": folder, "glob": root / "text" / "day-*.csv"}  # fmt: skip


@pytest.mark.parametrize("metric", ["euclidean", "rf-proximity"])
def test_partitions_predict_as_the_whole_file(tables, client, metric: str) -> None:
    root = tables["root"]
    model = root / f"{metric}.zarr"
    fit = invoke("-q", "knn", "fit", tables["train"], "--target", "y", "--metric", metric,
                 "--trees", "5", "--out", model)  # fmt: skip
    assert fit.exit_code == 0, fit.output
    whole, parts = root / f"whole-{metric}.csv", root / f"parts-{metric}.csv"
    assert invoke("-q", "knn", "predict", model, tables["data"], "--out", whole).exit_code == 0
    result = invoke("-q", "knn", "predict", model, tables["parts"], "--out", parts,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "by partitions" in result.output
    assert parts.read_text() == whole.read_text()
    assert len(pd.read_csv(parts)) == 600
    result = invoke("-q", "knn", "predict", model, tables["glob"], "--out", parts, "--overwrite",
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert parts.read_text() == whole.read_text()  # CSV parts: text parsed as in memory
    assert not list(root.glob(f".parts-{metric}.csv*"))  # pieces and partial file gone


def test_bad_partition_leaves_no_output(tables, client) -> None:
    root = tables["root"]
    model = root / "bad-model.zarr"
    assert invoke("-q", "knn", "fit", tables["train"], "--target", "y", "--out",
                  model).exit_code == 0  # fmt: skip
    bad = root / "bad"
    bad.mkdir()
    data = pd.read_csv(tables["data"])
    data.iloc[:100].to_parquet(bad / "p0.parquet")
    broken = data.iloc[100:200].copy()
    broken["kind"] = "zzz"  # a label the model never saw
    broken.to_parquet(bad / "p1.parquet")
    out = root / "bad.csv"
    result = invoke("-q", "knn", "predict", model, bad, "--out", out,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "zzz" in result.output and "kind" in result.output
    assert not out.exists() and not list(root.glob(".bad.csv*"))
    text = root / "bad-text"
    text.mkdir()
    broken = data.iloc[100:200].copy()
    broken["b"] = broken["b"].astype(object)
    broken.loc[broken.index[7], "b"] = "n/a?"
    data.iloc[:100].to_csv(text / "day-0.csv", index=False)
    broken.to_csv(text / "day-1.csv", index=False)
    result = invoke("-q", "knn", "predict", model, text / "day-*.csv", "--out", out,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 3, result.output
    # the part file, the column, the row of the whole table (counted from 0) and the value
    assert "day-1.csv" in result.output and "'b'" in result.output, result.output
    assert "row 107" in result.output and "n/a?" in result.output, result.output
    assert not out.exists()
    missing = invoke("-q", "knn", "predict", model, bad, "--out", out, "--drop", "a",
                     "--scheduler", client.scheduler.address)  # fmt: skip
    assert missing.exit_code == 3 and "'a'" in missing.output, missing.output


@pytest.mark.parametrize("ids", [False, True])
def test_score_by_partitions_as_the_whole_file(tmp_path, client, ids: bool) -> None:
    """``distforest score`` of a Parquet folder and of a CSV glob: the whole file's CSV."""
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    names = [f"f{j}" for j in range(X.shape[1])]
    train = pd.DataFrame(X[::2], columns=names).assign(kind=y[::2])
    new = pd.DataFrame(X[1::2], columns=names).assign(visit=[f"v{i}" for i in range(89)])
    new["extra"] = "ignored"
    train.to_csv(tmp_path / "train.csv", index=False)
    new.to_csv(tmp_path / "new.csv", index=False)
    (tmp_path / "parts").mkdir()
    (tmp_path / "text").mkdir()
    for k, cut in enumerate(np.array_split(np.arange(89), 3)):
        new.iloc[cut].to_parquet(tmp_path / "parts" / f"p{k}.parquet", index=False)
        new.iloc[cut].to_csv(tmp_path / "text" / f"day-{k}.csv", index=False)
    model = tmp_path / "model.zarr"
    fitted = invoke("-q", "proximity", tmp_path / "train.csv", "--target", "kind", "--trees", "9",
                    "--out", model)  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    id_args = ["--id", "visit"] if ids else []
    whole = invoke("-q", "score", model, tmp_path / "new.csv", *id_args, "--out",
                   tmp_path / "whole.csv")  # fmt: skip
    assert whole.exit_code == 0, whole.output
    expected = (tmp_path / "whole.csv").read_text()
    for source in (tmp_path / "parts", tmp_path / "text" / "day-*.csv"):
        out = tmp_path / "parts.csv"
        result = invoke("-q", "score", model, source, *id_args, "--out", out, "--overwrite",
                        "--scheduler", client.scheduler.address)  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "by partitions" in result.output, result.output
        assert out.read_text() == expected, source
