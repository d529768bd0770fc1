"""Missing cells filled through a model fitted elsewhere, a chunk of rows at a time.

``distforest impute --model FILE``: each missing cell ``(i, c)`` is the
proximity-weighted mean of column ``c``'s observed values over every row, the
proximity being the model's (rows sharing leaves), as
:func:`distforest.apps.scoring.impute_rows` weighs new rows against a model's
training rows.  One algorithm whatever the input: a table read whole is one
chunk, filled in this process; rows read by partitions (a glob, a folder of
parts, a large file) are filled by their partitions' tasks, no row gathered here:

1. the rows are routed through the model's trees by tasks into a temporary
   store (:meth:`~distforest.forests.proximity_forest.ProximityForest.from_model`
   of the rows' source: leaves and in-bag counts per row);
2. the columns with missing cells, their medians (exact, by radix selection over
   the row chunks: :func:`~distforest.apps.outliers.class_medians`) and the
   product's values ``V`` (:func:`~distforest.kernels.imputation.build_v`, written
   into the store by one task per chunk);
3. each partition's task (:class:`ModelFiller`) routes its rows again, sums
   ``P @ V`` for its rows with missing cells over the model's tree batches in
   batch order (:func:`~distforest.forests.products.add_in_order`, as the
   one-file run's product session adds them: the same floats), and fills them
   (:func:`~distforest.kernels.imputation.update_cells`).

Each worker reads the stored leaves and ``V`` once; this process holds the
model, the medians and the counts per column.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from distforest.kernels.imputation import ColumnLayout, build_v, plan_columns, update_cells

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ModelFiller", "model_filler"]

#: The product's values ``V`` in the temporary store of the rows.
V_NAME = "scratch/impute_v"


@dataclass(frozen=True)
class _ColumnValues:
    """The observed values of some feature columns of a source, by row chunks (the
    columns as the classes of :func:`~distforest.apps.outliers.class_medians`)."""

    source: Any
    columns: tuple[int, ...]

    def chunks(self) -> list[slice]:
        """The source's row chunks (one task each)."""
        return list(self.source.chunks())

    def read(self, rows: slice) -> tuple[np.ndarray, np.ndarray]:
        """The observed values of ``rows`` and their column's position in ``columns``."""
        X = self.source.read_rows(rows, np.float64)[:, list(self.columns)]
        observed = ~np.isnan(X)
        return X[observed], np.nonzero(observed)[1]


def _missing(source: Any, rows: slice) -> np.ndarray:
    """Task: the missing cells of each feature column in ``rows``."""
    return np.isnan(source.read_rows(rows, np.float64)).sum(axis=0)


def _write_v(source: Any, rows: slice, layout: ColumnLayout, centers: np.ndarray,
             path: str) -> None:  # fmt: skip
    """Task: the product's values of ``rows`` (:func:`build_v`) written into the store."""
    from distforest.store.run_store import write_block

    V = build_v(source.read_rows(rows, np.float64), layout, centers)
    write_block(path, V_NAME, (rows, slice(None)), V)


@dataclass
class ModelFiller:
    """Fills the missing cells of a partition's feature columns (in the partition's task).

    Attributes
    ----------
    forest : ProximityForest
        The model's forest on every row (leaves and in-bag counts in ``path``).
    path : str
        The rows' temporary store (its leaves, in-bag counts and ``V``).
    method, vote : str
    centers : ndarray
        Each column's median (the start values and the fallback).
    layout : ColumnLayout
        The product's columns (two per column with missing cells).
    cells : int
        Missing cells of the whole table.
    """

    forest: Any
    path: str
    method: str
    vote: str
    centers: np.ndarray
    layout: ColumnLayout
    cells: int

    def set_execution(self, *args: Any, **kwargs: Any) -> ModelFiller:
        """The filler works where it is called (a partition's task)."""
        return self

    def transform(self, features: pd.DataFrame) -> pd.DataFrame:
        """``features`` with their missing cells filled (the one-file run's values)."""
        from distforest.forests import forest_predict
        from distforest.forests.new_rows import new_leaves
        from distforest.io import load_table

        out = features.copy()
        if not len(features):
            return out
        table = load_table(features, min_rows=1)
        X = forest_predict.new_rows(self.forest, table).astype(np.float64)
        missing = np.isnan(X)
        rows = np.flatnonzero(missing.any(axis=1))
        if not rows.size:
            return out
        R = self._product(new_leaves(self.forest, table)[rows])
        local = np.where(missing[rows], self.centers, X[rows])
        update_cells(local, np.arange(rows.size), missing[rows], R, self.layout, self.centers,
                     self.centers, self.vote)  # fmt: skip
        X[rows] = local
        for j, name in enumerate(self.forest.feature_names_in_):
            out[name] = out[name].where(out[name].notna(), X[:, j])
        return out

    def _product(self, leaves: np.ndarray) -> np.ndarray:
        """``P @ V`` of rows with these leaves, summed over the tree batches of the one-file
        run's product session and added in batch order."""
        from distforest.forests.products import (
            PRODUCT_TASKS,
            WHOLE_FOREST_BYTES,
            StoredArray,
            _proximity_part,
            add_in_order,
        )
        from distforest.kernels import leafsums
        from distforest.parallel.tasks import plan_batches
        from distforest.store.inputs import input_rows
        from distforest.store.sink import stored_location

        n, trees = self.forest.leaves_.shape
        whole = 5 * n * trees <= WHOLE_FOREST_BYTES
        leaves_t, inbag_t = (StoredArray(*cast("tuple[str, str]", stored_location(a)), whole)
                             for a in (self.forest.leaves_, self.forest.inbag_))  # fmt: skip
        V = input_rows(self.path, V_NAME)
        dst = np.ascontiguousarray(leaves.T)
        batches = plan_batches(trees, max(1, -(-trees // PRODUCT_TASKS)))
        parts = ((i, _proximity_part(b, leaves_t, inbag_t, V, self.method, dst, None))
                 for i, b in enumerate(batches))  # fmt: skip
        sums, norm = add_in_order(parts)
        return leafsums.normalise(sums, norm)


@contextlib.contextmanager
def model_filler(model: Any, source: str, *, drop: tuple[str, ...], na_values: tuple[str, ...],
                 method: str, vote: str) -> Iterator[ModelFiller]:  # fmt: skip
    """The :class:`ModelFiller` of the rows at ``source`` (read by partitions into a
    temporary store, removed when the block ends), ``drop`` the columns that are not
    the model's features (target, ``--drop``, ID)."""
    from distforest.apps.outliers import class_medians
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.store.inputs import forget_inputs
    from distforest.store.scratch import scratch_array
    from distforest.store.source import opened

    with opened(source, drop=drop, na_values=na_values, partitions=True, dtype=None) as rows:
        forest = ProximityForest.from_model(model, rows)
        path = str(rows.store_path)
        with forest._runner(rows.n_samples * rows.n_features) as runner:
            chunks = list(rows.chunks())
            holes = np.zeros(rows.n_features, dtype=np.int64)
            for _, found in runner.run(_missing, [(rows, c) for c in chunks], name="holes"):
                holes += found
            columns = tuple(int(j) for j in np.flatnonzero(holes))
            centers = np.zeros(rows.n_features)
            if columns:
                sizes = rows.n_samples - holes[list(columns)]
                values = cast(Any, _ColumnValues(rows, columns))  # (read as RawValues are)
                centers[list(columns)] = class_medians(runner, values, sizes)
            layout = plan_columns(np.empty((0, rows.n_features)),
                                  np.zeros(rows.n_features, dtype=bool), columns)  # fmt: skip
            if columns:  # (no missing cell: nothing to weigh)
                scratch_array(path, V_NAME, (rows.n_samples, layout.width), np.float64,
                              chunk=chunks[0].stop)  # fmt: skip
                for _ in runner.run(_write_v, [(rows, c, layout, centers, path) for c in chunks],
                                    name="impute-values"):  # fmt: skip
                    pass
            try:
                yield ModelFiller(forest, path, method, vote, centers, layout, int(holes.sum()))
            finally:
                runner.everywhere(forget_inputs)  # the leaves and V the workers kept
