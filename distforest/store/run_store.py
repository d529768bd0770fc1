"""One Zarr v3 group per run: layout, provenance and completion status.

Layout (see docs/design.md section 5)::

    run.zarr/
      attrs: distforest_version, schema_version, created, params, input, status, ...
      forest/      flat per-node arrays of all trees, node_offset, seed
      sample, sample_i, sample_j, tree   coordinates (row and tree numbers)
      target       (sample)             class codes or regression values
      leaves       (sample, tree)       int32, chunked by rows
      inbag        (sample, tree)       uint8 bootstrap counts
      proximity    (sample_i, sample_j) uint8/uint16 counts of trees (CF scale_factor
                   1/T: readers see floats), chunks (tile, tile)
      done/        per matrix, a (tile_i, tile_j) uint8 record of the tiles written

Only the driver writes attributes (Zarr rewrites them whole).  Tasks write
array chunks through :func:`write_block`, one task per chunk.  ``status`` is
``"running"`` from creation until :meth:`RunStore.mark_complete`, so a reader
can tell a finished store from a half-written one.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.errors import ContainsArrayAndGroupError, ContainsArrayError, ContainsGroupError
from zarr.storage import LocalStore, MemoryStore

from distforest import location
from distforest._version import __version__
from distforest.errors import DISK_FULL_ERRNOS, StoreError
from distforest.io.attrs import decode_attrs, decode_value, encode_attrs
from distforest.io.matrices import DECODED_DTYPE, decode, decoded_dtype
from distforest.store import chunks
from distforest.store.schema import (
    DONE_DIMS,
    DONE_GROUP,
    MATRIX_DIMS,
    ROW_COORDS,
    MatrixEncoding,
    array_spec,
    matrix_encoding,
    row_chunks,
)

chunks.install()  # a damaged chunk is a StoreError naming it, on every reader

if TYPE_CHECKING:
    import xarray as xr

#: Layout version.  2: count matrices (Breiman's proximity) are stored as
#: integer counts with a CF ``scale_factor``; version 1 stored float32.  Both
#: read the same (readers decode by the attributes).
SCHEMA_VERSION = 2
STATUS_RUNNING = "running"
STATUS_COMPLETE = "complete"
#: The stores this process created or marked running: where an interrupted command left
#: work to resume (the command line's Ctrl-C message says so only if there is one).
WRITTEN_HERE: set[str] = set()


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _open_group(path: str | Path, mode: Literal["r", "r+", "w"], **kw: Any) -> zarr.Group:
    """The root group at ``path`` (a local path or a URL with its storage options).

    Zarr v3 only (distforest writes nothing else): without ``zarr_format`` zarr also
    looks for the v2 metadata files, three more requests for every open on object storage.
    """
    store = location.zarr_store(path, read_only=mode == "r")
    return zarr.open_group(store, mode=mode, **{"zarr_format": 3, **kw})


def _is_distforest_store(path: str | Path) -> bool:
    try:
        group = _open_group(path, "r")
    except Exception:
        return False
    return "distforest_version" in group.attrs


def is_half_created(path: str | Path) -> bool:
    """An empty directory, or a Zarr group with no attributes yet: nothing a run finished.

    Local stores made by :meth:`RunStore.create` never look like this (they
    are renamed into place whole; on object storage the group is written with
    its attributes in one request); older versions and disks that filled up
    at the wrong moment could leave one, and replacing it loses nothing.
    """
    if not location.is_dir(path):
        return False
    entries = location.entries(path)
    if not entries:
        return True
    if entries != ["zarr.json"]:
        return False
    try:
        meta = json.loads(location.read_bytes(location.join(path, "zarr.json")) or b"{}")
    except (OSError, ValueError):
        return True  # a metadata file cut short
    return not meta.get("attributes")


def check_can_create(path: str | Path, overwrite: bool) -> None:
    """Raise :class:`StoreError` unless a new store may be created at ``path``.

    Called before any work starts, so a doomed run fails at once.  An
    existing distforest store (or an empty directory) may be replaced with
    ``overwrite``; anything else at ``path`` is never removed.
    """
    shown = location.display(path)
    if not location.exists(path) or is_half_created(path):
        return  # nothing of value is there (a run killed while creating it)
    if not overwrite:
        raise location.existing_output(path)
    empty_dir = location.is_dir(path) and not location.entries(path)
    if not (empty_dir or _is_distforest_store(path)):
        raise StoreError(
            f"refusing to overwrite {shown!r}: it is not a distforest store; "
            "remove it yourself or choose another output path"
        )


#: File inside a ``.NAME.partial`` directory that says distforest made it (and may remove it).
PARTIAL_MARK = ".distforest-partial"


def _mark_partial(tmp: Path) -> None:
    fd = os.open(tmp / PARTIAL_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                 | getattr(os, "O_NOFOLLOW", 0), 0o644)  # fmt: skip
    os.close(fd)


def clear_partial(tmp: Path) -> None:
    """Remove ``tmp`` (a store being built) if distforest made it; refuse anything else.

    Removed: a directory holding :data:`PARTIAL_MARK`, or an empty one (a run killed
    between the two).  A symbolic link, a file or a directory without the mark is
    the user's: never followed nor deleted, a :class:`StoreError` names it.
    """
    if not (tmp.exists() or tmp.is_symlink()):
        return
    if not tmp.is_symlink() and tmp.is_dir():
        if (tmp / PARTIAL_MARK).is_file() and not (tmp / PARTIAL_MARK).is_symlink():
            shutil.rmtree(tmp)
            return
        if not any(tmp.iterdir()):
            tmp.rmdir()
            return
    raise StoreError(
        f"{str(tmp)!r} exists and was not made by distforest (no {PARTIAL_MARK} mark in it): "
        f"distforest builds the store {tmp.name[1 : -len('.partial')]!r} under that name and "
        "does not remove what is not its own; move it away or choose another output name"
    )


class RunStore:
    """A distforest run stored as a Zarr v3 group.

    Use :meth:`create` for a new run and :meth:`open` for an existing one.

    Parameters
    ----------
    path : str or Path
        The store's directory.
    group : zarr.Group
        The opened root group.
    """

    def __init__(self, path: str | Path, group: zarr.Group) -> None:
        #: The store's absolute path, or its URL (a :class:`~distforest.location.Location`
        #: keeps the storage options for the tasks that write it).
        self.path: str = (
            str(path) if location.is_remote(path) else str(Path(location.local(path)).resolve())
        )
        self.group = group

    # -- life cycle -------------------------------------------------------

    @classmethod
    def create(
        cls, path: str | Path, *, attrs: Mapping[str, Any], overwrite: bool = False
    ) -> RunStore:
        """Create a new store with status ``"running"``.

        Parameters
        ----------
        path : str or Path
            Directory of the store (conventionally ending in ``.zarr``).
        attrs : mapping
            Provenance to record (params, input fingerprint, ...); must be
            JSON-serialisable.
        overwrite : bool
            Replace an existing distforest store at ``path``.  A directory
            that is not a distforest store is never removed.

        Returns
        -------
        RunStore
        """
        head = encode_attrs({
            "distforest_version": __version__,
            "schema_version": SCHEMA_VERSION,
            "created": _now(),
            "status": STATUS_RUNNING,
            **dict(attrs),
        })  # fmt: skip
        check_can_create(path, overwrite)
        WRITTEN_HERE.add(location.display(path))
        if location.is_remote(path):
            return cls._create_in_place(str(path), head)
        p = Path(location.local(path))
        p.parent.mkdir(parents=True, exist_ok=True)
        # Built under a temporary name and renamed into place: a run killed
        # (or a disk filled) half-way through leaves no half-made store at
        # ``path``, only a ``.partial`` directory, marked as distforest's, that the
        # next create removes (a folder of that name without the mark is refused).
        tmp = p.with_name(f".{p.name}.partial")
        clear_partial(tmp)  # left by a killed run: removed only if distforest made it
        try:
            tmp.mkdir()
            _mark_partial(tmp)
            group = zarr.open_group(str(tmp), mode="a", zarr_format=3)
            group.attrs.update(head)
            if p.exists():
                shutil.rmtree(p)
            tmp.rename(p)
            (p / PARTIAL_MARK).unlink()  # a finished create: nothing but Zarr inside
        except OSError as exc:
            if (tmp / PARTIAL_MARK).is_file():  # ours: a directory made in a race is not
                shutil.rmtree(tmp, ignore_errors=True)
            fix = "free some space or " if exc.errno in DISK_FULL_ERRNOS else ""
            raise StoreError(
                f"cannot create the store {str(p)!r}: {exc.strerror or exc}; {fix}write to "
                "another directory"
            ) from exc
        return cls(p, zarr.open_group(str(p), mode="r+", use_consolidated=False))

    @classmethod
    def _create_in_place(cls, url: str, head: dict[str, Any]) -> RunStore:
        """Object storage has no rename: the group is written where it belongs, its
        attributes (status ``"running"``) in the same request as the group itself."""
        shown = location.display(url)
        try:
            if location.exists(url):
                location.remove_tree(url)  # check_can_create allowed it
            _open_group(url, "w", zarr_format=3, attributes=head)
            group = _open_group(url, "r+", use_consolidated=False)
        except Exception as exc:
            raise StoreError(f"cannot create the store {shown!r}: {_why(exc)}") from exc
        return cls(url, group)

    @classmethod
    def open(
        cls, path: str | Path, *, mode: Literal["r", "r+"] = "r", require_complete: bool = False
    ) -> RunStore:
        """Open an existing store.

        Parameters
        ----------
        path : str or Path
        mode : {"r", "r+"}
        require_complete : bool
            Raise :class:`StoreError` when the run did not finish.
        """
        p = location.display(path)
        if not location.exists(path):
            raise StoreError(f"no such store: {p!r}")
        try:
            group = _open_group(path, mode, use_consolidated=False)
        except Exception as exc:
            if location.exists(location.join(path, ".zgroup")):
                raise StoreError(
                    f"{p!r} is a Zarr v2 group, not a distforest store (those are "
                    "Zarr v3 groups); give the path of a distforest store"
                ) from exc
            raise StoreError(f"{p!r} is not a Zarr group: {exc}") from exc
        if "distforest_version" not in group.attrs:
            raise StoreError(f"{str(p)!r} is a Zarr group but not a distforest store")
        version = group.attrs.get("schema_version", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise StoreError(
                f"store {str(p)!r} has schema_version {version!r}, newer than this distforest "
                f"({__version__}) reads (up to {SCHEMA_VERSION}); upgrade distforest, or write "
                "the run again with this version"
            )
        store = cls(path, group)
        if require_complete and not store.is_complete:
            raise StoreError(
                f"store {str(p)!r} is incomplete (status {store.status!r}): the run that "
                "wrote it did not finish; run it again"
            )
        return store

    def array(self, name: str) -> zarr.Array:
        """Array ``name`` of the store (a path such as ``"done/proximity"`` works too)."""
        try:
            node = self.group[name]
        except KeyError:
            raise StoreError(f"store {self.path!r} has no array {name!r}") from None
        if not isinstance(node, zarr.Array):
            raise StoreError(f"{name!r} in store {self.path!r} is a group, not an array")
        return node

    def subgroup(self, name: str) -> zarr.Group:
        """Group ``name`` of the store."""
        node = self.group.get(name)
        if not isinstance(node, zarr.Group):
            raise StoreError(f"store {self.path!r} has no group {name!r}")
        return node

    def read(self, name: str) -> np.ndarray:
        """The whole of array ``name`` (O(n) sized arrays only), decoded like :meth:`dataset`."""
        arr = self.array(name)
        return decode(arr[...], dict(arr.attrs))

    @property
    def attrs(self) -> dict[str, Any]:
        """The group attributes as a plain dict (decoded: see :mod:`distforest.io.attrs`)."""
        return decode_attrs(self.group.attrs)

    def array_attrs(self, name: str) -> dict[str, Any]:
        """The attributes of array ``name``, decoded."""
        return decode_attrs(self.array(name).attrs)

    def create_arrays(self, specs: Mapping[str, Mapping[str, Any]]) -> dict[str, zarr.Array]:
        """Create (or replace) arrays of this store (driver): :func:`create_arrays`."""
        made = create_arrays(self.path, specs)
        if self.group.metadata.consolidated_metadata is not None:
            # a complete store's group lists its members from its consolidated metadata
            self.group = _open_group(self.path, "r+", use_consolidated=False)
        return made

    def update_array_attrs(self, name: str, **attrs: Any) -> None:
        """Merge attributes into array ``name`` (driver only)."""
        self.array(name).attrs.update(encode_attrs(attrs))

    @property
    def status(self) -> str:
        """``"running"`` or ``"complete"``."""
        return str(self.group.attrs.get("status", "unknown"))

    @property
    def is_complete(self) -> bool:
        """Whether everything the run planned was written."""
        return self.status == STATUS_COMPLETE

    def update_attrs(self, **attrs: Any) -> None:
        """Merge attributes into the group (driver only)."""
        self.group.attrs.update(encode_attrs(attrs))

    def mark_running(self) -> None:
        """Flag the store as being written (before adding arrays)."""
        WRITTEN_HERE.add(location.display(self.path))
        self.update_attrs(status=STATUS_RUNNING, updated=_now())

    def check_fit(self, fit_id: str, subject: str, fix: str) -> None:
        """Refuse a store whose forest is another fit's (its ``fit_id`` attribute).

        ``subject`` says what belongs to another fit, with its verb (``"the trees in
        'x.zarr' belong"``); ``fix`` is what to do instead.
        """
        stored = self.attrs.get("fit_id")
        if stored != fit_id:
            raise StoreError(
                f"{subject} to another fit (fit_id {stored!r}, this forest {fit_id!r}): {fix}"
            )

    def mark_complete(self) -> None:
        """Flag the store as finished; call only after every write is done.

        The status is set first and the consolidated metadata written last, so
        a reader using consolidated metadata sees the new arrays only once the
        run is complete.
        """
        self.update_attrs(status=STATUS_COMPLETE, updated=_now())
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
            self.group = zarr.consolidate_metadata(location.zarr_store(self.path), zarr_format=3)

    # -- writing ----------------------------------------------------------

    def write_array(
        self,
        name: str,
        data: np.ndarray,
        dims: Sequence[str],
        *,
        chunks: Sequence[int] | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> zarr.Array:
        """Write a whole array from the driver (O(n) sized data only)."""
        data = np.asarray(data)
        if chunks is None:
            chunks = tuple(max(1, s) for s in data.shape)
        arr = self.create_arrays({name: {
            "shape": data.shape,
            "chunks": tuple(min(max(1, c), max(1, s))
                            for c, s in zip(chunks, data.shape, strict=False)),
            "dtype": data.dtype,
            "dimension_names": tuple(dims),
            "attributes": encode_attrs(attrs or {}),
        }})[name]  # fmt: skip
        if data.size:
            arr[...] = data
        return arr

    def write_named(
        self,
        name: str,
        data: np.ndarray,
        *,
        rows: int = 2048,
        attrs: Mapping[str, Any] | None = None,
    ) -> zarr.Array:
        """Write per-row array ``name`` with the layout :mod:`distforest.store.schema` gives it.

        Parameters
        ----------
        name : str
            A name in :data:`distforest.store.schema.ARRAYS`.
        data : ndarray
        rows : int
            Rows per chunk for arrays chunked by rows (the tile size).
        attrs : mapping, optional
        """
        spec = array_spec(name)
        data = np.asarray(data)
        if spec.dtype is not None:
            data = data.astype(spec.dtype, copy=False)
        if data.ndim != len(spec.dims):
            raise StoreError(f"array {name!r} must have dims {spec.dims}, got shape {data.shape}")
        chunks = row_chunks(spec, data.shape, rows)
        return self.write_array(name, data, spec.dims, chunks=chunks, attrs=attrs)

    def copy_named(
        self,
        name: str,
        source: zarr.Array,
        *,
        rows: int = 2048,
        attrs: Mapping[str, Any] | None = None,
    ) -> zarr.Array:
        """:meth:`write_named` of an array of another store, copied by tasks a chunk at a
        time (on the current dask scheduler): this process never holds it whole."""
        import dask.array as da

        spec = array_spec(name)
        if source.ndim != len(spec.dims):
            raise StoreError(f"array {name!r} must have dims {spec.dims}, got shape "
                             f"{source.shape}")  # fmt: skip
        chunks = row_chunks(spec, source.shape, rows)
        arr: Any = self.group.create_array(name, shape=source.shape, chunks=chunks,
                                           dtype=spec.dtype or source.dtype,
                                           dimension_names=spec.dims, overwrite=True)  # fmt: skip
        if source.size:
            values = da.from_zarr(source).astype(arr.dtype).rechunk(chunks)
            da.store(values, arr, lock=False)  # whole chunks per task: no two write one
        if attrs:
            arr.attrs.update(encode_attrs(attrs))
        return arr

    def write_coordinates(
        self,
        n_samples: int,
        n_trees: int | None = None,
        *,
        ids: np.ndarray | None = None,
        id_name: str | None = None,
    ) -> None:
        """Row and tree numbers as coordinates, so xarray names every dim.

        With ``ids`` (the rows' IDs), those are the row coordinates instead
        (integers or text), and the attribute ``id_name`` of each says what
        they are.
        """
        if ids is None:
            rows = np.arange(n_samples, dtype=np.int64)
            for dim in ROW_COORDS:
                self.write_named(dim, rows)
        else:
            values = np.asarray(ids)
            text = values.dtype.kind not in "iu"
            if text:
                values = np.asarray([str(v) for v in values], dtype=object)
            made = self.create_arrays({dim: {
                "shape": values.shape, "chunks": (max(1, n_samples),),
                "dtype": str if text else values.dtype, "dimension_names": (dim,),
                "attributes": encode_attrs({"id_name": id_name or "id"}),
            } for dim in ROW_COORDS})  # fmt: skip
            for arr in made.values():
                if n_samples:
                    arr[...] = values
        if n_trees is not None:
            self.write_named("tree", np.arange(n_trees, dtype=np.int64))

    def create_matrix(
        self,
        name: str,
        n_rows: int,
        n_cols: int,
        tile: int,
        *,
        dtype: str | None = None,
        encoding: MatrixEncoding | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> zarr.Array:
        """Create an empty ``(sample_i, sample_j)`` matrix chunked in tiles.

        ``encoding`` defaults to the schema's for ``name`` (stored as
        ``dtype`` when given); unwritten cells read as NaN.
        """
        enc = encoding or matrix_encoding(name, dtype=dtype)
        return self.create_arrays({name: {
            "shape": (n_rows, n_cols),
            "chunks": (max(1, min(tile, n_rows)), max(1, min(tile, n_cols))),
            "dtype": enc.dtype,
            "fill_value": enc.fill_value,
            "compressors": enc.compressors or "auto",
            "dimension_names": MATRIX_DIMS,
            "attributes": encode_attrs({**dict(attrs or {}), **enc.attrs()}),
        }})[name]  # fmt: skip

    def create_done_record(self, name: str, shape: tuple[int, int]) -> zarr.Array:
        """An explicit per-tile "done" record for matrix ``name`` (resume relies on it).

        With fill values and skipped empty chunks, a chunk file on disk does
        not prove its tile was written whole; a task marks its tile done in
        ``done/<name>`` (one uint8 chunk per tile) only after writing it.
        """
        key = f"{DONE_GROUP}/{name}"
        return self.create_arrays({key: {
            "shape": shape, "chunks": (1, 1), "dtype": "uint8", "fill_value": 0,
            "dimension_names": DONE_DIMS,
        }})[key]  # fmt: skip

    def done_tiles(self, name: str) -> np.ndarray | None:
        """The done record of matrix ``name`` (1 = written), or None if it has none."""
        if DONE_GROUP not in self.group or name not in self.subgroup(DONE_GROUP):
            return None
        return self.read(f"{DONE_GROUP}/{name}")

    def prepare_matrix(
        self,
        name: str,
        shape: tuple[int, int],
        tile: int,
        *,
        dtype: str | None = None,
        encoding: MatrixEncoding | None = None,
        identity: Mapping[str, Any],
        attrs: Mapping[str, Any] | None = None,
    ) -> np.ndarray:
        """Create matrix ``name`` and its done record, or keep them to resume.

        The existing matrix is kept when it has the same shape, chunks,
        encoding (``encoding``, else the schema's with ``dtype``) and
        ``identity`` (what computed it: forest, method, tile plan, ...) and
        its done record matches; otherwise both are created anew.

        Returns
        -------
        ndarray of uint8, shape (row blocks, column blocks)
            The done record: 1 for the tiles already written.
        """
        enc = encoding or matrix_encoding(name, dtype=dtype)
        blocks = (-(-shape[0] // tile), -(-shape[1] // tile))
        identity = dict(identity)
        if name in self.group:
            arr = self.array(name)
            done = self.done_tiles(name)
            same = (
                tuple(arr.shape) == tuple(shape)
                and tuple(arr.chunks) == (max(1, min(tile, shape[0])), max(1, min(tile, shape[1])))
                and np.dtype(arr.dtype) == np.dtype(enc.dtype)
                and arr.attrs.get("scale_factor") == enc.scale_factor
                and decode_value(arr.attrs.get("identity")) == identity
                and done is not None
                and done.shape == blocks
            )
            if same:
                assert done is not None
                return done
        self.create_matrix(
            name, shape[0], shape[1], tile, encoding=enc,
            attrs={**dict(attrs or {}), "identity": identity, "complete": False},
        )  # fmt: skip
        self.create_done_record(name, blocks)
        return np.zeros(blocks, dtype=np.uint8)

    def write_forest(
        self, nodes: Mapping[str, np.ndarray], node_counts: np.ndarray, seeds: np.ndarray
    ) -> None:
        """Save the flattened trees (no pickle) under ``forest/``."""
        forest = self.group.require_group("forest")
        sub = RunStore(location.join(self.path, "forest"), forest)
        offset = np.concatenate([[0], np.cumsum(node_counts)]).astype(np.int64)
        sub.write_array("node_offset", offset, ("tree_edge",))
        sub.write_array("seed", np.asarray(seeds, dtype=np.uint64), ("tree",))
        chunk = 1 << 20
        for name, values in nodes.items():
            dims = ("node",) if values.ndim == 1 else ("node", "output")
            sub.write_array(name, values, dims, chunks=(chunk, *values.shape[1:]))

    def join_forest(
        self, parts: Sequence[str], node_counts: np.ndarray, seeds: np.ndarray,
        chunk: int = 1 << 20, *, dims: Mapping[str, Sequence[str]] | None = None,
    ) -> None:  # fmt: skip
        """Write ``forest/`` (the layout of :meth:`write_forest`) from the node arrays that
        tasks wrote in groups ``parts`` (one per batch of trees, in tree order); ``dims``
        of the arrays that are not one value per node.

        Copied a chunk (``chunk`` nodes, as :meth:`write_forest` stores them) at a time:
        this process never holds the forest (hundreds of megabytes of nodes at a million
        rows).
        """
        forest = self.group.require_group("forest")
        sub = RunStore(location.join(self.path, "forest"), forest)
        offset = np.concatenate([[0], np.cumsum(node_counts)]).astype(np.int64)
        sub.write_array("node_offset", offset, ("tree_edge",))
        sub.write_array("seed", np.asarray(seeds, dtype=np.uint64), ("tree",))
        for name, first in self.subgroup(parts[0]).arrays():
            dim = (dims or {}).get(name) or (("node",) if first.ndim == 1 else ("node", "output"))
            self.join_arrays(f"forest/{name}", [f"{part}/{name}" for part in parts], dim, chunk)

    def join_arrays(
        self, name: str, parts: Sequence[str], dims: Sequence[str], chunk: int = 1 << 20
    ) -> zarr.Array:
        """Write array ``name`` as the arrays ``parts`` of this store (written by tasks)
        joined end to end along their first dim, a chunk (``chunk`` rows) at a time: this
        process never holds them whole."""
        arrays = [self.array(part) for part in parts]
        rest = tuple(arrays[0].shape[1:])
        total = sum(int(a.shape[0]) for a in arrays)
        target = self.create_arrays({name: {
            "shape": (total, *rest), "chunks": (max(1, min(chunk, total)), *rest),
            "dtype": arrays[0].dtype, "dimension_names": tuple(dims),
        }})[name]  # fmt: skip
        # each part read a chunk of its own at a time: never a whole part (a batch's
        # nodes, about 0.4 GB of a field at 10,000,000 rows and 13 refined trees)
        pieces = (np.asarray(a[s : s + int(a.chunks[0])]) for a in arrays
                  for s in range(0, int(a.shape[0]), max(1, int(a.chunks[0]))))  # fmt: skip
        for start, block in chunk_aligned(pieces, chunk):
            target[start : start + block.shape[0]] = block
        return target

    def copy_group(self, name: str, source: zarr.Group) -> None:
        """Copy the arrays of ``source`` (a group of another store) into group ``name``,
        a chunk of rows at a time: the same shapes, chunks, dims and attributes."""
        group = self.group.require_group(name)
        for key, arr in source.arrays():
            dims = getattr(arr.metadata, "dimension_names", None)
            target = group.create_array(key, shape=arr.shape, chunks=arr.chunks, dtype=arr.dtype,
                                        dimension_names=dims, overwrite=True)  # fmt: skip
            target.attrs.update(arr.attrs.asdict())
            step = max(1, int(arr.chunks[0])) if arr.ndim else 1
            for start in range(0, int(arr.shape[0]) if arr.ndim else 0, step):
                target[start : start + step] = arr[start : start + step]
            if not arr.ndim:
                target[...] = arr[...]

    # -- reading ----------------------------------------------------------

    def dataset(self) -> xr.Dataset:
        """The store's root arrays as a lazy :class:`xarray.Dataset`.

        Matrices stored as integer counts are decoded to float32 (xarray
        alone decodes them to float64; rounded to float32 they are the
        values a float32 matrix held, bit for bit).
        """
        import xarray as xr  # on use: a run that only writes does without it

        ds = xr.open_zarr(
            location.zarr_store(self.path, read_only=True), consolidated=False, zarr_format=3
        )
        ds.attrs = decode_attrs(ds.attrs)
        for var in ds.variables.values():
            var.attrs = decode_attrs(var.attrs)
        for name, var in ds.data_vars.items():
            stored = var.encoding.get("dtype")
            if "scale_factor" in var.encoding and stored is not None and stored.kind in "iu":
                decoded = var.astype(DECODED_DTYPE)
                # the chunking stays known; the integer packing does not apply to floats
                packing = ("dtype", "scale_factor", "add_offset", "_FillValue")
                decoded.encoding = {k: v for k, v in var.encoding.items() if k not in packing}
                ds[name] = decoded
        return ds

    def read_forest(self) -> dict[str, np.ndarray]:
        """Load the flattened trees (O(nodes) memory)."""
        if "forest" not in self.group:
            raise StoreError(f"store {self.path!r} has no forest/ group")
        return {name: np.asarray(arr[...]) for name, arr in self.subgroup("forest").arrays()}

    def describe(self) -> dict[str, Any]:
        """A summary of the store for ``distforest info``."""
        arrays = {name: _summary(arr) for name, arr in sorted(self.group.arrays())}
        if "forest" in self.group:
            for name, arr in sorted(self.subgroup("forest").arrays()):
                arrays[f"forest/{name}"] = _summary(arr)
        return {"path": self.path, "attrs": self.attrs, "arrays": arrays}


def _why(exc: BaseException) -> str:
    """One line on why a store operation failed, with the usual fix."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"{text}; check that the location exists and that you may write there"


def _summary(arr: zarr.Array) -> dict[str, Any]:
    out = {
        "shape": list(arr.shape),
        "chunks": list(arr.chunks),
        "dtype": str(decoded_dtype(arr)),
        "dims": list(getattr(arr.metadata, "dimension_names", None) or ()),
    }
    if str(out["dtype"]) != str(arr.dtype):
        out["stored"] = f"{arr.dtype} x {arr.attrs['scale_factor']:.6g}"
    return out


def complete_output(rs: RunStore) -> None:
    """Mark an output complete, after its last write: the one place in the package that
    does (estimators, commands and the run protocol's last step alike)."""
    rs.mark_complete()


# -- functions that run inside tasks (plain, picklable) ----------------------


#: Arrays one process keeps open for its tasks (see :func:`task_array`).
OPEN_ARRAYS = 32
_open_arrays: OrderedDict[tuple[str, str, str], tuple[tuple[int, int, int], zarr.Array]] = (
    OrderedDict()
)
_open_lock = threading.Lock()


def task_array(path: str, name: str, mode: Literal["r", "r+"]) -> zarr.Array:
    """Array ``name`` of the store at ``path``, opened once per process and reused.

    Tile tasks read and write thousands of chunks of the same few arrays, and
    opening one (reading and parsing its metadata) costs about a millisecond.
    A kept handle is reused only while the array's ``zarr.json`` is the same
    file, unchanged (inode, size, modification time), so an array that was
    replaced, resized or given new attributes is opened anew.

    Handles opened for writing skip zarr's check of whether a chunk equals the
    fill value (on a 2048 x 2048 uint8 tile it costs twice the compression):
    such a chunk is then written instead of left out, and reads the same.
    """
    signature: tuple[int, int, int] | None = None
    if not location.is_remote(path):  # on object storage: opened anew (no cheap stat)
        try:
            st = (Path(path) / name / "zarr.json").stat()
            signature = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            pass
    key = (str(path), name, mode)
    with _open_lock:
        kept = _open_arrays.get(key)
        if kept is not None and kept[0] == signature:
            _open_arrays.move_to_end(key)
            return kept[1]
    arr = zarr.open_array(location.zarr_store(path, read_only=mode == "r"), path=name, mode=mode,
                          zarr_format=3)  # fmt: skip
    if mode != "r":
        arr = arr.with_config({"write_empty_chunks": True})
    if signature is not None:
        with _open_lock:
            _open_arrays[key] = (signature, arr)
            while len(_open_arrays) > OPEN_ARRAYS:
                _open_arrays.popitem(last=False)
    return arr


def read_rows(path: str, name: str, rows: slice) -> np.ndarray:
    """Read rows ``rows`` of array ``name`` of the store at ``path``."""
    return np.asarray(task_array(path, name, "r")[rows])


def chunk_aligned(pieces: Iterator[np.ndarray], chunk: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, block)`` of the pieces joined end to end, cut at multiples of ``chunk`` rows
    (the last block may be shorter): whole chunks to write, at most a chunk and a piece held.
    """
    start, held, size = 0, [], 0
    for piece in pieces:
        held.append(piece)
        size += piece.shape[0]
        if size >= chunk:
            joined = np.concatenate(held)
            whole = size // chunk * chunk
            yield start, joined[:whole]
            start, held, size = start + whole, [joined[whole:]], size - whole
    if size:
        yield start, np.concatenate(held)


def create_arrays(path: str, specs: Mapping[str, Mapping[str, Any]]) -> dict[str, zarr.Array]:
    """Create (or replace) arrays of the store at ``path`` in one pass.

    ``specs`` maps each array's path in the store to the keyword arguments of
    :meth:`zarr.Group.create_array`.  Missing parent groups are created, existing
    ones kept.  ``create_array`` checks every parent group of each array it creates
    (a read and an existence check of each, every time: some twenty requests an array
    on object storage, most of them for the same root ``zarr.json``);
    :func:`zarr.create_hierarchy` checks each node once for the whole set.  The
    metadata is the one ``create_array`` writes: zarr makes it in memory first.
    """
    layout = zarr.open_group(MemoryStore(), mode="w", zarr_format=3)
    nodes: dict[str, Any] = {name: layout.create_array(name, **dict(kw)).metadata
                             for name, kw in specs.items()}  # fmt: skip
    store = location.zarr_store(path)
    if not isinstance(store, Store):
        store = LocalStore(store)
    try:  # a new array costs one read; replacing one, a listing and a delete
        made = dict(zarr.create_hierarchy(store=store, nodes=nodes, overwrite=False))
    except (ContainsArrayError, ContainsGroupError, ContainsArrayAndGroupError):
        made = dict(zarr.create_hierarchy(store=store, nodes=nodes, overwrite=True))
    return {name: node for name, node in made.items()
            if name in specs and isinstance(node, zarr.Array)}  # fmt: skip


def write_group(
    path: str, name: str, arrays: Mapping[str, np.ndarray], chunk: int | None = None
) -> None:
    """Write whole arrays into a new group ``name`` of the store at ``path`` (from a task:
    no other task writes that group), in chunks of ``chunk`` rows (None: one chunk each)."""
    made = create_arrays(path, {
        f"{name}/{key}": {"shape": values.shape, "dtype": values.dtype,
                          "chunks": (max(1, min(chunk or values.shape[0], values.shape[0])),
                                     *(max(1, s) for s in values.shape[1:]))}
        for key, values in arrays.items()
    })  # fmt: skip
    for key, values in arrays.items():
        if values.size:
            made[f"{name}/{key}"][...] = values


def write_block(path: str, name: str, region: tuple[slice, ...], values: np.ndarray) -> None:
    """Write ``values`` into ``region`` of array ``name`` of the store at ``path``.

    The region must cover whole chunks, and no other task may write them.
    """
    task_array(path, name, "r+")[region] = values


def mark_done(path: str, name: str, tile: tuple[int, int]) -> None:
    """Record tile ``tile`` (block indices) of matrix ``name`` as written."""
    task_array(path, f"{DONE_GROUP}/{name}", "r+")[tile] = 1


def write_tile(
    path: str,
    name: str,
    index: tuple[int, int],
    region: tuple[slice, slice],
    values: np.ndarray,
    *,
    mirror: bool = False,
) -> int:
    """Write one tile (and its transpose when ``mirror``), then mark it done.

    Runs inside a task; the tile's chunks belong to this task alone.  The
    done mark is written last, so a tile marked done is whole.  A matrix
    stored as counts (:func:`~distforest.store.schema.matrix_encoding`)
    takes the integer counts, not fractions.

    Returns
    -------
    int
        Bytes written.
    """
    arr = task_array(path, name, "r+")
    values = np.asarray(values)
    if arr.dtype.kind in "iu" and values.dtype.kind not in "iu":
        raise StoreError(
            f"matrix {name!r} of {path!r} stores integer counts ({arr.dtype}); its tile "
            f"function returned {values.dtype} values: return the counts, not fractions"
        )
    values = values.astype(arr.dtype, copy=False)
    arr[region] = values
    written = values.nbytes
    if mirror:
        from distforest.kernels.transpose import transposed  # (numba: only for tiles)

        arr[region[1], region[0]] = transposed(values)
        written *= 2
    mark_done(path, name, index)
    return written
