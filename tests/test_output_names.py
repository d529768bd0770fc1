"""Traversal: every pipeline output is a plain relative name inside ``output.dir``.

No ``..``, no absolute path, no symbolic link among its components: refused
by ``distforest validate`` and by ``distforest run`` (exit 4) before anything
is written.  Command-line outputs are what the user typed and are not
concerned.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
BC = ROOT / "distforest" / "data" / "breast_cancer.csv"

#: name -> (pipeline body after input/output, key named in the error)
ESCAPES = {
    "store ..": ("output: {dir: out, store: ../../escaped.zarr}\n", "output.store"),
    "impute.out ..": (
        "output: {dir: out}\nimpute: {out: ../../x.csv}\n", "impute.out"),
    "absolute plot": ("output: {dir: out, plot: /tmp/distforest_escape.png}\n", "output.plot"),
    "outliers.plot ..": (
        "output: {dir: out}\noutliers: {out: o.csv, plot: a/../../o.png}\n", "outliers.plot"),
    "mds.out absolute": ("output: {dir: out}\nmds: {out: /tmp/mds.csv}\n", "mds.out"),
    "mislabels.out ..": ("output: {dir: out}\nmislabels: {out: ../m.csv}\n", "mislabels.out"),
    "clustering.out ..": (
        "xforest: {n_estimators: 2}\nclustering: {method: spectral, k: 2, out: ../c.csv}\n"
        "output: {dir: out}\n", "clustering.out"),
    "knn.model ..": ("knn: {target: Class, model: ../k.zarr}\noutput: {dir: out}\n", "knn.model"),
    "knn.predict.out ..": (
        "knn: {target: Class, predict: {input: INPUT, out: ../../p.csv}}\noutput: {dir: out}\n",
        "knn.predict.out"),
    "neighbors.out absolute": (
        "neighbors: {out: /tmp/nb.zarr}\noutput: {dir: out}\n", "neighbors.out"),
    "distance.out ..": (
        "smerf: {distances: DIST}\ndistance: {out: ../d.zarr}\noutput: {dir: out}\n",
        "distance.out"),
}  # fmt: skip


def _pipeline(tmp_path: Path, body: str) -> Path:
    dist = tmp_path / "D.npy"
    if not dist.exists():
        np.save(dist, np.zeros((3, 3)))
    text = f"input: {{path: {BC}, target: Class}}\n" + body
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("INPUT", str(BC)).replace("DIST", str(dist)))
    return path


def _refused(args: list[str], key: str) -> str:
    result = CliRunner().invoke(cli, ["-q", *args])
    assert result.exit_code == 4, result.output
    assert "Traceback" not in result.output
    assert key in result.output, result.output
    return result.output


@pytest.mark.parametrize("case", list(ESCAPES))
def test_validate_refuses_a_name_outside_output_dir(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    body, key = ESCAPES[case]
    output = _refused(["validate", str(_pipeline(tmp_path, body))], key)
    assert "inside output.dir" in output


def test_run_refuses_before_writing_anything(tmp_path, monkeypatch):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    path = _pipeline(work, "forest: {n_estimators: 2}\noutput: {dir: out, store: ../../x.zarr}\n")
    _refused(["run", str(path)], "output.store")
    assert not (tmp_path / "x.zarr").exists() and not (work / "out").exists()


def test_a_symlinked_component_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / "out" / "sub")
    body = "forest: {n_estimators: 2}\noutput: {dir: out}\noutliers: {out: sub/o.csv}\n"
    _refused(["validate", str(_pipeline(tmp_path, body))], "symbolic link")
    victim = tmp_path / "victim.csv"
    victim.write_text("mine\n")
    os.symlink(victim, tmp_path / "out" / "o.csv")  # the output itself a link
    body = (
        "forest: {n_estimators: 2}\noutput: {dir: out, overwrite: true}\noutliers: {out: o.csv}\n"
    )
    _refused(["run", str(_pipeline(tmp_path, body))], "symbolic link")
    assert victim.read_text() == "mine\n"
    assert not any(elsewhere.iterdir())


def test_plain_names_and_subfolders_are_accepted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = "output: {dir: out, store: stores/run.zarr}\noutliers: {out: apps/o.csv}\n"
    result = CliRunner().invoke(cli, ["validate", str(_pipeline(tmp_path, body))])
    assert result.exit_code == 0, result.output
