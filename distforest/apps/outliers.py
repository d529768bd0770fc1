"""Outlier scores of random-forest proximities (R randomForest's ``outlier()``).

For row i of class c: ``raw_i = n / sum_{j in c} P_ij^2`` (the diagonal
included, a zero sum counted as 1), then per class
``(raw - median) / MAD`` with ``MAD = 1.4826 * median |raw - median|``.
Without classes every row is in one class.  Only one number per row, the sum
of squared within-class proximities, is ever kept.

One algorithm, by row chunks, whether the rows are in memory or in a store:

1. each row's sum of squared within-class proximities
   (:func:`~distforest.forests.square_sums.square_sums`; for a forest fitted
   from a store, written to the store by tasks,
   :func:`~distforest.forests.square_sums.stored_square_sums`);
2. each class's median of ``raw = n / sum``, then its median of
   ``|raw - median|``, found exactly by radix selection over the row chunks
   (:mod:`distforest.kernels.order_stats`): tasks return counts of 65,536
   buckets a class and round, and the few values of the last bucket (a class
   of at most :data:`GATHER_LIMIT` rows is gathered at once: on rows held in
   memory that is one sort, the values ``np.median`` takes);
3. tasks score their chunk and return it, or hand it to a sink
   (:mod:`distforest.store.sink`): a piece of the CSV, or a scratch array of
   the store (for the mislabel ranking).

The flag (:data:`FLAG_COLUMN`, beside R's score): per class, Tukey's far-out
fence on a log scale.  With ``u = log1p(score - min score)`` of the class, a
row is flagged when ``u > Q3(u) + 3 (Q3(u) - Q1(u))`` (quartiles as
``np.percentile``'s, linear between two order statistics).  ``u`` grows with
the score, so the fence is a score threshold of the class,
``min + expm1(fence)``, from four order statistics of its raw values (the
minimum, the two either side of each quartile), found in step 2's rounds with
the median.  Its false-positive rate on clean data is stated as at most 0.1 %
of the rows (tests/test_outlier_flag.py holds it to that); measured
(benchmarks/results/outlier_flag.md), no row of clean Gaussian tables of 1,000
to 100,000 rows was flagged, where R's rule of thumb (score > 10) flagged up to
17 % of them (rows near a sharp class boundary).  The factor 3 is the margin:
the highest clean row would have needed a factor of at most 2.9.  The flag can
only be as good as the score: rows planted far from every row of their class
are flagged, rows planted at extreme values of an unsupervised forest often
score like the others.

Rows held in memory are a few chunks of one array (:class:`~distforest.store.
scratch.HeldColumn`) scored in this process; a stored forest's are chunks of
a scratch array scored by tasks on the workers, with no vector of n rows on
the driver.  The same floats either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr

from distforest.forests.square_sums import SUMS_ARRAY, StoredCodes
from distforest.kernels import order_stats
from distforest.parallel.execution import Runner
from distforest.store.scratch import Column, HeldColumn, StoredColumn, drop_scratch, row_chunks
from distforest.store.sink import CsvPieces, ScoreSink, csv_by_pieces

#: Consistency constant of the median absolute deviation (as R's ``mad``).
MAD_SCALE = 1.4826
#: Candidates of a class left in the bucket below which they are gathered and sorted.
GATHER_LIMIT = 1 << 18
#: The flag's fence: this many interquartile ranges above the third quartile of
#: ``log1p(score - min score)`` within the class (Tukey's far-out fence).
FENCE_IQRS = 3.0
#: The quartiles of the fence.
QUARTILES = (0.25, 0.75)
#: The flag's column in the outputs, beside the score's (``outlier``).
FLAG_COLUMN = "outlier_flag"


@dataclass(frozen=True)
class RawValues:
    """The rows' raw outlier values (``n / sum``, a zero sum counted as 1) a task reads by
    rows; with ``center`` (one per class), ``|raw - center[class]|`` instead.

    ``rows``: how many rows the columns hold (default ``n``; fewer for a sample
    of the training rows, whose raw values still divide the training rows' ``n``).
    """

    sums: Column
    codes: Column
    n: int
    center: np.ndarray | None = None
    rows: int | None = None

    def chunks(self) -> list[slice]:
        """The row chunks tasks read."""
        return row_chunks(self.n if self.rows is None else self.rows)

    def read(self, rows: slice) -> tuple[np.ndarray, np.ndarray]:
        """Values and class codes of ``rows``."""
        sums = np.array(self.sums.read(rows), dtype=np.float64)
        sums[sums == 0] = 1.0
        raw = np.divide(self.n, sums, out=sums)
        codes = self.codes.read(rows)
        if self.center is not None:
            raw = np.abs(raw - self.center[codes])
        return raw, codes


def _bucket_task(values: RawValues, rows: slice, queries: list[tuple[int, int, int]]) -> np.ndarray:
    raw, codes = values.read(rows)
    counts = np.zeros((len(queries), order_stats.BUCKETS), dtype=np.int64)
    for q, (c, known, prefix) in enumerate(queries):
        keys = order_stats.sortable_keys(raw[codes == c])
        counts[q] = order_stats.bucket_counts(keys, known, prefix)
    return counts


def _gather_task(values: RawValues, rows: slice,
                 queries: list[tuple[int, int, int]]) -> list[np.ndarray]:  # fmt: skip
    raw, codes = values.read(rows)
    return [order_stats.prefix_members(order_stats.sortable_keys(raw[codes == c]), known, prefix)
            for c, known, prefix in queries]  # fmt: skip


def order_statistics(runner: Runner, values: RawValues, ranks: dict[int, list[int]],
                     sizes: np.ndarray) -> dict[tuple[int, int], float]:  # fmt: skip
    """The ``rank``-th smallest (0-based) value of each class, exactly, by row chunks.

    ``ranks``: class -> ranks wanted; ``sizes``: rows of each class.
    """
    state = {(c, r): [0, 0, r, int(sizes[c])] for c, wanted in ranks.items() for r in wanted}
    chunks = values.chunks()
    while True:
        open_ = sorted({(c, s[0], s[1]) for (c, _), s in state.items()
                        if s[3] > GATHER_LIMIT and s[0] < order_stats.KEY_BITS})  # fmt: skip
        if not open_:
            break
        totals = np.zeros((len(open_), order_stats.BUCKETS), dtype=np.int64)
        for _, counts in runner.run(_bucket_task, [(values, rows, open_) for rows in chunks],
                                    name="outlier-medians"):  # fmt: skip
            totals += counts
        for (c, _), s in state.items():
            if (c, s[0], s[1]) in open_:
                bucket, s[2], s[3] = order_stats.narrow(totals[open_.index((c, s[0], s[1]))], s[2])
                s[0], s[1] = s[0] + order_stats.BITS, (s[1] << order_stats.BITS) | bucket
    result: dict[tuple[int, int], float] = {}
    for key, s in state.items():  # every bit known: the prefix is the value
        if s[0] == order_stats.KEY_BITS:
            result[key] = float(order_stats.key_values(np.array([s[1]], dtype=np.uint64))[0])
    wanted = sorted({(key[0], s[0], s[1]) for key, s in state.items() if key not in result})
    if wanted:
        members: list[list[np.ndarray]] = [[] for _ in wanted]
        for _, found in runner.run(_gather_task, [(values, rows, wanted) for rows in chunks],
                                   name="outlier-medians"):  # fmt: skip
            for q, keys in enumerate(found):
                members[q].append(keys)
        joined = [np.sort(np.concatenate(m)) for m in members]
        for key, s in state.items():
            if key not in result:
                keys = joined[wanted.index((key[0], s[0], s[1]))]
                result[key] = float(order_stats.key_values(keys[s[2] : s[2] + 1])[0])
    return result


def _median_ranks(m: int) -> set[int]:
    return {(m - 1) // 2, m // 2}


def _medians(found: dict[tuple[int, int], float], sizes: np.ndarray) -> np.ndarray:
    medians = np.zeros(len(sizes), dtype=np.float64)
    for c, m in enumerate(sizes):
        if m:
            low, high = np.float64(found[c, (m - 1) // 2]), np.float64(found[c, m // 2])
            medians[c] = low if m % 2 else (low + high) / 2
    return medians


def class_medians(runner: Runner, values: RawValues, sizes: np.ndarray) -> np.ndarray:
    """Each class's median (``np.median``'s: the mean of the middle two for an even count)."""
    ranks = {c: sorted(_median_ranks(int(m))) for c, m in enumerate(sizes) if m}
    return _medians(order_statistics(runner, values, ranks, sizes), sizes)


def _quartile_ranks(m: int) -> set[int]:
    """The minimum's rank and the two ranks either side of each quartile (of ``m`` values)."""
    return (
        {0}
        | {int(np.floor((m - 1) * p)) for p in QUARTILES}
        | {int(np.ceil((m - 1) * p)) for p in QUARTILES}
    )


def flag_thresholds(found: dict[tuple[int, int], float], sizes: np.ndarray,
                    center: np.ndarray, scale: np.ndarray) -> np.ndarray:  # fmt: skip
    """Each class's score threshold of the flag (``inf`` for a class without rows).

    ``found``: the raw values' order statistics (:func:`_quartile_ranks`),
    ``center`` and ``scale`` the scores' (the score grows with the raw value).
    """
    thresholds = np.full(len(sizes), np.inf)
    for c, m in enumerate(sizes):
        if not m:
            continue
        low = found[c, 0]
        q1, q3 = (_log_quantile(found, c, int(m), p, low, scale[c]) for p in QUARTILES)
        thresholds[c] = (low - center[c]) / scale[c] + np.expm1(q3 + FENCE_IQRS * (q3 - q1))
    return thresholds


def _log_quantile(found: dict[tuple[int, int], float], c: int, m: int, p: float,
                  low: float, scale: float) -> float:  # fmt: skip
    """Quantile ``p`` of ``log1p((raw - low) / scale)`` of class ``c`` (``m`` rows), linear
    between the two order statistics either side (``np.percentile``'s)."""
    h = (m - 1) * p
    a, b = (np.log1p((found[c, int(r)] - low) / scale) for r in (np.floor(h), np.ceil(h)))
    return float(a + (h - np.floor(h)) * (b - a))


def _count_task(codes: Column, rows: slice, k: int) -> np.ndarray:
    return np.bincount(codes.read(rows), minlength=k)


def class_sizes(runner: Runner, values: RawValues, k: int) -> np.ndarray:
    """Rows of each of the ``k`` classes, counted by row chunks."""
    sizes = np.zeros(k, dtype=np.int64)
    items = [(values.codes, rows, k) for rows in values.chunks()]
    for _, counts in runner.run(_count_task, items, name="outlier-classes"):
        sizes += counts[:k]
    return sizes


@dataclass(frozen=True)
class ClassScale:
    """Per class: the median of the raw values, their MAD (1 where it is 0) and the flag's
    score threshold (:func:`flag_thresholds`; None when not asked for)."""

    center: np.ndarray
    scale: np.ndarray
    threshold: np.ndarray | None


def centre_and_scale(runner: Runner, values: RawValues, k: int,
                     flagged: bool = True) -> ClassScale:  # fmt: skip
    """Each class's median of the raw values, its MAD and (``flagged``) its flag threshold,
    by row chunks.

    The median's and the fence's order statistics are found in the same rounds.
    """
    sizes = class_sizes(runner, values, k)
    ranks = {c: sorted(_median_ranks(int(m)) | (_quartile_ranks(int(m)) if flagged else set()))
             for c, m in enumerate(sizes) if m}  # fmt: skip
    found = order_statistics(runner, values, ranks, sizes)
    medians = _medians(found, sizes)
    mads = MAD_SCALE * class_medians(runner, replace(values, center=medians), sizes)
    scale = np.where(mads > 0, mads, 1.0)
    thresholds = flag_thresholds(found, sizes, medians, scale) if flagged else None
    return ClassScale(medians, scale, thresholds)


def _score_task(values: RawValues, rows: slice, scaled: ClassScale, k: int,
                sink: ScoreSink | None) -> tuple[np.ndarray, np.ndarray] | None:  # fmt: skip
    raw, codes = values.read(rows)
    scores = (raw - scaled.center[codes]) / scaled.scale[codes]
    if scaled.threshold is None:  # (a sink of the scores alone)
        assert sink is not None
        sink.write(k, rows, codes, scores)
        return None
    flags = scores > scaled.threshold[codes]
    if sink is None:
        return scores, flags
    sink.write(k, rows, codes, {"outlier": scores, FLAG_COLUMN: flags})
    return None


@dataclass(frozen=True)
class Scores:
    """Outlier scores of rows, their flags and each class's threshold of the flag."""

    scores: np.ndarray
    flags: np.ndarray
    thresholds: np.ndarray


def standardised(runner: Runner, values: RawValues, k: int, sink: ScoreSink | None = None,
                 flagged: bool = False) -> Scores | None:  # fmt: skip
    """``(raw - median) / MAD`` of every row within its class (``k`` classes) and its flag,
    by row chunks.

    Returns the scores, or (with ``sink``) None once every chunk is written to
    it (the scores alone, or with ``flagged`` the columns ``outlier`` and
    :data:`FLAG_COLUMN`).
    """
    scaled = centre_and_scale(runner, values, k, flagged or sink is None)
    chunks = values.chunks()
    items = [(values, rows, scaled, j, sink) for j, rows in enumerate(chunks)]
    parts: list[Any] = [None] * len(items)
    for j, part in runner.run(_score_task, items, name="outlier-scores"):
        parts[j] = part
    if sink is not None:
        return None
    assert scaled.threshold is not None  # (no sink: flagged)
    if not parts:
        return Scores(np.zeros(0), np.zeros(0, dtype=bool), scaled.threshold)
    return Scores(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                  scaled.threshold)  # fmt: skip


def scores_from_square_sums(square_sums: np.ndarray, labels: Any = None) -> np.ndarray:
    """Outlier scores from each row's sum of squared within-class proximities (in memory).

    ``labels``: each row's class (None: one class).
    The input is left as it is; the raw values are made a chunk at a time.
    """
    return flagged_from_square_sums(square_sums, labels).scores


def flagged_from_square_sums(square_sums: np.ndarray, labels: Any = None) -> Scores:
    """Outlier scores and flags from each row's sum of squared within-class proximities
    (:func:`scores_from_square_sums`)."""
    codes = _labels_or_one_class(labels, np.shape(square_sums)[0])
    values = RawValues(HeldColumn(np.asarray(square_sums)), HeldColumn(codes), codes.size)
    k = int(codes.max()) + 1 if codes.size else 1
    found = standardised(Runner(None), values, k)
    assert found is not None  # (no sink: the scores are returned)
    return found


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
    labels, keeps its sums in the store and is scored by tasks over its row
    chunks (:func:`scores_by_chunks`): the same floats again.
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
    return outlier_flags(forest, labels).scores


def outlier_flags(forest: Any, labels: Any = None) -> Scores:
    """Outlier scores of the training rows (:func:`outlier_scores`) with the default flag.

    A row is flagged when its score is above its class's threshold, Tukey's
    far-out fence on ``log1p(score - min score)`` of the class (the module's
    notes); clean Gaussian tables of up to 100,000 rows had no row flagged.

    Parameters
    ----------
    forest, labels
        As :func:`outlier_scores`'s (the training rows' classes, not new rows).

    Returns
    -------
    Scores
        ``scores`` (R's ``outlier()``), ``flags`` (bool) and ``thresholds``
        (one score a class).
    """
    from distforest.forests.square_sums import square_sums

    if labels is None:
        path = stored_path(forest)  # a forest fitted from a store: its sums stay there
        if path is not None:
            found = scores_by_chunks(forest, path)
            assert found is not None  # (no sink: the scores are returned)
            return found
        if forest.task_ == "classification":
            labels = forest.y_
    codes = _labels_or_one_class(labels, forest.n_samples_)
    return flagged_from_square_sums(square_sums(forest, codes), codes)


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
    """Outlier scores of new rows on the training rows' scale (:func:`outlier_flags_new_rows`'s
    ``scores``; its parameters)."""
    return outlier_flags_new_rows(forest, X, labels, method).scores


def outlier_flags_new_rows(forest, X, labels=None, method: str = "original") -> Scores:
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
    Scores
        ``scores`` (float64, one a new row), ``flags`` (a new row above its class's
        threshold) and ``thresholds``: the default flag's, Tukey's far-out fence of the
        class found on the training rows' scores (on the reference sample above
        :data:`REFERENCE_ROWS` training rows), so a new row is flagged as a training row
        with its score would be.
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
    reference = RawValues(HeldColumn(train_sums), HeldColumn(train[ref]), n, rows=ref.size)
    scaled = centre_and_scale(Runner(None), reference, int(train.max()) + 1)
    assert scaled.threshold is not None
    own = sums[np.arange(sums.shape[0]), new_codes]
    raw_new = n / np.where(own == 0, 1.0, own)
    scores = (raw_new - scaled.center[new_codes]) / scaled.scale[new_codes]
    return Scores(scores, scores > scaled.threshold[new_codes], scaled.threshold)


def scores_by_chunks(forest: Any, path: str, sink: ScoreSink | None = None,
                     flagged: bool = False) -> Scores | None:  # fmt: skip
    """Outlier scores of the training rows of a forest fitted from the store at ``path``,
    its sums written to the store and scored by tasks over its row chunks.

    Returns the scores and flags, or (with ``sink``) None once every chunk is
    written to it (with ``flagged``, the flags too: :func:`standardised`).
    """
    from distforest.forests.products import product_session
    from distforest.forests.square_sums import stored_square_sums

    n = int(forest.n_samples_)
    classification = forest.task_ == "classification"
    codes = StoredCodes(path, "target" if classification else None, n)
    k = len(forest.classes_) if classification else 1
    try:
        stored_square_sums(forest, codes)
        with product_session(forest) as session:
            values = RawValues(StoredColumn(path, SUMS_ARRAY), codes, n)
            return standardised(session.runner, values, k, sink, flagged)
    finally:
        drop_scratch(path, SUMS_ARRAY)


def stored_path(forest: Any) -> str | None:
    """The local store of a forest fitted from a store, if its scores can be made there."""
    from distforest.forests.products import stored_location

    where = stored_location(forest.leaves_)
    if where is None or not os.access(where[0], os.W_OK):
        return None
    ids = getattr(forest, "sample_ids_", None)
    if ids is not None and stored_location(ids) is None:  # IDs held in memory
        return None
    if forest.task_ == "classification":
        from distforest.store.run_store import RunStore

        if "target" not in RunStore.open(where[0]).group:
            return None
    return where[0]


def write_scores_csv(forest: Any, path: str, out: str) -> str:
    """The outlier CSV (ID or ``row``, ``label``, ``outlier``, :data:`FLAG_COLUMN`) written
    by tasks in pieces."""

    def fill(pieces: CsvPieces) -> None:
        scores_by_chunks(forest, path, pieces, flagged=True)

    return csv_by_pieces(forest, out, ("outlier", FLAG_COLUMN), fill)
