"""Pairwise similarity/distance matrices as Zarr tiles (or small ones in memory).

:func:`pairwise` writes an n x m matrix through the tile service (one task
per tile; for ``Y=None`` only the upper triangle is computed and each tile is
mirrored), resuming a half-written store of the same request.  It takes the
same inputs as the forests (arrays, DataFrames, paths), an optional range /
z-score normalisation fitted on the reference rows (``Y``, or ``X`` when
``Y`` is None), and a measure from :mod:`distforest.forests.measures`.
Nearest neighbours without the matrix are in :mod:`distforest.forests.neighbors`.
Results do not depend on the number of workers or the tile size.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from distforest import location
from distforest.errors import InputError, ParameterError, StoreError
from distforest.forests import constraints as C
from distforest.forests.measures import Measure, check_values, make_scaler, parse_metric
from distforest.forests.tiled import matrix_in_memory, write_matrix
from distforest.io import Table, load_table
from distforest.io.in_memory import check_in_memory
from distforest.parallel import placement
from distforest.parallel.execution import Progress, for_call
from distforest.parallel.placement import cells_of
from distforest.parallel.tiling import TilePlan
from distforest.store.inputs import StoredRows
from distforest.store.run_store import RunStore, complete_output

logger = logging.getLogger("distforest")


# -- inputs ---------------------------------------------------------------------


def as_matrix(X: Any, what: str = "X") -> tuple[np.ndarray, tuple[str, ...]]:
    """Features as a float64 matrix (and their names) from any supported input.

    A numeric 2-D ndarray is used as it is (any number of rows); everything
    else goes through :func:`distforest.io.load_table`.
    """
    if isinstance(X, Table):
        return X.X, X.feature_names
    if isinstance(X, np.ndarray) and X.dtype.kind in "biuf":
        if X.ndim != 2:
            raise ParameterError(
                f"{what} must be 2-D (rows x features), got shape {X.shape}; Reshape your "
                "data, e.g. x.reshape(-1, 1) for a single feature"
            )
        if X.shape[0] == 0 or X.shape[1] == 0:
            raise InputError(
                f"{what} has {X.shape[0]} sample(s) and {X.shape[1]} feature(s) (shape="
                f"{X.shape}) while a minimum of 1 is required."
            )
        names = tuple(str(i) for i in range(X.shape[1]))
        return np.ascontiguousarray(X, dtype=np.float64), names
    table = load_table(X, min_rows=1)
    return table.X, table.feature_names


def _what(X: Any, default: str) -> str:
    """How messages name an input: its file when it came from one."""
    return X.source if isinstance(X, Table) else default


def prepare(
    X: Any,
    Y: Any,
    metric: str | Measure,
    metric_params: dict[str, Any] | None,
    normalize: str | None,
    feature_range: tuple[float, float],
) -> tuple[Measure, Any, Any, Any]:
    """Parse the measure, load and normalise both sides, fit the measure on the reference.

    :class:`~distforest.store.inputs.StoredRows` (``X``, and ``Y`` if given) are
    used as they are: rows written into a store already scaled by ``normalize``
    and checked, with ``metric`` a measure already fitted on the reference.

    Returns
    -------
    measure, A, B, scaler
        ``A`` the query rows, ``B`` the reference rows (``A`` itself when
        ``Y`` is None), the fitted scaler or None.
    """
    measure = parse_metric(metric, metric_params)
    if isinstance(X, StoredRows):  # rows scaled (by ``normalize``) and checked when written
        return measure, X, X if Y is None else Y, None
    A, names = as_matrix(X, "X")
    B = A
    check_values(measure, A, _what(X, "X"), names)
    if Y is not None:
        B, names = as_matrix(Y, "Y")
        if B.shape[1] != A.shape[1]:
            raise ParameterError(
                f"X has {A.shape[1]} features but Y has {B.shape[1]}; give both the same columns"
            )
        check_values(measure, B, _what(Y, "Y"), names)
    scaler = make_scaler(normalize, feature_range)
    if scaler is not None:
        if measure.binary:
            raise ParameterError(f"{measure.name} is for 0/1 data; use normalize=None with it")
        scaler.fit(B)
        B = np.ascontiguousarray(scaler.transform(B), dtype=np.float64)
        A = B if Y is None else np.ascontiguousarray(scaler.transform(A), dtype=np.float64)
    return measure.fitted(B), A, B, scaler


# -- pairwise matrices ----------------------------------------------------------


def measure_tile(
    measure: Measure, A: np.ndarray, B: np.ndarray, dtype: str, rows: slice, cols: slice
) -> np.ndarray:
    """Tile function of the tile service: the measure between ``A[rows]`` and ``B[cols]``."""
    return measure.values(A[rows], B[cols]).astype(dtype, copy=False)


def pairwise(
    X: Any,
    Y: Any = None,
    *,
    metric: str | Measure = "euclidean",
    metric_params: dict[str, Any] | None = None,
    normalize: str | None = None,
    feature_range: tuple[float, float] = (0.0, 1.0),
    store: str | Path | None = None,
    tile_size: int = C.PAIRWISE_TILE,
    dtype: str | None = None,
    overwrite: bool = False,
    max_in_memory: int | None = None,
    client: Any = None,
    scheduler: str | None = None,
    cluster: str | Path | None = None,
    progress: Progress | None = None,
    store_attrs: dict[str, Any] | None = None,
    complete: bool = True,
) -> xr.DataArray:
    """Similarity or distance between every row of ``X`` and every row of ``Y``.

    Parameters
    ----------
    X : array-like, DataFrame, path or Table
        Rows of the matrix (``sample_i``).
    Y : same as X, optional
        Columns (``sample_j``); ``None`` means ``X`` against itself, which is
        symmetric: only tiles with ``i <= j`` are computed, each also written
        mirrored.
    metric : str or Measure
        See :mod:`distforest.forests.measures`: ``euclidean``, ``manhattan``,
        ``chebyshev``, ``minkowski:P``, ``mahalanobis`` (distances), ``cosine``,
        ``rbf[:GAMMA]``, ``russell-rao``, ``sokal-michener``, ``jaccard``
        (similarities).
    metric_params : dict, optional
        ``p``, ``gamma`` or ``VI`` (Mahalanobis inverse covariance; estimated
        on the reference rows, ``Y`` or else ``X``, when not given).
    normalize : {None, "range", "zscore"}
        Rescale the features first, fitted on the reference rows.
    feature_range : (low, high)
        Interval of ``normalize="range"``.
    store : str or Path, optional
        Zarr store to create; the matrix is written tile by tile as Dask
        tasks.  ``None``: a small matrix computed in memory (here, no cluster).
    tile_size : int
        Rows/columns of one tile (one task, one Zarr chunk).
    dtype : str, optional
        Values' type; default float32 in a store, float64 in memory.
    overwrite : bool
        Replace an existing distforest store.
    max_in_memory : int, optional
        Without a store, refuse matrices of more than ``max_in_memory ** 2``
        cells; default the ``distforest.in-memory-cells`` setting
        (:mod:`distforest.io.in_memory`, 100,000,000 cells).
    client : distributed.Client, None or "synchronous"
        The cluster (else ``scheduler``/``cluster``, else the current client,
        else a LocalCluster for the call); ``"synchronous"`` runs the tiles in
        this process.
    scheduler, cluster : optional
        Address of a scheduler or a cluster YAML file.
    progress : callable, optional
        ``progress("tiles", done, total)``.
    store_attrs : dict, optional
        More attributes of a new store (a job's spec and run record).
    complete : bool, default True
        Mark the store complete when written (False: the job's run protocol does).

    Returns
    -------
    xarray.DataArray
        Dims ``(sample_i, sample_j)``, named ``"distance"`` or ``"similarity"``
        after the measure's kind; ``attrs`` record the metric, kind and
        normalisation.  Lazy and Zarr-backed with a store.
    """
    tile = C.check_tile_size(tile_size)
    measure, A, B, _ = prepare(X, Y, metric, metric_params, normalize, feature_range)
    symmetric = Y is None
    n, m = A.shape[0], B.shape[0]
    name = measure.kind
    attrs = {"metric": measure.spec, "kind": measure.kind, "normalize": normalize or "none",
             "feature_range": list(feature_range), "symmetric": symmetric}  # fmt: skip
    plan = TilePlan(n, m, tile, symmetric=symmetric)
    if store is None:
        check_in_memory(n, m, what="matrix", itemsize=8, store="matrix.zarr",
                        max_in_memory=max_in_memory)  # fmt: skip
        dtype = dtype or "float64"
        out = matrix_in_memory(plan, measure_tile, (measure, A, B, dtype), dtype=dtype)
        coords = {"sample_i": np.arange(n), "sample_j": np.arange(m)}
        return xr.DataArray(out, dims=("sample_i", "sample_j"), coords=coords, name=name,
                            attrs=attrs)  # fmt: skip
    dtype = dtype or "float32"
    inputs = _describe(X, A, B)
    identity = {**attrs, "dtype": dtype, "input": inputs}
    rs = _open_for(store, identity, overwrite)
    if rs is None:
        rs = RunStore.create(store, attrs={**(store_attrs or {}), "params": attrs, "input": inputs,
                                           "identity": identity}, overwrite=overwrite)  # fmt: skip
        rs.write_named("sample_i", np.arange(n, dtype=np.int64))
        rs.write_named("sample_j", np.arange(m, dtype=np.int64))
    exe = for_call(client, scheduler, cluster, progress)
    with placement.runner(cells_of(A) + (0 if symmetric else cells_of(B)), exe) as runner:
        a = runner.share(A)
        b = a if symmetric else runner.share(B)
        write_matrix(runner, rs, name, plan, measure_tile, (measure, a, b, dtype),
                     identity=identity, dtype=dtype, attrs=attrs,
                     progress=exe.stage("tiles"))  # fmt: skip
    if complete:
        complete_output(rs)
    return rs.dataset()[name]


def _open_for(store: str | Path, identity: dict[str, Any], overwrite: bool) -> RunStore | None:
    """A half-written store of the same request, to resume (None: create a new one)."""
    if overwrite or not location.exists(store):
        return None
    try:
        rs = RunStore.open(store, mode="r+")
    except StoreError:
        return None  # RunStore.create then explains what is in the way
    if rs.is_complete or json.loads(json.dumps(identity)) != rs.attrs.get("identity"):
        return None
    logger.info("resuming the half-written matrix in %s", rs.path)
    rs.mark_running()
    return rs


def _describe(X: Any, A: Any, B: Any) -> dict[str, Any]:
    """The ``input`` attribute of a store: source, sizes, fingerprint of the rows."""
    out: dict[str, Any] = {"source": getattr(X, "source", f"<{type(X).__name__}>"),
                           "n_samples": int(A.shape[0]), "n_features": int(A.shape[1]),
                           "n_reference": int(B.shape[0])}  # fmt: skip
    if isinstance(X, Table):
        out["fingerprint"] = X.fingerprint()
    elif isinstance(X, StoredRows) and X.fingerprint:
        out["fingerprint"] = X.fingerprint
    return out
