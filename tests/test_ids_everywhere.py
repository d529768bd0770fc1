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


# -- the commands whose outputs follow the input's rows: --id leaves the column out --------


@pytest.fixture(scope="module")
def complete(tmp_path_factory):
    """A table without missing values (X-Forest, SMERF and SimForest refuse them), an ID
    column that looks like one, and the distances SMERF learns from."""
    rng = np.random.default_rng(1)
    n = 48
    frame = pd.DataFrame(rng.normal(size=(n, 3)), columns=list("abc"))
    frame["label"] = np.where(frame["a"] > 0, "x", "y")
    frame.insert(0, "key", np.argsort(frame["a"].to_numpy()) * 3 + 500)
    folder = tmp_path_factory.mktemp("complete")
    frame.to_csv(folder / "t.csv", index=False)
    X = frame[list("abc")].to_numpy()
    np.save(folder / "d.npy", np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)))
    return folder


#: command -> (arguments before the ID option, the output's name, a model it needs first)
COMMANDS = {
    "knn fit": (["knn", "fit", "t.csv", "--target", "label", "--k", "3"], "m.zarr", None),
    "knn predict": (["knn", "predict", "{model}", "t.csv"], "p.csv", "knn fit"),
    "neighbors": (["neighbors", "t.csv", "--k", "3"], "n.zarr", None),
    "similarity": (["similarity", "t.csv"], "s.zarr", None),
    "simforest fit": (["simforest", "fit", "t.csv", "--target", "label", "--trees", "4"],
                      "m.zarr", None),
    "simforest predict": (["simforest", "predict", "{model}", "t.csv"], "p.csv",
                          "simforest fit"),
    "smerf fit": (["smerf", "fit", "t.csv", "--distances", "d.npy", "--trees", "4",
                   "--tile-size", "16"], "m.zarr", None),
    "smerf predict": (["smerf", "predict", "{model}", "t.csv", "--tile-size", "16"], "p.zarr",
                      "smerf fit"),
    "xforest": (["xforest", "t.csv", "--trees", "8", "--tile-size", "16"], "x.zarr", None),
}  # fmt: skip


def _arrays(path):
    """Every array of a Zarr store (or the CSV's frame), to compare two outputs."""
    import zarr

    if str(path).endswith(".csv"):
        return {"csv": pd.read_csv(path)}
    group = zarr.open_group(str(path), mode="r")
    return {name: np.asarray(array[...]) for name, array in group.arrays()}


def _run_command(name, folder, option, out):
    args, _, needs = COMMANDS[name]
    model = None
    if needs is not None:
        model = out.with_name(f"model-{out.stem}.zarr")
        _run_command(needs, folder, option, model)
    argv = [a.format(model=model) if "{" in a else a for a in args]
    argv = [str(folder / a) if a in ("t.csv", "d.npy") else a for a in argv]
    return invoke(*argv, *option, "--out", out)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_table_command_takes_id(command, complete, tmp_path):
    """``--id key`` is accepted, says nothing about an ID used as a feature, and gives the
    outputs of ``--drop key`` (the rows keep their input order)."""
    suffix = COMMANDS[command][1].split(".")[-1]
    said = _run_command(command, complete, ("--id", "key"), tmp_path / f"id.{suffix}")
    assert not [m for m in said if "looks like a row ID" in m], said
    _run_command(command, complete, ("--drop", "key"), tmp_path / f"drop.{suffix}")
    with_id, dropped = _arrays(tmp_path / f"id.{suffix}"), _arrays(tmp_path / f"drop.{suffix}")
    assert with_id.keys() == dropped.keys() and with_id
    for name, values in with_id.items():
        if isinstance(values, pd.DataFrame):
            pd.testing.assert_frame_equal(values, dropped[name])
        else:
            np.testing.assert_array_equal(values, dropped[name], err_msg=name)


#: A pipeline of every other kind, its input the complete table (INPUT: how the ID is given).
KIND_PIPELINES = {
    "knn": "kind: knn\ninput: {path: T, target: label, INPUT}\n"
           "neighbors: {k: 3, out: neighbors.zarr}\n"
           "knn: {k: 3, model: knn_model.zarr, predict: {input: T, out: predictions.csv}}\n",
    "similarity": "kind: similarity\ninput: {path: T, INPUT}\n"
                  "similarity: {metric: euclidean, tile_size: 16}\n",
    "smerf": "kind: smerf\ninput: {path: T, target: label, INPUT}\n"
             "smerf: {n_estimators: 4, random_state: 0, tile_size: 16}\n"
             "distance: {oob: true, out: distance.zarr}\n",
    "simforest": "kind: simforest\ninput: {path: T, target: label, INPUT}\n"
                 "simforest: {n_estimators: 4, random_state: 0, tile_size: 16}\n"
                 "outliers: {out: outliers.csv}\nmds: {out: mds.csv}\n",
    "xforest": "kind: xforest\ninput: {path: T, target: label, INPUT}\n"
               "xforest: {n_estimators: 8, random_state: 0, tile_size: 16}\n"
               "clustering: {method: kernel-kmeans, k: 2, out: clusters.csv}\n",
}  # fmt: skip


@pytest.mark.parametrize("kind", KIND_PIPELINES)
def test_every_pipeline_kind_honours_input_id(kind, complete, tmp_path):
    """input.id in a pipeline of each other kind: accepted, no ID warning, and every output
    (CSV or store) as with input.drop."""
    outputs = {}
    ways = {"id": "id: key", "drop": "drop: [key]"}
    if kind == "similarity":  # no target: the class column is dropped too
        ways = {"id": "id: key, drop: [label]", "drop": "drop: [key, label]"}
    table = str(complete / "t.csv")
    for way, how in ways.items():
        folder = tmp_path / way
        store = "" if kind == "knn" else ", store: run.zarr"  # (k-NN names its outputs)
        yaml = tmp_path / f"{way}.yaml"
        text = KIND_PIPELINES[kind].replace("INPUT", how).replace("T,", f"{table},")
        yaml.write_text(text.replace("T}", f"{table}}}") + f"output: {{dir: {folder}{store}}}\n")
        said = invoke("run", yaml)
        assert not [m for m in said if "looks like a row ID" in m], said
        found = sorted(p for p in folder.iterdir() if p.suffix in (".csv", ".zarr"))
        outputs[way] = {p.name: _arrays(p) for p in found}
    with_id, dropped = outputs["id"], outputs["drop"]
    assert with_id.keys() == dropped.keys() and with_id
    for name, arrays in with_id.items():
        assert arrays.keys() == dropped[name].keys(), name
        for array, values in arrays.items():
            if isinstance(values, pd.DataFrame):
                pd.testing.assert_frame_equal(values, dropped[name][array])
            else:
                np.testing.assert_array_equal(values, dropped[name][array], err_msg=array)
