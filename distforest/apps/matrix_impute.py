"""Missing cells filled from the proximity matrix a run stored (``impute: {from: proximity}``).

The design's "proximity matrix for imputation": the matrix the same run
wrote (Breiman's, out-of-bag or RF-GAP, as Zarr tiles) weighs the observed
values of each column, once:

- numeric column c, row i: ``sum_j P_ij m_jc x_jc / sum_j P_ij m_jc``
  (``m`` the observed mask: a row's own missing cell never votes);
- categorical column c: the level with the largest ``sum_j P_ij m_jc [x_jc = l]``
  (``vote="sum"``) or that sum over the level's count (``"mean"``);
- the column median / most frequent level when no row with an observed value
  has a proximity to row i.

No forest is grown: the forest was fitted on the table with its missing
cells (routed by the trees' missing-value branches) and the matrix is fixed,
so one pass is the whole method (rfImpute's iterations refit the forest on
the filled table; this does not).  Only the rows with a missing cell are
read, as ``P[rows] @ V`` through dask, chunk by chunk: nothing ``n x n`` is
held in memory.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pandas as pd

from distforest.kernels.imputation import build_v, plan_columns, start_values, update_cells


def fill_from_matrix(
    matrix: Any, features: pd.DataFrame, vote: str = "sum"
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The feature columns of a table with their missing cells filled from ``matrix``.

    Parameters
    ----------
    matrix : xarray.DataArray or array-like, shape (n, n)
        A stored proximity matrix of the table's rows (e.g.
        ``RunStore.dataset()["proximity"]``); rows ``i`` weigh rows ``j``.
    features : DataFrame
        The feature columns of every row the matrix is of, in its order, as read;
        missing cells as NaN.
    vote : {"sum", "mean"}
        Categorical columns: largest weighted total, or total per observed row of the level.

    Returns
    -------
    filled : DataFrame
        ``features`` filled, categorical columns as their labels.
    missing : dict of str to int
        Cells filled per column.
    """
    from distforest.io import load_table

    table = load_table(features)
    X = np.array(table.X, dtype=np.float64)
    n = X.shape[0]
    if tuple(matrix.shape) != (n, n):
        raise ValueError(f"a {n} x {n} proximity matrix is needed, got {tuple(matrix.shape)}")
    categorical = np.array([f in table.categories for f in table.feature_names], dtype=bool)
    missing = np.isnan(X)
    counts = {name: int(missing[:, j].sum()) for j, name in enumerate(table.feature_names)}
    rows = np.flatnonzero(missing.any(axis=1))
    if rows.size:
        stats = start_values(X, categorical)
        layout = plan_columns(X, categorical, np.flatnonzero(missing.any(axis=0)).tolist())
        V = build_v(X, layout, stats)
        P = getattr(matrix, "data", matrix)
        if not isinstance(P, da.Array):  # a lazy (Zarr-backed) array is read by row blocks too
            P = da.from_array(P if hasattr(P, "shape") else np.asarray(P),
                              chunks=(min(n, 4096), n))  # fmt: skip
        R = np.asarray((P[rows].astype(np.float64) @ V).compute())
        local = np.where(missing[rows], stats, X[rows])
        update_cells(local, np.arange(rows.size), missing[rows], R, layout, stats, stats, vote)
        X[rows] = local
    out = features.copy()
    for j, name in enumerate(table.feature_names):
        levels = table.categories.get(name)
        column = X[:, j]
        values = column if levels is None else np.asarray(levels, dtype=object)[column.astype(int)]
        out.isetitem(list(out.columns).index(name), values)
    return out, counts
