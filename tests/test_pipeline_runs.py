"""Batch runs: resume after a killed driver, locks, re-runs, changed configs, reports.

A run that is killed is the real CLI in a subprocess of its own (killed with its
process group, as a machine dies); the runs before and after it, like cron's next
run, call the same command in this process (``run_cli``: a process start-up and
the imports spared each time).  Stores are compared byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.store.lock import StoreLock, lock_path
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
BC = ROOT / "distforest" / "data" / "breast_cancer.csv"


def pipeline(tmp_path: Path, name: str, *, trees: int = 20, tile: int = 16) -> Path:
    """A small pipeline with many tiny tiles (a long tile stage to interrupt)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n"
        f"input: {{path: {BC}, target: Class, drop: [Id]}}\n"
        f"forest: {{n_estimators: {trees}, random_state: 3, tile_size: {tile}}}\n"
        "outliers: {out: outliers.csv}\n"
        f"output: {{dir: {tmp_path / name}, store: run.zarr}}\n"
    )
    return path


def cli_cmd(*args: object) -> list[str]:
    return [sys.executable, "-m", "distforest", "-q", *map(str, args)]


def run_cli(*args: object) -> subprocess.CompletedProcess:
    """``distforest -q ARGS`` in this process: its exit code, stdout and stderr."""
    result = CliRunner().invoke(cli, ["-q", *map(str, args)], catch_exceptions=False)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def arrays(store: Path) -> dict[str, np.ndarray]:
    """Every array of a store (root, forest/ and done/), by path."""
    group = zarr.open_group(str(store), mode="r", use_consolidated=False)
    out = {}

    def walk(g: zarr.Group, prefix: str) -> None:
        for name, arr in g.arrays():
            out[prefix + name] = arr[...]
        for name, sub in g.groups():
            walk(sub, f"{prefix}{name}/")

    walk(group, "")
    return out


def done_count(store: Path, name: str = "proximity") -> int:
    """Tiles marked done: one chunk file each in done/<name> (counted without zarr: fast).

    zarr writes a chunk to a ``.partial`` file and renames it: those are not counted.
    """
    return sum(
        sum(not f.endswith(".partial") for f in files)
        for _, _, files in os.walk(store / "done" / name / "c")
    )


def test_resume_after_sigkill_of_the_driver_is_bit_identical(tmp_path):
    reference = pipeline(tmp_path, "clean", tile=32)
    result = run_cli("run", reference)
    assert result.returncode == 0, result.stderr
    clean = tmp_path / "clean" / "run.zarr"

    killed = pipeline(tmp_path, "killed", tile=32)
    store = tmp_path / "killed" / "run.zarr"
    proc = subprocess.Popen(cli_cmd("run", killed), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    total = 22 * 23 // 2  # 699 rows in tiles of 32: 22 blocks, upper triangle
    deadline = time.time() + 240
    while done_count(store) < 100 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    done_at_kill = done_count(store)
    # The machine dies: the driver and its worker processes, all at once.
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 100 <= done_at_kill < total, f"interrupt came too late/early: {done_at_kill}/{total}"
    assert not RunStore.open(store).is_complete

    status = run_cli("status", store)
    assert status.returncode == 1 and "interrupted" in status.stdout
    chunk_dir = store / "proximity" / "c"
    done = zarr.open_array(str(store), path="done/proximity", mode="r")[...]
    finished = [chunk_dir / str(i) / str(j) for i, j in zip(*np.nonzero(done), strict=True)]
    finished = [p for p in finished if p.exists()]
    mtimes = {p: p.stat().st_mtime_ns for p in finished}
    assert len(mtimes) >= 80

    resumed = run_cli("run", killed)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stdout
    assert RunStore.open(store).is_complete
    # Finished tiles were not computed again...
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())
    # ... and the result equals the uninterrupted run's, bit for bit.
    a, b = arrays(clean), arrays(store)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "clean" / "outliers.csv"),
        pd.read_csv(tmp_path / "killed" / "outliers.csv"),
    )
    report = json.loads((tmp_path / "killed" / "report.json").read_text())
    assert report["mode"] == "resume"
    assert report["stages"]["tiles"]["skipped"] >= done_at_kill

    again = run_cli("run", killed)
    assert again.returncode == 0 and "already complete" in again.stdout


def test_changed_config_is_refused_then_restarted(tmp_path):
    path = pipeline(tmp_path, "p", trees=6, tile=256)
    assert run_cli("run", path).returncode == 0
    store = tmp_path / "p" / "run.zarr"
    before = RunStore.open(store).attrs["spec_hash"]
    changed = run_cli("run", path, "--set", "forest.n_estimators=7")
    assert changed.returncode == 6
    assert "different job" in changed.stderr and "n_estimators: 6 -> 7" in changed.stderr
    assert RunStore.open(store).attrs["spec_hash"] == before
    restarted = run_cli("run", path, "--set", "forest.n_estimators=7", "--restart")
    assert restarted.returncode == 0, restarted.stderr
    rs = RunStore.open(store)
    assert rs.is_complete and rs.attrs["n_trees"] == 7 and rs.attrs["spec_hash"] != before


def test_one_run_at_a_time_and_stale_locks(tmp_path):
    path = pipeline(tmp_path, "p", trees=6, tile=256)
    store = tmp_path / "p" / "run.zarr"
    with StoreLock(store, run_id="other"):
        busy = run_cli("run", path)
    assert busy.returncode == 7
    assert "being written by run other" in busy.stderr and f"pid {os.getpid()}" in busy.stderr
    assert not store.exists()

    # A run that died without releasing: its record is left, its flock is gone.
    lock_path(store).write_text(json.dumps({"run_id": "dead", "pid": 999999, "host": "h"}))
    result = run_cli("run", path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    assert report["took_over_stale_lock_of"]["run_id"] == "dead"
    md = (tmp_path / "p" / "report.md").read_text()  # in words, not a Python dict
    assert "took over the stale lock of run dead (pid 999999 on h, " in md and "{" not in md
    assert not lock_path(store).exists()  # released cleanly: removed


def test_report_and_status_of_a_pipeline_with_every_application(tmp_path):
    path = tmp_path / "all.yaml"
    path.write_text(
        f"input: {{path: {BC}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 12, random_state: 0, tile_size: 256}\n"
        "proximity: {method: rfgap}\n"
        "impute: {out: imputed.csv, iterations: 1, n_estimators: 5}\n"
        "outliers: {out: outliers.csv, plot: outliers.png}\n"
        "mislabels: {out: suspects.csv}\n"
        "mds: {out: mds.csv, plot: mds.png}\n"
        f"output: {{dir: {tmp_path / 'out'}, store: run.zarr, plot: prox.png}}\n"
    )
    # --workers asks for a LocalCluster (a small input without it runs in this process)
    result = CliRunner().invoke(cli, ["-q", "run", str(path), "--workers", "2"],
                                catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    assert set(report["stages"]) == {"fit", "tiles", "plot", "impute", "outliers", "mislabels",
                                     "mds", "report"} - {"report"}  # fmt: skip
    assert all(s >= 0 for s in report["seconds_per_stage"].values())
    assert report["tasks"]["fit-trees"]["tasks"] >= 1
    assert report["tasks"]["proximity_rfgap-tiles"]["tasks"] == 9  # 3 x 3 tiles, not symmetric
    assert report["retries"] == 0
    assert report["data_quality"]["missing_cells"] == 16
    assert report["data_quality"]["cells_imputed"] == 16
    assert report["bytes_written"]["store"] > 699 * 699 * 4 // 10
    assert report["peak_worker_memory_bytes"] and all(
        v > 10_000_000 for v in report["peak_worker_memory_bytes"].values()
    )
    assert report["versions"]["zarr"].startswith("3")
    engine = report["engine"]  # which engine and addresses the run used
    assert engine["engine"] == "local" and engine["class"] == "distributed.LocalCluster"
    assert engine["scheduler"].startswith("tls://127.0.0.1:") and engine["tls"] is True
    assert engine["workers"] and all(w.startswith("tls://127.0.0.1:") for w in engine["workers"])
    assert engine["dashboard"] is None
    md = (out / "report.md").read_text()
    assert (
        f"- engine: local (distributed.LocalCluster, <default>), scheduler {engine['scheduler']}"
        in md
    )
    assert "![MDS picture](mds.png)" in md and "![outlier picture](outliers.png)" in md
    assert len(pd.read_csv(out / "suspects.csv")) == 699

    # Nothing in the store needs code to load: numeric arrays, standard codecs, JSON.
    for meta in (out / "run.zarr").rglob("zarr.json"):
        text = json.loads(meta.read_text())
        if text.get("node_type") == "array":
            assert np.dtype(text["data_type"]).kind in "biuf", (meta, text["data_type"])
            assert {c["name"] for c in text["codecs"]} <= {"bytes", "zstd", "transpose"}, meta

    status = CliRunner().invoke(cli, ["status", str(out / "run.zarr")])
    assert status.exit_code == 0 and "status:  complete" in status.output
    assert "proximity_rfgap: 9 of 9 written" in status.output
    state = json.loads(CliRunner().invoke(cli, ["status", str(out / "run.zarr"), "--json"]).output)
    assert set(state["stages"]) >= {"fit", "tiles", "impute", "mds", "report"}


def test_dry_run_prints_the_plan_and_refuses_a_full_disk(tmp_path, monkeypatch):
    path = pipeline(tmp_path, "p", trees=50, tile=100)
    result = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "28 tiles of 100 x 100" in result.output  # 7 blocks: 7 * 8 / 2
    assert "699 rows x 9 features" in result.output and "disk:" in result.output
    assert not (tmp_path / "p").exists()

    from distforest.jobs import estimates

    monkeypatch.setattr(estimates, "free_space", lambda directory: 1000)
    for args in (["run", str(path), "--dry-run"], ["-q", "run", str(path)]):
        full = CliRunner().invoke(cli, args)
        assert full.exit_code == 6 and "not enough disk space" in full.output
        assert "only 1.0 kB are free" in full.output
    assert not (tmp_path / "p" / "run.zarr").exists()


def test_dry_run_reads_the_plan_the_run_uses(tmp_path):
    path = pipeline(tmp_path, "same", trees=5, tile=64)
    dry = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    planned = re.search(r"([\d,]+) tiles of (\d+) x", dry.output)
    assert planned, dry.output
    run = CliRunner().invoke(cli, ["-q", "run", str(path)])
    assert run.exit_code == 0, run.output
    stats = RunStore.open(tmp_path / "same" / "run.zarr").attrs["stages"]["tiles"]
    assert int(planned.group(1).replace(",", "")) == stats["tiles"] == 11 * 12 // 2
    # without tile_size in the file, the plan uses the estimator's default
    text = path.read_text().replace(", tile_size: 64", "")
    path.write_text(text.replace("same", "default"))
    dry = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert "1 tiles of 699 x 699" in dry.output, dry.output


def test_validate(tmp_path):
    shipped = sorted(str(p) for p in (ROOT / "pipelines").glob("*.yaml"))
    result = CliRunner().invoke(cli, ["validate", *shipped])
    assert result.exit_code == 0, result.output
    assert result.output.count("ok ") == len(shipped)

    base = pipeline(tmp_path, "p").read_text()
    cases = {
        "typo": (base.replace("n_estimators", "n_estimator"), "did you mean 'n_estimators'"),
        "choice": (base + "proximity: {method: rfgp}\n", "did you mean 'rfgap'"),
        "no target": (
            base.replace(", target: Class", "") + "mislabels: {out: s.csv}\n",
            "mislabels needs the labels",
        ),
        "no bootstrap": (
            base.replace("random_state: 3", "random_state: 3, bootstrap: false")
            + "proximity: {method: oob}\n",
            "proximity.method='oob' needs out-of-bag rows, but forest.bootstrap=False",
        ),
        "no bootstrap, two uses": (
            base.replace("random_state: 3", "random_state: 3, bootstrap: false")
            + "impute: {out: i.csv, proximity: rfgap}\nmislabels: {out: s.csv}\n",
            "impute.proximity='rfgap', mislabels='rfgap' need out-of-bag rows",
        ),
        "missing input": (base.replace(str(BC), "/no/such/file.csv"), "does not exist"),
        "code": ("input: !!python/object/apply:os.system ['touch pwned']\n", "not valid YAML"),
    }
    for name, (text, message) in cases.items():
        bad = tmp_path / f"{name.replace(' ', '_')}.yaml"
        bad.write_text(text)
        result = CliRunner().invoke(cli, ["validate", str(bad)])
        assert result.exit_code == 4, (name, result.output)
        assert "INVALID" in result.output and message in result.output, (name, result.output)
    assert not Path("pwned").exists()
    override = CliRunner().invoke(cli, ["validate", str(tmp_path / "p.yaml"), "--set", "forst.x=1"])
    assert override.exit_code == 4 and "did you mean 'forest'" in override.output


@pytest.mark.parametrize("phase", ["fit", "tiles"])
def test_killed_worker_gives_the_identical_result(phase, tmp_path, client):
    """A worker process SIGKILLed mid-phase: tasks are retried, results identical."""
    from distributed import Client, LocalCluster

    from distforest.forests.proximity_forest import ProximityForest

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 6))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    params = {"n_estimators": 24, "batch_size": 2, "tile_size": 40, "random_state": 5}
    ref = ProximityForest(**params).set_execution(client).fit(X, y)
    expected = ref.proximity(store=tmp_path / "ref.zarr")

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,  # fmt: skip
        Client(cluster) as own,
    ):
        killed: list[int] = []

        def kill_one(stage: str, done: int, total: int) -> None:
            if stage == phase and done == 2 and not killed:
                pid = next(iter(own.run(os.getpid).values()))
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        pf = ProximityForest(**params).set_execution(own, progress=kill_one).fit(X, y)
        got = pf.proximity(store=tmp_path / "got.zarr")
        assert killed, "no worker was killed"
        assert killed[0] not in own.run(os.getpid).values()
    np.testing.assert_array_equal(pf.leaves_, ref.leaves_)
    np.testing.assert_array_equal(pf.inbag_, ref.inbag_)
    assert got.values.tobytes() == expected.values.tobytes()


@pytest.mark.parametrize(
    ("name", "overrides", "options", "store"),
    [
        # a cluster option: the report's cluster facts (a small input alone runs in process)
        ("xforest_cluster", ["xforest.n_estimators=20"], ["--workers", "1"],
         "ionosphere_xforest.zarr"),
        ("knn", [], [], "neighbors.zarr"),
    ],
)  # fmt: skip
def test_xforest_and_knn_pipelines_are_locked_and_reported(name, overrides, options, store,
                                                           tmp_path):  # fmt: skip
    path = ROOT / "pipelines" / f"{name}.yaml"
    out = tmp_path / name
    args = ["-q", "run", str(path), "--set", f"output.dir={out}", *options]
    for item in overrides:
        args += ["--set", item]
    with StoreLock(out / store, run_id="other"):
        busy = CliRunner().invoke(cli, args)
    assert busy.exit_code == 7 and "being written by run other" in busy.output
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["seconds"] > 0 and report["bytes_written"]
    assert str(out / store) in json.dumps(report["config"])
    assert (out / "report.md").exists() and not lock_path(out / store).exists()
    if name == "xforest_cluster":  # which engine and addresses, tasks and retries
        engine = report["engine"]
        assert engine["engine"] == "local" and engine["scheduler"].startswith("tls://127.0.0.1:")
        assert len(engine["workers"]) >= 1
        assert report["tasks"] and report["retries"] == 0, report["tasks"]
        assert "## Cluster" in (out / "report.md").read_text()


IONOSPHERE = ROOT / "distforest" / "data" / "ionosphere.csv"


def ionosphere_pipeline(tmp_path: Path, name: str, sections: str, output: str = "") -> Path:
    """A pipeline file on the bundled ionosphere data with the given sections."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ninput: {{path: {IONOSPHERE}, target: Class}}\n{sections}"
        f"output: {{dir: {tmp_path / name}{output}}}\n"
    )
    return path


def xforest_pipeline(tmp_path: Path, name: str) -> Path:
    """An X-Forest pipeline with many tiny tiles (a long tile stage to interrupt)."""
    sections = (
        "xforest: {n_estimators: 100, random_state: 1, tile_size: 16}\n"
        "clustering: {method: kernel-kmeans, k: 2, out: clusters.csv}\n"
    )
    return ionosphere_pipeline(tmp_path, name, sections, ", store: sim.zarr")


def test_xforest_pipeline_resumes_after_sigkill_bit_identical(tmp_path):
    clean = run_cli("run", xforest_pipeline(tmp_path, "clean"))
    assert clean.returncode == 0, clean.stderr
    killed = xforest_pipeline(tmp_path, "killed")
    store = tmp_path / "killed" / "sim.zarr"

    def count() -> int:
        return done_count(store, "beta_similarity")

    proc = subprocess.Popen(cli_cmd("run", killed), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    total = 22 * 23 // 2  # 351 rows in tiles of 16: 22 blocks, upper triangle
    deadline = time.time() + 240
    while count() < 40 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    done_at_kill = count()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 40 <= done_at_kill < total, f"interrupt came too late/early: {done_at_kill}/{total}"
    assert not RunStore.open(store).is_complete

    resumed = run_cli("run", killed)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stdout
    stats = RunStore.open(store).attrs["stages"]["tiles"]
    assert stats["skipped"] >= done_at_kill and stats["tiles"] == total
    a, b = arrays(tmp_path / "clean" / "sim.zarr"), arrays(store)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "clean" / "clusters.csv"),
        pd.read_csv(tmp_path / "killed" / "clusters.csv"),
    )
    again = run_cli("run", killed)
    assert again.returncode == 0 and "already complete" in again.stdout


def knn_pipeline(tmp_path: Path, name: str) -> Path:
    """A k-NN pipeline whose model (a 300-tree forest metric) takes a while to fit."""
    sections = (
        "neighbors: {metric: euclidean, k: 5, normalize: zscore, algorithm: auto, out: nb.zarr}\n"
        "knn: {task: classification, k: 5, weights: distance, metric: rfgap, normalize: none,\n"
        "      n_estimators: 300, random_state: 0, model: model.zarr,\n"
        f"      predict: {{input: {IONOSPHERE}, out: predictions.csv}}}}\n"
    )
    return ionosphere_pipeline(tmp_path, name, sections)


def test_knn_pipeline_resumes_by_stage_after_sigkill(tmp_path):
    clean = run_cli("run", knn_pipeline(tmp_path, "clean"))
    assert clean.returncode == 0, clean.stderr
    killed = knn_pipeline(tmp_path, "killed")
    out = tmp_path / "killed"
    proc = subprocess.Popen(cli_cmd("run", killed), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 240

    def neighbours_done() -> bool:  # the job's store records its finished stages
        try:
            return "neighbors" in (RunStore.open(out / "nb.zarr").attrs.get("stages") or {})
        except Exception:
            return False

    while not neighbours_done() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # while the model's forest is being fitted
    proc.wait()
    assert neighbours_done() and not (out / "predictions.csv").exists()
    assert not RunStore.open(out / "nb.zarr").is_complete  # complete when every stage is
    kept = {p: p.stat().st_mtime_ns for p in (out / "nb.zarr").rglob("*")
            if p.is_file() and "/c/" in str(p)}  # (the arrays' chunks)  # fmt: skip
    assert kept

    resumed = run_cli("run", killed)
    assert resumed.returncode == 0, resumed.stderr
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())  # stage kept, not redone
    for store in ("nb.zarr", "model.zarr"):
        a, b = arrays(tmp_path / "clean" / store), arrays(out / store)
        assert sorted(a) == sorted(b)
        for name in a:
            assert a[name].tobytes() == b[name].tobytes(), (store, name)
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "clean" / "predictions.csv"), pd.read_csv(out / "predictions.csv")
    )
    again = run_cli("run", killed)
    assert again.returncode == 0 and "already complete" in again.stdout

    changed = run_cli("run", killed, "--set", "knn.k=7")
    assert changed.returncode == 6 and "knn" in changed.stderr


@pytest.mark.parametrize(
    ("method", "trees", "itemsize"),
    [("original", 100, 1), ("original", 300, 2), ("rfgap", 100, 4), ("oob", 100, 4)],
)
def test_the_disk_plan_counts_the_proximity_as_stored(method, trees, itemsize):
    """Breiman's proximity is stored as counts of trees (uint8 below 255 trees, then
    uint16); oob and rfgap as float32: the disk pre-check plans that many bytes."""
    from distforest.jobs.estimates import estimate
    from distforest.jobs.proximity import ProximityJob

    forest = {"n_estimators": trees, "tile_size": 1000, "min_samples_leaf": 1,
              "batch_size": None, "max_features": "sqrt"}  # fmt: skip
    job = ProximityJob(input="x.csv", out="o.zarr", forest=forest, method=method)
    plan = estimate(job, 10_000, 5, threads=2)
    assert plan["store"]["proximity matrix (uncompressed)"] == itemsize * 10_000**2


@pytest.mark.parametrize(("n", "kept"), [(20_000, 10 * 2048 * 100 * 12), (1_000_000, 256 * 2**20)])
def test_the_memory_plan_counts_the_row_blocks_a_worker_keeps(n, kept):
    """A worker writing tiles keeps the matrix's row blocks (up to a budget): the
    plan's worker peak includes them, on top of a tile task's own arrays."""
    from distforest.jobs.estimates import estimate
    from distforest.jobs.proximity import ProximityJob

    forest = {"n_estimators": 100, "tile_size": 2048, "min_samples_leaf": 1,
              "batch_size": None, "max_features": "sqrt"}  # fmt: skip
    job = ProximityJob(input="x.csv", out="o.zarr", forest=forest, method="original")
    plan = estimate(job, n, 2, threads=2)
    task_arrays = 2 * 2048 * 100 * 9 + 3 * 4 * 2048 * 2048
    assert plan["tile_worker_bytes"] == task_arrays + kept  # 20k: all 10 blocks; 1M: the budget
    assert plan["worker_peak_bytes"] >= plan["tile_worker_bytes"]
