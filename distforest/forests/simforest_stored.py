"""Fit a :class:`~distforest.forests.simforest.SimilarityForestClassifier` on a stored table.

For a named measure (``rbf``, ``cosine``, ``dot``, ``euclidean``) on feature
rows kept in a run store (``input/X``, labels in ``input/y``); the driver
never holds the rows nor the ``(n, T)`` per-row arrays:

1. **Trees.**  One task per batch of trees (the same batches and seeds as in
   memory).  A task reads ``input/X`` once per worker process
   (:func:`~distforest.store.inputs.input_rows`, shared by that worker's
   tasks; rows scaled by a command's z-score are kept scaled, once), grows
   its trees with :func:`~distforest.kernels.simtrees.grow_tree` (the same
   trees as in memory, bit for bit: a tree depends on its seed and the
   similarities only), writes their final nodes and bootstrap counts into
   arrays of its own (``simforest_fit/leaves_<k>``, ``inbag_<k>``: one writer
   each) and returns the nodes only.
2. **Per-row arrays by row chunks.**  Tasks join the batches' arrays into the
   ``(n, T)`` ``leaves`` and ``inbag``, each writing whole chunks
   (:func:`~distforest.forests.stored.gather_batches`).

The store then holds what :meth:`SimilarityForestClassifier.save` writes
(forest, leaves, inbag, target, pair objects, coordinates, provenance), so
proximities and outlier scores read it from there; the fitted estimator's
``leaves_`` and ``inbag_`` are the store's Zarr arrays (read on use).  Its
``trees_`` (the nodes, about as large as the rows' per-tree arrays) stay in
this process, as prediction needs them; their own ``leaves``/``inbag`` are
empty.

:func:`column_moments` gives a command's z-score, the float64 values numpy's
``X.mean(axis=0)`` and ``X.std(axis=0)`` give in memory: one task reads the
chunks in order and sums them row after row, as numpy sums along axis 0.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.forests.measures import Measure
from distforest.forests.simforest import NO_ROWS
from distforest.forests.stored import _label_codes, fit_in_temporary_store, gather_batches
from distforest.io.attrs import decode_attrs
from distforest.kernels.simfetch import fetch_function
from distforest.kernels.simtrees import SimTree, SimTreeParams, grow_tree
from distforest.parallel import tasks
from distforest.store.inputs import (
    INPUT_GROUP,
    StoredTable,
    forget_inputs,
    input_chunk,
    input_rows,
    scaled_rows,
)
from distforest.store.run_store import RunStore, task_array, write_block

if TYPE_CHECKING:
    from distforest.forests.simforest import SimilarityForestClassifier

logger = logging.getLogger("distforest")

#: Group of the per-batch arrays while fitting (removed afterwards).
FIT_GROUP = "simforest_fit"


@dataclass(frozen=True)
class Rows:
    """What a tree task reads: the store's ``input/X``, scaled by ``(X - mean) / scale``
    (float64, as a command scales a table in memory) when ``scaling`` is given.

    ``token`` names the fit: a worker process scales the rows once per fit.
    """

    path: str
    token: str
    scaling: tuple[np.ndarray, np.ndarray] | None = None


def _objects(rows: Rows) -> np.ndarray:
    """The training objects of a tree task (read, and scaled, once per process)."""
    if rows.scaling is None:
        return input_rows(rows.path)
    mean, scale = rows.scaling
    return scaled_rows(rows.path, rows.token, mean, scale)


def _grow_task(
    rows: Rows,
    function: Any,
    y: np.ndarray,
    seeds: np.ndarray,
    params: SimTreeParams,
    n_classes: int,
    batch: int,
) -> list[SimTree]:
    """Grow the trees of ``seeds``; write their per-row arrays, return their nodes."""
    X = _objects(rows)
    trees = [grow_tree(fetch_function(function, X), y, int(s), params, n_classes) for s in seeds]
    everything = (slice(None), slice(None))
    leaves = np.stack([t.leaves for t in trees], axis=1).astype(np.int32)
    write_block(rows.path, f"{FIT_GROUP}/leaves_{batch}", everything, leaves)
    inbag = np.stack([t.inbag for t in trees], axis=1).astype(np.uint8)
    write_block(rows.path, f"{FIT_GROUP}/inbag_{batch}", everything, inbag)
    return [replace(t, leaves=NO_ROWS, inbag=NO_ROWS) for t in trees]


def _moments_task(path: str, chunks: list[slice]) -> tuple[np.ndarray, np.ndarray]:
    """``X.mean(axis=0)`` and ``X.std(axis=0)`` of ``input/X`` as float64, read a chunk at
    a time: numpy sums a C-ordered array along axis 0 row after row, so does this."""

    def total(center: np.ndarray | None) -> np.ndarray:
        acc: np.ndarray | None = None
        for rows in chunks:
            values = input_chunk(path, rows).astype(np.float64)
            if center is not None:
                values -= center
                np.multiply(values, values, out=values)
            stacked = values if acc is None else np.concatenate([acc[None], values])
            acc = np.add.reduce(stacked, axis=0)
        assert acc is not None
        return acc

    n = chunks[-1].stop
    mean = total(None) / n
    return mean, np.sqrt(total(mean) / n)


def column_moments(
    forest: SimilarityForestClassifier, table: StoredTable
) -> tuple[np.ndarray, np.ndarray]:
    """The feature columns' mean and standard deviation (float64, numpy's in-memory
    values, bit for bit), by one task reading ``table`` a chunk at a time."""
    with forest._runner(table.n_samples * table.n_features) as runner:
        for _, moments in runner.run(_moments_task, [(table.path, table.chunks())],
                                     name="simforest-moments"):  # fmt: skip
            return cast(tuple[np.ndarray, np.ndarray], moments)
    raise AssertionError("unreachable")  # pragma: no cover


def _check_table(table: StoredTable, measure: Measure) -> None:
    """Refuse what the in-memory fit refuses: text columns, missing values, no labels."""
    if table.categories:
        raise InputError(
            f"{table.source}: column(s) {sorted(table.categories)} hold text; a SimForest "
            "measure needs numeric features (drop them, or encode them as numbers)"
        )
    attrs = decode_attrs(RunStore.open(table.path).subgroup(INPUT_GROUP).attrs)
    missing = {str(k): int(v) for k, v in dict(attrs.get("missing") or {}).items() if v}
    if missing:
        raise InputError(
            f"{table.source} has missing values ({missing}); {measure.name} needs complete "
            "rows: impute them first (distforest impute) or drop those rows"
        )
    if not table.has_target:
        raise InputError(
            f"{table.source} was stored without a target: ingest it with target='<label "
            "column>' to fit a classifier"
        )


def _pair_rows(rows: Rows, ids: np.ndarray) -> np.ndarray:
    """The pair objects' rows (scaled as the tasks scale them)."""
    arr = task_array(rows.path, f"{INPUT_GROUP}/X", "r")
    values = np.asarray(arr.get_orthogonal_selection((ids, slice(None))))
    if rows.scaling is None:
        return values
    mean, scale = rows.scaling
    return cast(np.ndarray, (values.astype(np.float64) - mean) / scale)


def _classes(table: StoredTable) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, codes)`` as the in-memory fit's ``np.unique`` gives them; text labels
    are stored as codes of their sorted values, read a chunk at a time (never as labels)."""
    from distforest.forests.simforest import class_codes

    if table.target_kind != "labels":
        return class_codes(table.read_y(), table.n_samples)
    classes = np.empty(len(table.target_labels), dtype=object)
    classes[:] = list(table.target_labels)
    return classes, _label_codes(table, len(classes))


def fit_table(
    forest: SimilarityForestClassifier,
    table: StoredTable,
    y: Any = None,
    similarity: Any = None,
    *,
    scaling: tuple[np.ndarray, np.ndarray] | None = None,
) -> SimilarityForestClassifier:
    """Fit ``forest`` on ``table`` (see the module docstring); returns it, fitted.

    Parameters
    ----------
    forest : SimilarityForestClassifier
        With a named ``metric`` (or ``similarity`` naming one).
    table : StoredTable
        Feature rows in ``input/X``, labels in ``input/y``.
    y : None
        The labels are the table's; giving them again is refused.
    similarity : str, optional
        A measure name, as for :meth:`SimilarityForestClassifier.fit`.
    scaling : (mean, scale), optional
        Features scaled as ``(X - mean) / scale`` in float64 before the measure
        (a command's ``--normalize zscore``).
    """
    if y is not None:
        raise InputError(
            f"{table.source} is a stored table: its labels were read with it "
            f"({table.target_name!r}); do not pass y as well"
        )
    params = forest._validated()
    if callable(similarity):
        raise ParameterError(
            "a stored table is fitted with a named measure (metric='rbf', 'cosine', 'dot' or "
            "'euclidean'), not a similarity function: load the objects to use a function"
        )
    measure = forest._measure(similarity, params)
    if not isinstance(measure, Measure):
        raise ParameterError(
            f"{table.source} holds feature rows, not a similarity matrix: give "
            "metric='rbf', 'cosine', 'dot' or 'euclidean'"
        )
    _check_table(table, measure)
    measure = measure.fitted(np.empty((0, table.n_features)))  # rbf: gamma from the width
    n, n_trees, tile = table.n_samples, params["n_estimators"], params["tile_size"]
    classes, codes = _classes(table)
    tree_params = forest._tree_params(params, measure.kind)
    entropy, seeds = tasks.plan_seeds(params["random_state"], n_trees)
    rows = Rows(str(table.path), uuid.uuid4().hex, scaling)
    rs = RunStore.open(table.path, mode="r+")
    rs.mark_running()
    trees: list[SimTree] = [None] * n_trees  # type: ignore[list-item]
    with forest._runner(n * table.n_features) as runner:
        size = params["batch_size"] or tasks.default_batch_size(n_trees, runner.threads())
        batches = tasks.plan_batches(n_trees, size)
        group = rs.group.require_group(FIT_GROUP)
        for k, b in enumerate(batches):
            for name, dtype in (("leaves", "int32"), ("inbag", "uint8")):
                group.create_array(f"{name}_{k}", shape=(n, b.stop - b.start),
                                   chunks=(min(n, tile), b.stop - b.start), dtype=dtype,
                                   overwrite=True)  # fmt: skip
        logger.info("growing %d SimForest trees on %d x %d from %s in %d tasks", n_trees, n,
                    table.n_features, table.path, len(batches))  # fmt: skip
        y_shared = runner.share(codes.astype(np.int64))
        items = [(rows, measure.values, y_shared, seeds[b], tree_params, len(classes), k)
                 for k, b in enumerate(batches)]  # fmt: skip
        for i, part in runner.run(_grow_task, items, name="simforest-fit",
                                  progress=forest._report("fit")):  # fmt: skip
            trees[batches[i]] = part
        runner.everywhere(forget_inputs)
        parts = range(len(batches))
        arrays = tuple(
            gather_batches(runner, rs.path, [f"{FIT_GROUP}/{name}_{k}" for k in parts], name,
                           dtype, tile, progress=forest._report("leaves"))
            for name, dtype in (("leaves", "int32"), ("inbag", "uint8"))
        )  # fmt: skip
    del rs.group[FIT_GROUP]
    forest._set_fitted(trees, classes, codes, measure, None, measure.kind, params, rows=arrays)
    forest.pair_objects_ = _pair_rows(rows, forest.pair_ids_)
    forest.n_features_in_ = table.n_features
    forest.random_state_ = entropy
    forest.seeds_ = seeds
    forest.fit_id_ = uuid.uuid4().hex
    # the store becomes this model's (what save writes), so its matrices go there
    rs.write_coordinates(n, n_trees)
    forest._save_parts(rs, tile)
    forest._write_arrays(rs, tile, ("target", "pair_ids", "pair_objects"))
    rs.update_attrs(**forest._provenance(model=True), store_input=True)
    return forest


def fit_frame(
    forest: SimilarityForestClassifier, frame: Any, y: Any = None, similarity: Any = None
) -> SimilarityForestClassifier:
    """Fit on a ``dask.dataframe.DataFrame`` (``y`` names its label column) read by
    partitions into a temporary store
    (:func:`~distforest.forests.stored.fit_in_temporary_store`)."""
    if not isinstance(y, str):
        raise InputError(
            "the labels of a dask DataFrame must be one of its columns: pass y='<column>' "
            f"(got {type(y).__name__}); or X.assign(label=...) first"
        )

    def fit(table: StoredTable) -> None:
        fit_table(forest, table, None, similarity)

    return cast("SimilarityForestClassifier", fit_in_temporary_store(forest, frame, fit, target=y))
