"""One decision of where work runs (issue 25, item 3), and one plan for every dry run.

Small inputs run in this process for every command and every estimator; a
named cluster is always used.  "No cluster was started" is asserted by
replacing :func:`distforest.parallel.cluster.connect` (through which every
LocalCluster, scheduler address and cluster file goes) with a function that
fails; the session's shared ``client`` fixture, once made, is the default
``distributed`` client, so the tests that expect no cluster hide it.
Timings of the same commands, in fresh processes, are in
``benchmarks/results/small_commands.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

import dask.config
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.datasets import make_classification

import distforest.parallel.cluster as cluster_module
from distforest import (
    SMERF,
    KNNClassifier,
    KNNRegressor,
    ProximityForest,
    ProximityImputer,
    SimilarityForestClassifier,
    XForest,
    execution,
)
from distforest.cli.main import cli
from distforest.parallel import placement
from distforest.parallel.execution import Execution, Runner

ROOT = Path(__file__).resolve().parents[1]
BC = str(ROOT / "distforest" / "data" / "breast_cancer.csv")


class ClusterStarted(AssertionError):
    """Raised by the stand-in for ``connect``."""


@pytest.fixture
def no_cluster(monkeypatch):
    """Fail on any cluster start or connection; hide a default client of the session."""
    import distributed

    def refuse(**kwargs: object) -> None:
        raise ClusterStarted(f"a cluster was started or reached: {kwargs}")

    def no_default(*args: object, **kwargs: object) -> None:
        raise ValueError("No clients found")

    monkeypatch.setattr(cluster_module, "connect", refuse)
    monkeypatch.setattr(distributed, "get_client", no_default)


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


# -- the rule ---------------------------------------------------------------------------


def test_the_rule(no_cluster, monkeypatch):
    limit = placement.in_process_cells()
    assert limit == 2_000_000  # distforest.yaml's default
    assert placement.runs_in_process(limit, Execution())
    assert not placement.runs_in_process(limit + 1, Execution())
    # anything named is used, however small the input
    assert not placement.runs_in_process(1, Execution(client="synchronous"))
    assert not placement.runs_in_process(1, Execution(scheduler="tcp://127.0.0.1:1"))
    assert not placement.runs_in_process(1, Execution(cluster="c.yaml"))
    # a command's options alone decide for it
    options = {"scheduler": None, "cluster": None}
    assert placement.runs_in_process(10, options=options)
    assert not placement.runs_in_process(10, options={**options, "n_workers": 1})
    assert not placement.runs_in_process(limit + 1, options=options)
    # the one setting
    with dask.config.set({"distforest.in-process-cells": 5}):
        assert not placement.runs_in_process(6, Execution())
        assert placement.runs_in_process(5, Execution())


def test_cells_of():
    X = np.zeros((7, 3))
    assert placement.cells_of(X) == 21
    assert placement.cells_of(X, None, np.zeros((2, 3))) == 27
    assert placement.cells_of(["a", "b"]) == 2


def test_a_large_input_starts_a_cluster_and_the_test_sees_it(no_cluster, monkeypatch):
    """The stand-in fails when the threshold says "cluster": the other tests can fail."""
    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    with (
        dask.config.set({"distforest.in-process-cells": X.size - 1}),
        pytest.raises(ClusterStarted),
    ):
        ProximityForest(n_estimators=3).fit(X, y)
    with pytest.raises(ClusterStarted, match="n_workers"):
        with placement.place(X.size, {"scheduler": None, "cluster": None, "n_workers": 1}):
            pass


def test_a_named_execution_is_used(no_cluster):
    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    with pytest.raises(ClusterStarted, match=r"tcp://127\.0\.0\.1:1"):
        ProximityForest(n_estimators=3).set_execution(scheduler="tcp://127.0.0.1:1").fit(X, y)


# -- every estimator, default construction ------------------------------------------------


def _estimator_calls():
    X, y = make_classification(n_samples=80, n_features=5, n_informative=3, random_state=1)
    S = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 5)
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    holes = X.copy()
    holes[::7, 2] = np.nan
    return {
        "ProximityForest": lambda: ProximityForest().fit(X, y).proximity(),
        "XForest": lambda: XForest().fit(X).similarity(),
        "ProximityImputer": lambda: ProximityImputer().fit_transform(holes),
        "KNNClassifier": lambda: KNNClassifier().fit(X, y).predict(X),
        "KNNClassifier rf-proximity": lambda: (
            KNNClassifier(metric="rf-proximity").fit(X, y).predict(X)
        ),
        "KNNRegressor": lambda: KNNRegressor().fit(X, X[:, 0]).predict(X),
        "SimilarityForestClassifier": lambda: SimilarityForestClassifier().fit(S, y).predict(S),
        "SimilarityForestClassifier rbf": lambda: (
            SimilarityForestClassifier(metric="rbf").fit(X, y).proximity()
        ),
        "SMERF": lambda: SMERF().fit(X, D).predict_distance(X),
    }


@pytest.mark.parametrize("name", list(_estimator_calls()))
def test_every_estimator_runs_small_inputs_in_process(no_cluster, name):
    """Default construction, no execution given: no LocalCluster (it took 10-300 s)."""
    assert _estimator_calls()[name]() is not None


def test_in_process_uses_the_threads_of_this_process(no_cluster):
    seen = []
    with placement.runner(10) as r:
        seen.append((r.in_process, r.threads()))
    assert seen == [(True, placement.in_process_threads())]
    with execution("synchronous"), placement.runner(10) as r:  # named: as it says
        assert r.in_process and r.threads() == 1


# -- every command on the breast-cancer table -------------------------------------------------

BC_T = [BC, "--target", "Class", "--drop", "Id"]
BC_X = [BC, "--drop", "Id", "--drop", "Class", "--drop", "Bare.nuclei"]


def test_every_command_runs_a_small_table_in_process(no_cluster, tmp_path):
    X = pd.read_csv(BC).drop(columns=["Id", "Class", "Bare.nuclei"]).to_numpy(float)
    np.save(tmp_path / "D.npy", np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)))
    o = tmp_path
    commands = [
        ["proximity", *BC_T, "--trees", 5, "--out", o / "p.zarr"],
        ["impute", *BC_T, "--trees", 5, "--iterations", 1, "--out", o / "imp.csv"],
        ["outliers", *BC_T, "--trees", 5, "--out", o / "out.csv"],
        ["mislabels", *BC_T, "--trees", 5, "--out", o / "mis.csv"],
        ["mds", *BC_T, "--trees", 5, "--out", o / "mds.csv"],
        ["xforest", *BC_X, "--trees", 20, "--out", o / "x.zarr"],
        ["cluster", o / "x.zarr", "--method", "spectral", "--k", 2, "--out", o / "c.csv"],
        ["cluster", o / "x.zarr", "--method", "kernel-kmeans", "--k", 2, "--matrix-free",
         "--out", o / "c2.csv"],
        ["similarity", *BC_X, "--out", o / "s.zarr"],
        ["neighbors", *BC_X, "--out", o / "nn.zarr"],
        ["knn", "fit", *BC_T, "--drop", "Bare.nuclei", "--metric", "rf-proximity",
         "--trees", 5, "--out", o / "knn.zarr"],
        ["knn", "predict", o / "knn.zarr", BC, "--out", o / "knn.csv"],
        ["simforest", "fit", *BC_T, "--drop", "Bare.nuclei", "--trees", 5,
         "--out", o / "sf.zarr"],
        ["simforest", "predict", o / "sf.zarr", BC, "--drop", "Id", "--out", o / "sf.csv"],
        ["simforest", "proximity", o / "sf.zarr", "--out", o / "sfp.zarr"],
        ["smerf", "fit", *BC_X, "--trees", 5, "--distances", o / "D.npy", "--out", o / "m.zarr"],
        ["smerf", "predict", o / "m.zarr", *BC_X, "--out", o / "md.zarr"],
    ]  # fmt: skip
    for args in commands:
        result = invoke("-q", *args)
        assert result.exit_code == 0, (args, result.output)
    assert len(pd.read_csv(o / "knn.csv")) == 699


# -- one plan for every dry run ---------------------------------------------------------------

#: The tasks a plan counts: fit batches, neighbour searches and tiles (``*-tiles``).
COUNTED = (
    "fit-trees",
    "xforest-trees",
    "simforest-fit",
    "smerf-trees",
    "neighbors",
    "simforest-predict",
)


@pytest.fixture
def count_tasks(monkeypatch):
    """Record (name, tasks) of every Runner.run of the test."""
    seen: list[tuple[str, int]] = []
    original = Runner.run

    def counting(self, func, items, *, name, progress=None):
        seen.append((name, len(items)))
        return original(self, func, items, name=name, progress=progress)

    monkeypatch.setattr(Runner, "run", counting)
    return seen


def _planned(output: str) -> tuple[int, int]:
    found = re.search(r"tasks:\s+([\d,]+) \(([\d,]+) of them tiles\)", output)
    assert found, output
    return int(found.group(1).replace(",", "")), int(found.group(2).replace(",", ""))


def _ran(seen: list[tuple[str, int]], columns: bool = False) -> tuple[int, int]:
    """The counted tasks and tiles of a run; ``columns``: with a column imputation's forests
    (one run per column and pass, ``column-<j>``: counted by ``impute``'s plan, not by a
    pipeline's, whose impute stage is noted only)."""
    tiles = sum(n for name, n in seen if name.endswith("-tiles"))
    fits = sum(n for name, n in seen if name in COUNTED or (columns and name.startswith("column-")))
    return fits + tiles, tiles


def test_proximity_dry_run_plans_the_tasks_the_run_runs(tmp_path, count_tasks):
    args = [*BC_T, "--trees", 9, "--tile-size", 256, "--out", tmp_path / "p.zarr"]
    dry = invoke("proximity", *args, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert not (tmp_path / "p.zarr").exists() and count_tasks == []
    for field in ("tasks:", "disk:", "memory:", "time:", "runs:"):
        assert field in dry.output
    assert "in this process on" in dry.output
    assert invoke("-q", "proximity", *args).exit_code == 0
    assert _planned(dry.output) == _ran(count_tasks) == (_ran(count_tasks)[0], 6)


@pytest.mark.parametrize(
    ("pipeline", "setting"),
    [("simforest", "simforest.n_estimators"), ("smerf", "smerf.n_estimators"),
     ("xforest_cluster", "xforest.n_estimators"), ("main", "forest.n_estimators"),
     ("knn", "knn.k"), ("mds", "forest.n_estimators"), ("mislabels", "forest.n_estimators"),
     ("outliers", "forest.n_estimators"), ("nightly_impute", "forest.n_estimators")],
)  # fmt: skip
def test_pipeline_dry_run_plans_the_tasks_the_run_runs(tmp_path, monkeypatch, count_tasks,
                                                       pipeline, setting):  # fmt: skip
    monkeypatch.chdir(ROOT)  # the shipped pipelines name their input relative to the root
    args = [ROOT / "pipelines" / f"{pipeline}.yaml", "--set", f"output.dir={tmp_path}",
            "--set", f"{setting}=6"]  # fmt: skip
    dry = invoke("run", *args, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "time:" in dry.output and "runs:" in dry.output and count_tasks == []
    assert not any(tmp_path.iterdir())
    result = invoke("-q", "run", *args)
    assert result.exit_code == 0, result.output
    planned, ran = _planned(dry.output), _ran(count_tasks)
    assert planned == ran and ran[0] > 0, (planned, count_tasks)


def test_every_shipped_pipeline_is_in_the_dry_run_test():
    # nightly_score applies a saved model: no fit or tile task to count (it needs the
    # model of `run main`); tests/test_score_pipeline.py checks its dry run and run
    shipped = {p.stem for p in (ROOT / "pipelines").glob("*.yaml")} - {"nightly_score"}
    marks = test_pipeline_dry_run_plans_the_tasks_the_run_runs.pytestmark
    assert shipped == {pipeline for pipeline, _ in marks[0].args[1]}


def _command_args(o: Path) -> dict[str, tuple[list, list]]:
    """Each command's dry-run arguments, and what must exist before (run first)."""
    fit_sf = ["simforest", "fit", *BC_T, "--drop", "Bare.nuclei", "--trees", 6,
              "--out", o / "sf.zarr"]  # fmt: skip
    fit_knn = ["knn", "fit", *BC_T, "--drop", "Bare.nuclei", "--metric", "rf-proximity",
               "--trees", 7, "--out", o / "knn.zarr"]  # fmt: skip
    fit_m = ["smerf", "fit", *BC_X, "--trees", 6, "--distances", o / "D.npy",
             "--out", o / "m.zarr"]  # fmt: skip
    return {
        "outliers": (["outliers", *BC_T, "--trees", 9, "--out", o / "out.csv"], []),
        "mislabels": (["mislabels", *BC_T, "--trees", 9, "--out", o / "mis.csv"], []),
        "mds": (["mds", *BC_T, "--trees", 9, "--out", o / "mds.csv"], []),
        "importances": (["importances", *BC_T, "--trees", 9, "--out", o / "imp.csv"], []),
        "xforest": (["xforest", *BC_X, "--trees", 20, "--tile-size", 256,
                     "--out", o / "x.zarr"], []),
        "similarity": (["similarity", *BC_X, "--tile-size", 256, "--out", o / "s.zarr"], []),
        "neighbors": (["neighbors", *BC_X, "--out", o / "nn.zarr"], []),
        "knn fit": (fit_knn, []),
        "knn predict": (["knn", "predict", o / "knn.zarr", BC, "--out", o / "knn.csv"],
                        [fit_knn]),
        "knn predict euclidean": (["knn", "predict", o / "e.zarr", BC, "--out", o / "e.csv"],
                                  [[*fit_knn[:-2], "--metric", "euclidean", "--out",
                                    o / "e.zarr"]]),
        "impute": (["impute", *BC_T, "--trees", 6, "--iterations", 1, "--out", o / "i.csv"],
                   []),
        "impute rfgap": (["impute", *BC_T, "--proximity", "rfgap", "--trees", 6,
                          "--iterations", 2, "--out", o / "i.csv"], []),
        "simforest fit": (fit_sf, []),
        "simforest predict": (["simforest", "predict", o / "sf.zarr", BC, "--drop", "Id",
                               "--out", o / "sf.csv"], [fit_sf]),
        "simforest proximity": (["simforest", "proximity", o / "sf.zarr", "--tile-size", 256,
                                 "--out", o / "sfp.zarr"], [fit_sf]),
        "smerf fit": (fit_m, []),
        "smerf predict": ([ "smerf", "predict", o / "m.zarr", *BC_X, "--tile-size", 256,
                           "--out", o / "md.zarr"], [fit_m]),
    }  # fmt: skip


@pytest.mark.parametrize("command", list(_command_args(Path("."))))
def test_command_dry_run_plans_the_tasks_the_run_runs(tmp_path, count_tasks, command):
    X = pd.read_csv(BC).drop(columns=["Id", "Class", "Bare.nuclei"]).to_numpy(float)
    np.save(tmp_path / "D.npy", np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)))
    args, before = _command_args(tmp_path)[command]
    for earlier in before:
        assert invoke("-q", *earlier).exit_code == 0
    count_tasks.clear()
    written = set(tmp_path.iterdir())
    dry = invoke(*args, "--dry-run")
    assert dry.exit_code == 0, dry.output
    for field in ("tasks:", "disk:", "memory:", "time:", "runs:"):
        assert field in dry.output, (field, dry.output)
    assert count_tasks == [] and set(tmp_path.iterdir()) == written  # nothing run or written
    result = invoke("-q", *args)
    assert result.exit_code == 0, result.output
    planned, ran = _planned(dry.output), _ran(count_tasks, columns=command == "impute")
    assert planned == ran and ran[0] > 0, (planned, count_tasks)


@pytest.mark.parametrize(
    "how", [["--method", "spectral"], ["--method", "kernel-kmeans", "--matrix-free"]]
)
def test_cluster_dry_run_plans_no_counted_task_as_the_run_runs(tmp_path, count_tasks, how):
    assert (
        invoke("-q", "xforest", *BC_X, "--trees", 20, "--out", tmp_path / "x.zarr").exit_code == 0
    )
    count_tasks.clear()
    args = ["cluster", tmp_path / "x.zarr", *how, "--k", 2, "--out", tmp_path / "c.csv"]
    dry = invoke(*args, "--dry-run")
    assert dry.exit_code == 0 and "time:" in dry.output and count_tasks == [], dry.output
    assert not (tmp_path / "c.csv").exists()
    assert ("matrix-free" in dry.output) == ("--matrix-free" in how)
    assert invoke("-q", *args).exit_code == 0
    # products (matrix-free) are not counted by either; nothing else is submitted
    assert _planned(dry.output) == _ran(count_tasks) == (0, 0)
    assert any(n == "xforest-product" for n, _ in count_tasks) == ("--matrix-free" in how)


def test_score_dry_run_plans_no_counted_task_as_the_run_runs(tmp_path, count_tasks):
    """``score`` routes new rows through a saved forest: no fit batch nor tile, planned or run."""
    model = tmp_path / "p.zarr"
    assert invoke("-q", "proximity", *BC_T, "--trees", 5, "--out", model).exit_code == 0
    count_tasks.clear()
    args = ["score", model, BC, "--drop", "Id", "--out", tmp_path / "s.csv"]
    dry = invoke(*args, "--dry-run")
    assert dry.exit_code == 0 and "time:" in dry.output and count_tasks == [], dry.output
    assert "699 new rows" in dry.output and not (tmp_path / "s.csv").exists()
    assert invoke("-q", *args).exit_code == 0
    assert _planned(dry.output) == _ran(count_tasks) == (0, 0)
    # it did run tasks, of kinds a plan does not count (predictions, products)
    assert {name for name, _ in count_tasks} >= {"predict", "product"}, count_tasks


@pytest.mark.parametrize("form", ["parquet-folder", "csv-glob"])
def test_dry_run_of_a_partitioned_input_counts_without_loading(tmp_path, form):
    """A folder of parts or a glob: rows and features in the plan, the table never loaded."""
    import distforest.io as io_module

    X, y = make_classification(90, 4, random_state=0)
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"]).assign(y=y, key=np.arange(90))
    parts = tmp_path / "parts"
    parts.mkdir()
    for k in range(3):
        chunk = frame.iloc[30 * k : 30 * (k + 1)]
        if form == "parquet-folder":
            chunk.to_parquet(parts / f"p{k}.parquet", index=False)
        else:
            chunk.to_csv(parts / f"p{k}.csv", index=False)
    source = str(parts) if form == "parquet-folder" else str(parts / "*.csv")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        f"kind: proximity\ninput:\n  path: '{source}'\n  target: y\n  drop: [d]\n  id: key\n"
        f"forest:\n  n_estimators: 4\nproximity:\n  top_k: 5\n"
        f"output:\n  dir: {tmp_path / 'out'}\n  store: s.zarr\n"
    )

    def refuse(*args, **kwargs):
        raise AssertionError("the dry run loaded the table whole")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(io_module, "load_table", refuse)
        dry = invoke("run", pipeline, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "90 rows x 3 features" in dry.output  # a, b, c: not d (dropped), y, key
    assert not (tmp_path / "out").exists()


def test_impute_dry_run_of_a_glob_starts_nothing_and_writes_nothing(no_cluster, tmp_path):
    """By partitions, ``impute`` always runs on a cluster: its dry run says so, starts none."""
    frame = pd.read_csv(BC)
    for k in range(2):
        frame.iloc[350 * k : 350 * (k + 1)].to_csv(tmp_path / f"p{k}.csv", index=False)
    dry = invoke("impute", tmp_path / "*.csv", "--target", "Class", "--drop", "Id",
                 "--out", tmp_path / "out/", "--dry-run")  # fmt: skip
    assert dry.exit_code == 0, dry.output
    assert "impute: 699 rows x 9 features" in dry.output
    assert "LocalCluster started for the run (rows read by partitions" in dry.output
    assert not (tmp_path / "out").exists()
    # 9 columns counted (an upper bound), 35 trees each in tasks of ceil(35 / 8) = 5 trees
    # (about 8 tasks a column), at most 10 passes
    assert _planned(dry.output) == (9 * 7 * 10, 0)
