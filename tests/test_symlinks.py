"""Symlinks and user files beside the outputs: never followed, truncated or deleted.

Temporaries distforest writes beside an output get fresh random names and are
opened ``O_EXCL | O_NOFOLLOW``; a ``.NAME.zarr.partial`` folder is removed
only when it holds distforest's mark; an existing report that is not this
output's is refused like any other existing output.  (The lock file is the
store lock's business: ``distforest/store/lock.py``.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.errors import StoreError
from distforest.jobs.outputs import write_csv, write_text
from distforest.store.run_store import PARTIAL_MARK, RunStore

BC = Path(__file__).resolve().parents[1] / "distforest" / "data" / "breast_cancer.csv"


def _pipeline(tmp_path: Path, extra: str = "", output: str = "") -> tuple[Path, Path]:
    out = tmp_path / "out"
    path = tmp_path / "p.yaml"
    path.write_text(
        f"input: {{path: {BC}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 3, random_state: 1, tile_size: 256}\n"
        f"output: {{dir: {out}, store: run.zarr{output}}}\n{extra}"
    )
    return path, out


def _run(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["-q", "run", str(path)])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text("not distforest's\n")
    return path


def test_links_at_the_old_temporary_names_are_not_followed(tmp_path, victim):
    path, out = _pipeline(tmp_path, "outliers: {out: outliers.csv}\n")
    out.mkdir()
    for name in (".report.json.partial", ".report.md.partial", ".outliers.csv.partial"):
        os.symlink(victim, out / name)
    code, output = _run(path)
    assert code == 0, output
    assert victim.read_text() == "not distforest's\n"
    assert json.loads((out / "report.json").read_text())["store"].endswith("run.zarr")
    assert not [p for p in out.iterdir() if p.name.endswith(".partial") and not p.is_symlink()]


def test_writers_never_open_an_existing_name(tmp_path, victim, monkeypatch):
    import secrets

    monkeypatch.setattr(secrets, "token_hex", lambda n: "fixed")  # force a clash
    os.symlink(victim, tmp_path / ".r.txt.fixed.partial")
    with pytest.raises(FileExistsError):
        write_text(tmp_path / "r.txt", "x")
    with pytest.raises(FileExistsError):
        import pandas as pd

        write_csv(pd.DataFrame({"a": [1]}), str(tmp_path / "r.txt"))
    assert victim.read_text() == "not distforest's\n" and not (tmp_path / "r.txt").exists()


def test_a_users_partial_folder_is_never_deleted(tmp_path):
    path, out = _pipeline(tmp_path)
    partial = out / ".run.zarr.partial"
    partial.mkdir(parents=True)
    (partial / "thesis.tex").write_text("years of work\n")
    code, output = _run(path)
    assert code == StoreError.exit_code, output
    assert "not made by distforest" in output and ".run.zarr.partial" in output
    assert (partial / "thesis.tex").read_text() == "years of work\n"
    assert not (out / "run.zarr").exists()


def test_a_link_at_the_partial_name_is_refused_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("keep\n")
    os.symlink(elsewhere, tmp_path / ".s.zarr.partial")
    with pytest.raises(StoreError, match="not made by distforest"):
        RunStore.create(tmp_path / "s.zarr", attrs={})
    assert (elsewhere / "keep").exists()


def test_distforests_own_partial_folder_is_cleared(tmp_path):
    for marked in (True, False):
        partial = tmp_path / ".s.zarr.partial"
        partial.mkdir()
        if marked:  # a run killed half-way: the mark and some arrays
            (partial / PARTIAL_MARK).write_text("")
            (partial / "zarr.json").write_text("{}")
        # unmarked and empty: killed between mkdir and the mark
        RunStore.create(tmp_path / "s.zarr", attrs={}, overwrite=True)
        assert not partial.exists()
        assert RunStore.open(tmp_path / "s.zarr").status == "running"


def test_an_existing_report_that_is_not_this_runs_is_refused(tmp_path):
    path, out = _pipeline(tmp_path)
    out.mkdir()
    (out / "report.md").write_text("my notes\n")
    code, output = _run(path)
    assert code == StoreError.exit_code, output
    assert "report.md already exists" in output
    assert (out / "report.md").read_text() == "my notes\n" and not (out / "run.zarr").exists()
    path, out = _pipeline(tmp_path, output=", overwrite: true")  # said so: replaced
    code, output = _run(path)
    assert code == 0, output
    assert (out / "report.md").read_text() != "my notes\n"


def test_a_rerun_replaces_its_own_report(tmp_path):
    path, out = _pipeline(tmp_path)
    assert _run(path)[0] == 0
    first = json.loads((out / "report.json").read_text())["run_id"]
    RunStore.open(out / "run.zarr", mode="r+").update_attrs(status="running")  # resumed
    assert _run(path)[0] == 0
    assert json.loads((out / "report.json").read_text())["run_id"] != first


def test_xforest_does_not_replace_another_runs_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.json").write_text('{"mine": true}\n')
    data = tmp_path / "d.csv"
    data.write_text("a,b\n" + "".join(f"{i},{(i * 7) % 11}\n" for i in range(40)))
    result = CliRunner().invoke(cli, ["-q", "xforest", str(data), "--out", "x.zarr",
                                      "--trees", "2"])  # fmt: skip
    assert result.exit_code == StoreError.exit_code, result.output
    assert (tmp_path / "report.json").read_text() == '{"mine": true}\n'
