"""The one place that names every stored array: dims, dtype, chunking.

Estimators and applications ask this module how an array is laid out
instead of deciding it in their ``save``: so every store of every forest
kind reads the same way with xarray (docs/design.md section 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distforest.errors import StoreError

#: Group of the encoded input in a run store.
INPUT_GROUP = "input"
#: Rows per chunk of ``input/X`` (about 8 MB at 100 float32 features).
INPUT_ROWS = 20_000

#: Dimension names of the pairwise matrices.
MATRIX_DIMS = ("sample_i", "sample_j")

#: Row-number coordinates written with every store of n rows.
ROW_COORDS = ("sample", *MATRIX_DIMS)


@dataclass(frozen=True)
class ArraySpec:
    """Layout of one per-row (or per-tree) array.

    Attributes
    ----------
    dims : tuple of str
    dtype : str or None
        The stored type; None keeps the data's own type (targets).
    by_rows : bool
        Chunked in blocks of rows (``tile_size`` rows, all other dims whole);
        otherwise one chunk.
    doc : str
    """

    dims: tuple[str, ...]
    dtype: str | None
    by_rows: bool
    doc: str


@dataclass(frozen=True)
class MatrixSpec:
    """Layout of a pairwise matrix: ``(sample_i, sample_j)`` in ``tile x tile`` chunks.

    Attributes
    ----------
    symmetric : bool or None
        Whether only the upper triangle is computed and mirrored (None: it
        depends on the call, e.g. ``pairwise(X)`` vs ``pairwise(X, Y)``).
    dtype : str
        Default stored type.
    doc : str
    counts : bool
        Every value is a whole number of trees divided by the number of trees
        T, so the matrix is stored as integer counts (see
        :func:`matrix_encoding`).
    """

    symmetric: bool | None
    dtype: str
    doc: str
    counts: bool = False


@dataclass(frozen=True)
class MatrixEncoding:
    """How a matrix's values are stored on disk.

    Attributes
    ----------
    dtype : str
        The stored type.
    fill_value : int or float
        What an unwritten cell holds (readers see NaN).
    scale_factor : float or None
        For integer counts: ``1 / T``.  The CF convention: a reader
        multiplies by it (xarray does so on opening), and cells equal to
        ``_FillValue`` read as NaN.  None: values are stored as they are.
    compressors : tuple
        Zarr v3 compressors; empty tuple: Zarr's default (zstd).
    """

    dtype: str
    fill_value: int | float = float("nan")
    scale_factor: float | None = None
    compressors: tuple[Any, ...] = field(default=())

    @property
    def is_counts(self) -> bool:
        """Whether values are stored as integer counts (decoded by ``scale_factor``)."""
        return self.scale_factor is not None

    def attrs(self) -> dict[str, Any]:
        """The CF attributes readers decode with (empty for plain floats)."""
        if self.scale_factor is None:
            return {}
        return {"scale_factor": self.scale_factor, "_FillValue": self.fill_value}


ARRAYS: dict[str, ArraySpec] = {
    "sample": ArraySpec(("sample",), "int64", False, "row numbers"),
    "sample_i": ArraySpec(("sample_i",), "int64", False, "row numbers of the matrices"),
    "sample_j": ArraySpec(("sample_j",), "int64", False, "column numbers of the matrices"),
    "tree": ArraySpec(("tree",), "int64", False, "tree numbers"),
    "target": ArraySpec(("sample",), None, False, "class codes or regression values"),
    "leaves": ArraySpec(("sample", "tree"), "int32", True, "leaf of row i in tree t"),
    "inbag": ArraySpec(("sample", "tree"), "uint8", True, "bootstrap count of row i in tree t"),
    "leaf_mass": ArraySpec(
        ("sample", "tree"), "float32", True, "total in-bag count of row i's leaf (RF-GAP)"
    ),
    "depth": ArraySpec(("sample", "tree"), "int32", True, "depth of row i's leaf in tree t"),
    "pair_ids": ArraySpec(("pair",), "int64", False, "training ids of a SimForest's pair objects"),
    "centring_means": ArraySpec(
        ("sample",),
        "float64",
        True,
        "mean squared distance of each training object (SimForest "
        "double centring; attribute grand_mean)",
    ),
    "pair_objects": ArraySpec(
        ("pair", "feature"), "float64", False, "features of a SimForest's pair objects"
    ),
    "path": ArraySpec(
        ("sample", "tree", "path_word"), "uint64", True, "root-to-leaf path bits of row i"
    ),
    "tree_importances": ArraySpec(
        ("tree", "feature"), "float64", False, "each tree's normalised impurity importances"
    ),
    "neighbors_index": ArraySpec(
        ("sample", "neighbor"), "int64", True, "row numbers of row i's top-k proximity neighbours"
    ),
    "neighbors_proximity": ArraySpec(
        ("sample", "neighbor"), "float32", True, "proximities of row i's top-k neighbours"
    ),
    "feature_importances": ArraySpec(
        ("feature",), "float64", False, "total decrease of the split objective per feature"
    ),
}

MATRICES: dict[str, MatrixSpec] = {
    "proximity": MatrixSpec(True, "float32", "Breiman's proximity", counts=True),
    "proximity_oob": MatrixSpec(True, "float32", "out-of-bag proximity (R's oob.prox)"),
    "proximity_rfgap": MatrixSpec(False, "float32", "RF-GAP proximity (rows sum to 1)"),
    "proximity_kerf": MatrixSpec(False, "float32", "KeRF proximity (rows sum to 1)"),
    "proximity_boosted": MatrixSpec(True, "float32", "boosted trees' weighted proximity"),
    "cross_proximity": MatrixSpec(
        False,
        "float32",
        "Breiman's proximity of new rows (i) to the training rows (j)",
        counts=True,
    ),
    "cross_proximity_oob": MatrixSpec(False, "float32", "out-of-bag proximity of new rows"),
    "cross_proximity_rfgap": MatrixSpec(False, "float32", "RF-GAP proximity of new rows"),
    "beta_similarity": MatrixSpec(True, "float32", "X-Forest beta-similarity"),
    "basic_similarity": MatrixSpec(True, "float32", "fraction of trees sharing a leaf"),
    "similarity": MatrixSpec(None, "float32", "a similarity measure between rows"),
    "distance": MatrixSpec(None, "float32", "a distance measure between rows"),
    "train_distance": MatrixSpec(
        True,
        "float64",
        "SMERF's observed training distances (NaN = not observed), kept in "
        "the model so that it predicts without its input file",
    ),
}

#: Group of the flattened trees and the per-tree arrays stored with them.
FOREST_GROUP = "forest"
#: Group of the per-tile done records, one ``(tile_i, tile_j)`` array per matrix.
DONE_GROUP = "done"
DONE_DIMS = ("tile_i", "tile_j")


def array_spec(name: str) -> ArraySpec:
    """The layout of per-row array ``name``."""
    try:
        return ARRAYS[name]
    except KeyError:
        raise StoreError(
            f"no layout for array {name!r}; known: {', '.join(sorted(ARRAYS))} "
            "(add it to distforest/store/schema.py)"
        ) from None


def matrix_spec(name: str) -> MatrixSpec:
    """The layout of matrix ``name``."""
    try:
        return MATRICES[name]
    except KeyError:
        raise StoreError(
            f"no layout for matrix {name!r}; known: {', '.join(sorted(MATRICES))} "
            "(add it to distforest/store/schema.py)"
        ) from None


#: Integer types for counts of trees, smallest first; the largest value of
#: each is kept free as the fill value of unwritten cells.
COUNT_DTYPES = ("uint8", "uint16")


def _count_compressors() -> tuple[Any, ...]:
    from zarr.codecs import BloscCodec

    # Measured on real 2048 x 2048 tiles of uint8 counts (n = 20,000, T = 100,
    # 16% non-zero): LZ4 after bit-shuffling writes a chunk ~3x faster than
    # zstd (Zarr's default) at ~1.5x its size, about the size float32 + zstd
    # had; see benchmarks/bench_tiles.py.
    return (BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),)


def count_dtype(n_trees: int) -> str | None:
    """The smallest integer type holding counts ``0..n_trees`` and a fill value.

    None when ``n_trees`` is too large for every type in :data:`COUNT_DTYPES`.
    """
    for dtype in COUNT_DTYPES:
        if n_trees < np.iinfo(dtype).max:
            return dtype
    return None


def matrix_encoding(
    name: str, *, n_trees: int | None = None, dtype: str | None = None
) -> MatrixEncoding:
    """How matrix ``name`` is stored.

    A matrix whose values are counts of trees over T (its spec says
    ``counts``) is stored as ``uint8`` counts when T < 255, ``uint16`` when
    T < 65535 (with ``scale_factor = 1/T``; the type's largest value marks
    unwritten cells), else as float32.  Every other matrix is stored as
    ``dtype`` (default: the schema's) with NaN as fill value.

    Parameters
    ----------
    name : str
        A name in :data:`MATRICES`.
    n_trees : int, optional
        T, for count matrices; without it they are stored as floats.
    dtype : str, optional
        Stored type of a float matrix.
    """
    spec = matrix_spec(name)
    counts = count_dtype(n_trees) if spec.counts and n_trees and dtype is None else None
    if counts is None:
        return MatrixEncoding(dtype or spec.dtype)
    assert n_trees is not None
    return MatrixEncoding(
        counts,
        fill_value=int(np.iinfo(counts).max),
        scale_factor=1.0 / n_trees,
        compressors=_count_compressors(),
    )


def row_chunks(spec: ArraySpec, shape: tuple[int, ...], rows: int) -> tuple[int, ...]:
    """Chunk shape of an array of ``shape`` laid out by ``spec`` (``rows`` per row block)."""
    if not spec.by_rows:
        return tuple(max(1, s) for s in shape)
    return (max(1, min(rows, shape[0])), *(max(1, s) for s in shape[1:]))
