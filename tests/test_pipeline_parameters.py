"""A pipeline key and the command-line option of the same parameter accept the same values.

Each pair below is one parameter reached two ways: the key of a pipeline
section (checked by :mod:`distforest.jobs.pipeline_schema` when the file is
read) and the option of the command that computes the same thing.  For every
candidate value, the key is accepted exactly when the option is (a value in a
YAML file is typed; on the command line it is its text).
"""

from __future__ import annotations

import click
import pytest

from distforest.cli.main import cli
from distforest.errors import ConfigError
from distforest.jobs import pipeline_schema as S

#: (section, key) -> (command, option name).
PAIRS = {
    ("similarity", "tile_size"): (("similarity",), "tile_size"),
    ("similarity", "normalize"): (("similarity",), "normalize"),
    ("neighbors", "k"): (("neighbors",), "k"),
    ("neighbors", "algorithm"): (("neighbors",), "algorithm"),
    ("neighbors", "normalize"): (("neighbors",), "normalize"),
    ("mds", "components"): (("mds",), "components"),
    ("mds", "dissimilarity"): (("mds",), "dissimilarity"),
    ("proximity", "method"): (("proximity",), "method"),
    ("proximity", "top_k"): (("proximity",), "top_k"),
    ("score", "method"): (("score",), "method"),
    ("clustering", "method"): (("cluster",), "method"),
    ("clustering", "k"): (("cluster",), "k"),
    ("clustering", "n_init"): (("cluster",), "n_init"),
    ("clustering", "min_samples"): (("cluster",), "min_samples"),
    ("forest", "n_estimators"): (("proximity",), "n_estimators"),
    ("forest", "tile_size"): (("proximity",), "tile_size"),
    ("forest", "max_samples"): (("proximity",), "max_samples"),
}
VALUES = (-1, 0, 1, 2, 15, 16, 100, 2048, 0.5, 1.5, "x", "sqrt", "range", "rfgap",
          "rfgp", "brute", "linear", "kernel-kmeans", "dbscan", "original")  # fmt: skip


def option(path: tuple[str, ...], name: str) -> tuple[click.Command, click.Parameter]:
    ctx = click.Context(cli)
    cmd: click.Command | None = cli
    for part in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(ctx, part)
    assert cmd is not None
    return cmd, next(p for p in cmd.params if p.name == name)


def cli_accepts(cmd: click.Command, param: click.Parameter, word: str) -> bool:
    ctx = click.Context(cmd)
    try:
        param.process_value(ctx, param.type_cast_value(ctx, word))
    except click.BadParameter:
        return False
    return True


#: Values of the keys a section requires, given beside the key under test.
REQUIRED = {"out": "x.csv", "method": "kernel-kmeans", "path": "x.csv", "dir": "out"}


def key_accepts(section: str, key: str, value: object) -> bool:
    given = {**{k: REQUIRED[k] for k in S.REQUIRED.get(section, ())}, key: value}
    try:
        S.section_of({section: given}, section, "p.yaml")
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize(("section", "key"), PAIRS, ids=[f"{s}.{k}" for s, k in PAIRS])
def test_key_and_option_accept_the_same_values(section, key):
    cmd, param = option(*PAIRS[section, key])
    differ = [(v, key_accepts(section, key, v)) for v in VALUES
              if key_accepts(section, key, v) != cli_accepts(cmd, param, str(v))]  # fmt: skip
    assert not differ, f"{section}.{key} accepts (value, key accepts) unlike the option: {differ}"
