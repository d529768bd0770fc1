"""One estimator contract: scikit-learn's own checks, and clone with or without a client.

Every public estimator runs scikit-learn's ``check_estimator`` suite in
process (``execution("synchronous")``: the same tasks, no cluster per fit).
The one check that does not run is ``check_array_api_input``: scikit-learn
skips it unless ``SCIPY_ARRAY_API=1`` is set, and distforest's trees and
kernels take NumPy arrays only (README, "The estimator contract").

SMERF is fitted to a matrix of observed distances, ``fit(X, D)`` with ``D``
of shape (n, n), where scikit-learn's checks pass a one-dimensional target:
every check that fits it with such a target is listed in
:data:`SMERF_NOT_APPLICABLE` (expected to fail, with that reason); the others
(parameters, clone, repr, refusals before fit) run.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.utils.estimator_checks import parametrize_with_checks

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
    SMERF(n_estimators=5),
]

_NEEDS_D = "fit(X, D) takes an n x n matrix of observed distances; the check passes a 1-D y"
#: The checks that fit SMERF with a one-dimensional target (all refused: D must be n x n).
SMERF_NOT_APPLICABLE = {
    name: _NEEDS_D
    for name in (
        "check_fit_score_takes_y",
        "check_estimators_overwrite_params",
        "check_dont_overwrite_parameters",
        "check_estimators_fit_returns_self",
        "check_readonly_memmap_input",
        "check_n_features_in_after_fitting",
        "check_positive_only_tag_during_fit",
        "check_estimators_dtypes",
        "check_dtype_object",
        "check_pipeline_consistency",
        "check_estimators_nan_inf",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_fit2d_1feature",
        "check_dict_unchanged",
        "check_fit_idempotent",
        "check_fit_check_is_fitted",
        "check_n_features_in",
        "check_fit2d_predict1d",
    )
}


#: ProximityForest's weighted fits, by scikit-learn's pre-1.9 rule (weights multiply each
#: tree's bootstrap counts).
FOREST_WEIGHT_CHECKS = {
    "check_sample_weight_equivalence_on_dense_data": (
        "each tree draws its bootstrap at random: a weight of 2 multiplies the row's drawn "
        "count, which is not the same draw as the row repeated (tests/test_weights.py checks each "
        "tree's weighted total against bootstrap count x sample_weight x class weight)"
    ),
    "check_class_weight_classifiers": (
        "the check relies on min_weight_fraction_leaf=0.01 to let class weights change fully "
        "grown trees; ProximityForest has no such parameter, so its pure leaves ignore the "
        "weights (tests/test_weights.py checks the class weights each tree receives)"
    ),
}


#: A k-NN model's weighted votes (a measure's neighbours do not depend on the weights).
KNN_WEIGHT_CHECKS = {
    "check_sample_weight_equivalence_on_dense_data": (
        "a weight of 2 doubles a neighbour's vote, while a repeated row takes a second of the "
        "k places (tests/test_weights.py checks the weighted votes against NearestNeighbors)"
    ),
}


def _not_applicable(estimator: object) -> dict[str, str]:
    if isinstance(estimator, SMERF):
        return SMERF_NOT_APPLICABLE
    if isinstance(estimator, (KNNClassifier, KNNRegressor)):
        return KNN_WEIGHT_CHECKS
    if isinstance(estimator, ProximityForest):
        return FOREST_WEIGHT_CHECKS
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_not_applicable)
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
