"""Where distforest starts clusters and where it must not: scripts, joblib workers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from conftest import user_environment

ROOT = Path(__file__).resolve().parents[1]

_UNGUARDED = """\
import dask
import numpy as np
from distforest import ProximityForest

X = np.random.default_rng(0).normal(size=(40, 3))
y = (X[:, 0] > 0).astype(int)
dask.config.set({"distforest.in-process-cells": 0})  # as large as needs a cluster
ProximityForest(n_estimators=4, random_state=0).fit(X, y)  # no __main__ guard
print("FITTED")
"""


def _run_script(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess[str], float]:
    script = tmp_path / "user_script.py"
    script.write_text(text, encoding="utf-8")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=user_environment(),
    )
    return done, time.perf_counter() - start


def test_missing_main_guard_is_one_line_with_the_fix(tmp_path):
    done, seconds = _run_script(tmp_path, _UNGUARDED)
    assert done.returncode != 0
    assert "FITTED" not in done.stdout
    assert seconds < 60  # refused before any worker process starts
    last = done.stderr.strip().splitlines()[-1]
    assert 'if __name__ == "__main__":' in last
    assert "user_script.py, line 8" in last  # the line that starts the cluster
    # No worker was started: a short traceback, not pages of nanny failures.
    assert len(done.stderr.splitlines()) < 40, done.stderr
    assert "Nanny" not in done.stderr


def test_guarded_script_is_not_refused(tmp_path):
    body = "\n".join("    " + line for line in _UNGUARDED.splitlines()[4:])
    text = "\n".join(_UNGUARDED.splitlines()[:4]) + '\n\nif __name__ == "__main__":\n' + body
    done, _ = _run_script(tmp_path, text.replace("# no __main__ guard", ""))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FITTED" in done.stdout


def test_grid_search_with_joblib_workers_over_a_pipeline_with_a_distforest_step():
    """GridSearchCV(n_jobs=2): each joblib worker runs in-process, no cluster per worker."""
    from sklearn.datasets import load_iris
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    import distforest
    from distforest import KNNClassifier

    X, y = load_iris(return_X_y=True)
    pipe = make_pipeline(
        StandardScaler(), KNNClassifier(metric="rf-proximity", n_estimators=8, random_state=0)
    )
    grid = {"knnclassifier__n_neighbors": [3, 7]}
    parallel = GridSearchCV(pipe, grid, cv=2, n_jobs=2, refit=False).fit(X, y)
    # oracle: the same search, one fit after the other in this process
    with distforest.execution("synchronous"):
        serial = GridSearchCV(pipe, grid, cv=2, n_jobs=1, refit=False).fit(X, y)
    np.testing.assert_array_equal(
        parallel.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"]
    )
    assert parallel.cv_results_["mean_test_score"].max() > 0.85


def test_child_processes_run_in_process():
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        assert pool.apply(_client_in_child) is None


def _client_in_child() -> object:
    from distforest.parallel.cluster import use_client

    with use_client() as client:
        return client
