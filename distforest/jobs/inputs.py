"""When a command reads its input by partitions on the workers, and where it keeps it.

Inputs that are a glob of files, a folder that is not a Zarr store (a Parquet
dataset of any name), or a file of more than :data:`PARTITIONED_BYTES` are
read by partitions (:func:`distforest.store.inputs.ingest`): the driver sees
summaries only and the encoded table lives in a temporary run store the
command removes when it ends.  Smaller files keep the in-memory path (and
its start-up time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distforest.errors import InputError
from distforest.store import source as source_rule
from distforest.store.temporary import temporary_store

__all__ = ["PARTITIONED_BYTES", "check_request", "input_shape", "listing_stamp",
           "partitioned_input", "read_by_parts", "temporary_store"]  # fmt: skip

if TYPE_CHECKING:
    from distforest.store.inputs import PendingInput

#: Files larger than this are read by partitions (the source rule's, 32 MiB).
PARTITIONED_BYTES = source_rule.PARTITIONED_BYTES


def partitioned_input(source: str) -> bool:
    """Whether ``source`` is read by partitions rather than loaded whole
    (:func:`distforest.store.source.by_partitions`, files above :data:`PARTITIONED_BYTES`)."""
    return source_rule.by_partitions(source, PARTITIONED_BYTES)


def read_by_parts(source: str, target: str | None, drop: tuple[str, ...],
                  na_values: tuple[str, ...]) -> PendingInput:  # fmt: skip
    """Pass 1 of a feature table read by partitions (on the current dask scheduler): every
    check of :func:`~distforest.io.load_table` (missing values refused), the features
    encoded as the float64 values it gives; the rows are written later
    (:meth:`~distforest.store.inputs.PendingInput.write`).  For the estimators that fit
    the float64 rows in memory (SMERF, X-Forest): the same values from the store."""
    import numpy as np

    from distforest.io.ingest import read_partitioned
    from distforest.store.inputs import PendingInput

    return PendingInput(read_partitioned(source, target=target, drop=drop,
                                         na_values=na_values, allow_missing=False,
                                         dtype=np.float64))  # fmt: skip


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


def input_shape(
    source: str,
    target: str | None = None,
    *,
    drop: tuple[str, ...] | list[str] = (),
    na_values: tuple[str, ...] | list[str] = (),
    id: str | None = None,
) -> tuple[str, int, int]:
    """The rows and feature columns of an input, for a dry run: ``(source, n, d)``.

    A table read by partitions is not loaded: a Parquet dataset's rows come from
    its metadata, a CSV's by counting its lines in this process (a pass over the
    text, nothing kept), and the features are its columns less the target, the
    ID and the dropped ones.  Anything else is read as the run reads it.
    """
    if not partitioned_input(source):
        from distforest.io import load_table

        table = load_table(source, target=target, drop=drop, na_values=na_values, id=id)
        return str(table.source), table.n_samples, table.n_features
    import dask

    from distforest.io.partitions import open_partitions

    parts = open_partitions(source, na_values=tuple(map(str, na_values)))
    if parts.array is not None:
        return parts.source, int(parts.array.shape[0]), int(parts.array.shape[1])
    not_features = {str(c) for c in (*drop, target, id) if c is not None}
    columns = [c for c in parts.columns if c not in not_features]
    with dask.config.set(scheduler="threads"):
        n = len(parts.frame)
    return parts.source, int(n), len(columns)


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
