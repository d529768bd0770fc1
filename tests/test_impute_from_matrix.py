"""``impute: {from: proximity}``: missing cells filled from the matrix the run stored.

Checked against the definition computed with numpy from the stored matrix
itself (read back densely: the tables are small).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from sklearn.datasets import load_wine

from distforest import open_store
from distforest.cli.main import cli

NAMES = [f"f{j}" for j in range(13)]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("matrix_impute")
    X, y = load_wine(return_X_y=True)
    frame = pd.DataFrame(X, columns=NAMES)
    frame["grade"] = np.array(["low", "mid", "high"])[np.digitize(X[:, 9], [3.5, 6.0])]
    frame.insert(0, "Id", [f"w{i}" for i in range(len(y))])
    frame["kind"] = y
    rng = np.random.default_rng(0)
    for column in ("f1", "f4", "grade"):
        frame.loc[rng.random(len(y)) < 0.08, column] = np.nan
    frame.to_csv(tmp / "wine.csv", index=False)
    return tmp, frame


def _run(tmp, method: str, **impute) -> CliRunner:
    spec = {
        "input": {"path": str(tmp / "wine.csv"), "target": "kind", "drop": ["Id"]},
        "forest": {"n_estimators": 15, "random_state": 0, "tile_size": 64},
        "proximity": {"method": method},
        "impute": {"out": "imputed.csv", "from": "proximity", **impute},
        "output": {"dir": str(tmp / method), "store": "run.zarr", "report": False},
    }
    path = tmp / f"{method}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return CliRunner().invoke(cli, ["-q", "run", str(path)])


@pytest.mark.parametrize(("method", "name"), [("original", "proximity"),
                                              ("rfgap", "proximity_rfgap")])  # fmt: skip
def test_cells_are_the_matrix_weighted_means_and_votes(table, method, name):
    tmp, frame = table
    result = _run(tmp, method)
    assert result.exit_code == 0, result.output
    P = open_store(tmp / method / "run.zarr")[name].values.astype(np.float64)
    assert P.shape == (178, 178)
    got = pd.read_csv(tmp / method / "imputed.csv")
    assert list(got.columns) == list(frame.columns)
    assert got["Id"].tolist() == frame["Id"].tolist() and (got["kind"] == frame["kind"]).all()
    assert got.notna().all().all()
    for column in ("f1", "f4"):
        gap = frame[column].isna().to_numpy()
        observed = ~gap
        values = np.where(observed, frame[column].to_numpy(), 0.0)
        expected = (P @ values) / (P @ observed)
        np.testing.assert_allclose(got[column][gap], expected[gap], rtol=1e-6)
        np.testing.assert_array_equal(got[column][observed], frame[column][observed])
    gap = frame["grade"].isna().to_numpy()
    levels = np.array(sorted(frame["grade"].dropna().unique()))
    votes = P @ (frame["grade"].to_numpy()[:, None] == levels[None, :]).astype(float)
    np.testing.assert_array_equal(got["grade"][gap], levels[votes.argmax(axis=1)][gap])
    stages = open_store(tmp / method / "run.zarr").attrs["stages"]
    assert stages["impute"]["cells_imputed"] == int(frame[["f1", "f4", "grade"]].isna().sum().sum())


@pytest.mark.parametrize(
    ("impute", "proximity", "words"),
    [
        ({"iterations": 3}, {}, "impute.iterations sets the imputer's own forests"),
        ({}, {"top_k": 5}, "set proximity.dense: true"),
        ({"from": "matrix"}, {}, "impute.from"),
    ],
)
def test_bad_combinations_are_exit_4(table, impute, proximity, words):
    tmp, _ = table
    spec = {
        "input": {"path": str(tmp / "wine.csv"), "target": "kind"},
        "proximity": proximity,
        "impute": {"out": "i.csv", "from": "proximity", **impute},
        "output": {"dir": str(tmp / "bad")},
    }
    path = tmp / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 4 and words in result.output, result.output
