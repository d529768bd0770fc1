"""One estimator contract: scikit-learn's own checks, and clone with or without a client.

Every public estimator runs scikit-learn's ``check_estimator`` suite in
process (``execution("synchronous")``: the same tasks, no cluster per fit).
The one check that does not run is ``check_array_api_input``: scikit-learn
skips it unless ``SCIPY_ARRAY_API=1`` is set, and distforest's trees and
kernels take NumPy arrays only (README, "The estimator contract").
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.utils.estimator_checks import parametrize_with_checks

from distforest import (
    KNNClassifier,
    KNNRegressor,
    ProximityForest,
    ProximityImputer,
    SimilarityForestClassifier,
    XForest,
    execution,
)
from distforest.errors import ParameterError
from distforest.parallel.execution import Execution, current_execution

ESTIMATORS = [
    ProximityForest(n_estimators=5, random_state=0),
    ProximityForest(n_estimators=5, task="classification", random_state=0),
    ProximityForest(n_estimators=5, task="regression", random_state=0),
    XForest(n_estimators=5, leaf_size=5, random_state=0),
    ProximityImputer(iterations=1, n_estimators=5, random_state=0),
    KNNClassifier(),
    KNNRegressor(),
    SimilarityForestClassifier(n_estimators=5),  # precomputed: the checks pass square kernels
    SimilarityForestClassifier(n_estimators=5, metric="rbf"),
]


@parametrize_with_checks(ESTIMATORS)
def test_scikit_learn_checks(estimator, check):
    with execution("synchronous"):
        check(estimator)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_parameters_hold_no_execution(estimator):
    names = set(estimator.get_params())
    assert not names & {"client", "scheduler", "cluster", "progress"}


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_clone_and_pickle_with_a_client(client, estimator):
    est = clone(estimator).set_execution(client, progress=lambda *a: None)
    copy = clone(est)  # failed with "cannot pickle '_asyncio.Task'" when client was a parameter
    assert copy.get_params() == est.get_params()
    assert "_execution" not in vars(copy)  # a clone runs where its caller says
    assert est._current_execution().client is client
    back = pickle.loads(pickle.dumps(est))
    assert "_execution" not in vars(back)


def test_forward_selection_runs_on_a_client(client):
    """KNNClassifier(select="forward") clones itself: the clones run on the same client."""
    X, y = load_iris(return_X_y=True)
    params = {"n_neighbors": 5, "select": "forward", "n_features_to_select": 2, "select_cv": 3}
    seen = []
    there = KNNClassifier(**params, metric="rf-proximity", n_estimators=8, random_state=0)
    there.set_execution(client, progress=lambda stage, done, total: seen.append(stage))
    there.fit(X, y)
    here = KNNClassifier(**params, metric="rf-proximity", n_estimators=8, random_state=0)
    with execution("synchronous"):
        here.fit(X, y)
    np.testing.assert_array_equal(there.support_, here.support_)
    assert there.support_.sum() == 2
    assert "fit" in seen  # the clones' forests reported to the outer execution


def test_execution_block_is_seen_by_nested_calls_and_restored(client):
    assert current_execution() == Execution()
    with execution(client) as exe:
        assert current_execution() is exe
        forest = ProximityForest(n_estimators=4, random_state=0).fit(*load_iris(return_X_y=True))
        assert forest.leaves_.shape == (150, 4)
    assert current_execution() == Execution()


def test_bad_client_is_refused():
    with pytest.raises(ParameterError, match="scheduler="):
        Execution("tcp://127.0.0.1:8786")


def test_same_forest_in_process_and_on_the_cluster(client):
    X, y = load_iris(return_X_y=True)
    with execution("synchronous"):
        here = ProximityForest(n_estimators=6, random_state=3).fit(X, y)
    there = ProximityForest(n_estimators=6, random_state=3).set_execution(client).fit(X, y)
    np.testing.assert_array_equal(here.leaves_, there.leaves_)
    np.testing.assert_array_equal(here.inbag_, there.inbag_)
