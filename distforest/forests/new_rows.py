"""New rows against a fitted forest: their proximity to the training rows, and what it gives.

A new row is routed through the trees (its leaves) and is out of bag in
every tree.  Its proximity to training row j is then, per method:

- ``original``: the fraction of trees in which both share a leaf;
- ``oob``: the same over the trees where j is out of bag too;
- ``rfgap``: ``(1/T) sum_t c_j(t) [same leaf] / M(t)``, with ``M(t)`` the
  in-bag total of the new row's leaf (rows sum to 1).

:func:`cross_proximity` writes the ``n_new x n_train`` matrix through the tile
service (one task per group of tiles, resumable, integer counts for
``original``) or builds a small one in memory, with the very tile function
of the training proximities.  :func:`squared_sums` gives each new row's sums
of squared proximities by class (for outlier scores) one task per block of
new rows, never holding more than a block of rows of the matrix.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from distforest.forests import forest_predict
from distforest.forests.tiled import matrix_in_memory, write_matrix
from distforest.forests.tiles import compute_tile
from distforest.io.in_memory import check_in_memory
from distforest.kernels.apply import apply_nodes
from distforest.kernels.proximity import warm_up
from distforest.parallel.tasks import plan_batches
from distforest.parallel.tiling import TilePlan
from distforest.store.run_store import RunStore, complete_output
from distforest.store.schema import matrix_encoding

if TYPE_CHECKING:
    import xarray as xr

    from distforest.forests.fitted import FittedForest

#: Store name of each method's cross matrix (layouts in :mod:`distforest.store.schema`).
CROSS_NAMES = {
    "original": "cross_proximity",
    "oob": "cross_proximity_oob",
    "rfgap": "cross_proximity_rfgap",
}


def new_leaves(forest: FittedForest, X: Any) -> np.ndarray:
    """Leaves of new rows (the training columns, categories coded as in fit).

    Returns
    -------
    ndarray of int32, shape (n_new, n_estimators)
    """
    if getattr(forest, "outside_", None) is not None:  # a model fitted elsewhere routes them
        return np.asarray(forest.apply(X))
    forest._check_nodes("the proximity of new rows")
    X32 = forest_predict.new_rows(forest, X)
    offsets, _value, *routing = forest_predict._forest_arrays(forest)
    nodes = dict(zip(forest_predict.ROUTING_FIELDS, routing, strict=True))
    return apply_nodes(X32, {"node_offset": offsets, **nodes})


def new_row_arrays(forest: FittedForest, leaves: np.ndarray) -> dict[str, np.ndarray]:
    """What a tile needs of the new rows: leaves, in-bag counts (none) and leaf masses.

    ``leaf_mass[i, t]`` is the in-bag total of the training rows in new row
    i's leaf of tree t (RF-GAP's ``M_i(t)``), looked up per tree.
    """
    offsets = np.concatenate([[0], np.cumsum(forest.node_counts_)]).astype(np.int64)
    mass = np.empty(leaves.shape, dtype=np.float32)
    for t in range(leaves.shape[1]):
        totals = np.bincount(forest.leaves_[:, t], weights=forest.inbag_[:, t],
                             minlength=int(offsets[t + 1] - offsets[t]))  # fmt: skip
        mass[:, t] = totals[leaves[:, t]]
    inbag = np.zeros(leaves.shape, dtype=np.uint8)  # out of bag in every tree
    return {"leaves": leaves, "inbag": inbag, "leaf_mass": mass}


def _share_each(runner: Any, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Each array sent to the workers on its own (a scattered dict would be keyed by its
    names: two dicts with the same names would overwrite each other's data)."""
    return {name: runner.share(a) for name, a in arrays.items()}


def cross_tile(
    new: dict, train: dict, method: str, counts: str | None, rows: slice, cols: slice
) -> np.ndarray:
    """A tile function of the tile service: new rows ``rows`` by training rows ``cols``."""
    block_i = {name: a[rows] for name, a in new.items()}
    block_j = {name: a[cols] for name, a in train.items() if name != "leaf_mass"}
    return compute_tile(method, block_i, block_j, counts)


def cross_proximity(
    forest: FittedForest,
    X: Any,
    method: str,
    store: str | Path | None,
    *,
    overwrite: bool,
    max_in_memory: int | None,
) -> xr.DataArray:
    """The proximity of new rows to the training rows, ``(n_new, n_train)``.

    See :meth:`ProximityForest.proximity` (with ``X``).
    """
    import xarray as xr  # on use, as for the training proximities

    forest._check_fitted()
    forest._check_method(method)
    leaves = new_leaves(forest, X)
    new = new_row_arrays(forest, leaves)
    train = {"leaves": np.asarray(forest.leaves_), "inbag": np.asarray(forest.inbag_)}
    n_new, n = leaves.shape[0], forest.n_samples_
    tile = forest.params_["tile_size"]
    plan = TilePlan(n_new, n, tile)
    name = CROSS_NAMES[method]
    if store is None:
        check_in_memory(n_new, n, what="proximity", itemsize=4, store="cross.zarr",
                        max_in_memory=max_in_memory)  # fmt: skip
        values = matrix_in_memory(plan, cross_tile, (new, train, method, None))
        train_rows = (np.arange(n) if forest.sample_ids_ is None
                      else np.asarray(forest.sample_ids_))  # fmt: skip
        coords = {"sample_i": np.arange(n_new), "sample_j": train_rows}
        return xr.DataArray(values, dims=("sample_i", "sample_j"), coords=coords, name=name,
                            attrs={"method": method, "new_rows": True})  # fmt: skip
    n_trees = int(forest.leaves_.shape[1])
    rs = RunStore.create(store, overwrite=overwrite, attrs={
        "kind": "cross-proximity", "fit_id": forest.fit_id_, "method": method,
        "n_new": n_new, "n_train": n, "n_trees": n_trees, "params": forest.params_,
    })  # fmt: skip
    rs.write_named("sample_i", np.arange(n_new, dtype=np.int64))
    rs.write_named("sample_j", np.arange(n, dtype=np.int64))
    rs.write_named("leaves", leaves, rows=tile)
    encoding = matrix_encoding(name, n_trees=n_trees)
    counts = encoding.dtype if encoding.is_counts else None
    warm_up(() if counts is None else (counts,))  # compile once here, not in every worker at once
    with forest._runner(forest._fitted_cells() + n_new * forest.n_features_in_) as runner:
        handles = (_share_each(runner, new), _share_each(runner, train))
        write_matrix(
            runner, rs, name, plan, cross_tile, (*handles, method, counts),
            identity={"fit_id": forest.fit_id_, "method": method},
            encoding=encoding, attrs={"method": method, "n_trees": n_trees},
            progress=forest._report("tiles"),
        )  # fmt: skip
    complete_output(rs)
    return rs.dataset()[name]


def _square_sums_task(
    new: dict, train: dict, method: str, onehot: np.ndarray, rows: slice, tile: int
) -> np.ndarray:
    """Sums of squared proximities of new rows ``rows`` to each class's training rows."""
    out = np.zeros((rows.stop - rows.start, onehot.shape[1]))
    for cols in plan_batches(onehot.shape[0], tile):
        values = cross_tile(new, train, method, None, rows, cols).astype(np.float64)
        out += (values**2) @ onehot[cols]
    return out


def squared_sums(forest: FittedForest, X: Any, classes: np.ndarray, method: str) -> np.ndarray:
    """Each new row's sum of squared proximities to the training rows of each class.

    One task per block of ``tile_size`` new rows; a task holds one tile of
    the matrix at a time.

    Parameters
    ----------
    forest : ProximityForest
    X : array-like
        New rows.
    classes : ndarray of int, shape (n_train,)
        Class code of each training row (zeros: one class).
    method : {"original", "oob", "rfgap"}

    Returns
    -------
    ndarray of float64, shape (n_new, n_classes)
    """
    forest._check_method(method)
    new = new_row_arrays(forest, new_leaves(forest, X))
    train = {"leaves": np.asarray(forest.leaves_), "inbag": np.asarray(forest.inbag_)}
    n_new = new["leaves"].shape[0]
    tile = forest.params_["tile_size"]
    blocks = plan_batches(n_new, tile)
    onehot = np.zeros((classes.size, int(classes.max()) + 1))
    onehot[np.arange(classes.size), classes] = 1.0
    out = np.empty((n_new, onehot.shape[1]))
    with forest_predict.runner_for(forest, new["leaves"].size) as runner:
        handles = (_share_each(runner, new), _share_each(runner, train), method,
                   runner.share(onehot))  # fmt: skip
        items = [(*handles, rows, tile) for rows in blocks]
        for i, part in runner.run(_square_sums_task, items, name="new-row-squares"):
            out[blocks[i]] = part
    return out


def proximity_weights(forest: FittedForest, X: Any, method: str) -> np.ndarray:
    """Proximity-weighted target of new rows: class weights (rows sum to 1) or values.

    ``sum_j P_ij v_j / sum_j P_ij`` over the training rows j, with ``v_j`` the
    one-hot class (classification) or the target (regression); computed as
    ``P @ V`` from per-tree leaf sums, never forming P.

    Returns
    -------
    ndarray of float64, shape (n_new, n_classes) or (n_new, 1)
    """
    from distforest.forests.products import product_session

    forest_predict.check_supervised(forest, "proximity-weighted prediction")
    forest._check_method(method)
    y = np.asarray(forest.y_)
    if forest.task_ == "classification":
        V = np.zeros((y.size, len(forest.classes_)))
        V[np.arange(y.size), y.astype(np.int64)] = 1.0
    else:
        V = y.astype(np.float64)[:, None]
    leaves = new_leaves(forest, X)
    V1 = np.concatenate([V, np.ones((y.size, 1))], axis=1)  # the weights' row sums last
    with product_session(forest) as session:
        sums = session.product(V1, method, new_leaves=leaves)
    total = sums[:, -1:]
    return np.divide(sums[:, :-1], total, out=np.zeros_like(sums[:, :-1]), where=total > 0)
