"""Relative paths in a pipeline are relative to the YAML file's folder (issue 44, point 7).

A path that exists only relative to the working directory keeps that reading, with
a warning that names the path to write; the shipped pipelines run by name keep
the working directory (their outputs go where the command runs).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from distforest.jobs.pipeline import load_pipeline

ROOT = Path(__file__).resolve().parents[1]
BC = ROOT / "distforest" / "data" / "breast_cancer.csv"
PIPELINE = (
    "input: {path: data/bc.csv, target: Class, drop: [Id]}\n"
    "forest: {n_estimators: 5}\n"
    "output: {dir: out, store: run.zarr}\n"
)


@pytest.fixture
def project(tmp_path):
    """project/pipelines/p.yaml naming project/pipelines/data/bc.csv, run from elsewhere."""
    folder = tmp_path / "project" / "pipelines"
    (folder / "data").mkdir(parents=True)
    shutil.copyfile(BC, folder / "data" / "bc.csv")
    (folder / "p.yaml").write_text(PIPELINE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return folder, elsewhere


def test_relative_paths_are_read_from_the_yaml_folder(project, monkeypatch, recwarn):
    folder, elsewhere = project
    monkeypatch.chdir(elsewhere)
    job = load_pipeline(folder / "p.yaml")
    assert Path(job.input).resolve() == (folder / "data" / "bc.csv").resolve()
    assert Path(job.out).resolve() == (folder / "out" / "run.zarr").resolve()
    assert not [w for w in recwarn if "relative to the working directory" in str(w.message)]


def test_a_path_found_only_from_the_working_directory_keeps_it_with_a_warning(project, monkeypatch):
    folder, elsewhere = project
    (elsewhere / "data").mkdir()
    shutil.copyfile(BC, elsewhere / "data" / "only_here.csv")
    (folder / "q.yaml").write_text(PIPELINE.replace("data/bc.csv", "data/only_here.csv"))
    monkeypatch.chdir(elsewhere)
    said = r"input.path 'data/only_here.csv' is read relative to the working directory"
    fix = r"write path: \.\./\.\./elsewhere/data/only_here.csv"
    with pytest.warns(UserWarning, match=said + ".*" + fix):
        job = load_pipeline(folder / "q.yaml")
    assert job.input == "data/only_here.csv"


def test_validate_from_another_folder(project, monkeypatch):
    from click.testing import CliRunner

    from distforest.cli.main import cli

    folder, elsewhere = project
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(cli, ["validate", str(folder / "p.yaml")])
    assert result.exit_code == 0, result.output


def test_examples_copied_elsewhere_validate_from_the_parent_folder(tmp_path, monkeypatch, recwarn):
    """The issue's case: ``distforest examples ex`` then ``validate ex/pipelines/*.yaml``."""
    from click.testing import CliRunner

    from distforest.cli.main import cli

    copied = CliRunner().invoke(cli, ["-q", "examples", str(tmp_path / "ex")])
    assert copied.exit_code == 0, copied.output
    monkeypatch.chdir(tmp_path)
    files = sorted(str(p) for p in (tmp_path / "ex" / "pipelines").glob("*.yaml"))
    result = CliRunner().invoke(cli, ["validate", *files])
    assert result.exit_code == 0, result.output
    job = load_pipeline(tmp_path / "ex" / "pipelines" / "main.yaml")
    assert Path(job.out).resolve().is_relative_to((tmp_path / "ex").resolve())
    assert not [w for w in recwarn if "relative to the working directory" in str(w.message)]
