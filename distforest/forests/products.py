"""Matrix-free proximity products as Dask tasks over batches of trees.

``P @ V`` is a sum over trees (see :mod:`distforest.kernels.leafsums`), so
each task takes a batch of trees, all rows, and returns an n x k partial sum;
the driver adds the partial sums as they arrive.  Leaves and in-bag counts
are scattered to the workers once per session, then every product reuses
them: an eigensolver can call the session hundreds of times.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from distforest.kernels import leafsums
from distforest.parallel import tasks


def _product_task(
    leaves_t: np.ndarray,
    inbag_t: np.ndarray,
    V: np.ndarray,
    trees: slice,
    method: str,
    dst_leaves_t: np.ndarray | None,
    rows: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    src_leaves, src_inbag = leaves_t[trees], inbag_t[trees]
    if dst_leaves_t is not None:
        dst_leaves = dst_leaves_t[trees]
        dst_inbag = np.zeros_like(dst_leaves, dtype=np.uint8)
    elif rows is not None:
        dst_leaves, dst_inbag = src_leaves[:, rows], src_inbag[:, rows]
    else:
        dst_leaves, dst_inbag = src_leaves, src_inbag
    return leafsums.leaf_product(src_leaves, src_inbag, V, dst_leaves, dst_inbag, method)


def _squared_task(
    leaves_t: np.ndarray, index: tuple[np.ndarray, np.ndarray], V: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    return leafsums.squared_product(leaves_t, index[0], index[1], V, rows)


#: Tasks per product: the trees are cut into this many batches.
PRODUCT_TASKS = 8


def _add_in_order(results: Iterator[tuple[int, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Add the tasks' ``(sums, norm)`` in batch order as they arrive.

    Completion order varies from run to run; adding in batch order keeps the
    result bit-identical, and adding as soon as the next batch is there keeps
    only the few parts that arrived early in memory (not all of them).
    """
    early: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    total: list[np.ndarray] | None = None
    expected = 0
    for index, part in results:
        early[index] = part
        while expected in early:
            sums, norm = early.pop(expected)
            if total is None:  # received arrays may be read-only views of a buffer
                total = [np.require(sums, requirements="W"), np.require(norm, requirements="W")]
            else:
                total[0] += sums
                total[1] += norm
            expected += 1
    assert total is not None and not early
    return total[0], total[1]


class ProductSession:
    """Repeated ``P @ V`` for one fitted forest on one Dask client.

    Parameters
    ----------
    client : distributed.Client
    leaves, inbag : ndarray, shape (n, T)
        The forest's training leaves and in-bag counts.
    batch_size : int, optional
        Trees per task (default: the trees in :data:`PRODUCT_TASKS` batches,
        whatever the cluster, so that results are bit-identical on any cluster).
    """

    def __init__(
        self, client: Any, leaves: np.ndarray, inbag: np.ndarray, batch_size: int | None = None
    ) -> None:
        self.client = client
        self.n_samples, self.n_trees = leaves.shape
        leafsums.warm_up()
        leaves_t = np.ascontiguousarray(leaves.T)
        self._leaves = tasks.scatter(client, leaves_t)
        self._inbag = tasks.scatter(client, np.ascontiguousarray(inbag.T))
        # The batches fix the order in which partial sums are added, so they
        # depend on the forest only: the same bits on any cluster.
        size = batch_size or max(1, -(-self.n_trees // PRODUCT_TASKS))
        self._batches = tasks.plan_batches(self.n_trees, size)
        self._index: Any = None

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
        V2 = V[:, None] if flat else V
        V_future = tasks.scatter(self.client, V2)
        dst = None
        if new_leaves is not None:
            dst = tasks.scatter(self.client, np.ascontiguousarray(new_leaves.T))
        items = [(self._leaves, self._inbag, V_future, b, method, dst, rows) for b in self._batches]
        sums, norm = _add_in_order(tasks.run_tasks(self.client, _product_task, items,
                                                   name="product"))  # fmt: skip
        result = leafsums.normalise(sums, norm)
        return result[:, 0] if flat else result

    def squared_product(self, V: np.ndarray, *, block: int = 65536) -> np.ndarray:
        """``(P * P) @ V`` for Breiman's proximity, from sparse proximity rows.

        One task per block of rows; each builds its rows' proximities from
        leaf members, so the cost grows with leaf sizes, not with n per row.
        """
        V = np.asarray(V, dtype=np.float64)
        V2 = V[:, None] if V.ndim == 1 else V
        if self._index is None:
            leaves_t = self.client.gather(self._leaves)
            self._index = tasks.scatter(self.client, leafsums.leaf_index(leaves_t))
            del leaves_t
        V_future = tasks.scatter(self.client, V2)
        blocks = tasks.plan_batches(self.n_samples, block)
        items = [(self._leaves, self._index, V_future, np.arange(b.start, b.stop)) for b in blocks]
        out = np.empty((self.n_samples, V2.shape[1]))
        for i, part in tasks.run_tasks(self.client, _squared_task, items, name="squared-product"):
            out[blocks[i]] = part
        return out[:, 0] if V.ndim == 1 else out


@contextmanager
def product_session(forest: Any, batch_size: int | None = None) -> Iterator[ProductSession]:
    """A :class:`ProductSession` for a fitted ProximityForest, on its client."""
    forest._check_fitted()
    with forest._client() as client:
        yield ProductSession(client, forest.leaves_, forest.inbag_, batch_size)
