"""Outlier scores of random-forest proximities (R randomForest's ``outlier()``).

For row i of class c: ``raw_i = n / sum_{j in c} P_ij^2`` (the diagonal
included, a zero sum counted as 1), then per class
``(raw - median) / MAD`` with ``MAD = 1.4826 * median |raw - median|``.
Without classes every row is in one class.  Only one number per row, the sum
of squared within-class proximities, is ever kept.
"""

from __future__ import annotations

from typing import Any, cast

import dask.array as da
import numpy as np
import xarray as xr

#: Consistency constant of the median absolute deviation (as R's ``mad``).
MAD_SCALE = 1.4826


def standardise_by_class(raw: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``(raw - median) / MAD`` within each class; a zero MAD divides by 1."""
    scores = np.empty_like(raw, dtype=np.float64)
    for level in np.unique(labels):
        members = labels == level
        values = raw[members]
        median = np.median(values)
        mad = MAD_SCALE * np.median(np.abs(values - median))
        scores[members] = (values - median) / (mad if mad > 0 else 1.0)
    return scores


def scores_from_square_sums(
    square_sums: np.ndarray, labels: np.ndarray, *, overwrite: bool = False
) -> np.ndarray:
    """Outlier scores from each row's sum of squared within-class proximities.

    ``overwrite=True`` computes the raw values in ``square_sums`` itself (float64):
    one vector of n less at once, which at ten million rows is 80 MB of the driver.
    """
    n = square_sums.shape[0]
    sums = square_sums if overwrite else np.array(square_sums, dtype=np.float64)
    sums[sums == 0] = 1.0
    raw = np.divide(n, sums, out=sums)
    return standardise_by_class(raw, labels)


def _labels_or_one_class(labels: np.ndarray | None, n: int) -> np.ndarray:
    """Class codes ``0 .. k - 1`` in the order of the sorted labels (``np.unique``'s).

    Labels that already are those codes (a forest's target) are used as they
    are: at ten million rows ``np.unique`` would sort them, and hold three
    copies, on the driver.
    """
    if labels is None:
        return np.zeros(n, dtype=np.int64)
    values = np.asarray(labels)
    if values.dtype.kind in "iu" and values.size and 0 <= values.min() and values.max() < n:
        present = np.flatnonzero(np.bincount(values))
        if present[-1] == present.size - 1:  # every code 0 .. k-1 is used
            return values.astype(np.int64, copy=False)
    _, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int64)


def outlier_scores(forest: Any, labels: Any = None, new_labels: Any = None) -> np.ndarray:
    """Outlier score of every training row of a fitted forest, matrix-free, or of new rows.

    Sums of squared within-class proximities (Breiman's original proximity)
    come from :func:`distforest.forests.square_sums.square_sums`: sparse
    proximity rows from leaf members while leaves are small, else sums over
    pairs of trees (trees grown on a sample and applied to many rows), the
    same floats either way.  A forest fitted from a store, with its own
    labels, is scored by row chunks on the workers
    (:mod:`distforest.apps.stored_outliers`): the same floats again.
    ``outlier_scores(forest, X_new)`` (a table of new rows in place of the
    labels: two-dimensional, a DataFrame or a path) scores the new rows
    against the training rows: :func:`outlier_scores_new_rows`.

    Parameters
    ----------
    forest : ProximityForest
        A fitted forest.
    labels : array-like, optional
        Class of each training row; default the forest's target for
        classification, one class otherwise.  Or new rows (see above).
    new_labels : array-like, optional
        With new rows: the class of each (default the forest's prediction).

    Returns
    -------
    ndarray of float64, shape (n_samples,) or (n_new,)
    """
    if _are_rows(labels):
        return outlier_scores_new_rows(forest, labels, labels=new_labels)
    if new_labels is not None:
        raise TypeError("new_labels goes with new rows: outlier_scores(forest, X_new, new_labels)")
    from distforest.forests.square_sums import square_sums

    if labels is None:
        from distforest.apps.stored_outliers import scores_by_chunks, stored_path

        path = stored_path(forest)  # a forest fitted from a store: scored by row chunks
        if path is not None:
            return cast(np.ndarray, scores_by_chunks(forest, path))
        if forest.task_ == "classification":
            labels = forest.y_
    codes = _labels_or_one_class(labels, forest.n_samples_)
    return scores_from_square_sums(square_sums(forest, codes), codes, overwrite=True)


def _are_rows(value: Any) -> bool:
    """Whether an argument is a table of rows (2-D, a DataFrame, a path), not labels."""
    if value is None:
        return False
    if isinstance(value, str) or hasattr(value, "__fspath__") or hasattr(value, "columns"):
        return True
    return getattr(value, "ndim", np.ndim(value)) == 2


def outlier_scores_from_matrix(
    matrix: xr.DataArray, labels: np.ndarray | None = None
) -> np.ndarray:
    """Outlier scores from a stored (Zarr-backed) proximity matrix, tile by tile.

    Works for any proximity (original, OOB, RF-GAP).  Dask streams the
    chunks; only per-row sums are kept.

    Parameters
    ----------
    matrix : xarray.DataArray
        Square proximity matrix, e.g. ``open_store(path)["proximity_oob"]``.
    labels : array-like, optional
        Class of each row (default: one class).

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    n = matrix.shape[0]
    codes = _labels_or_one_class(labels, n)
    P = matrix.data if isinstance(matrix.data, da.Array) else da.from_array(matrix.values)
    chunks_i, chunks_j = P.chunks
    ci = da.from_array(codes, chunks=(chunks_i,))[:, None]
    cj = da.from_array(codes, chunks=(chunks_j,))[None, :]
    squares = da.where(ci == cj, P.astype(np.float64) ** 2, 0.0).sum(axis=1)
    return scores_from_square_sums(np.asarray(squares.compute()), codes)


#: Training rows whose raw outlier values set the median and MAD new rows are scored
#: against: all of them up to this many; above, a fixed sample of about this many (each
#: class in proportion, at least ``REFERENCE_PER_CLASS`` rows of it or all it has).
REFERENCE_ROWS = 50_000
REFERENCE_PER_CLASS = 1_000


def reference_rows(codes: np.ndarray, limit: int = REFERENCE_ROWS) -> np.ndarray:
    """The training rows of the outlier reference (sorted): all, or a fixed stratified sample.

    Deterministic (a fixed seed): the same model gives the same reference.
    """
    n = codes.size
    if n <= limit:
        return np.arange(n)
    rng = np.random.default_rng(0)
    keep = []
    for level in np.unique(codes):
        members = np.flatnonzero(codes == level)
        take = min(members.size, max(REFERENCE_PER_CLASS, round(limit * members.size / n)))
        keep.append(np.sort(rng.choice(members, take, replace=False)))
    return np.sort(np.concatenate(keep))


def outlier_scores_new_rows(forest, X, labels=None, method: str = "original") -> np.ndarray:
    """Outlier scores of new rows, on the scale of the training rows' scores.

    For new row i of class c: ``raw_i = n / sum_{j in c} P_ij^2`` over the
    training rows j (``P`` the proximity of the new rows, out of bag in every
    tree), standardised with the median and MAD of the training rows' raw
    values of class c (R's ``outlier()`` for the training rows): a new row
    scoring 10 is as unusual as a training row scoring 10.  On more than
    :data:`REFERENCE_ROWS` training rows the median and MAD come from a fixed
    stratified sample of them (:func:`reference_rows`): each training row's
    raw value costs a sparse proximity row (its leaf-mates in every tree), so
    the reference of a 1,000,000-row model would cost 20 times that of the
    sample while moving the median and MAD by sampling error only.

    Parameters
    ----------
    forest : ProximityForest
        Fitted with its nodes (``fit``, or loaded from a store).
    X : array-like, DataFrame, path or Table
        New rows.
    labels : array-like, optional
        Class of each new row (one of the training classes); default the
        forest's prediction for classification, one class otherwise.
    method : {"original", "oob", "rfgap"}
        Proximity of the new rows (the training side is always Breiman's).

    Returns
    -------
    ndarray of float64, shape (n_new,)
    """
    from distforest.errors import InputError
    from distforest.forests.new_rows import new_leaves, squared_sums
    from distforest.forests.products import product_session

    classification = forest.task_ == "classification"
    train = _labels_or_one_class(forest.y_ if classification else None, forest.n_samples_)
    if classification:
        known = np.asarray(forest.classes_)
        given = forest.predict(X) if labels is None else np.asarray(labels)
        new = np.searchsorted(known, given)
        bad = (new >= known.size) | (known[np.minimum(new, known.size - 1)] != given)
        if bad.any():
            raise InputError(
                f"labels {sorted(set(np.asarray(given)[bad].tolist()))[:5]} are not classes of "
                f"the forest ({known.tolist()[:10]}); give training classes"
            )
    else:
        new = None
    onehot = np.zeros((train.size, train.max() + 1))
    onehot[np.arange(train.size), train] = 1.0
    ref = reference_rows(train, REFERENCE_ROWS)  # (read now: tests lower it)
    kept = forest.__dict__.get("_outlier_reference")  # the same for every call on this fit
    with product_session(forest) as session:
        if kept is not None and kept[0] == (forest.fit_id_, ref.size):
            train_sums = kept[1]
        elif ref.size == train.size:
            train_sums = session.squared_product(onehot)[np.arange(train.size), train]
        else:  # the sampled training rows as queries: their own sparse rows, self included
            leaves = forest.leaves_  # a Zarr array when the forest was fitted from a store
            rows = leaves.oindex[ref, :] if hasattr(leaves, "oindex") else leaves[ref]
            queries = session.squared_product(onehot, new_leaves=np.asarray(rows))
            train_sums = queries[np.arange(ref.size), train[ref]]
        # kept for the next call (a worker scoring partition after partition)
        forest.__dict__["_outlier_reference"] = ((forest.fit_id_, ref.size), train_sums)
        if method == "original":  # sparse rows from leaf members: no n_new x n tile
            sums = session.squared_product(onehot, new_leaves=new_leaves(forest, X))
    if method != "original":
        sums = squared_sums(forest, X, train, method)
    new_codes = np.zeros(sums.shape[0], dtype=np.int64) if new is None else new
    n = forest.n_samples_
    raw_train = n / np.where(train_sums == 0, 1.0, train_sums)
    own = sums[np.arange(sums.shape[0]), new_codes]
    raw_new = n / np.where(own == 0, 1.0, own)
    scores = np.empty(raw_new.shape)
    for level in np.unique(new_codes):
        values = raw_train[train[ref] == level]
        median = np.median(values)
        mad = MAD_SCALE * np.median(np.abs(values - median))
        members = new_codes == level
        scores[members] = (raw_new[members] - median) / (mad if mad > 0 else 1.0)
    return scores
