"""distforest inside Dask tasks: joblib's dask backend and user tasks neither deadlock
nor start clusters.

The session's cluster has two workers of one thread each: two outer tasks
occupy every thread, so a fit that queued its own tree tasks behind them and
waited would wait for ever.  Each test runs its work in a thread and gives up
after two minutes (a deadlock fails instead of hanging the suite).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import joblib
import numpy as np
from distributed import get_client
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV

import distforest
from distforest import ProximityForest, execution

PATIENCE = 120  # seconds; each test takes a few when it works

X, Y = load_iris(return_X_y=True)
GRID = {"min_samples_leaf": [1, 10]}


def _within_patience(func):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(func).result(timeout=PATIENCE)


def _search() -> GridSearchCV:
    forest = ProximityForest(6, task="classification", random_state=0)
    return GridSearchCV(forest, GRID, cv=2, n_jobs=2)


def test_grid_search_under_joblib_dask_backend(client):
    def run() -> GridSearchCV:
        with joblib.parallel_backend("dask"):
            return _search().fit(X, Y)

    there = _within_patience(run)
    with execution("synchronous"):
        here = _search().fit(X, Y)
    np.testing.assert_array_equal(
        there.cv_results_["mean_test_score"], here.cv_results_["mean_test_score"]
    )
    assert len(client.scheduler_info()["workers"]) == 2  # no worker started a cluster


def _fit_in_a_task(seed: int) -> np.ndarray:
    """A user's task that gives distforest the worker's client explicitly."""
    with distforest.execution(get_client()):
        return ProximityForest(4, random_state=seed).fit(X, Y).leaves_


def _fit_in_a_task_by_default(seed: int) -> tuple[np.ndarray, bool]:
    """A user's task that says nothing: distforest runs in the task."""
    from distforest.parallel.local_cluster import in_dask_task

    return ProximityForest(4, random_state=seed).fit(X, Y).leaves_, in_dask_task()


def test_tasks_that_call_distforest_finish(client):
    def run() -> list:
        explicit = client.map(_fit_in_a_task, [1, 2], pure=False)  # both threads taken
        default = client.map(_fit_in_a_task_by_default, [1, 2], pure=False)
        return client.gather(explicit) + client.gather(default)

    a, b, (c, inside), (d, _) = _within_patience(run)
    with execution("synchronous"):
        for seed, leaves in ((1, a), (2, b), (1, c), (2, d)):
            np.testing.assert_array_equal(
                leaves, ProximityForest(4, random_state=seed).fit(X, Y).leaves_
            )
    assert inside
