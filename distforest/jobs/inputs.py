"""A job's input before any cluster starts: its checks, and the names other jobs import.

Which inputs are read by partitions (a glob, a folder of parts, a file of more
than :data:`~distforest.store.source.PARTITIONED_BYTES`) is decided by
:mod:`distforest.store.source` alone: :func:`~distforest.store.source.open_input`
gives a job its input (rows in memory, or the partitions' summaries whose rows
go into the job's store), :func:`~distforest.store.source.input_shape` a dry
run its size.
"""

from __future__ import annotations

from typing import Any

from distforest.errors import InputError
from distforest.store.source import PARTITIONED_BYTES, input_shape
from distforest.store.temporary import temporary_store

__all__ = ["PARTITIONED_BYTES", "check_request", "input_shape", "listing_stamp",
           "temporary_store"]  # fmt: skip


def check_request(X: Any, Y: Any, metric: str) -> None:
    """Refuse a bad measure or mismatched tables before any cluster starts; name the files."""
    from distforest.forests.measures import parse_metric

    parse_metric(metric)
    if Y is not None and Y.n_features != X.n_features:
        raise InputError(
            f"{Y.source} has {Y.n_features} feature column(s) ({', '.join(Y.feature_names)}) but "
            f"{X.source} has {X.n_features} ({', '.join(X.feature_names)}); give both the same "
            "columns (--drop the others)"
        )


def listing_stamp(path: str) -> str:
    """A digest of the names, sizes and modification times of the files of ``path`` (a
    file, a folder of parts, a glob; local or a URL): a changed input is another job."""
    import hashlib

    from distforest import location

    fs, where = location.filesystem(path)
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(fs.expand_path(where, recursive=True)):
        info = fs.info(name)
        if info.get("type") == "file":
            stamp = info.get("mtime") or info.get("LastModified") or info.get("ETag") or ""
            h.update(f"{name}:{info.get('size')}:{stamp}".encode())
    return h.hexdigest()
