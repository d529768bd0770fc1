"""The product session: matrix-free ``M @ V`` as tasks over batches of trees.

Every forest matrix is a sum over trees (proximities through per-tree leaf
sums, :mod:`distforest.kernels.leafsums`; X-Forest similarity through its
factorisation ``S = Phi Phi^T / T``, :mod:`distforest.kernels.betasim`).  A
forest offers one *part function* ``part(trees, *shared, *args)`` returning
the sum over a batch of trees; :class:`ProductSession` shares the forest's
arrays with the workers once, runs one task per batch, and adds the parts
in batch order as they arrive: the result is bit-identical on any cluster
(the batches depend on the forest only), and only the few parts that
arrive early are held.

:class:`ProximityProducts` is the session of a proximity forest
(``P @ V`` for the original, OOB and RF-GAP proximities, and ``(P * P) @ V``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.kernels import leafsums
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import plan_batches
from distforest.store.inputs import input_rows
from distforest.store.run_store import task_array, write_block
from distforest.store.scratch import scratch_array
from distforest.store.sink import stored_location

#: Tasks per product: the trees are cut into this many batches.
PRODUCT_TASKS = 8


def add_in_order(results: Iterator[tuple[int, Any]]) -> Any:
    """Add the tasks' parts (arrays or tuples of arrays) in batch order as they arrive.

    Completion order varies from run to run; adding in batch order keeps the
    result bit-identical, and adding as soon as the next batch is there keeps
    only the parts that arrived early in memory.
    """
    early: dict[int, Any] = {}
    total: list[np.ndarray] | None = None
    single = False
    expected = 0
    for index, part in results:
        early[index] = part
        while expected in early:
            parts = early.pop(expected)
            if total is None:
                single = not isinstance(parts, tuple)
                # received arrays may be read-only views of a buffer
                total = [np.require(p, requirements="W") for p in ((parts,) if single else parts)]
            else:
                for acc, p in zip(total, (parts,) if single else parts, strict=True):
                    acc += p
            expected += 1
    if total is None or early:
        raise RuntimeError(f"product parts missing: got {expected}, early {sorted(early)}")
    return total[0] if single else tuple(total)


class ProductSession:
    """Repeated sums over tree batches of one fitted forest on one runner.

    Parameters
    ----------
    runner : Runner
    part : callable
        ``part(trees: slice, *shared, *args)``: the sum over a batch of trees.
    shared : sequence
        The forest's arrays, sent to the workers once for the whole session.
    n_trees : int
    batch_size : int, optional
        Trees per task (default: the trees in :data:`PRODUCT_TASKS` batches,
        whatever the cluster, so that results are bit-identical on any cluster).
    """

    def __init__(
        self,
        runner: Runner,
        part: Callable[..., Any],
        shared: Sequence[Any],
        n_trees: int,
        batch_size: int | None = None,
    ) -> None:
        self.runner = runner
        self.part = part
        self.n_trees = n_trees
        self._shared = tuple(runner.share(a) for a in shared)
        size = batch_size or max(1, -(-n_trees // PRODUCT_TASKS))
        self._batches = plan_batches(n_trees, size)

    def share(self, value: Any) -> Any:
        """Send a per-product value (``V``) to the workers."""
        return self.runner.share(value)

    def shared(self, index: int) -> Any:
        """The ``index``-th shared array, back in this process."""
        return self.runner.gather(self._shared[index])

    @property
    def n_batches(self) -> int:
        """Tree batches (tasks) of a product."""
        return len(self._batches)

    def sum(self, *args: Any, name: str = "product") -> Any:
        """Sum of ``part(batch, *shared, *args)`` over all tree batches, in batch order."""
        items = [(b, *self._shared, *args) for b in self._batches]
        return add_in_order(self.runner.run(self.part, items, name=name))

    def each(self, func: Callable[..., Any], *args: Any, name: str) -> Iterator[tuple[int, Any]]:
        """``func(batch, *shared, *args, index)`` for every tree batch, as they finish: for
        parts the tasks keep (write to a store) instead of returning."""
        items = [(b, *self._shared, *args, i) for i, b in enumerate(self._batches)]
        return self.runner.run(func, items, name=name)


# -- proximity forests ------------------------------------------------------------


#: Bytes of a stored forest's leaves and in-bag counts (5 a row and tree) up to which each
#: worker keeps them whole for its product tasks; above, a task reads only its batch of
#: trees (every chunk read by every task, a batch held: 10,000,000 rows and 100 trees are
#: 5 GB whole, twice that while transposed, against 0.6 GB a batch).
WHOLE_FOREST_BYTES = 1 << 30


@dataclass(frozen=True)
class StoredArray:
    """An array ``(n, T)`` of a run store that tasks read themselves (never sent by the driver).

    ``whole``: each worker process reads it once, transposed to ``(T, n)``
    (:func:`~distforest.store.inputs.input_rows`), and shares it between its
    tasks; else each task reads the trees it needs (:meth:`trees`).
    """

    path: str
    name: str
    whole: bool = True

    def read(self) -> np.ndarray:
        """The array, transposed and C-ordered (from this process's copy)."""
        return input_rows(self.path, self.name, transpose=True)

    def trees(self, trees: slice) -> np.ndarray:
        """Trees ``trees`` of the array, ``(T_b, n)`` C-ordered."""
        if self.whole:
            return self.read()[trees]
        return np.ascontiguousarray(np.asarray(task_array(self.path, self.name, "r")[:, trees]).T)


def _held(value: Any) -> Any:
    """A task's argument: arrays as given, :class:`StoredArray` read in this process."""
    return value.read() if isinstance(value, StoredArray) else value


def tree_batch(value: Any, trees: slice) -> np.ndarray:
    """Trees ``trees`` of a ``(T, n)`` array or a :class:`StoredArray`."""
    return value.trees(trees) if isinstance(value, StoredArray) else value[trees]


#: Leaf indexes a worker process keeps, by store path (see :func:`_stored_index`).
_indexes: dict[str, tuple[Any, tuple[np.ndarray, np.ndarray]]] = {}


def _stored_index(leaves: StoredArray) -> tuple[np.ndarray, np.ndarray]:
    """The leaf index of stored leaves, built once per process."""
    values = leaves.read()
    kept = _indexes.get(leaves.path)
    if kept is None or kept[0] is not values:
        _indexes.clear()
        kept = (values, leafsums.leaf_index(values))
        _indexes[leaves.path] = kept
    return kept[1]


def _proximity_part(
    trees: slice,
    leaves_t: np.ndarray | StoredArray,
    inbag_t: np.ndarray | StoredArray,
    V: np.ndarray,
    method: str,
    dst_leaves_t: np.ndarray | None,
    rows: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    src_leaves, src_inbag = tree_batch(leaves_t, trees), tree_batch(inbag_t, trees)
    if dst_leaves_t is not None:
        dst_leaves = dst_leaves_t[trees]
        dst_inbag = np.zeros_like(dst_leaves, dtype=np.uint8)
    elif rows is not None:
        dst_leaves, dst_inbag = src_leaves[:, rows], src_inbag[:, rows]
    else:
        dst_leaves, dst_inbag = src_leaves, src_inbag
    return leafsums.leaf_product(src_leaves, src_inbag, V, dst_leaves, dst_inbag, method)


#: Scratch arrays of :meth:`ProximityProducts.product_to_store`, under its group name: the
#: batches' unnormalised sums ``(batches, n, k)`` and counts ``(batches, n)``.
PART_SUMS, PART_NORMS = "sums", "norms"


def _stored_part(
    trees: slice,
    leaves_t: StoredArray,
    inbag_t: StoredArray,
    V: Any,
    method: str,
    group: str,
    index: int,
) -> None:
    """One tree batch's part of ``P @ V`` (``V.read()`` in this task), written to the store."""
    sums, norm = _proximity_part(trees, leaves_t, inbag_t, V.read(), method, None, None)
    where = (slice(index, index + 1), slice(None))
    write_block(leaves_t.path, f"{group}/{PART_SUMS}", where, sums[None])
    write_block(leaves_t.path, f"{group}/{PART_NORMS}", where, norm[None])


def stored_product_rows(path: str, group: str, rows: slice) -> np.ndarray:
    """Rows ``rows`` of a product left in the store by :meth:`ProximityProducts.product_to_store`:
    the batches' parts added in batch order, as :func:`add_in_order` adds them, then
    normalised (the same floats as :meth:`ProximityProducts.product`)."""
    sums_array = task_array(path, f"{group}/{PART_SUMS}", "r")
    norms_array = task_array(path, f"{group}/{PART_NORMS}", "r")
    sums, norm = np.array(sums_array[0, rows]), np.array(norms_array[0, rows])
    for b in range(1, sums_array.shape[0]):
        sums += sums_array[b, rows]
        norm += norms_array[b, rows]
    return leafsums.normalise(sums, norm)


def _squared_task(
    leaves_t: np.ndarray | StoredArray,
    index: tuple[np.ndarray, np.ndarray] | None,
    V: np.ndarray,
    rows: np.ndarray,
    query_t: np.ndarray | None = None,
) -> np.ndarray:
    if index is None:  # stored leaves: the index is built where they are read
        assert isinstance(leaves_t, StoredArray)
        index = _stored_index(leaves_t)
    query = _held(leaves_t) if query_t is None else query_t  # new rows' leaves, (T, block)
    return leafsums.squared_product(query, index[0], index[1], V, rows)


def stored_squared_rows(leaves_t: StoredArray, V: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of ``(P * P) @ V`` of a stored forest, computed in a task's process
    (the leaves and their index read there once)."""
    return _squared_task(leaves_t, None, V, rows)


class ProximityProducts:
    """Repeated ``P @ V`` for one fitted proximity forest.

    Parameters
    ----------
    runner : Runner
    leaves, inbag : ndarray, shape (n, T)
        The forest's training leaves and in-bag counts.
    batch_size : int, optional
        Trees per task (see :class:`ProductSession`).
    """

    def __init__(
        self, runner: Runner, leaves: np.ndarray, inbag: np.ndarray, batch_size: int | None = None
    ) -> None:
        self.n_samples, self.n_trees = leaves.shape
        leafsums.warm_up()
        where = stored_location(leaves), stored_location(inbag)
        shared: tuple[Any, Any]
        if where[0] is not None and where[1] is not None:
            # a forest fitted from a store: the workers read its leaves, this process never
            self._stored = True
            whole = 5 * self.n_samples * self.n_trees <= WHOLE_FOREST_BYTES
            shared = (StoredArray(*where[0], whole), StoredArray(*where[1], whole))
        else:
            self._stored = False
            leaves, inbag = np.asarray(leaves), np.asarray(inbag)
            shared = (np.ascontiguousarray(leaves.T), np.ascontiguousarray(inbag.T))
        self.session = ProductSession(runner, _proximity_part, shared, self.n_trees, batch_size)
        self._index: Any = None
        self.stored_leaves = where[0] if self._stored else None

    @property
    def runner(self) -> Runner:
        """The runner the session's tasks run on."""
        return self.session.runner

    @property
    def leaves_t(self) -> Any:
        """The ``(T, n)`` leaves as the tasks take them (a handle, or a :class:`StoredArray`)."""
        return self.session._shared[0]

    def product(
        self,
        V: np.ndarray,
        method: str = "original",
        *,
        rows: np.ndarray | None = None,
        new_leaves: np.ndarray | None = None,
    ) -> np.ndarray:
        """``P @ V`` without forming P.

        Parameters
        ----------
        V : ndarray, shape (n, k) or (n,)
            Values of the training rows.
        method : {"original", "oob", "rfgap"}
            See :mod:`distforest.kernels.leafsums` (``oob`` is row-normalised).
        rows : ndarray of int, optional
            Only these rows of the result (training rows).
        new_leaves : ndarray of int32, shape (m, T), optional
            Leaves of new rows instead: the proximity of each new row (out of
            bag in every tree) to the training rows.

        Returns
        -------
        ndarray of float64, shape (n or len(rows) or m, k) (1-D if V is)
        """
        V = np.asarray(V, dtype=np.float64)
        flat = V.ndim == 1
        V_handle = self.session.share(V[:, None] if flat else V)
        dst = None
        if new_leaves is not None:
            dst = self.session.share(np.ascontiguousarray(new_leaves.T))
        sums, norm = self.session.sum(V_handle, method, dst, rows)
        result = leafsums.normalise(sums, norm)
        return result[:, 0] if flat else result

    def product_to_store(self, V: Any, k: int, method: str, group: str) -> None:
        """``P @ V`` of a forest fitted from a store, left in that store: each tree batch's
        task reads ``V`` itself (``V.read()``: float64, shape ``(n, k)``) and writes its part
        into scratch arrays under ``group``; nothing of n rows comes to this process.  Rows
        are read back with :func:`stored_product_rows`.
        """
        if self.stored_leaves is None:
            from distforest.errors import ParameterError

            raise ParameterError(
                "product_to_store needs a forest fitted from a store (its leaves in the store); "
                "use product() for a forest held in memory"
            )
        path, batches, n = self.stored_leaves[0], self.session.n_batches, self.n_samples
        scratch_array(path, f"{group}/{PART_SUMS}", (batches, n, k), "float64", rows_axis=1)
        scratch_array(path, f"{group}/{PART_NORMS}", (batches, n), "float64", rows_axis=1)
        for _ in self.session.each(_stored_part, V, method, group, name="product-parts"):
            pass

    def squared_product(
        self, V: np.ndarray, *, block: int = 65536, new_leaves: np.ndarray | None = None
    ) -> np.ndarray:
        """``(P * P) @ V`` for Breiman's proximity, from sparse proximity rows.

        One task per block of rows; each builds its rows' proximities from
        leaf members, so the cost grows with leaf sizes, not with n per row.
        With ``new_leaves`` (int32, shape ``(m, T)``) the rows are new rows
        (their proximity to the training rows): ``(m, k)``, no ``m x n`` formed.
        """
        V = np.asarray(V, dtype=np.float64)
        V2 = V[:, None] if V.ndim == 1 else V
        runner = self.session.runner
        leaves = self.session._shared[0]
        if self._index is None and not self._stored:
            self._index = runner.share(leafsums.leaf_index(self.session.shared(0)))
        V_handle = runner.share(V2)
        m = self.n_samples if new_leaves is None else new_leaves.shape[0]
        # a few tasks per thread (rows are independent: the blocks change no result)
        block = min(block, max(1024, -(-m // (4 * runner.threads()))))
        blocks = plan_batches(m, block)
        items: list[tuple[Any, ...]]
        if new_leaves is None:
            items = [(leaves, self._index, V_handle, np.arange(b.start, b.stop)) for b in blocks]
        else:  # each task gets its block of new rows' leaves, trees first
            items = [(leaves, self._index, V_handle, np.arange(b.stop - b.start),
                      np.ascontiguousarray(new_leaves[b].T)) for b in blocks]  # fmt: skip
        out = np.empty((m, V2.shape[1]))
        for i, part in runner.run(_squared_task, items, name="squared-product"):
            out[blocks[i]] = part
        return out[:, 0] if V.ndim == 1 else out


@contextmanager
def product_session(forest: Any, batch_size: int | None = None) -> Iterator[ProximityProducts]:
    """A :class:`ProximityProducts` for a fitted ProximityForest, on its execution."""
    forest._check_fitted()
    where = stored_location(forest.leaves_)
    if where is not None:
        from distforest.errors import StoreError
        from distforest.store.run_store import RunStore

        fit_id = RunStore.open(where[0]).attrs.get("fit_id")
        if fit_id != forest.fit_id_:
            raise StoreError(
                f"the leaves in {where[0]!r} belong to another fit (fit_id {fit_id!r}, this "
                f"forest {forest.fit_id_!r}): a store holds one forest, and a later fit on the "
                "same stored table replaced this one's; fit this forest again"
            )
    with forest._runner(forest._fitted_cells()) as runner:
        yield ProximityProducts(runner, forest.leaves_, forest.inbag_, batch_size)
