"""Hostile YAML: deep nesting, alias bombs and duplicate keys are exit 4 in one short line.

Pipelines (``run``, ``validate``, ``--set``) and cluster files read YAML through
one loader (``distforest._schema.load_yaml``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from distforest.cli.main import cli

BC = Path(__file__).resolve().parents[1] / "distforest" / "data" / "breast_cancer.csv"

#: An error line longer than this would be a message built from the file's values.
SHORT = 1000


def refused(args: list[str], *words: str) -> str:
    start = time.perf_counter()
    result = CliRunner().invoke(cli, ["-q", *map(str, args)])
    assert time.perf_counter() - start < 30
    assert result.exit_code == 4, result.output[:2000]
    assert "Traceback" not in result.output
    assert len(result.output) < SHORT, len(result.output)
    for word in words:
        assert word in result.output, (word, result.output)
    return result.output


def _nested(levels: int) -> str:
    return "a: " + "[" * levels + "]" * levels + "\n"


def _laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for k in range(1, levels):
        lines.append(f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]")
    return "\n".join(lines) + f"\ninput: *a{levels - 1}\noutput: {{dir: out}}\n"


HOSTILE = {
    "nested 5,000 levels": (_nested(5000), ["nested more than"]),
    "nested 5,000 mappings": ("a: " + "{b: " * 5000 + "1" + "}" * 5000 + "\n",
                              ["nested more than"]),
    "billion laughs": (_laughs(), ["aliases"]),
    "a long chain of aliases": (
        "x0: &x0 [1]\n" + "".join(f"x{k}: &x{k} [*x{k - 1}]\n" for k in range(1, 3000)),
        ["aliases"]),
    "duplicate key": (
        f"input: {{path: {BC}, target: Class}}\nforest: {{n_estimators: 5}}\n"
        "forest: {n_estimators: 500000}\noutput: {dir: out}\n",
        ["duplicate key 'forest'", "first at line"]),
    "duplicate nested key": (
        f"input: {{path: {BC}, target: Class, target: Id}}\noutput: {{dir: out}}\n",
        ["duplicate key 'target'"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.parametrize("command", ["validate", "run"])
def test_hostile_pipelines_are_refused_in_one_short_line(tmp_path, monkeypatch, case, command):
    monkeypatch.chdir(tmp_path)
    text, words = HOSTILE[case]
    path = tmp_path / "p.yaml"
    path.write_text(text)
    refused([command, path], *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["nested 5,000 levels", "billion laughs", "duplicate key"])
def test_hostile_cluster_files_are_refused(tmp_path, case):
    text, words = HOSTILE[case]
    cluster = tmp_path / "c.yaml"
    cluster.write_text(text.replace("input:", "kind: local\nx:"))
    data = tmp_path / "d.csv"
    data.write_text("a,b\n" + "".join(f"{i},{i % 3}\n" for i in range(20)))
    refused(["proximity", data, "--out", tmp_path / "p.zarr", "--cluster", cluster], *words)


def test_set_override_values_are_read_by_the_same_loader(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(f"input: {{path: {BC}, target: Class}}\noutput: {{dir: out}}\n")
    refused(["validate", path, "--set", "forest.n_estimators={a: 1, a: 2}"], "duplicate key 'a'")


def test_merge_keys_are_not_duplicates(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        f"input: {{path: {BC}, target: Class}}\n"
        "forest: {<<: {n_estimators: 5, random_state: 1}, random_state: 2}\n"
        "output: {dir: out}\n"
    )
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
