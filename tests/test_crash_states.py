"""Every state a killed run can leave recovers on the next run, without a person.

Each case makes the state a SIGKILL (or a full disk) leaves at one point of a
run -- while creating the store, during the fit, while saving, during the
outputs -- then runs the same pipeline again and compares with a clean run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.store.lock import lock_path
from distforest.store.run_store import PARTIAL_MARK, RunStore

BC = Path(__file__).resolve().parents[1] / "distforest" / "data" / "breast_cancer.csv"


def pipeline(tmp_path: Path, name: str) -> tuple[Path, Path]:
    path = tmp_path / f"{name}.yaml"
    out = tmp_path / name
    path.write_text(
        f"name: crash\ninput: {{path: {BC}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 8, random_state: 5, tile_size: 256}\n"
        "outliers: {out: outliers.csv}\n"
        f"output: {{dir: {out}, store: run.zarr}}\n"
    )
    return path, out


def run(path: Path) -> str:
    result = CliRunner().invoke(cli, ["-q", "run", str(path)])
    assert result.exit_code == 0, result.output
    return result.output


def arrays(store: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}

    def walk(group: zarr.Group, prefix: str) -> None:
        for name, arr in group.arrays():
            out[prefix + name] = np.asarray(arr[...]).tobytes()
        for name, sub in group.groups():
            walk(sub, f"{prefix}{name}/")

    walk(zarr.open_group(str(store), mode="r", use_consolidated=False), "")
    return out


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("clean")
    path, out = pipeline(tmp, "clean")
    run(path)
    return out


def same_as_clean(out: Path, clean: Path) -> None:
    assert RunStore.open(out / "run.zarr").is_complete
    assert arrays(out / "run.zarr") == arrays(clean / "run.zarr")
    pd.testing.assert_frame_equal(
        pd.read_csv(out / "outliers.csv"), pd.read_csv(clean / "outliers.csv")
    )


def test_killed_while_creating_the_store_empty_directory(tmp_path, clean):
    path, out = pipeline(tmp_path, "empty")
    (out / "run.zarr").mkdir(parents=True)  # the directory was made, nothing else
    run(path)
    same_as_clean(out, clean)


@pytest.mark.parametrize("metadata", ["", '{"zarr_format": 3, "node_type": "group"}'])
def test_killed_while_creating_the_store_no_attributes_yet(tmp_path, clean, metadata):
    path, out = pipeline(tmp_path, "noattrs")
    (out / "run.zarr").mkdir(parents=True)
    (out / "run.zarr" / "zarr.json").write_text(metadata)  # cut short, or without attrs
    run(path)
    same_as_clean(out, clean)


def test_leftover_partial_directory_is_cleared(tmp_path, clean):
    path, out = pipeline(tmp_path, "partial")
    partial = out / ".run.zarr.partial"
    partial.mkdir(parents=True)
    (partial / PARTIAL_MARK).write_text("")  # distforest's mark: its own, so removed
    (partial / "junk").write_text("left by a run killed inside RunStore.create")
    run(path)
    same_as_clean(out, clean)
    assert not partial.exists()


def test_killed_while_saving_the_forest(tmp_path, clean):
    path, out = pipeline(tmp_path, "saving")
    run(path)
    rs = RunStore.open(out / "run.zarr", mode="r+")
    del rs.group["leaves"]  # the save did not get this far
    rs.update_attrs(status="running", stages={})
    run(path)
    same_as_clean(out, clean)


def test_killed_while_writing_the_outputs(tmp_path, clean):
    path, out = pipeline(tmp_path, "outputs")
    run(path)
    rs = RunStore.open(out / "run.zarr", mode="r+")
    stages = dict(rs.attrs["stages"])
    for name in ("outliers", "report"):
        stages.pop(name)
    rs.update_attrs(status="running", stages=stages)
    (out / "outliers.csv").unlink()
    assert "resumed" in run(path)
    same_as_clean(out, clean)


def test_half_written_store_of_no_job_is_replaced(tmp_path, clean):
    path, out = pipeline(tmp_path, "nojob")
    RunStore.create(out / "run.zarr", attrs={"note": "made by hand, never finished"})
    run(path)
    same_as_clean(out, clean)


def test_a_complete_store_of_another_job_is_still_refused(tmp_path, clean):
    path, out = pipeline(tmp_path, "other")
    RunStore.create(out / "run.zarr", attrs={"spec_hash": "0123"}).mark_complete()
    result = CliRunner().invoke(cli, ["-q", "run", str(path)])
    assert result.exit_code == 6 and "different job" in result.output


def test_lock_path_that_is_a_directory(tmp_path):
    path, out = pipeline(tmp_path, "lockdir")
    lock_path(out / "run.zarr").mkdir(parents=True)
    result = CliRunner().invoke(cli, ["-q", "run", str(path)])
    assert result.exit_code == 6, result.output
    assert "cannot open the lock file" in result.output and "Traceback" not in result.output
