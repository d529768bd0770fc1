"""``--id`` on every table command and ``input.id`` in every stage (issue 44, point 3).

The oracle of each: the ID column named as the rows' IDs gives the results of the
same run with the column dropped (it is not a feature), and the output keeps it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A table whose ID column would split the classes if it were a feature."""
    rng = np.random.default_rng(0)
    n = 120
    frame = pd.DataFrame(rng.normal(size=(n, 4)), columns=list("abcd"))
    frame["label"] = np.where(frame["a"] + rng.normal(0, 0.5, n) > 0, "x", "y")
    frame.insert(0, "key", np.argsort(frame["a"].to_numpy()) * 7 + 1000)  # unique, informative
    frame.loc[rng.choice(n, 15, replace=False), "b"] = np.nan
    path = tmp_path_factory.mktemp("ids") / "t.csv"
    frame.to_csv(path, index=False)
    return path


def invoke(*args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(cli, ["-q", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [str(w.message) for w in caught]


def test_impute_takes_id(table, tmp_path):
    with_id, dropped = tmp_path / "id.csv", tmp_path / "drop.csv"
    said = invoke("impute", table, "--target", "label", "--id", "key", "--trees", "10",
                  "--out", with_id)  # fmt: skip
    assert not [m for m in said if "looks like a row ID" in m]
    invoke("impute", table, "--target", "label", "--drop", "key", "--trees", "10",
           "--out", dropped)  # fmt: skip
    a, b = pd.read_csv(with_id), pd.read_csv(dropped)
    pd.testing.assert_frame_equal(a, b)
    assert a["key"].tolist() == pd.read_csv(table)["key"].tolist()


STAGES = {
    "impute": "impute: {out: imputed.csv, iterations: 2, n_estimators: 10}\n",
    "outliers": "outliers: {out: outliers.csv}\n",
    "mislabels": "mislabels: {out: mislabels.csv}\n",
    "mds": "mds: {out: mds.csv, components: 2}\n",
}


@pytest.mark.parametrize("stage", STAGES)
def test_every_pipeline_stage_honours_input_id(stage, table, tmp_path):
    outputs = {}
    for how in ("id: key", "drop: [key]"):
        folder = tmp_path / how.split(":")[0]
        yaml = tmp_path / f"{how.split(':')[0]}.yaml"
        yaml.write_text(
            f"input: {{path: {table}, target: label, {how}}}\n"
            "forest: {n_estimators: 12, random_state: 0, tile_size: 64}\n"
            + STAGES[stage]
            + f"output: {{dir: {folder}, store: run.zarr}}\n"
        )
        said = invoke("run", yaml)
        assert not [m for m in said if "looks like a row ID" in m], said
        outputs[how] = pd.read_csv(folder / f"{'imputed' if stage == 'impute' else stage}.csv")
    with_id, dropped = outputs["id: key"], outputs["drop: [key]"]
    keys = pd.read_csv(table)["key"].tolist()
    assert "key" in with_id.columns and sorted(with_id["key"]) == sorted(keys)
    # rows in input order: by the ID (with input.id), by the ID or the row number (dropped)
    with_id = with_id.iloc[np.argsort(with_id["key"].map(keys.index))].reset_index(drop=True)
    position = dropped["key"].map(keys.index) if "key" in dropped else dropped["row"]
    dropped = dropped.iloc[np.argsort(position)].reset_index(drop=True)
    same = [c for c in dropped.columns if c in with_id.columns and c not in ("key", "row")]
    assert same
    pd.testing.assert_frame_equal(with_id[same], dropped[same])
