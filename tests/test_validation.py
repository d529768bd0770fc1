"""One validation path: constraint tables, combination rules, the same answers everywhere."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_iris

from distforest import (
    KNNClassifier,
    KNNRegressor,
    ProximityForest,
    ProximityImputer,
    XForest,
    execution,
)
from distforest.cli.main import cli
from distforest.errors import ParameterError, did_you_mean
from distforest.forests.neighbors import top_k_neighbors
from distforest.forests.pairwise import pairwise

PACKAGE = Path(__file__).resolve().parents[1] / "distforest"
ESTIMATORS = [ProximityForest, XForest, ProximityImputer, KNNClassifier, KNNRegressor]
X, Y = load_iris(return_X_y=True)


@pytest.fixture(autouse=True)
def in_process():
    with execution("synchronous"):
        yield


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_parameter_has_a_constraint(cls):
    assert set(cls().get_params()) == set(cls._parameter_constraints)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ProximityForest(bootstrap="no"), "bootstrap must be True or False, got 'no'"),
        (lambda: ProximityForest(bootstrap=0), "bootstrap must be True or False, got 0"),
        (lambda: XForest(normalize="yes"), "normalize must be True or False"),
        (lambda: ProximityForest(n_estimators=0), "n_estimators must be an integer >= 1, got 0"),
        (lambda: ProximityForest(n_estimators=True), "n_estimators must be an integer"),
        (lambda: ProximityForest(kind="extra-tree"), "did you mean 'extra-trees'"),
        (
            lambda: ProximityForest(max_samples=1.5),
            r"max_samples must be None, an integer >= 1 .*a fraction in \(0, 1\]",
        ),
        (lambda: ProximityImputer(proximity="rf-gap"), "did you mean 'rfgap'"),
        (lambda: KNNClassifier(feature_range=(1, 0)), "feature_range must have low < high"),
        (lambda: KNNClassifier(select_cv=1), "select_cv must be an integer >= 2"),
    ],
)
def test_bad_values_are_refused_in_fit(make, message):
    estimator = make()  # __init__ only stores (scikit-learn's contract)
    with pytest.raises(ParameterError, match=message):
        estimator.fit(X, Y)


def test_max_samples_needs_bootstrap():
    with pytest.raises(ParameterError, match=r"max_samples=0.3 cannot be set when bootstrap=False"):
        ProximityForest(bootstrap=False, max_samples=0.3).fit(X, Y)


@pytest.mark.parametrize("method", ["oob", "rfgap"])
def test_out_of_bag_methods_need_bootstrap(method):
    """Used to return an all-zero matrix from Python; the check was only in the YAML loader."""
    forest = ProximityForest(n_estimators=4, bootstrap=False, random_state=0).fit(X, Y)
    with pytest.raises(ParameterError, match=f"method='{method}' needs out-of-bag rows"):
        forest.proximity(method=method)
    with pytest.raises(ParameterError, match="bootstrap=False"):
        forest.product(np.ones(len(X)), method=method)
    assert forest.proximity(method="original").shape == (150, 150)


def test_one_tile_size_bound_everywhere(tmp_path):
    for call in (
        lambda: pairwise(X, tile_size=8),
        lambda: top_k_neighbors(X, k=3, tile_size=8, client="synchronous"),
        lambda: ProximityForest(tile_size=8).fit(X, Y),
        lambda: XForest(tile_size=8).fit(X),
        lambda: KNNClassifier(tile_size=8).fit(X, Y),
    ):
        with pytest.raises(ParameterError, match="tile_size must be an integer >= 16, got 8"):
            call()
    csv = tmp_path / "x.csv"
    csv.write_text("a,b\n1,2\n3,4\n5,7\n")
    for command in ("similarity", "neighbors", "proximity", "xforest"):
        result = CliRunner().invoke(cli, [command, str(csv), "--out", str(tmp_path / "o.zarr"),
                                          "--tile-size", "8"])  # fmt: skip
        assert result.exit_code == 2 and "x>=16" in result.output, (command, result.output)


def _defaults(command: str) -> dict:
    ctx = cli.make_context("distforest", [command, "--help"], resilient_parsing=True)
    cmd = cli.get_command(ctx, command)
    return {p.name: p.default for p in cmd.params if isinstance(p, click.Option)}


@pytest.mark.parametrize(
    ("command", "cls", "keys"),
    [
        ("proximity", ProximityForest,
         ("n_estimators", "task", "kind", "max_features", "min_samples_leaf", "max_depth",
          "batch_size", "tile_size")),
        ("impute", ProximityImputer,
         ("iterations", "n_estimators", "proximity", "categorical_vote", "task", "kind",
          "max_features", "min_samples_leaf")),
        ("xforest", XForest,
         ("n_estimators", "n_directions", "mode", "leaf_size", "beta", "batch_size", "tile_size")),
    ],
)  # fmt: skip
def test_command_line_defaults_are_the_estimators(command, cls, keys):
    cli_defaults = _defaults(command)
    for key in keys:
        want = cls().get_params()[key]
        got = cli_defaults[key]
        assert got == want or got == str(want), (command, key, got, want)


def test_pipeline_refuses_what_python_refuses(tmp_path):
    base = (
        f"input: {{path: {PACKAGE / 'data' / 'breast_cancer.csv'}, target: Class, drop: [Id]}}\n"
        f"output: {{dir: {tmp_path}}}\n"
    )
    cases = {
        "forest: {bootstrap: false, max_samples: 0.3}\n": "max_samples=0.3 cannot be set",
        "forest: {bootstrap: 'no'}\n": "forest.bootstrap must be True or False, got 'no'",
        "forest: {tile_size: 8}\n": "forest.tile_size must be an integer >= 16, got 8",
        "forest: {kind: extra-tree}\n": "did you mean 'extra-trees'",
    }
    for section, message in cases.items():
        path = tmp_path / "p.yaml"
        path.write_text(base + section)
        result = CliRunner().invoke(cli, ["validate", str(path)])
        assert result.exit_code == 4 and message in result.output, (section, result.output)


def test_one_did_you_mean():
    assert did_you_mean("rfgp", ["original", "oob", "rfgap"]) == "; did you mean 'rfgap'?"
    assert did_you_mean("class", ["Class", "Id"]) == "; did you mean 'Class'?"  # case first
    assert did_you_mean("zzz", ["original"]) == ""
    users = [
        p.relative_to(PACKAGE)
        for p in PACKAGE.rglob("*.py")
        if "get_close_matches" in p.read_text() and p.name != "errors.py"
    ]
    assert not users, f"did-you-mean written again in {users}; use errors.did_you_mean"


def test_pipeline_file_problems_exit_4_without_traceback(tmp_path):
    base = (
        f"input: {{path: {PACKAGE / 'data' / 'breast_cancer.csv'}, target: Class, drop: [Id]}}\n"
        f"output: {{dir: {tmp_path}}}\n"
    )
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(("name: caf\u00e9\n" + base).encode("latin-1"))
    missing = tmp_path / "missing.yaml"
    missing.write_text(base + f"cluster: {tmp_path / 'no_such_cluster.yaml'}\n")
    bad_cluster = tmp_path / "c.yaml"
    bad_cluster.write_text("kind: local\nn_workerz: 2\n")
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(base + f"cluster: {bad_cluster}\n")
    for path, message in (
        (latin, "not UTF-8 text (byte 0xe9"),
        (missing, "cluster:"),
        (invalid, "did you mean 'n_workers'"),
    ):
        result = CliRunner().invoke(cli, ["validate", str(path)])
        assert result.exit_code == 4 and message in result.output, (path.name, result.output)
        assert "Traceback" not in result.output


def test_unwritable_outputs_are_refused_before_any_work(tmp_path):
    csv = tmp_path / "x.csv"
    csv.write_text("a,b\n1,2\n3,4\n5,7\n6,1\n")
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    store = tmp_path / "s.zarr"
    for option, path in (("--plot", blocker / "pic.png"), ("--plot", tmp_path)):
        result = CliRunner().invoke(
            cli, ["-q", "xforest", str(csv), "--trees", "5", "--out", str(store), option, str(path)]
        )
        assert result.exit_code == 6, result.output
        assert "cannot write" in result.output or "is a directory" in result.output
        assert not store.exists()  # refused before the forest was grown or the store made
