"""`distforest simforest fit | predict | proximity`, end to end, with good and bad inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner
from sklearn.metrics.pairwise import rbf_kernel

from distforest import SimilarityForestClassifier, execution
from distforest.cli.main import cli
from distforest.store import open_store

DATA = Path(__file__).resolve().parents[1] / "distforest" / "data" / "ionosphere.csv"


def invoke(*args: object):
    return CliRunner().invoke(cli, ["-q", *[str(a) for a in args]], catch_exceptions=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("simforest")
    frame = pd.read_csv(DATA)
    target = "Class" if "Class" in frame.columns else frame.columns[-1]
    X = frame.drop(columns=[target]).to_numpy(dtype=float)
    y = frame[target].to_numpy()
    tr, te = np.arange(0, len(y), 2)[:150], np.arange(1, len(y), 2)[:60]
    mean, std = X[tr].mean(axis=0), X[tr].std(axis=0)
    X = (X - mean) / np.where(std > 0, std, 1.0)  # as the CLI's --normalize zscore does
    S, Q = rbf_kernel(X[tr], gamma=0.05), rbf_kernel(X[te], X[tr], gamma=0.05)
    np.save(root / "S.npy", S)
    np.save(root / "Q.npy", Q)
    pd.DataFrame({"label": y[tr]}).to_csv(root / "labels.csv", index=False)
    frame.iloc[tr].to_csv(root / "train.csv", index=False)
    frame.iloc[te].drop(columns=[target]).to_csv(root / "new.csv", index=False)
    return {"root": root, "S": S, "Q": Q, "y": y[tr], "yt": y[te], "target": target}


def test_fit_predict_and_proximity_from_a_matrix(files, tmp_path):
    root = files["root"]
    model = tmp_path / "model.zarr"
    result = invoke("simforest", "fit", "--similarity", root / "S.npy", "--labels",
                    root / "labels.csv", "--trees", 20, "--seed", 4, "--out", model)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert str(model) in result.output
    out = tmp_path / "pred.csv"
    result = invoke("simforest", "predict", model, "--similarity", root / "Q.npy", "--out", out)
    assert result.exit_code == 0, result.output
    pred = pd.read_csv(out)
    classes = sorted(set(files["y"]))
    assert list(pred.columns) == ["prediction", *[f"proba_{c}" for c in classes]]
    assert len(pred) == files["Q"].shape[0]
    # the same as the Python estimator with the same seed
    with execution("synchronous"):
        forest = SimilarityForestClassifier(n_estimators=20, random_state=4)
        forest.fit(files["S"], files["y"])
    proba = forest.predict_proba(files["Q"])
    np.testing.assert_allclose(pred[[f"proba_{c}" for c in classes]].to_numpy(), proba)
    assert (pred["prediction"].to_numpy() == forest.predict(files["Q"])).all()
    assert (pred["prediction"].to_numpy() == files["yt"]).mean() > 0.75
    prox = tmp_path / "prox.zarr"
    result = invoke("simforest", "proximity", model, "--out", prox, "--tile-size", 64)
    assert result.exit_code == 0, result.output
    stored = open_store(prox)["proximity"].values
    np.testing.assert_array_equal(stored, forest.proximity().values)


def test_fit_and_predict_from_a_table(files, tmp_path):
    root = files["root"]
    model = tmp_path / "model.zarr"
    result = invoke("simforest", "fit", root / "train.csv", "--target", files["target"],
                    "--metric", "rbf:0.05", "--trees", 15, "--out", model)  # fmt: skip
    assert result.exit_code == 0, result.output
    out = tmp_path / "pred.csv"
    result = invoke("simforest", "predict", model, root / "new.csv", "--out", out)
    assert result.exit_code == 0, result.output
    pred = pd.read_csv(out)
    assert (pred["prediction"].to_numpy() == files["yt"]).mean() > 0.75
    # z-scoring is stored with the model: the table path equals the matrix path on z-scored rows
    with execution("synchronous"):
        forest = SimilarityForestClassifier(n_estimators=15, random_state=0)
        forest.fit(files["S"], files["y"])
    np.testing.assert_allclose(pred.iloc[:, 1:].to_numpy(), forest.predict_proba(files["Q"]),
                               atol=1e-12)  # fmt: skip


def _bad(tmp_path, name, values):
    path = tmp_path / name
    np.save(path, values)
    return path


def test_bad_inputs_exit_non_zero_and_write_nothing(files, tmp_path):
    root, S, y = files["root"], files["S"], files["y"]
    out = tmp_path / "model.zarr"
    all_nan = S.copy()
    all_nan[5] = np.nan
    cases = [
        (["--similarity", _bad(tmp_path, "rect.npy", S[:, :-3]), "--labels", root / "labels.csv"],
         "square"),
        (["--similarity", _bad(tmp_path, "short.npy", S[:-1, :-1]), "--labels",
          root / "labels.csv"], "labels but the matrix has"),
        (["--similarity", _bad(tmp_path, "nan.npy", all_nan), "--labels", root / "labels.csv"],
         "row 5 has no observed entry"),
        (["--similarity", root / "S.npy", "--labels", tmp_path / "one.csv"], "one class"),
        (["--similarity", tmp_path / "absent.npy", "--labels", root / "labels.csv"],
         "does not exist"),
        (["--labels", root / "labels.csv"], "either --similarity"),
        (["--similarity", root / "S.npy", "--labels", tmp_path / "two.csv"], "exactly one column"),
    ]  # fmt: skip
    pd.DataFrame({"label": ["a"] * len(y)}).to_csv(tmp_path / "one.csv", index=False)
    pd.DataFrame({"a": y, "b": y}).to_csv(tmp_path / "two.csv", index=False)
    for args, message in cases:
        result = invoke("simforest", "fit", *args, "--trees", 2, "--out", out)
        assert result.exit_code != 0, (args, result.output)
        assert message in result.output, (message, result.output)
        assert "Traceback" not in result.output
        assert not out.exists() and not list(tmp_path.glob(".model.zarr*"))


def test_predict_refuses_a_matrix_of_the_wrong_width(files, tmp_path):
    root = files["root"]
    model = tmp_path / "model.zarr"
    invoke("simforest", "fit", "--similarity", root / "S.npy", "--labels", root / "labels.csv",
           "--trees", 3, "--out", model)  # fmt: skip
    out = tmp_path / "pred.csv"
    wrong = _bad(tmp_path, "Q.npy", files["Q"][:, :-1])
    result = invoke("simforest", "predict", model, "--similarity", wrong, "--out", out)
    assert result.exit_code == 3, result.output
    assert "one column per training object" in result.output
    assert not out.exists()
    result = invoke("simforest", "predict", model, root / "new.csv", "--out", out)
    assert result.exit_code == 2 and "fitted on a similarity matrix" in result.output
    assert not out.exists()


def test_a_zarr_group_is_read_as_the_matrix(files, tmp_path):
    group = zarr.open_group(str(tmp_path / "S.zarr"), mode="w")
    group.create_array("similarity", data=files["S"], chunks=(40, 40))
    model = tmp_path / "model.zarr"
    result = invoke("simforest", "fit", "--similarity", tmp_path / "S.zarr", "--labels",
                    files["root"] / "labels.csv", "--trees", 5, "--out", model)  # fmt: skip
    assert result.exit_code == 0, result.output
    with execution("synchronous"):
        expected = SimilarityForestClassifier(n_estimators=5, random_state=0)
        expected.fit(files["S"], files["y"])
    np.testing.assert_array_equal(SimilarityForestClassifier.load(model).leaves_,
                                  expected.leaves_)  # fmt: skip


PIPELINE = Path(__file__).resolve().parents[1] / "pipelines" / "simforest.yaml"


def test_pipeline_runs_resumes_and_is_not_repeated(tmp_path):
    out_dir = tmp_path / "out"
    args = ("run", PIPELINE, "--set", f"output.dir={out_dir}", "--set", "simforest.n_estimators=20")
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    model = out_dir / "model.zarr"
    forest = SimilarityForestClassifier.load(model)
    stored = open_store(model)["proximity"].values
    np.testing.assert_array_equal(stored, forest.proximity().values)
    mds = pd.read_csv(out_dir / "mds.csv")
    assert list(mds.columns) == ["row", "label", "dim1", "dim2"] and len(mds) == 351
    assert (out_dir / "outliers.png").exists() and (out_dir / "mds.png").exists()
    result = invoke(*args)
    assert result.exit_code == 0 and "already complete" in result.output
    # a run killed before its last stage: the rerun keeps the model and redoes only what is missing
    from distforest.store.run_store import RunStore

    RunStore.open(model, mode="r+").mark_running()
    (out_dir / "mds.csv").unlink()
    result = invoke(*args)
    assert result.exit_code == 0 and "resumed" in result.output, result.output
    assert SimilarityForestClassifier.load(model).fit_id_ == forest.fit_id_
    pd.testing.assert_frame_equal(pd.read_csv(out_dir / "mds.csv"), mds)


def test_pipeline_mistakes_are_reported(tmp_path):
    bad = tmp_path / "bad.yaml"
    text = PIPELINE.read_text()
    bad.write_text(text.replace("n_pairs: 1", "n_pairs: 0"))
    result = invoke("validate", bad)
    assert result.exit_code == 4 and "n_pairs" in result.output
    bad.write_text(text.replace("metric: rbf ", "metric: manhattan "))
    result = invoke("validate", bad)
    assert result.exit_code == 4 and "metric" in result.output, result.output
    bad.write_text(text.replace("  target: Class", "  target: Class\n  labels: labels.csv"))
    result = invoke("validate", bad)
    assert result.exit_code == 4 and "input.labels" in result.output, result.output
