"""Classical multidimensional scaling of proximities, matrix-free, by row chunks.

Classical scaling of dissimilarities D takes the top eigenvectors of
``B = -1/2 J D^2 J`` (J the centring matrix).  With Breiman's
``D = sqrt(1 - P)``, ``D^2 = 1 - P`` and ``B = 1/2 J P J``; with ``D = 1 - P``,
``B = J P J - 1/2 J (P*P) J``.  Both only need products ``P v`` (per-tree leaf
sums) and ``(P*P) v`` (sparse proximity rows): no n x n matrix is formed.

One method whether the rows are in memory or in a store: a thick-restarted
block Lanczos (block Krylov-Schur) whose n-row blocks are scratch arrays
chunked by rows, in the run store for a forest fitted from a store (nothing
of n rows on the driver), else held in memory (:class:`Scratch`):

- ``B @ V`` of a block: one task per batch of trees makes its leaf sums
  (:func:`~distforest.kernels.leafsums.leaf_product`), written to a scratch
  array (in a store) or added in batch order (in memory); tasks over row
  chunks add the batches in batch order (and, for ``linear``, the rows of
  ``(P*P) @ V``);
- the new block is made orthogonal to the basis and to the vector of ones
  (the centring ``J``) by two rounds of classical Gram-Schmidt, then
  orthonormal by the eigendecomposition of its small Gram matrix (SVQB); every
  inner product over n is returned by the chunk tasks as partial sums of
  fixed groups of :data:`GRAIN` rows and added on the driver in row order, so
  the result is the same whatever the workers, the chunk size (a multiple of
  the grain) and where the scratch arrays are;
- the Rayleigh-Ritz step takes the small projected matrix (at most
  :data:`MAX_BASIS` columns) on the driver; a Ritz pair has converged when its
  residual ``||B u - theta u||`` (read off the coefficients, no extra product)
  is at most ``tol * |theta|``, ARPACK's criterion; when the basis is full the
  best half of the Ritz vectors and the last block are kept (thick restart);
- coordinates ``U sqrt(lambda)`` are formed by tasks over row chunks, each
  axis's sign set so that its first largest absolute entry is positive (found
  by chunks), and returned or written as CSV pieces.

This method replaced ARPACK (``scipy.sparse.linalg.eigsh``) for rows held in
memory too, so that a forest gives the same floats wherever its rows are: the
two agree to about 1e-8 of the coordinates' scale at the default ``tol`` (not
bit for bit).  On small data it is slower for ``sqrt`` (a few seconds at
20,000 rows) and faster for ``linear`` from about 20,000 rows
(``benchmarks/results/mds_small.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distforest.errors import ParameterError
from distforest.forests.products import (
    PRODUCT_TASKS,
    add_in_order,
    stored_squared_rows,
    tree_batch,
)
from distforest.forests.square_sums import StoredCodes
from distforest.kernels import leafsums, row_blocks
from distforest.parallel.execution import Runner
from distforest.parallel.tasks import plan_batches
from distforest.store.scratch import ScratchSpace
from distforest.store.sink import CsvPieces, csv_by_pieces

DISSIMILARITIES = ("sqrt", "linear")

#: Rows per chunk of the scratch arrays and per task over rows (rounded to a multiple of
#: :data:`GRAIN`): a chunk of the basis is ``ROWS_PER_CHUNK x (MAX_BASIS + block)`` doubles.
ROWS_PER_CHUNK = 1 << 17
#: Rows of the fixed groups whose partial inner products the driver adds in row order.
GRAIN = 4096
#: Rows of the fixed groups of the seeded start block (independent of any chunking).
START_ROWS = 4096
#: Columns of a block beyond the wanted components.
BLOCK_EXTRA = 4
#: Basis columns (at least four blocks) before a thick restart.
MAX_BASIS = 40
#: Block products after which the iteration stops without convergence.
MAX_PRODUCTS = 500
#: Columns of a new block whose norm is below this fraction of the product's are dropped,
#: and directions of its normalised Gram matrix below ``DEPENDENT`` (linear dependence).
NEGLIGIBLE = 1e-10
DEPENDENT = 1e-12
#: Largest departure from orthonormality of a new block before it is orthogonalised again.
ORTHO_TOL = 1e-12
#: Seed of the start block.
SEED = 0

BASIS = "scratch/mds_basis"
BLOCK = "scratch/mds_block"
PRODUCT = "scratch/mds_product"
PARTS = "scratch/mds_parts"
SQUARED = "scratch/mds_squared"


@dataclass(frozen=True)
class Scratch:
    """The scratch arrays of one run (what the tasks need to find them), in ``space``: the
    run store, or arrays held in this process (whose tasks then run in this process)."""

    space: ScratchSpace
    n: int
    chunk: int
    grain: int
    n_trees: int

    @property
    def in_store(self) -> bool:
        """Whether the arrays are in a store (tasks anywhere open them)."""
        return self.space.path is not None

    def read(self, name: str, rows: slice, cols: slice) -> np.ndarray:
        """A region of a 2-D scratch array, as float64 (a copy)."""
        return np.array(self.space.read(name, (rows, cols)), dtype=np.float64)

    def part(self, batch: int, rows: slice, width: int) -> np.ndarray:
        """Rows ``rows`` of tree batch ``batch``'s part of the block's product."""
        return self.space.read(PARTS, (batch, rows, slice(0, width)))

    def write(self, name: str, region: tuple[slice, ...], values: np.ndarray) -> None:
        """Write a region (whole chunks of rows: this task's alone)."""
        self.space.write(name, region, values)

    def create(self, width: int, block: int, batches: int) -> None:
        """Make the scratch arrays (``batches`` parts of a product), raw doubles."""
        for name, shape, chunks in (
            (BASIS, (self.n, width), (self.chunk, block)),  # column blocks: a block written whole
            (BLOCK, (self.n, block), (self.chunk, block)),
            (PRODUCT, (self.n, block), (self.chunk, block)),
            (PARTS, (batches, self.n, block), (1, self.chunk, block)),
            (SQUARED, (self.n, block), (self.chunk, block)),
        ):
            self.space.create(name, shape, "float64", chunks=chunks, compressed=False)

    def drop(self) -> None:
        """Remove the scratch arrays."""
        self.space.drop(BASIS, BLOCK, PRODUCT, PARTS, SQUARED)

    def chunks(self) -> list[slice]:
        """The row chunks, one task each."""
        return [slice(s, min(s + self.chunk, self.n)) for s in range(0, self.n, self.chunk)]


def _start_block(rows: slice, width: int) -> np.ndarray:
    """Rows ``rows`` of the seeded start block, uniform in [-1, 1)."""
    first, last = rows.start // START_ROWS, (rows.stop - 1) // START_ROWS
    blocks = [
        np.random.default_rng([SEED, g]).uniform(-1.0, 1.0, (START_ROWS, width))
        for g in range(first, last + 1)
    ]
    offset = rows.start - first * START_ROWS
    return np.concatenate(blocks)[offset : offset + rows.stop - rows.start]


def _leaf_sums(trees: slice, leaves: Any, V: np.ndarray) -> np.ndarray:
    """One batch of trees' leaf sums of ``V`` (``P @ V`` before the division by T)."""
    src = tree_batch(leaves, trees)
    unused = np.zeros(src.shape, dtype=np.uint8)  # Breiman's P weighs no row by its in-bag count
    sums, _ = leafsums.leaf_product(src, unused, V, src, unused, "original")
    return sums


def _tree_task(s: Scratch, batch: int, trees: slice, leaves: Any, width: int) -> None:
    """One batch of trees' leaf sums of the block, written to the store."""
    sums = _leaf_sums(trees, leaves, s.read(BLOCK, slice(None), slice(0, width)))
    s.write(PARTS, (slice(batch, batch + 1), slice(None), slice(0, width)), sums[None])


def _tree_part(trees: slice, leaves: Any, inbag: Any, V: np.ndarray, index: int) -> np.ndarray:
    """One batch of trees' leaf sums of the block, returned (a product session's part)."""
    return _leaf_sums(trees, leaves, V)


def _squared_task(s: Scratch, rows: slice, leaves: Any, width: int) -> None:
    """Rows ``rows`` of ``(P * P) @ V`` of the block."""
    V = s.read(BLOCK, slice(None), slice(0, width))
    out = stored_squared_rows(leaves, V, np.arange(rows.start, rows.stop))
    s.write(SQUARED, (rows, slice(0, width)), out)


def _chunk_task(
    s: Scratch,
    rows: slice,
    source: tuple[Any, ...],
    m: int,
    steps: list[tuple[np.ndarray, np.ndarray]],
    transform: np.ndarray | None,
    dest: tuple[int, int] | None,
) -> tuple[np.ndarray, ...]:
    """One row chunk of a block: formed (``source``), projected (``steps``: subtract the
    mean, then ``Q h``), transformed, written; returns its grain sums against ``Q``.

    ``source``: ``("start", w)`` the seeded block, ``("product", w, batches, dissimilarity)``
    the block's product added from the parts (written to :data:`PRODUCT`),
    ``("stored", name, c0, c1)`` columns of a scratch array.
    """
    Q = s.read(BASIS, rows, slice(0, m))
    if source[0] == "start":
        Z = _start_block(rows, source[1])
    elif source[0] == "product":
        _, width, batches, dissimilarity = source
        Z = np.zeros((rows.stop - rows.start, width))
        for b in range(batches):  # in batch order: the same floats on any cluster
            Z += s.part(b, rows, width)
        Z /= s.n_trees
        if dissimilarity == "sqrt":
            Z *= 0.5
        else:
            Z -= 0.5 * s.read(SQUARED, rows, slice(0, width))
        s.write(PRODUCT, (rows, slice(0, width)), Z)
    else:
        Z = s.read(source[1], rows, slice(source[2], source[3]))
    for mean, h in steps:
        Z = Z - mean
        Z = Z - row_blocks.ordered_product(Q, h)
    if transform is not None:
        Z = row_blocks.ordered_product(Z, transform)
    if dest is not None:
        s.write(BASIS, (rows, slice(*dest)), Z)
        s.write(BLOCK, (rows, slice(0, dest[1] - dest[0])), Z)
    return row_blocks.grain_sums(Z, Q, s.grain)


def _restart_task(s: Scratch, rows: slice, m: int, Y: np.ndarray, last: tuple[int, int]) -> None:
    """Rows ``rows`` of the restarted basis: the Ritz vectors ``Q Y``, then the last block."""
    Q = s.read(BASIS, rows, slice(0, m))
    kept = row_blocks.ordered_product(Q, Y)
    tail = s.read(BASIS, rows, slice(*last))
    s.write(BASIS, (rows, slice(0, Y.shape[1] + tail.shape[1])), np.hstack([kept, tail]))


def _largest_task(s: Scratch, rows: slice, m: int, Y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each Ritz vector's first largest absolute entry in the chunk, and its value."""
    U = row_blocks.ordered_product(s.read(BASIS, rows, slice(0, m)), Y)
    where = np.abs(U).argmax(axis=0)
    values = U[where, np.arange(U.shape[1])]
    return np.abs(values), values


def _coordinates_task(
    s: Scratch,
    j: int,
    rows: slice,
    m: int,
    Y: np.ndarray,
    codes: StoredCodes | None,
    pieces: CsvPieces | None,
) -> np.ndarray | None:
    """Rows ``rows`` of the coordinates ``Q Y`` (``Y`` scaled and signed): returned, or
    written as piece ``j`` of the CSV."""
    X = row_blocks.ordered_product(s.read(BASIS, rows, slice(0, m)), Y)
    if pieces is None:
        return X
    assert codes is not None
    pieces.write(j, rows, codes.read(rows), X)
    return None


class _Lanczos:
    """The driver's side: small matrices only, every n-row step a round of tasks."""

    def __init__(
        self, runner: Runner, s: Scratch, products: Any, k: int, dissimilarity: str, tol: float
    ) -> None:
        # scratch held in this process: its row tasks run here (the tree products do not)
        self.runner = runner if s.in_store else Runner(None)
        self.s, self.products = s, products
        self.k, self.dissimilarity, self.tol = k, dissimilarity, tol
        n = s.n
        self.block = min(k + BLOCK_EXTRA, n - 1)
        self.cap = max(MAX_BASIS, 4 * self.block)
        self.width = self.cap + self.block
        self.H = np.zeros((self.width, self.width))
        self.chunks = s.chunks()
        self.offsets = np.cumsum([0] + [-(-(c.stop - c.start) // s.grain) for c in self.chunks])
        self.batches = plan_batches(s.n_trees, max(1, -(-s.n_trees // PRODUCT_TASKS)))
        #: Parts of a product the row tasks add: one a tree batch in a store; in memory the
        #: batches are added in batch order as they arrive (the same floats: see _product).
        self.parts = len(self.batches) if s.in_store else 1
        self.products_done = 0

    # -- rounds of tasks --------------------------------------------------------------

    def _stats(
        self,
        source: tuple[Any, ...],
        m: int,
        steps: list[Any],
        transform: np.ndarray | None = None,
        dest: tuple[int, int] | None = None,
    ) -> tuple[np.ndarray, ...]:
        """Grain sums of a chunk round, added in row order (one row-ordered sum)."""
        items = [(self.s, rows, source, m, steps, transform, dest) for rows in self.chunks]

        def grains() -> Any:
            for i, parts in self.runner.run(_chunk_task, items, name="mds-blocks"):
                for g in range(parts[0].shape[0]):
                    yield int(self.offsets[i]) + g, tuple(p[g] for p in parts)

        return add_in_order(grains())

    def _product(self, last: tuple[int, int]) -> None:
        """The block's product parts (and squared rows): tree batches, then row chunks."""
        width = last[1] - last[0]
        leaves = self.products.leaves_t
        if not self.s.in_store:  # on the product session's runner, the parts added here
            V = self.s.read(BLOCK, slice(None), slice(0, width))
            # the batches' sum, added to zeros by the row tasks: the store's floats (a sum
            # whose every part is -0.0 is the only one that differs, and 0.0 + -0.0 is 0.0)
            handle = self.products.session.share(V)
            parts = self.products.session.each(_tree_part, handle, name="mds-products")
            self.s.write(PARTS, (slice(0, 1), slice(None), slice(0, width)),
                         add_in_order(parts)[None])  # fmt: skip
            if self.dissimilarity == "linear":  # rows are independent: any blocks
                self.s.write(SQUARED, (slice(None), slice(0, width)),
                             self.products.squared_product(V))  # fmt: skip
            self.products_done += 1
            return
        items = [(self.s, b, trees, leaves, width) for b, trees in enumerate(self.batches)]
        for _ in self.runner.run(_tree_task, items, name="mds-products"):
            pass
        if self.dissimilarity == "linear":
            work = [(self.s, rows, leaves, width) for rows in self.chunks]
            for _ in self.runner.run(_squared_task, work, name="mds-squared-products"):
                pass
        self.products_done += 1

    # -- orthonormal blocks -----------------------------------------------------------

    def _svqb(self, G: np.ndarray, reference: float, room: int) -> tuple[np.ndarray, ...]:
        """``X`` (w x r) making ``Z X`` orthonormal for ``Z^T Z = G``, and ``C`` (r x w) with
        ``Z = (Z X) C`` up to the dropped directions."""
        w = G.shape[0]
        d = np.sqrt(np.clip(np.diag(G), 0.0, None))
        live = d > NEGLIGIBLE * np.sqrt(max(reference, 0.0))
        X, C = np.zeros((w, 0)), np.zeros((0, w))
        if not live.any() or room <= 0:
            return X, C
        dl = d[live]
        values, vectors = np.linalg.eigh(G[np.ix_(live, live)] / np.outer(dl, dl))
        values, vectors = values[::-1], vectors[:, ::-1]
        if values[0] <= 0:  # nothing left but rounding
            return X, C
        keep = np.flatnonzero(values > DEPENDENT * values[0])[:room]
        root = np.sqrt(values[keep])
        X = np.zeros((w, keep.size))
        X[live] = vectors[:, keep] / dl[:, None] / root
        C = np.zeros((keep.size, w))
        C[:, live] = root[:, None] * vectors[:, keep].T * dl
        return X, C

    def _new_block(
        self, source: tuple[Any, ...], first: tuple[np.ndarray, ...], cols: int
    ) -> tuple[int, np.ndarray, np.ndarray]:
        """Orthonormalise a formed block (its grain sums ``first``) against the basis
        ``[0, cols)`` and the ones; write it at ``cols``.  Returns its width, ``h`` and ``C``
        (``J Z = Q h + V C``)."""
        n = self.s.n
        room = min(self.block, n - 1 - cols)
        mean1, h1 = first[0] / n, first[1]
        reference = float(np.max(np.diag(first[2]) - n * mean1 * mean1, initial=0.0))
        second = self._stats(source, cols, [(mean1, h1)])
        mean2, h2 = second[0] / n, second[1]
        G = second[2] - h2.T @ h2 - n * np.outer(mean2, mean2)
        X, C = self._svqb((G + G.T) / 2, reference, room)
        h = h1 + h2
        width = X.shape[1]
        if width == 0:
            return 0, h, C
        dest = (cols, cols + width)
        check = self._stats(source, cols, [(mean1, h1), (mean2, h2)], X, dest)
        for _ in range(3):
            mean3, h3, G3 = check[0] / n, check[1], check[2]
            error = max(
                np.abs(check[0]).max() / np.sqrt(n),
                np.abs(h3).max(initial=0.0),
                np.abs(G3 - np.eye(width)).max(),
            )
            if error <= ORTHO_TOL:
                break
            G = G3 - h3.T @ h3 - n * np.outer(mean3, mean3)
            X2, C2 = self._svqb((G + G.T) / 2, 1.0, room)
            h, C = h + h3 @ C, C2 @ C
            width = X2.shape[1]
            if width == 0:
                return 0, h, C
            check = self._stats(
                ("stored", BASIS, *dest), cols, [(mean3, h3)], X2, (cols, cols + width)
            )
            dest = (cols, cols + width)
        return width, h, C

    # -- the iteration ----------------------------------------------------------------

    def solve(self) -> tuple[np.ndarray, np.ndarray, int]:
        """``(Y, theta, m)``: the top k Ritz vectors' coefficients in the basis ``[0, m)``."""
        first = self._stats(("start", self.block), 0, [])
        width, _, _ = self._new_block(("start", self.block), first, 0)
        last, cols = (0, width), width
        H = self.H
        while True:
            if self.products_done >= MAX_PRODUCTS:
                raise ParameterError(
                    f"MDS did not converge to tol={self.tol:g} in {MAX_PRODUCTS} block products"
                    f" ({self.k} components); ask for a larger tol or fewer components"
                )
            self._product(last)
            source = ("product", last[1] - last[0], self.parts, self.dissimilarity)
            first = self._stats(source, cols, [])
            width, h, C = self._new_block(("stored", PRODUCT, 0, last[1] - last[0]), first, cols)
            H[:cols, last[0] : last[1]] = h
            H[cols : cols + width, last[0] : last[1]] = C
            m = cols
            theta, Y = np.linalg.eigh((H[:m, :m] + H[:m, :m].T) / 2)
            theta, Y = theta[::-1], Y[:, ::-1]
            residual = np.linalg.norm(C @ Y[last[0] : last[1], : self.k], axis=0)
            scale = np.maximum(np.abs(theta[: self.k]), np.finfo(float).eps * np.abs(theta[0]))
            if width == 0 or np.all(residual <= self.tol * scale):
                return Y[:, : self.k], theta[: self.k], m
            coupling = C @ Y[last[0] : last[1]]  # B Q y = theta Q y + V (C y_last)
            last, cols = (m, m + width), m + width
            if cols + self.block > self.cap:  # thick restart: the best half, and the last block
                keep = min(m, self.cap // 2)
                items = [(self.s, rows, m, Y[:, :keep], last) for rows in self.chunks]
                for _ in self.runner.run(_restart_task, items, name="mds-restart"):
                    pass
                H[:] = 0.0
                H[:keep, :keep] = np.diag(theta[:keep])
                H[keep : keep + width, :keep] = coupling[:, :keep]
                last, cols = (keep, keep + width), keep + width


def scratch_bytes(n: int, n_components: int, n_trees: int) -> int:
    """Bytes of the scratch arrays :func:`mds_by_chunks` makes in the run store (removed at
    the end): the Lanczos basis, three blocks and the tree batches' partial products (held
    in memory, a product is one part instead of one a tree batch)."""
    block = min(n_components + BLOCK_EXTRA, n - 1)
    width = max(MAX_BASIS, 4 * block) + block
    batches = len(plan_batches(n_trees, max(1, -(-n_trees // PRODUCT_TASKS))))
    return 8 * n * (width + 3 * block + batches * block)


def mds(
    forest: Any, n_components: int = 2, *, dissimilarity: str = "sqrt", tol: float = 1e-8
) -> tuple[np.ndarray, np.ndarray]:
    """Classical MDS coordinates of the training rows of a fitted forest.

    Parameters
    ----------
    forest : ProximityForest
    n_components : int, default 2
    dissimilarity : {"sqrt", "linear"}, default "sqrt"
        ``sqrt``: D = sqrt(1 - P) (Breiman, R's ``MDSplot``); ``linear``: D = 1 - P.
    tol : float
        Relative accuracy of the eigenpairs (ARPACK's criterion).

    Returns
    -------
    coordinates : ndarray, shape (n_samples, n_components)
        ``U sqrt(lambda)``, by decreasing eigenvalue; the sign of each axis
        is fixed so that its first largest absolute entry is positive.
    eigenvalues : ndarray, shape (n_components,)
    """
    from distforest.apps.outliers import stored_path

    coordinates, values = mds_by_chunks(forest, stored_path(forest), n_components,
                                        dissimilarity=dissimilarity, tol=tol)  # fmt: skip
    assert coordinates is not None
    return coordinates, values


def mds_by_chunks(
    forest: Any,
    path: str | None,
    n_components: int = 2,
    *,
    dissimilarity: str = "sqrt",
    tol: float = 1e-8,
    pieces: CsvPieces | None = None,
) -> tuple[np.ndarray | None, np.ndarray]:
    """Classical MDS of the training rows of a fitted forest, its scratch arrays in the
    store at ``path`` (a forest fitted from it) or (``path`` None) held in memory.

    Parameters and results as :func:`mds`; with ``pieces`` (a store only) the
    coordinates are written as CSV pieces by the tasks and None is returned in their place.
    """
    from distforest.forests.products import product_session

    if dissimilarity not in DISSIMILARITIES:
        raise ParameterError(
            f"dissimilarity must be one of {DISSIMILARITIES}, got {dissimilarity!r}"
        )
    n = int(forest.n_samples_)
    if not 1 <= n_components < n - 1:
        raise ParameterError(f"n_components must be in [1, {n - 2}], got {n_components!r}")
    chunk = max(GRAIN, ROWS_PER_CHUNK // GRAIN * GRAIN)
    rows = min(chunk, -(-n // GRAIN) * GRAIN)
    s = Scratch(ScratchSpace(path), n, rows, GRAIN, int(forest.leaves_.shape[1]))
    codes: Any = None
    if pieces is not None:
        assert path is not None, "CSV pieces are written from a store"
        codes = StoredCodes(path, "target" if forest.task_ == "classification" else None, n)
    try:
        with product_session(forest) as products:
            row_blocks.warm_up()
            lanczos = _Lanczos(products.runner, s, products, n_components, dissimilarity, tol)
            s.create(lanczos.width, lanczos.block, lanczos.parts)
            Y, theta, m = lanczos.solve()
            runner, chunks = lanczos.runner, s.chunks()
            largest = np.full(n_components, -1.0)
            signs = np.zeros(n_components)
            found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
            for i, part in runner.run(
                _largest_task, [(s, rows, m, Y) for rows in chunks], name="mds-signs"
            ):
                found[i] = part
            for i in range(len(chunks)):  # in row order: the first largest entry, as argmax
                size, value = found.pop(i)
                better = size > largest
                largest[better], signs[better] = size[better], np.sign(value[better])
            scaled = Y * signs * np.sqrt(np.clip(theta, 0, None))
            items = [(s, j, rows, m, scaled, codes, pieces) for j, rows in enumerate(chunks)]
            parts: list[Any] = [None] * len(items)
            for j, part in runner.run(_coordinates_task, items, name="mds-coordinates"):
                parts[j] = part
    finally:
        s.drop()
    return (None if pieces is not None else np.concatenate(parts)), theta


def write_mds_csv(
    forest: Any, path: str, out: str, n_components: int = 2, dissimilarity: str = "sqrt"
) -> str:
    """The MDS CSV (ID or ``row``, ``label``, ``dim1`` ..) written by tasks in pieces,
    joined into ``out`` through a temporary file and a rename; returns ``out`` resolved."""
    columns = tuple(f"dim{k + 1}" for k in range(n_components))
    return csv_by_pieces(
        forest,
        out,
        columns,
        lambda pieces: mds_by_chunks(
            forest, path, n_components, dissimilarity=dissimilarity, pieces=pieces
        ),
    )
