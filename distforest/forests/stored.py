"""Fit a :class:`~distforest.forests.ProximityForest` on a table in a run store.

The driver never holds the table: it sends tasks the store's path.

1. **Trees.**  One task per batch of trees (the same batches and seeds as
   in memory).  A task reads ``input/X`` once per worker process
   (:func:`~distforest.store.inputs.input_rows`, shared by that worker's
   tasks), grows its trees (:func:`~distforest.kernels.trees.grow_nodes`:
   the same trees as in memory, bit for bit), writes its trees' in-bag
   counts into an array of its own (``fit/inbag_<k>``, one writer) and
   returns only the nodes.
2. **Leaves by row chunks.**  The forest's nodes are sent to each worker
   once; one task per block of rows reads those rows of ``input/X``, routes
   them through every tree (:func:`~distforest.kernels.apply.apply_forest`,
   scikit-learn's rule) and writes whole chunks of ``leaves`` and ``inbag``.

The store then holds what :meth:`ProximityForest.save` writes (forest,
leaves, inbag, coordinates, target, provenance), so proximities and the
applications read it from there.  The fitted estimator's ``leaves_`` and
``inbag_`` are the store's Zarr arrays (read on use), not copies in memory.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from distforest.forests.targets import encode_target, resolve_task
from distforest.kernels.apply import apply_nodes
from distforest.kernels.trees import NODE_FIELDS, TreeBatch, TreeParams, grow_nodes
from distforest.parallel import tasks
from distforest.store.inputs import (
    StoredTable,
    forget_inputs,
    input_chunk,
    input_rows,
    per_fit,
    write_row_ids,
)
from distforest.store.run_store import RunStore, read_rows, task_array, write_block, write_group

if TYPE_CHECKING:
    from distforest.forests.proximity_forest import ProximityForest

logger = logging.getLogger("distforest")

#: Group of the per-batch in-bag counts while fitting (removed afterwards).
FIT_GROUP = "fit"
#: Rows per routing task: about this many, in whole chunks of ``leaves``.
ROUTE_ROWS = 65_536


@dataclass(frozen=True)
class _ForestRef:
    """Where the routing tasks read the forest (``forest/`` of the store): each worker
    process reads it once per fit (``token``) and keeps it for its tasks."""

    path: str
    token: str


def _forest_nodes(ref: _ForestRef) -> dict[str, np.ndarray]:
    """The forest's nodes, read once per worker process and fit (:func:`per_fit`)."""

    def read() -> dict[str, np.ndarray]:
        nodes = RunStore.open(ref.path).read_forest()
        nodes.pop("seed", None)
        return nodes

    return cast(dict[str, np.ndarray], per_fit("forest", ref.path, ref.token, read))


@dataclass(frozen=True)
class StoredNodes(Mapping[str, np.ndarray]):
    """The node arrays of a forest fitted into a store, read from it on use.

    The driver of a stored fit never holds the forest (hundreds of megabytes of
    nodes at a million rows); routing new rows or saving elsewhere reads it.
    A later fit into the same store replaced it: reading then raises
    :class:`~distforest.errors.StoreError`.
    """

    path: str
    fit_id: str

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in NODE_FIELDS:
            raise KeyError(name)
        rs = RunStore.open(self.path)
        if rs.attrs.get("fit_id") != self.fit_id:
            from distforest.errors import StoreError

            raise StoreError(
                f"the forest in {self.path!r} belongs to another fit (fit_id "
                f"{rs.attrs.get('fit_id')!r}, this forest {self.fit_id!r}): a store holds one "
                "forest, and a later fit on the same stored table replaced this one's; fit "
                "this forest again"
            )
        return np.asarray(rs.array(f"forest/{name}")[...])

    def __iter__(self) -> Iterator[str]:
        return iter(NODE_FIELDS)

    def __len__(self) -> int:
        return len(NODE_FIELDS)


def _label_codes(table: StoredTable, n_classes: int) -> np.ndarray:
    """``input/y`` (label codes) read a chunk at a time into int16 (int32 for many classes)."""
    y = RunStore.open(table.path).array("input/y")
    codes = np.empty(table.n_samples, dtype=np.int16 if n_classes <= 1 << 15 else np.int32)
    step = int(y.chunks[0])
    for start in range(0, table.n_samples, step):
        codes[start : start + step] = y[start : start + step]
    return codes


def _grow_task(
    path: str, y: np.ndarray | None, seeds: np.ndarray, params: TreeParams, batch: int
) -> TreeBatch:
    X = input_rows(path)
    if y is not None and y.dtype.kind in "iu":  # class codes: the trees see int64, as in memory
        y = y.astype(np.int64)
    grown = grow_nodes(X, y, seeds, params)
    write_block(path, f"{FIT_GROUP}/inbag_{batch}", (slice(None), slice(None)), grown.inbag)
    write_group(path, f"{FIT_GROUP}/nodes_{batch}", grown.nodes)  # joined by the driver
    return replace(grown.nodes_only(), nodes={})


def _route_task(path: str, forest: _ForestRef, n_batches: int, rows: slice) -> int:
    X = input_chunk(path, rows)
    leaves = apply_nodes(X, _forest_nodes(forest))
    inbag = np.concatenate(
        [read_rows(path, f"{FIT_GROUP}/inbag_{k}", rows) for k in range(n_batches)], axis=1
    )
    write_block(path, "leaves", (rows, slice(None)), leaves)
    write_block(path, "inbag", (rows, slice(None)), inbag)
    return int(rows.stop - rows.start)


def fit_stored(
    forest: ProximityForest,
    table: StoredTable,
    params: dict[str, Any],
    tree_params_of: Any,
) -> ProximityForest:
    """Fit ``forest`` on ``table`` (see the module docstring); returns it, fitted.

    Parameters
    ----------
    forest : ProximityForest
    table : StoredTable
    params : dict
        The forest's validated parameters.
    tree_params_of : callable
        ``tree_params_of(task, classes) -> TreeParams``, the estimator's
        own translation of its parameters (so both paths grow the same trees).
    """
    labels = table.target_kind == "labels"
    if labels:  # the distinct labels decide the task as all n of them would
        task = resolve_task(params["task"], np.asarray(table.target_labels, dtype=object),
                            table.target_name)  # fmt: skip
    if labels and task == "classification":
        # codes of the sorted labels, what encode_target gives, read by chunks into the
        # smallest type (the driver keeps them: 2 bytes a row, not an 8-byte code and a label)
        y_fit: np.ndarray | None = _label_codes(table, len(table.target_labels))
        classes = list(table.target_labels)
    else:
        y_raw = table.read_y()
        task = resolve_task(params["task"], y_raw, table.target_name)
        y_fit, classes = encode_target(task, y_raw)
        del y_raw
    tree_params: TreeParams = tree_params_of(task, classes)
    n_trees = params["n_estimators"]
    entropy, seeds = tasks.plan_seeds(params["random_state"], n_trees)
    n, tile = table.n_samples, params["tile_size"]
    rs = RunStore.open(table.path, mode="r+")
    rs.mark_running()
    with forest._runner(n * table.n_features) as runner:
        batches = tasks.plan_tree_batches(n_trees, runner.threads(), params["batch_size"])
        fit_group = rs.group.require_group(FIT_GROUP)
        for k, b in enumerate(batches):
            width = b.stop - b.start
            fit_group.create_array(f"inbag_{k}", shape=(n, width), chunks=(min(n, tile), width),
                                   dtype="uint8", overwrite=True)  # fmt: skip
        logger.info("fitting %d %s trees on %d x %d from %s in %d tasks", n_trees, task, n,
                    table.n_features, table.path, len(batches))  # fmt: skip
        y_future = None if y_fit is None else runner.share(y_fit)
        items = [(table.path, y_future, seeds[b], tree_params, k) for k, b in enumerate(batches)]
        parts: list[Any] = [None] * len(batches)
        for i, part in runner.run(_grow_task, items, name="fit-trees",
                                  progress=forest._report("fit")):  # fmt: skip
            parts[i] = part
        node_counts = np.concatenate([p.node_counts for p in parts])
        rs.write_coordinates(n, n_trees)
        # the rows' IDs, if any, as the row coordinates: copied by tasks, read on use
        ids = write_row_ids(rs, table) if table.id_name is not None else None
        # the tasks wrote their trees; joined here a chunk at a time, never held whole
        rs.join_forest([f"{FIT_GROUP}/nodes_{k}" for k in range(len(batches))], node_counts,
                       seeds)  # fmt: skip
        rs.write_named("tree_importances", np.concatenate([p.importances for p in parts]))
        for name, dtype in (("leaves", "int32"), ("inbag", "uint8")):
            rs.group.create_array(name, shape=(n, n_trees), chunks=(min(n, tile), n_trees),
                                  dtype=dtype, dimension_names=("sample", "tree"),
                                  overwrite=True)  # fmt: skip
        shared = _ForestRef(str(table.path), uuid.uuid4().hex)  # each worker reads it once
        step = max(tile, ROUTE_ROWS // tile * tile)
        blocks = [slice(s, min(s + step, n)) for s in range(0, n, step)]
        route = [(table.path, shared, len(batches), b) for b in blocks]
        for _ in runner.run(_route_task, route, name="leaves", progress=forest._report("leaves")):
            pass
        runner.everywhere(forget_inputs)
    del rs.group[FIT_GROUP]
    forest.n_samples_ = n
    forest.n_features_in_ = table.n_features
    forest.feature_names_in_ = table.feature_names
    forest.categories_ = table.categories
    forest.sample_ids_ = ids  # the store's array (or None: rows are numbered)
    forest.id_name_ = table.id_name
    forest.tree_importances_ = np.concatenate([p.importances for p in parts])
    forest.target_name_ = table.target_name
    forest.task_ = task
    forest.classes_ = classes
    forest.y_ = y_fit
    forest.seeds_ = seeds
    forest.random_state_ = entropy
    forest.node_counts_ = node_counts
    forest.input_ = {"source": table.source, "fingerprint": table.fingerprint()}
    forest.fit_id_ = uuid.uuid4().hex
    forest.nodes_ = StoredNodes(str(table.path), forest.fit_id_)
    forest.params_ = params
    # the store's arrays, read on use (np.asarray) or by the workers (the products)
    forest.leaves_ = cast(np.ndarray, rs.array("leaves"))
    forest.inbag_ = cast(np.ndarray, rs.array("inbag"))
    if y_fit is not None:
        rs.write_named("target", y_fit, attrs={"classes": forest._provenance()["classes"]})
    rs.update_attrs(**forest._provenance(), store_input=True)
    return forest


def is_dask_frame(X: Any) -> bool:
    """Whether ``X`` is a ``dask.dataframe.DataFrame`` (without importing dask)."""
    return type(X).__module__.split(".")[0] == "dask" and hasattr(X, "columns")


def _gather_task(path: str, parts: tuple[str, ...], name: str, rows: slice) -> int:
    target = task_array(path, name, "r+")
    block = np.zeros((rows.stop - rows.start, *target.shape[1:]), dtype=target.dtype)
    col = 0
    for part in parts:
        values = read_rows(path, part, rows)
        block[(slice(None), slice(col, col + values.shape[1]),
               *(slice(0, s) for s in values.shape[2:]))] = values  # fmt: skip
        col += values.shape[1]
    write_block(path, name, (rows, *(slice(None),) * (block.ndim - 1)), block)
    return int(rows.stop - rows.start)


def gather_batches(
    runner: Any,
    path: str,
    parts: list[str],
    name: str,
    dtype: str,
    chunk_rows: int,
    *,
    dims: tuple[str, ...] = ("sample", "tree"),
    progress: Any = None,
) -> Any:
    """Join per-batch ``(n, w_k, ...)`` arrays of a store into one ``(n, sum w_k, ...)`` array.

    Array ``name`` (dims ``dims``, chunks of ``chunk_rows`` whole rows) is
    created in the store at ``path`` and written by row-block tasks of whole chunks
    (about :data:`ROUTE_ROWS` rows each), each reading its rows of every part: one
    writer per Zarr chunk, and no process holds the whole array.  Parts of more
    than two dims are joined along the second; a part narrower in a later dim
    is padded with zeros (the path-code words of a batch of shallower trees).

    Returns
    -------
    zarr.Array
        The joined array (read on use).
    """
    rs = RunStore.open(path, mode="r+")
    shapes = [tuple(int(s) for s in rs.array(part).shape) for part in parts]
    n = shapes[0][0]
    width = sum(shape[1] for shape in shapes)
    rest = tuple(max(shape[k] for shape in shapes) for k in range(2, len(shapes[0])))
    chunk = max(1, min(n, chunk_rows))
    rs.group.create_array(name, shape=(n, width, *rest), chunks=(chunk, width, *rest),
                          dtype=dtype, dimension_names=dims, overwrite=True)  # fmt: skip
    step = max(chunk, ROUTE_ROWS // chunk * chunk)
    items = [(path, tuple(parts), name, slice(s, min(s + step, n))) for s in range(0, n, step)]
    for _ in runner.run(_gather_task, items, name=f"gather-{name}", progress=progress):
        pass
    return rs.array(name)


#: Temporary stores of estimators fitted on a dask DataFrame, removed with their estimator.
_TEMPORARY: weakref.WeakKeyDictionary[Any, weakref.finalize] = weakref.WeakKeyDictionary()


def fit_in_temporary_store(owner: Any, frame: Any, fit: Any, **ingest_kw: Any) -> Any:
    """Ingest ``frame`` (by partitions, on the workers) into a temporary run store and
    call ``fit(table)`` with its :class:`StoredTable`; returns ``owner``.

    The store is made under dask's ``temporary-directory`` (else the system's) and
    removed when ``owner`` (the fitted estimator, whose arrays live there) is
    garbage-collected or fitted again; at once if the fit fails.
    """
    import dask

    from distforest.store.inputs import ingest

    parent = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    work = Path(tempfile.mkdtemp(prefix="distforest-input-", dir=parent))
    try:
        fit(ingest(frame, work / "run.zarr", **ingest_kw))
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    old = _TEMPORARY.pop(owner, None)
    if old is not None:
        old()
    _TEMPORARY[owner] = weakref.finalize(owner, shutil.rmtree, str(work), True)
    return owner


def fit_dask_frame(
    forest: ProximityForest, frame: Any, y: Any, params: dict[str, Any], tree_params_of: Any
) -> ProximityForest:
    """Fit on a ``dask.dataframe.DataFrame`` without computing it in this process.

    The frame is read by partitions on the workers into a temporary run store
    (:func:`fit_in_temporary_store`).  The target must be a column of the frame,
    named by ``y``.
    """
    from distforest.errors import InputError

    if y is not None and not isinstance(y, str):
        raise InputError(
            f"the target of a dask DataFrame must be one of its columns: pass y='<column>' "
            f"(got a {type(y).__name__}); or X.assign(target=...) first"
        )

    def fit(table: StoredTable) -> None:
        fit_stored(forest, table, params, lambda t, k: tree_params_of(t, k, table.n_samples))

    return cast("ProximityForest", fit_in_temporary_store(forest, frame, fit, target=y))
