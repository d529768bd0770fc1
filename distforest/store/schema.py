"""The one place that names every stored array: dims, dtype, chunking.

Estimators and applications ask this module how an array is laid out
instead of deciding it in their ``save``: so every store of every forest
kind reads the same way with xarray (DESIGN.md section 5).
"""

from __future__ import annotations

from dataclasses import dataclass

from distforest.errors import StoreError

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
    """

    symmetric: bool | None
    dtype: str
    doc: str


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
    "pair_objects": ArraySpec(
        ("pair", "feature"), "float64", False, "features of a SimForest's pair objects"
    ),
    "path": ArraySpec(
        ("sample", "tree", "path_word"), "uint64", True, "root-to-leaf path bits of row i"
    ),
    "feature_importances": ArraySpec(
        ("feature",), "float64", False, "total decrease of the split objective per feature"
    ),
}

MATRICES: dict[str, MatrixSpec] = {
    "proximity": MatrixSpec(True, "float32", "Breiman's proximity"),
    "proximity_oob": MatrixSpec(True, "float32", "out-of-bag proximity (R's oob.prox)"),
    "proximity_rfgap": MatrixSpec(False, "float32", "RF-GAP proximity (rows sum to 1)"),
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


def row_chunks(spec: ArraySpec, shape: tuple[int, ...], rows: int) -> tuple[int, ...]:
    """Chunk shape of an array of ``shape`` laid out by ``spec`` (``rows`` per row block)."""
    if not spec.by_rows:
        return tuple(max(1, s) for s in shape)
    return (max(1, min(rows, shape[0])), *(max(1, s) for s in shape[1:]))
