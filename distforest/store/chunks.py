"""A damaged chunk is a store error naming the array and the chunk, on every reader.

Every Zarr read of distforest (stores, models, matrices given as input; in
this process and in the workers) goes through zarr's codec pipeline, so the
one check is there: :class:`CheckedCodecPipeline` is zarr's own batched
pipeline whose reads turn a codec failure (a garbled or truncated chunk file:
Zstd / Blosc decompression errors, a chunk of the wrong size) into a
:class:`~distforest.errors.StoreError` (exit 6).  :func:`install` registers and
selects it in zarr's configuration (``codec_pipeline.path``); importing
:mod:`distforest.store.run_store` installs it, in this process and in every
worker that runs a task of distforest's (their modules import the run store).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import zarr
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr.registry import register_pipeline

from distforest.errors import DistforestError, StoreError

#: The pipeline's import path, as zarr's configuration names it.
PIPELINE = f"{__name__}.CheckedCodecPipeline"


def _chunk_name(byte_getter: Any) -> str:
    """``'array' chunk 'c/0/3' in 'store'`` from a zarr store path."""
    path = str(getattr(byte_getter, "path", "") or byte_getter)
    store = getattr(getattr(byte_getter, "store", None), "root", None)
    array, sep, chunk = path.partition("/c/")
    if not sep:
        array, _, chunk = path.rpartition("/")
    where = f" of {str(store)!r}" if store is not None else ""
    return f"chunk {'c/' + chunk if sep else chunk!r} of array {array or '/'!r}{where}"


class CheckedCodecPipeline(BatchedCodecPipeline):
    """zarr's :class:`BatchedCodecPipeline`; a chunk that cannot be decoded is a StoreError."""

    async def read_batch(
        self, batch_info: Iterable[tuple[Any, ...]], out: Any, drop_axes: tuple[int, ...] = ()
    ) -> None:
        batch = list(batch_info)
        try:
            await super().read_batch(batch, out, drop_axes)
        except (DistforestError, OSError):  # a full disk, a missing permission: as they are
            raise
        except Exception as exc:
            names = ", ".join(_chunk_name(item[0]) for item in batch[:3])
            more = f" (one of {len(batch)} chunks)" if len(batch) > 1 else ""
            raise StoreError(
                f"{names}{more} cannot be decoded ({type(exc).__name__}: {exc}): the file is "
                "damaged (garbled or truncated); write the store again (--overwrite), or "
                "restore it from a copy"
            ) from exc


def install() -> None:
    """Read every Zarr chunk of this process through :class:`CheckedCodecPipeline`."""
    register_pipeline(CheckedCodecPipeline)
    zarr.config.set({"codec_pipeline.path": PIPELINE})
