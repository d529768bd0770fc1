"""Fit :class:`~distforest.forests.smerf.SMERF` on a table in a run store.

The driver never holds the features nor any per-row array of the fit (the
table's rows times the trees): it sends tasks the store's path.

1. **Trees.**  One task per batch of trees (the same batches and seeds as in
   memory).  A task reads ``input/X`` once per worker process
   (:func:`~distforest.store.inputs.input_rows`, shared by that worker's
   tasks) and D once per process as the in-memory fit does
   (:class:`~distforest.io.distances.StoredDistances`), grows its trees
   (:func:`~distforest.kernels.smerf.grow_batch`: the same trees as in
   memory, bit for bit, when ``input/X`` holds the float64 values
   :func:`~distforest.io.load_table` gives), routes every training row through
   them and writes its trees' leaves and in-bag counts into arrays of its own
   (``smerf-fit/leaves_<k>``, ``smerf-fit/inbag_<k>``, one writer each); it
   returns its flat trees.
2. **Per-row arrays by row chunks.**  Row-block tasks join the batches'
   columns into whole chunks of ``leaves`` (int32) and ``inbag`` (uint8)
   (:func:`~distforest.forests.stored.gather_batches`); the estimator's
   ``leaves_`` and ``inbag_`` are those Zarr arrays, read on use (a tile task
   reads its rows), never an n x T copy in the driver.

What the driver still holds: the flat trees (nodes, split projections and
every leaf's in-bag members, about ``n_estimators x n`` int64 members), as the
tile tasks need them whole; D is a reference to its file (or the array given).
A later fit on the same stored table replaces ``leaves`` and ``inbag``: the
earlier model then refuses to predict from them (its ``fit_id``).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

from distforest.errors import InputError, StoreError
from distforest.forests import constraints as C
from distforest.forests.stored import fit_in_temporary_store, gather_batches
from distforest.io.attrs import decode_attrs
from distforest.io.distances import Distances, StoredDistances, distance_values, load_distances
from distforest.kernels import smerf as K
from distforest.parallel import tasks
from distforest.store.inputs import INPUT_GROUP, StoredTable, forget_inputs, input_rows
from distforest.store.run_store import RunStore, write_block

if TYPE_CHECKING:
    from distforest.forests.smerf import SMERF

logger = logging.getLogger("distforest")

#: Group of the per-batch leaves and in-bag counts while fitting (removed afterwards).
FIT_GROUP = "smerf-fit"
#: The per-row arrays of a stored fit, at the store's root: (name, dtype).
ROW_ARRAYS = (("leaves", "int32"), ("inbag", "uint8"))


def _grow_task(
    path: str, D: np.ndarray | StoredDistances, seeds: np.ndarray, params: dict[str, Any],
    batch: int,
) -> K.FlatForest:  # fmt: skip
    """Task: grow the batch's trees on the stored rows; write their leaves and in-bag counts."""
    X = np.array(input_rows(path), dtype=np.float64)  # this task's own (writable) copy
    forest = K.grow_batch(X, distance_values(D), seeds, params)
    inbag = K.inbag_counts(forest, X.shape[0])
    if inbag.max(initial=0) > np.iinfo(np.uint8).max:
        raise StoreError("a bootstrap count above 255 cannot be stored as uint8 inbag")
    everything = (slice(None), slice(None))
    write_block(path, f"{FIT_GROUP}/leaves_{batch}", everything, K.apply(forest, X))
    write_block(path, f"{FIT_GROUP}/inbag_{batch}", everything, inbag.astype(np.uint8))
    return forest


def _check_complete(table: StoredTable) -> None:
    """Refuse a stored table with missing feature values (from its summaries)."""
    attrs = decode_attrs(RunStore.open(table.path).subgroup(INPUT_GROUP).attrs)
    missing = {k: int(v) for k, v in (attrs.get("missing") or {}).items() if int(v)}
    if missing:
        shown = ", ".join(f"{k!r} ({v})" for k, v in list(missing.items())[:5])
        raise InputError(
            f"{table.source}: SMERF needs complete features, but columns have missing values: "
            f"{shown}; impute them first, e.g. `distforest impute`"
        )


def check_own_rows(model: SMERF) -> None:
    """Refuse store-backed ``leaves_`` that a later fit on the same store replaced."""
    import zarr

    leaves = model.leaves_
    if isinstance(leaves, zarr.Array) and leaves.attrs.get("fit_id") != model.fit_id_:
        raise StoreError(
            f"the leaves of this SMERF in {leaves.store} belong to another fit (fit_id "
            f"{leaves.attrs.get('fit_id')!r}, this model {model.fit_id_!r}): a later fit on the "
            "same stored table replaced them; fit this model again"
        )


def fit_stored(model: SMERF, table: StoredTable, D: Any, params: dict[str, Any]) -> SMERF:
    """Fit ``model`` on ``table`` and ``D`` (see the module docstring); returns it, fitted.

    Parameters
    ----------
    model : SMERF
    table : StoredTable
    D : path, array or Distances
        As :meth:`SMERF.fit`; its rows must be the table's ``n_samples``.
    params : dict
        The model's validated parameters.
    """
    from distforest.forests.smerf import input_cells

    _check_complete(table)
    n, d = table.n_samples, table.n_features
    dist = D if isinstance(D, Distances) else load_distances(D, n=n)
    if dist.shape[0] != n:
        raise InputError(
            f"D has {dist.shape[0]} rows but the stored table {table.source} has {n}; D must "
            "have one row and one column per row of the table, in the same order"
        )
    n_trees = params["n_estimators"]
    entropy, seeds = tasks.plan_seeds(params["random_state"], n_trees)
    tree_params = {k: params[k]
                   for k in ("max_features", "min_samples_leaf", "max_depth", "bootstrap",
                             "oblique")}  # fmt: skip
    K.warm_up()  # compile once here, not in every worker at the same time
    rs = RunStore.open(table.path, mode="r+")
    chunk = max(1, min(n, C.SMERF_TILE))
    with model._runner(input_cells(n, d)) as runner:
        batches = tasks.plan_batches(n_trees, tasks.default_batch_size(n_trees, runner.threads()))
        group = rs.group.require_group(FIT_GROUP)
        for k, b in enumerate(batches):
            for name, dtype in ROW_ARRAYS:
                group.create_array(f"{name}_{k}", shape=(n, b.stop - b.start),
                                   chunks=(chunk, b.stop - b.start), dtype=dtype,
                                   overwrite=True)  # fmt: skip
        logger.info("growing %d SMERF trees on %d x %d from %s in %d tasks", n_trees, n, d,
                    table.path, len(batches))  # fmt: skip
        values = dist.values
        # a file is passed as a reference: each worker reads it once (never the driver)
        d_h = values if isinstance(values, StoredDistances) else runner.share(values)
        items = [(table.path, d_h, seeds[b], tree_params, k) for k, b in enumerate(batches)]
        parts: list[Any] = [None] * len(batches)
        for i, part in runner.run(_grow_task, items, name="smerf-trees",
                                  progress=model._report("fit")):  # fmt: skip
            parts[i] = part
        fit_id = uuid.uuid4().hex
        rows = {}
        for name, dtype in ROW_ARRAYS:
            per_batch = [f"{FIT_GROUP}/{name}_{k}" for k in range(len(batches))]
            rows[name] = gather_batches(runner, table.path, per_batch, name, dtype, chunk)
            rows[name].attrs.update({"fit_id": fit_id})
        runner.everywhere(forget_inputs)
    del rs.group[FIT_GROUP]
    model._fitted(
        K.concatenate(parts, consume=True), rows["leaves"], rows["inbag"], n_samples=n,
        feature_names=table.feature_names, seeds=seeds, entropy=entropy, dist=dist,
        input_={"source": table.source, "fingerprint": table.fingerprint()}, params=params,
        fit_id=fit_id,
    )  # fmt: skip
    return model


def fit_dask_frame(model: SMERF, frame: Any, D: Any, params: dict[str, Any]) -> SMERF:
    """Fit on a ``dask.dataframe.DataFrame`` without computing it in this process.

    The frame is read by partitions on the workers (features encoded as float64,
    missing values refused) into a temporary run store, removed when the model
    is garbage-collected or fitted again.
    """

    def fit(table: StoredTable) -> None:
        fit_stored(model, table, D, params)

    fit_in_temporary_store(model, frame, fit, allow_missing=False, dtype=np.float64)
    return model
