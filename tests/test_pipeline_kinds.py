"""The pipeline kinds of ``importances`` and ``simforest predict`` (issue 39): the YAML of
docs/pipelines.md loads into the job its command builds, the kind is inferred from the
section, and bad values are refused before any work.  (Their runs write the command's
bytes: ``tests/test_job_stages.py``.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from distforest.errors import ConfigError
from distforest.jobs.forest_answers import IMPORTANCES, ImportancesJob
from distforest.jobs.pipeline import load_pipeline
from distforest.jobs.simforest_model import SimForestPredictJob

ROOT = Path(__file__).resolve().parents[1]
ION = ROOT / "distforest" / "data" / "ionosphere.csv"


def _docs_yaml(kind: str) -> str:
    """The YAML block of docs/pipelines.md of ``kind``."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", (ROOT / "docs" / "pipelines.md").read_text(),
                        flags=re.S | re.M)  # fmt: skip
    (text,) = [b for b in blocks if f"kind: {kind}" in b]
    return text


@pytest.mark.parametrize("kind", ["importances", "simforest-predict"])
def test_the_documented_pipelines_load_into_the_command_s_job(kind, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the page names the bundled data relative to the root
    path = tmp_path / "p.yaml"
    path.write_text(_docs_yaml(kind))
    job = load_pipeline(path, overrides=[f"output.dir={tmp_path / 'out'}"])
    bare = yaml.safe_load(path.read_text())
    del bare["kind"]  # inferred from the section
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(bare))
    again = load_pipeline(tmp_path / "bare.yaml", overrides=[f"output.dir={tmp_path / 'out'}"])
    if kind == "importances":
        assert isinstance(job, ImportancesJob) and job.answer == "importances"
        assert job.target == "Class" and job.drop == ("Id",)
        assert job.options == {"repeats": 5, "test_size": 0.25, "top": 10}
        assert job.files == {"out": str(tmp_path / "out" / "importances.csv")}
        assert job.out == str(tmp_path / "out" / "importances.run.zarr")
    else:
        assert isinstance(job, SimForestPredictJob)
        assert job.model == str(tmp_path / "results" / "simforest" / "model.zarr")  # (its folder)
        assert job.data == job.input
        assert job.matrix is None and job.distances is None
        assert job.files == {"out": str(tmp_path / "out" / "predictions.csv")}
    assert type(again) is type(job) and again.files == job.files


def test_the_importances_defaults_are_the_command_s():
    from distforest.cli.apps_cmd import importances

    given = {p.name: p.default for p in importances.params if p.name in IMPORTANCES}
    assert given == IMPORTANCES


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "p.yaml"
    path.write_text(text + f"output: {{dir: {tmp_path}}}\n")
    return load_pipeline(path)


def test_bad_values_of_the_new_kinds_are_refused(tmp_path):
    forest = f"input: {{path: {ION}}}\nforest: {{n_estimators: 5}}\n"
    with pytest.raises(ConfigError, match=r"importances needs input.target"):
        _load(tmp_path, forest + "importances: {out: i.csv}\n")
    with pytest.raises(ConfigError, match=r"importances.test_size must be a fraction in "
                       r"\(0, 1\).*got 1.5"):  # fmt: skip
        _load(tmp_path, forest.replace("}\nforest", ", target: Class}\nforest")
              + "importances: {out: i.csv, test_size: 1.5}\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r"predict.matrix.*one of similarity, distances"):
        _load(tmp_path, f"model: m.zarr\ninput: {{path: {ION}}}\n"
                        "predict: {out: p.csv, matrix: similarities}\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r"needs 'model: PATH'"):
        _load(tmp_path, f"input: {{path: {ION}}}\npredict: {{out: p.csv}}\n")
    job = _load(tmp_path, f"model: m.zarr\ninput: {{path: {ION}}}\n"
                          "predict: {out: p.csv, matrix: distances}\n")  # fmt: skip
    assert isinstance(job, SimForestPredictJob)
    assert job.distances == str(ION) and job.data is None and job.matrix is None
