"""Outliers, mislabels and MDS against dense re-implementations."""

from __future__ import annotations

import numpy as np
import pytest
from oracles import dense_oob_proximity, dense_original_proximity

from distforest import ProximityForest, load_table
from distforest.apps.mds import mds
from distforest.apps.mislabels import mislabel_scores
from distforest.apps.outliers import outlier_scores, outlier_scores_from_matrix


def r_outlier(prox: np.ndarray, cls: np.ndarray | None) -> np.ndarray:
    """R randomForest's outlier.default, transcribed densely."""
    n = prox.shape[0]
    cls = np.zeros(n, dtype=int) if cls is None else cls
    scores = np.empty(n)
    for level in np.unique(cls):
        members = cls == level
        out = (prox[np.ix_(members, members)] ** 2).sum(axis=1)
        out = n / np.where(out == 0, 1, out)
        median = np.median(out)
        mad = 1.4826 * np.median(np.abs(out - median))
        scores[members] = (out - median) / mad
    return scores


@pytest.fixture(scope="module")
def forest(client, small_classification):
    X, y = small_classification
    return ProximityForest(n_estimators=40, random_state=3).set_execution(client).fit(X, y)


def test_outlier_scores_equal_r_formula(forest):
    dense = dense_original_proximity(forest.leaves_, forest.leaves_)
    np.testing.assert_allclose(outlier_scores(forest), r_outlier(dense, forest.y_), rtol=1e-9)
    np.testing.assert_allclose(
        outlier_scores(forest, labels=np.zeros(forest.n_samples_)),
        r_outlier(dense, None),
        rtol=1e-9,
    )


def test_outlier_scores_from_a_stored_oob_matrix(forest, tmp_path):
    P = forest.proximity(method="oob", store=tmp_path / "p.zarr", overwrite=True)
    dense = dense_oob_proximity(forest.leaves_, forest.inbag_).astype(np.float32)
    expected = r_outlier(dense.astype(np.float64), forest.y_)
    np.testing.assert_allclose(outlier_scores_from_matrix(P, forest.y_), expected, rtol=1e-6)


def classical_mds(D2: np.ndarray, k: int) -> np.ndarray:
    n = D2.shape[0]
    J = np.eye(n) - 1.0 / n
    values, vectors = np.linalg.eigh(-0.5 * J @ D2 @ J)
    order = np.argsort(values)[::-1][:k]
    return vectors[:, order] * np.sqrt(values[order])


@pytest.mark.parametrize("dissimilarity", ["sqrt", "linear"])
def test_mds_equals_dense_classical_scaling(forest, dissimilarity):
    P = dense_original_proximity(forest.leaves_, forest.leaves_)
    D2 = 1 - P if dissimilarity == "sqrt" else (1 - P) ** 2
    expected = classical_mds(D2, 3)
    got, values = mds(forest, 3, dissimilarity=dissimilarity)
    assert np.all(np.diff(values) <= 0)
    for axis in range(3):
        a, b = got[:, axis], expected[:, axis]
        sign = np.sign(a @ b)
        np.testing.assert_allclose(a, sign * b, atol=1e-6 * np.abs(b).max())


def test_flipped_labels_dominate_the_top_of_the_ranking(client, breast_cancer_csv):
    table = load_table(breast_cancer_csv, target="Class", drop=["Id"])
    y = np.asarray(table.y).copy()
    rng = np.random.default_rng(0)
    flipped = rng.choice(len(y), size=round(0.05 * len(y)), replace=False)
    y[flipped] = np.where(y[flipped] == "benign", "malignant", "benign")
    forest = ProximityForest(n_estimators=200, random_state=0).set_execution(client).fit(table.X, y)
    ranking = mislabel_scores(forest)
    top = ranking["row"].to_numpy()[: len(flipped)]
    precision = np.isin(top, flipped).mean()
    assert precision >= 0.7, precision
    assert set(ranking.columns) >= {"label", "suggested", "p_label", "outlier", "score"}
    assert ranking["score"].is_monotonic_decreasing
