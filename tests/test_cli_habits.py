"""The command line follows habits, and its failure paths are closed.

Group options after the subcommand, did-you-mean for commands, Ctrl-C (exit
130, one line, resumable), outputs checked writable before work (on a real
read-only mount), the shipped examples found by name, the settings in
dask.config, DBSCAN's all-noise warning, and a second matrix of one forest added
to its store (command line and Python).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask.config
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.cluster import DBSCAN

from distforest import examples, settings
from distforest.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "distforest" / "data"


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


# -- group options, did-you-mean ---------------------------------------------------


LEVELS = [("-q", logging.WARNING), ("--quiet", logging.WARNING), ("-v", logging.DEBUG),
          ("--verbose", logging.DEBUG)]  # fmt: skip


@pytest.mark.parametrize("flag, level", LEVELS)
def test_group_flags_after_the_subcommand(tmp_path, flag, level):
    before = invoke("examples", tmp_path / "a")
    assert before.exit_code == 0, before.output
    assert logging.getLogger("distforest").level == logging.INFO
    after = invoke("examples", tmp_path / "b", flag)
    assert after.exit_code == 0, after.output
    assert logging.getLogger("distforest").level == level
    nested = invoke("knn", "predict", "--help", flag)  # a subcommand of a subcommand too
    assert nested.exit_code == 0, nested.output


def test_a_mistyped_command_gets_a_suggestion():
    result = invoke("proximty", "data.csv")
    assert result.exit_code == 2
    assert "No such command 'proximty'; did you mean 'proximity'?" in result.output
    unknown = invoke("zzzz")
    assert unknown.exit_code == 2 and "see distforest --help" in unknown.output


# -- Ctrl-C ------------------------------------------------------------------------


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_in_one_line_and_the_run_resumes(tmp_path):
    """SIGINT to the whole process group, as a terminal's Ctrl-C, while tiles are written."""
    from distforest.store.lock import StoreLock
    from distforest.store.run_store import RunStore

    out = tmp_path / "p.zarr"
    args = [sys.executable, "-m", "distforest", "proximity", str(DATA / "breast_cancer.csv"),
            "--target", "Class", "--drop", "Id", "--trees", "300", "--tile-size", "16",
            "--out", str(out)]  # fmt: skip
    # ~1,000 tiles of 300 trees on one worker: the tiles stage lasts long enough for the
    # signal to arrive during it (with 100 trees and 32-row tiles a quiet machine could
    # finish before it: exit 0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # as from a terminal: SIGINT not ignored (a pytest worker may ignore it, and an ignored
    # signal stays ignored in the child, which would then never see the Ctrl-C)
    proc = subprocess.Popen([*args, "--workers", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=_sigint_default)  # fmt: skip
    # generous waits: with other pytest workers (and other jobs) on two cores, the start-up
    # and the fit take several times as long as alone
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:  # wait for the tiles stage
        if (out / "done").exists():
            break
        time.sleep(0.05)
    assert proc.poll() is None, ("the run ended before its tiles stage", proc.communicate())
    if not (out / "done").exists():
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the run reached no tiles stage in 400 s: {proc.communicate()}")
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"no exit 300 s after Ctrl-C: {proc.communicate()}")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("distforest:")]
    assert errors == ["distforest: interrupted; finished work is kept: run the same command "
                      "again to resume"]  # fmt: skip
    with StoreLock(str(out), "test"):  # released: taken at once
        pass
    assert RunStore.open(out).status == "running"
    again = invoke(*args[3:])  # the same command, here (no process start-up): in process
    assert again.exit_code == 0, again.output
    assert "resumed" in again.stdout
    assert RunStore.open(out).is_complete


# -- outputs checked before work ---------------------------------------------------


@pytest.fixture(scope="module")
def read_only(tmp_path_factory):
    """A read-only tmpfs (root only)."""
    folder = tmp_path_factory.mktemp("ro")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def _inputs(folder: Path) -> dict[str, Path]:
    table = pd.read_csv(DATA / "breast_cancer.csv").drop(columns="Id")
    full = folder / "full.csv"
    table.dropna().iloc[:80].to_csv(full, index=False)
    S = folder / "S.npy"
    np.save(S, np.eye(20))
    labels = folder / "labels.csv"
    pd.DataFrame({"label": np.arange(20) % 2}).to_csv(labels, index=False)
    return {"data": DATA / "breast_cancer.csv", "full": full, "S": S, "labels": labels}


@pytest.mark.parametrize("command", [
    "impute {data} --target Class --out {ro}/i.csv",
    "proximity {data} --target Class --out {ro}/p.zarr",
    "proximity {data} --target Class --out {tmp}/p.zarr --plot {ro}/p.png",
    "outliers {data} --target Class --out {ro}/o.csv",
    "mislabels {data} --target Class --out {tmp}/m.csv --overwrite",
    "mds {data} --target Class --out {ro}/m.csv",
    "similarity {full} --drop Class --out {ro}/s.zarr",
    "neighbors {full} --drop Class --k 3 --out {ro}/n.zarr",
    "knn fit {full} --target Class --out {ro}/k.zarr",
    "xforest {full} --drop Class --out {ro}/x.zarr",
    "cluster {tmp}/none.zarr --k 2 --out {ro}/l.csv",
    "simforest fit --similarity {S} --labels {labels} --out {ro}/s.zarr",
    "smerf fit {full} --distances {S} --out {ro}/s.zarr",
    "examples {ro}/ex",
    "run main --set output.dir={ro}/main",
])  # fmt: skip
def test_an_unwritable_output_is_refused_before_work(tmp_path, read_only, command):
    names = {**_inputs(tmp_path), "ro": read_only, "tmp": tmp_path}
    if "{ro}" not in command:  # an output that is fine, and one that is not: mislabels' --out
        command = command.replace("{tmp}/m.csv", "{ro}/m.csv")
    start = time.perf_counter()
    result = invoke(*command.format(**names).split())
    seconds = time.perf_counter() - start
    assert result.exit_code == 6, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("distforest: error: cannot "), result.output
    assert str(read_only) in lines[0]
    assert seconds < 5  # refused while reading the command line, not after the work
    assert os.listdir(read_only) == []


def test_an_existing_output_is_exit_6_for_impute_as_for_the_others(tmp_path):
    out = tmp_path / "i.csv"
    out.write_text("mine\n")
    for command in ("impute", "outliers"):
        result = invoke(command, DATA / "breast_cancer.csv", "--target", "Class", "--out", out)
        assert result.exit_code == 6 and "already exists" in result.output, result.output
    assert out.read_text() == "mine\n"


# -- shipped examples --------------------------------------------------------------


def test_examples_copies_the_shipped_files_and_data(tmp_path):
    result = invoke("examples", tmp_path / "ex")
    assert result.exit_code == 0, result.output
    for kind in examples.KINDS:
        shipped = sorted((ROOT / kind).glob("*.yaml"))
        assert len(shipped) >= 6
        for src in shipped:
            assert (tmp_path / "ex" / kind / src.name).read_bytes() == src.read_bytes()
    for src in DATA.glob("*.csv"):
        assert (tmp_path / "ex" / "distforest" / "data" / src.name).read_bytes() == src.read_bytes()
    again = invoke("examples", tmp_path / "ex")
    assert again.exit_code == 6 and "--overwrite" in again.output
    assert invoke("examples", tmp_path / "ex", "--overwrite").exit_code == 0


def test_shipped_files_are_found_by_name(tmp_path, monkeypatch):
    from distforest.parallel.cluster_config import load_cluster_config

    monkeypatch.chdir(tmp_path)  # not the repository root
    config = load_cluster_config("local")
    assert config.kind == "local" and Path(config.source).name == "local.yaml"
    assert examples.find("pipelines", "main") == ROOT / "pipelines" / "main.yaml"
    assert examples.find("pipelines", "pipelines/main.yaml") is None  # a path is a path
    with pytest.raises(Exception, match=r"did you mean 'local'"):
        load_cluster_config("locl")
    valid = invoke("run", "main", "--dry-run")
    assert valid.exit_code == 0, valid.output
    assert str(DATA / "breast_cancer.csv") in valid.output or "tiles" in valid.output


def test_a_build_ships_copies_identical_to_the_top_level_files(tmp_path):
    """``setup.py``'s build_py hook copies pipelines/ and cluster_configs/ into the package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("distforest_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the hook; setup() runs only under the backend
    copied = module.copy_examples(tmp_path)
    for kind in examples.KINDS:
        shipped = sorted((ROOT / kind).glob("*.yaml"))
        built = tmp_path / "distforest" / "data" / kind
        assert sorted(p.name for p in built.glob("*.yaml")) == [p.name for p in shipped]
        for src in shipped:
            assert (built / src.name).read_bytes() == src.read_bytes()
    assert len(copied) == sum(len(list((ROOT / k).glob("*.yaml"))) for k in examples.KINDS)


# -- settings ----------------------------------------------------------------------


def test_settings_live_in_dask_config(monkeypatch):
    for name in settings.SETTINGS:
        assert dask.config.get(f"distforest.{name}") == settings.defaults()[name]
        monkeypatch.delenv(settings.SETTINGS[name].env or "UNSET_X", raising=False)
    assert settings.get("stall-timeout") == 3600
    with dask.config.set({"distforest.stall-timeout": 5}):
        assert settings.get("stall-timeout") == 5
    monkeypatch.setenv("DISTFOREST_STALL_TIMEOUT", "7")  # the older name wins
    with dask.config.set({"distforest.stall-timeout": 5}):
        assert settings.get("stall-timeout") == 7
        assert settings.source("stall-timeout") == "DISTFOREST_STALL_TIMEOUT"
    with (
        dask.config.set({"distforest.in-process-cells": -1}),
        pytest.raises(ValueError, match=r"distforest\.in-process-cells must be a whole number"),
    ):
        settings.get("in-process-cells")


def test_dask_reads_the_distforest_section_from_its_environment():
    code = ("from distforest import settings; import dask.config; print(settings.get("
            "'max-cpu-hours'), dask.config.get('distforest.no-worker-timeout'))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASK_DISTFOREST__MAX_CPU_HOURS": "12.5",
           "DASK_DISTFOREST__NO_WORKER_TIMEOUT": "9"}  # fmt: skip
    env.pop("DISTFOREST_MAX_CPU_HOURS", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["12.5", "9"], out.stderr


def test_the_settings_table_lists_every_setting_with_its_default():
    text = (ROOT / "docs" / "clusters.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `distforest.")]
    assert len(rows) == len(settings.SETTINGS)
    for row, (name, setting) in zip(rows, settings.SETTINGS.items(), strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == f"`distforest.{name}`"
        assert cells[1] == str(settings.defaults()[name])
        assert (f"`{setting.env}`" in cells[2]) == (setting.env is not None)


# -- DBSCAN ------------------------------------------------------------------------


@pytest.mark.parametrize("stored", [False, True], ids=["in-memory", "by-tiles"])
def test_dbscan_all_noise_names_an_eps_that_gives_clusters(stored, caplog):
    from distforest.apps import clustering

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(40, 3))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    S = Z @ Z.T  # unit diagonal: distance sqrt(2 - 2 S) = Euclidean between rows of Z
    similarity = S
    if stored:
        blocks = [slice(s, min(s + 7, 40)) for s in range(0, 40, 7)]
        similarity = clustering.SimilarityOperator(
            40, S.__matmul__, lambda r: [(c, S[r, c]) for c in blocks], None, block=7
        )
    with caplog.at_level(logging.WARNING, logger="distforest"):
        labels = clustering.dbscan(similarity, eps=0.01, min_samples=4)
    assert (labels == -1).all()
    (record,) = [r for r in caplog.records if "noise" in r.getMessage()]
    message = record.getMessage()
    D = np.sqrt(np.maximum(2 - 2 * S, 0))
    kth = np.sort(D, axis=1)[:, 3]  # the 4th nearest, itself included
    assert f"eps >= {kth.min():.3g} gives at least one cluster" in message
    assert f"eps = {np.median(kth):.3g}" in message
    at = DBSCAN(eps=kth.min() * (1 + 1e-9), min_samples=4, metric="precomputed").fit_predict(D)
    below = DBSCAN(eps=kth.min() * 0.999, min_samples=4, metric="precomputed").fit_predict(D)
    assert (at >= 0).any() and (below == -1).all()  # the named eps is the threshold
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="distforest"):
        clustering.dbscan(similarity, eps=float(np.median(kth)), min_samples=4)
    assert not [r for r in caplog.records if "noise" in r.getMessage()]


# -- another matrix of the same forest ---------------------------------------------


def test_the_cli_adds_another_method_of_the_same_forest_to_its_store(tmp_path):
    import xarray as xr

    from distforest import ProximityForest

    out = tmp_path / "p.zarr"
    base = ["-q", "proximity", DATA / "breast_cancer.csv", "--target", "Class", "--drop", "Id",
            "--trees", "10", "--out", out]  # fmt: skip
    assert invoke(*base).exit_code == 0
    leaves = xr.open_zarr(out)["leaves"].values
    oob = invoke(*base, "--method", "oob", "--plot", tmp_path / "oob.png")
    assert oob.exit_code == 0, oob.output
    assert "proximity_oob 699 x 699" in oob.output and (tmp_path / "oob.png").exists()
    ds = xr.open_zarr(out)
    assert ds.attrs["status"] == "complete"
    np.testing.assert_array_equal(ds["leaves"].values, leaves)  # the same forest, not refitted
    forest = ProximityForest.load(out)
    expected = forest.proximity(method="oob").values
    np.testing.assert_allclose(ds["proximity_oob"].values, expected, rtol=1e-6)
    again = invoke(*base, "--method", "oob")
    assert again.exit_code == 0 and "already complete" in again.output
    other = invoke(*[a if a != "10" else "11" for a in base], "--method", "rfgap")
    assert other.exit_code == 6 and "forest.n_estimators: 10 -> 11" in other.output
    assert "proximity_rfgap" not in xr.open_zarr(out)


def test_a_python_cell_run_twice_finds_its_store(tmp_path, monkeypatch):
    import distforest
    from distforest import ProximityForest
    from distforest.errors import StoreError

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(120, 4)), rng.integers(0, 2, 120)
    with distforest.execution("synchronous"):
        first = ProximityForest(n_estimators=8, random_state=0).fit(X, y)
        P1 = first.proximity(store="prox.zarr").values
        second = ProximityForest(n_estimators=8, random_state=0).fit(X, y)  # the cell again
        P2 = second.proximity(store="prox.zarr").values
        np.testing.assert_array_equal(P1, P2)
        second.proximity(method="rfgap", store="prox.zarr")
        other = ProximityForest(n_estimators=8, random_state=1).fit(X, y)
        with pytest.raises(StoreError, match="already exists"):
            other.proximity(store="prox.zarr")
        unseeded = ProximityForest(n_estimators=8).fit(X, y)
        with pytest.raises(StoreError, match="already exists"):
            unseeded.proximity(store="prox.zarr")
