"""Scoring pipelines: a saved model applied to new rows (``model:`` + ``input:``).

The imputed cells are checked against their definition computed from the
dense cross proximity (itself checked against brute force in test_new_rows);
the scores against the functions ``distforest score`` runs; and the model
store against a copy taken before the run (nothing refitted, nothing written).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from sklearn.datasets import load_wine

from distforest import ProximityForest, execution
from distforest.apps.outliers import outlier_scores_new_rows
from distforest.cli.main import cli
from distforest.store.run_store import RunStore

NAMES = [f"f{j}" for j in range(13)]


def _tree_digest(path: Path) -> dict[str, str]:
    """Every file of a store, hashed (a changed array or attribute changes it)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A finished proximity run on half of wine (a categorical column, missing cells)."""
    tmp = tmp_path_factory.mktemp("score")
    X, y = load_wine(return_X_y=True)
    frame = pd.DataFrame(X, columns=NAMES)
    frame["grade"] = np.array(["low", "mid", "high"])[np.digitize(X[:, 9], [3.5, 6.0])]
    frame["kind"] = y
    frame["visit"] = [f"v{i}" for i in range(len(y))]
    train, new = frame.iloc[::2].copy(), frame.iloc[1::2].copy()
    train.loc[train.index[:5], "f2"] = np.nan  # missing training values are not voters
    rng = np.random.default_rng(3)
    for column in ("f0", "f6", "grade"):
        new.loc[new.index[rng.choice(len(new), 9, replace=False)], column] = np.nan
    train.drop(columns="visit").to_csv(tmp / "train.csv", index=False)
    new[["visit", "grade", *reversed(NAMES), "kind"]].to_csv(tmp / "new.csv", index=False)
    store = tmp / "model.zarr"
    fitted = CliRunner().invoke(cli, ["-q", "proximity", str(tmp / "train.csv"), "--target",
                                      "kind", "--trees", "15", "--out", str(store)])  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    return tmp, store, new


def _pipeline(tmp: Path, store: Path, out: str, **extra) -> Path:
    spec = {
        "name": "nightly",
        "model": str(store),
        "input": {"path": str(tmp / "new.csv"), "id": "visit"},
        "score": {"out": "scores.csv"},
        "impute": {"out": "imputed.csv"},
        "output": {"dir": str(tmp / out)},
        **extra,
    }
    path = tmp / f"{out}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_scores_and_imputations_of_new_rows_only(model, monkeypatch):
    tmp, store, new = model
    before = _tree_digest(store)

    def refit(*args, **kwargs):
        raise AssertionError("the model was refitted or its proximities recomputed")

    monkeypatch.setattr(ProximityForest, "fit", refit)
    monkeypatch.setattr(ProximityForest, "write_proximity", refit)
    # no n_new x n_train tile either: the cross tiles' function fails if called
    monkeypatch.setattr("distforest.forests.new_rows.cross_tile", refit)
    result = CliRunner().invoke(cli, ["-q", "run", str(_pipeline(tmp, store, "night"))])
    assert result.exit_code == 0, result.output
    monkeypatch.undo()
    assert _tree_digest(store) == before  # the model store is only read
    run = RunStore.open(tmp / "night" / "scores.zarr")
    assert run.is_complete and set(run.attrs["stages"]) == {"score", "impute"}

    forest = ProximityForest.load(store)
    rows = new[["grade", *NAMES]].copy()
    rows = rows[list(forest.feature_names_in_)]
    scores = pd.read_csv(tmp / "night" / "scores.csv")
    assert list(scores.columns) == ["visit", "predicted", "proximity_predicted", "outlier",
                                    "outlier_flag"]  # fmt: skip
    assert scores["visit"].tolist() == new["visit"].tolist()
    with execution("synchronous"):
        np.testing.assert_array_equal(scores["predicted"], forest.predict(rows))
        np.testing.assert_array_equal(scores["proximity_predicted"],
                                      forest.predict_proximity(rows))  # fmt: skip
        np.testing.assert_allclose(scores["outlier"], outlier_scores_new_rows(forest, rows))
        P = forest.proximity("rfgap", X=rows).values.astype(np.float64)
    assert (scores["predicted"] == new["kind"].to_numpy()).mean() > 0.85

    imputed = pd.read_csv(tmp / "night" / "imputed.csv")
    assert list(imputed.columns) == ["visit", *forest.feature_names_in_]
    assert imputed["visit"].tolist() == new["visit"].tolist()
    train = pd.read_csv(tmp / "train.csv")
    for column in ("f0", "f6", "f2"):  # observed cells unchanged, missing ones by definition
        gap = new[column].isna().to_numpy()
        np.testing.assert_allclose(imputed[column][~gap], new[column][~gap])
        observed = train[column].notna().to_numpy()
        values = np.where(observed, train[column].to_numpy(), 0.0)
        expected = (P @ values) / (P @ observed)
        np.testing.assert_allclose(imputed[column][gap], expected[gap], rtol=1e-5)
    gap = new["grade"].isna().to_numpy()
    assert gap.sum() == 9 and imputed["grade"].notna().all()
    levels = np.array(sorted(train["grade"].unique()))
    votes = P @ (train["grade"].to_numpy()[:, None] == levels[None, :]).astype(float)
    np.testing.assert_array_equal(imputed["grade"][gap], levels[votes.argmax(axis=1)][gap])
    np.testing.assert_array_equal(imputed["grade"][~gap], new["grade"][~gap])

    again = CliRunner().invoke(cli, ["run", str(_pipeline(tmp, store, "night"))])
    assert again.exit_code == 0 and "already complete" in again.output


def test_dry_run_and_validate_say_what_runs(model):
    tmp, store, _ = model
    path = _pipeline(tmp, store, "dry")
    result = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "89 new rows against a 89-row model" in result.output
    assert (
        "no fit, no tiles" in result.output and "tasks:        0 (0 of them tiles)" in result.output
    )
    assert not (tmp / "dry").exists()
    checked = CliRunner().invoke(cli, ["validate", str(path)])
    assert checked.exit_code == 0 and "scores of new rows" in checked.output


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"forest": {"n_estimators": 10}}, "remove 'forest'"),
        ({"impute": {"out": "i.csv", "iterations": 3}}, "impute.iterations would fit"),
        ({"impute": {"out": "i.csv", "proximity": "column"}}, "fits new forests"),
        ({"score": {"out": "s.csv", "method": "nearest"}}, "score.method"),
    ],
)
def test_bad_scoring_pipelines_are_exit_4(model, extra, words):
    tmp, store, _ = model
    result = CliRunner().invoke(cli, ["validate", str(_pipeline(tmp, store, "bad", **extra))])
    assert result.exit_code == 4 and words in result.output, result.output


def test_a_changed_training_table_is_refused_before_any_output(model):
    tmp, store, _ = model
    other = pd.read_csv(tmp / "train.csv")
    other.loc[0, "f1"] += 1.0
    other.to_csv(tmp / "other.csv", index=False)
    path = _pipeline(tmp, store, "changed")
    data = yaml.safe_load(path.read_text())
    data["model"] = {"path": str(store), "training": str(tmp / "other.csv")}
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(cli, ["run", str(path)])
    assert result.exit_code == 6 and "not the table the model was fitted on" in result.output
    assert not (tmp / "changed").exists()


def test_an_unfinished_model_is_refused(model, tmp_path):
    tmp, _, _ = model
    X, y = load_wine(return_X_y=True)
    with execution("synchronous"):
        ProximityForest(5, random_state=0).fit(X, y).save(tmp_path / "half.zarr")
    result = CliRunner().invoke(cli, ["run", str(_pipeline(tmp, tmp_path / "half.zarr", "h"))])
    assert result.exit_code == 6 and "not complete" in result.output, result.output


def test_a_large_model_scores_against_a_fixed_sample_of_its_rows(monkeypatch):
    """Above REFERENCE_ROWS training rows, the median and MAD come from a stratified sample."""
    from oracles import dense_original_proximity
    from sklearn.datasets import make_classification

    from distforest.apps import outliers

    X, y = make_classification(300, n_features=6, n_informative=4, n_classes=3,
                               weights=[0.6, 0.3, 0.1], flip_y=0.1, random_state=0)  # fmt: skip
    with execution("synchronous"):
        pf = ProximityForest(15, task="classification", random_state=5).fit(X, y)
    monkeypatch.setattr(outliers, "REFERENCE_ROWS", 90)
    monkeypatch.setattr(outliers, "REFERENCE_PER_CLASS", 20)
    ref = outliers.reference_rows(pf.y_, 90)
    assert np.array_equal(ref, outliers.reference_rows(pf.y_, 90))  # fixed
    assert 90 <= ref.size < 150 and set(pf.y_[ref]) == {0, 1, 2}
    assert np.bincount(pf.y_[ref]).min() == 20  # the smallest class gets its minimum
    X_new = X[:30] + 0.1
    with execution("synchronous"):
        got = outliers.outlier_scores_new_rows(pf, X_new)
        predicted = pf.predict(X_new)
        leaves_new = pf.apply(X_new)
    n = len(y)
    P = dense_original_proximity(pf.leaves_, pf.leaves_)
    raw_train = n / ((P**2) * (y[:, None] == y[None, :])).sum(axis=1)
    P_new = dense_original_proximity(leaves_new, pf.leaves_)
    raw_new = n / ((P_new**2) * (predicted[:, None] == y[None, :])).sum(axis=1)
    expected = np.empty(30)
    for c in range(3):
        values = raw_train[ref][y[ref] == c]  # the sampled rows only
        median = np.median(values)
        mad = outliers.MAD_SCALE * np.median(np.abs(values - median))
        expected[predicted == c] = (raw_new[predicted == c] - median) / mad
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    everyone = np.empty(30)  # (the sample matters: all rows would give other scores)
    for c in range(3):
        values = raw_train[y == c]
        median = np.median(values)
        mad = outliers.MAD_SCALE * np.median(np.abs(values - median))
        everyone[predicted == c] = (raw_new[predicted == c] - median) / mad
    assert not np.allclose(got, everyone, rtol=1e-3)


def test_nightly_pipeline_over_a_folder_of_parts(model, monkeypatch):
    """The same pipeline over tonight's export as a folder of Parquet parts: scored and
    imputed by partitions, the same CSV files as from the one file."""
    from distforest.jobs import score

    tmp, store, _ = model
    stages: list[str] = []
    by_parts = score.rows_to_csv

    def counted(model_path, rows, out, what, options):
        stages.append(what)
        return by_parts(model_path, rows, out, what, options)

    monkeypatch.setattr(score, "rows_to_csv", counted)
    whole = CliRunner().invoke(cli, ["-q", "run", str(_pipeline(tmp, store, "one-file"))])
    assert whole.exit_code == 0, whole.output
    folder = tmp / "export"
    folder.mkdir()
    table = pd.read_csv(tmp / "new.csv")
    for k, cut in enumerate(np.array_split(np.arange(len(table)), 4)):
        table.iloc[cut].to_parquet(folder / f"part-{k}.parquet", index=False)
    spec = yaml.safe_load(_pipeline(tmp, store, "by-parts").read_text())
    spec["input"]["path"] = str(folder)
    (tmp / "by-parts.yaml").write_text(yaml.safe_dump(spec))
    parts = CliRunner().invoke(cli, ["-q", "run", str(tmp / "by-parts.yaml")])
    assert parts.exit_code == 0, parts.output
    assert stages == ["score", "impute"]  # only the folder went by partitions
    for name in ("scores.csv", "imputed.csv"):
        assert (tmp / "by-parts" / name).read_text() == (tmp / "one-file" / name).read_text()
    run = RunStore.open(tmp / "by-parts" / "scores.zarr")
    assert run.is_complete and set(run.attrs["stages"]) == {"score", "impute"}
