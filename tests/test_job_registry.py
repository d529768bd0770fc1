"""The job registry: an explicit ``kind:`` in pipeline files, inferred when absent."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from distforest.errors import ConfigError
from distforest.jobs.forest_answers import ImportancesJob
from distforest.jobs.knn import KNNJob
from distforest.jobs.pipeline import load_pipeline
from distforest.jobs.proximity import ProximityJob
from distforest.jobs.registry import KINDS, infer_kind
from distforest.jobs.score import ScoreJob
from distforest.jobs.simforest import SimForestJob
from distforest.jobs.simforest_model import SimForestPredictJob
from distforest.jobs.similarity import SimilarityJob
from distforest.jobs.smerf import SmerfJob
from distforest.jobs.xforest import XForestJob

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "pipelines").glob("*.yaml"))
CLASSES = {"proximity": ProximityJob, "xforest": XForestJob, "simforest": SimForestJob,
           "knn": KNNJob, "smerf": SmerfJob, "score": ScoreJob,
           "similarity": SimilarityJob, "importances": ImportancesJob,
           "simforest-predict": SimForestPredictJob}  # fmt: skip


def test_every_kind_is_a_job_class_with_the_protocol():
    assert set(KINDS) == set(CLASSES)
    for name, cls in CLASSES.items():
        assert cls.job_kind == name
        for method in ("plan", "run", "summary", "describe"):
            assert callable(getattr(cls, method)), (cls, method)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_pipelines_name_their_kind_and_inference_agrees(path, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # inputs are named relative to the repository root
    data = yaml.safe_load(path.read_text())
    assert data["kind"] in KINDS
    job = load_pipeline(path, overrides=[f"output.dir={tmp_path}"])
    assert type(job) is CLASSES[data["kind"]] and job.job_kind == data["kind"]
    del data["kind"]  # the same file without kind: the kind inferred as before
    assert infer_kind(data) == job.job_kind
    bare = tmp_path / path.name
    bare.write_text(yaml.safe_dump(data))
    assert type(load_pipeline(bare, overrides=[f"output.dir={tmp_path}"])) is type(job)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    data = ROOT / "distforest" / "data" / "ionosphere.csv"
    path.write_text(f"input: {{path: {data}, drop: [Class]}}\noutput: {{dir: {tmp_path}}}\n"
                    + text)  # fmt: skip
    return path


def test_a_kind_that_contradicts_the_sections_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"kind is 'proximity' but the section 'xforest' "
                       r"belongs to xforest pipelines"):  # fmt: skip
        load_pipeline(_write(tmp_path, "kind: proximity\nxforest: {n_estimators: 5}\n"))


def test_an_unknown_kind_suggests_the_closest(tmp_path):
    with pytest.raises(ConfigError, match=r"kind 'xforrest' is not a kind of job; did you mean "
                       r"'xforest'"):  # fmt: skip
        load_pipeline(_write(tmp_path, "kind: xforrest\n"))


def test_an_explicit_kind_is_checked_as_that_kind(tmp_path):
    # without kind: a file with no X-Forest section is a proximity job; with kind: xforest
    # it is checked as an X-Forest pipeline, which needs its section
    assert type(load_pipeline(_write(tmp_path, ""))) is ProximityJob
    with pytest.raises(ConfigError, match=r"an X-Forest pipeline .* add an 'xforest' section"):
        load_pipeline(_write(tmp_path, "kind: xforest\n"))
    job = load_pipeline(_write(tmp_path, "kind: xforest\nxforest: {n_estimators: 5}\n"))
    assert type(job) is XForestJob and job.forest["n_estimators"] == 5
