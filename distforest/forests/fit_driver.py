"""The one fit of every forest: seeds, batches of trees, the runner, the sink.

:func:`fit_forest` knows no estimator.  An estimator gives it

- a :class:`~distforest.io.source.RowSource` (rows in memory or in a store,
  from :func:`distforest.store.source.open_source`),
- a *grower*: a picklable callable ``grower(X, y, seeds) -> GrownBatch`` that
  grows one batch of trees on all the rows (a module-level function, or a
  :func:`functools.partial` of one, with the estimator's tree settings bound),
- the per-row results the grower makes (name -> dtype and dims),
- a :class:`~distforest.store.sink.RowSink` (from
  :func:`distforest.store.sink.open_sink`) where the per-row results and the
  trees' nodes go,

and takes back a :class:`ForestFit`, from which it sets its fitted attributes
once.  The same seeds (planned from ``random_state``) and the same batches
whatever the input's home: the same trees, bit for bit.

One task per batch of trees: it opens the rows on its worker (rows in memory
were sent once per worker; rows in a store are read once per worker process
and shared by its tasks), grows its trees and puts its per-row arrays and nodes
into the sink (returned to the driver for a sink in memory, written into the
store's ``fit/`` parts otherwise, then joined by row-block tasks: no process
holds a whole ``(n, T)`` array or the whole forest).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distforest.io.source import RowSource
from distforest.parallel import tasks
from distforest.parallel.execution import Runner
from distforest.store.inputs import forget_inputs
from distforest.store.sink import RowSink, SinkHandle

__all__ = ["ForestFit", "Grower", "GrownBatch", "fit_forest"]

logger = logging.getLogger("distforest")


@dataclass(frozen=True)
class GrownBatch:
    """What a grower returns for one batch of ``w`` trees.

    Attributes
    ----------
    rows : dict of str to ndarray
        Per-row results, ``(n, w, ...)`` each (leaves, in-bag counts, path codes).
    trees : dict of str to ndarray
        Per-tree results, ``(w, ...)`` each (node counts, importances), kept on
        the driver (small).
    nodes : dict of str to ndarray
        The trees' node arrays, concatenated over the batch's trees (child
        indices local to their tree); empty when the nodes are not kept.
    """

    rows: Mapping[str, np.ndarray]
    trees: Mapping[str, np.ndarray]
    nodes: Mapping[str, np.ndarray] = field(default_factory=dict)


#: ``grower(X, y, seeds) -> GrownBatch``: X the source's rows (every row, as the
#: source's ``rows_handle`` gives them), y the shared target or None, seeds the
#: batch's per-tree seeds.
Grower = Callable[[np.ndarray, "np.ndarray | None", np.ndarray], GrownBatch]


@dataclass(frozen=True)
class ForestFit:
    """The result of :func:`fit_forest`.

    Attributes
    ----------
    seeds : ndarray of uint64, shape (n_trees,)
    random_state : int
        The root entropy the seeds were planned from.
    batches : list of slice
        The trees of each task.
    rows : dict
        Per-row results ``(n, n_trees, ...)``: NumPy arrays, or the store's Zarr
        arrays (read on use).
    trees : dict of str to ndarray
        Per-tree results ``(n_trees, ...)``, joined in tree order.
    nodes : mapping or None
        The forest's node arrays (a dict, or a store's
        :class:`~distforest.store.sink.StoredNodes`); None when not kept.
    sample_ids : array or None
        The rows' IDs (the store's ``sample`` array for rows in that store).
    fit_id : str
        A new identity of this fit (the store's ``fit_id`` names the forest it holds).
    store : str or None
        The run store the results are in; None: in memory.
    """

    seeds: np.ndarray
    random_state: int
    batches: list[slice]
    rows: dict[str, Any]
    trees: dict[str, np.ndarray]
    nodes: Mapping[str, np.ndarray] | None
    sample_ids: Any
    fit_id: str
    store: str | None


def _grow_task(
    grower: Grower, rows: Any, y: np.ndarray | None, seeds: np.ndarray, k: int, out: SinkHandle
) -> GrownBatch:
    grown = grower(np.asarray(rows), y, seeds)
    return GrownBatch(
        rows=out.put_batch(k, grown.rows) or {},
        trees=grown.trees,
        nodes=(out.put_nodes(k, grown.nodes) or {}) if grown.nodes else {},
    )


def fit_forest(
    source: RowSource,
    grower: Grower,
    *,
    y: np.ndarray | None,
    n_trees: int,
    random_state: int | None,
    batch_size: int | None,
    runner: Runner,
    sink: RowSink,
    row_results: Mapping[str, tuple[Any, tuple[str, ...]]],
    keep_nodes: bool = True,
    dtype: Any = np.float32,
    progress: tasks.ProgressCallback | None = None,
    join_progress: tasks.ProgressCallback | None = None,
) -> ForestFit:
    """Grow ``n_trees`` trees on ``source`` by batches, their results into ``sink``.

    Parameters
    ----------
    source : RowSource
    grower : callable
        ``grower(X, y, seeds) -> GrownBatch`` (picklable: it runs on the workers).
    y : ndarray or None
        The target as the trees fit it (codes or floats), sent once per worker.
    n_trees : int
    random_state : int or None
        Seed of the whole forest (:func:`distforest.parallel.tasks.plan_seeds`).
    batch_size : int or None
        Trees per task (None: :func:`distforest.parallel.tasks.plan_tree_batches`).
    runner : Runner
    sink : RowSink
        Where per-row results and nodes go (memory, or a run store).
    row_results : mapping
        Per-row result name -> ``(dtype, dims)`` (the grower's ``rows`` keys).
    keep_nodes : bool, default True
        Join the trees' nodes (``ForestFit.nodes``); False: the grower keeps none.
    dtype : numpy dtype, default float32
        Of the rows the grower sees.
    progress, join_progress : callable, optional
        ``(done, total)`` of the growing tasks and of the joining ones.

    Returns
    -------
    ForestFit
    """
    entropy, seeds = tasks.plan_seeds(random_state, n_trees)
    n = source.n_samples
    batches = tasks.plan_tree_batches(n_trees, runner.threads(), batch_size)
    logger.info("fitting %d trees on %d x %d from %s in %d tasks", n_trees, n,
                source.n_features, source.source, len(batches))  # fmt: skip
    sink.expect_batches(n_trees, row_results)
    rows = source.rows_handle(runner.share, dtype)
    y_shared = None if y is None else runner.share(y)
    out = sink.handle()
    items = [(grower, rows, y_shared, seeds[b], k, out) for k, b in enumerate(batches)]
    trees: list[Mapping[str, np.ndarray]] = [{}] * len(batches)
    for k, grown in runner.run(_grow_task, items, name="fit-trees", progress=progress):
        sink.place_batch(k, batches[k], grown.rows)
        sink.place_nodes(k, grown.nodes)
        trees[k] = grown.trees
    del rows, y_shared
    per_tree = {name: np.concatenate([t[name] for t in trees]) for name in trees[0]}
    fit_id = uuid.uuid4().hex
    ids = sink.coordinates(n_trees, source)
    nodes = (sink.join_nodes(per_tree["node_counts"], seeds, fit_id)
             if keep_nodes and "node_counts" in per_tree else None)  # fmt: skip
    joined = sink.join_batches(runner, progress=join_progress)
    sink.close()
    if source.store_path is not None:  # the rows each worker kept for this fit
        runner.everywhere(forget_inputs)
    return ForestFit(seeds, entropy, batches, joined, per_tree, nodes, ids, fit_id, sink.path)
