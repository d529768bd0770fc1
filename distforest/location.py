"""Where inputs and stores live: a local path or an fsspec URL (``s3://``, ``gs://``, ...).

Every place that reads or writes a path asks this module, so local paths
keep their plain :mod:`os`/:mod:`pathlib` fast paths and URLs go through
:mod:`fsspec` (which Zarr, pandas and dask speak too).

A URL may carry *storage options* (endpoint, credentials, ...): a
:class:`Location` is a ``str`` (the URL, nothing else) that also holds them,
so it travels wherever a path travels (jobs, stores, task arguments) and
prints as the bare URL: options never reach a message, a report or a store
attribute.  Without options, fsspec's own defaults apply: for S3 the
environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...) and the
credential files boto3 reads.  Options given explicitly are pickled into
the task graph with the tasks that write the store; on a cluster prefer
credentials from the workers' environment.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from distforest.errors import DistforestError, MissingDependencyError, StoreError

#: The package that gives fsspec each common protocol, for messages.
PACKAGES = {
    "s3": "s3fs (pip install 'distforest[s3]')",
    "s3a": "s3fs (pip install 'distforest[s3]')",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "abfs": "adlfs",
    "az": "adlfs",
}
#: Protocols that are the local file system.
LOCAL_PROTOCOLS = frozenset({"file", "local"})
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@")


class Location(str):
    """A URL (the string itself) with the fsspec ``storage_options`` to reach it.

    The options are not part of the string: printing, hashing, comparing or
    JSON-encoding a Location sees the URL only.
    """

    storage_options: dict[str, Any]

    def __new__(cls, url: str, storage_options: dict[str, Any] | None = None) -> Location:
        self = super().__new__(cls, url)
        self.storage_options = dict(storage_options or {})
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Location, (str.__str__(self), self.storage_options))

    def __str__(self) -> str:  # ``str(location)`` keeps the options
        return self

    def __truediv__(self, child: str) -> Location:
        """``location / "name"``: the URL one level down, with the same options."""
        return Location(f"{str.__str__(self).rstrip('/')}/{str(child).strip('/')}",
                        self.storage_options)  # fmt: skip


def protocol(path: str | os.PathLike[str]) -> str | None:
    """The URL scheme of ``path`` (``"s3"``, ``"memory"``, ...), or None for a plain path."""
    if not isinstance(path, str):
        return None
    if "::" in path:  # a chained URL such as simplecache::s3://...
        return path.split("::", 1)[0].split("://", 1)[0]
    match = _SCHEME.match(path)
    return match.group(1).lower() if match else None


def is_remote(path: Any) -> bool:
    """Whether ``path`` is a URL of a file system other than the local one."""
    proto = protocol(path) if isinstance(path, str) else None
    return proto is not None and proto not in LOCAL_PROTOCOLS


def local(path: str | os.PathLike[str]) -> str:
    """A local path as a plain string (``file://`` removed)."""
    text = os.fspath(path)
    proto = protocol(text)
    if proto in LOCAL_PROTOCOLS:
        return text.split("://", 1)[1]
    return text


def with_options(path: Any, storage_options: dict[str, Any] | None) -> Any:
    """``path`` carrying ``storage_options`` when it is a URL (else ``path`` as given)."""
    if isinstance(path, str) and is_remote(path):
        return Location(str(path), {**options(path), **(storage_options or {})})
    return path


def options(path: Any) -> dict[str, Any]:
    """The storage options ``path`` carries (empty for a plain string or path)."""
    return dict(getattr(path, "storage_options", None) or {})


def display(path: Any) -> str:
    """``path`` as text for messages: a URL loses any ``user:password@`` part."""
    return _USERINFO.sub(r"\1", str(path))


def resolved(path: Any) -> str:
    """``path`` as outputs are reported: a local path made absolute, a URL as it is."""
    if is_remote(path):
        return str(path)
    return str(Path(local(path)).resolve())


def filesystem(path: str) -> tuple[Any, str]:
    """The fsspec file system of URL ``path`` and the path within it."""
    from fsspec.core import url_to_fs

    return url_to_fs(str(path), **options(path))


def join(path: Any, *names: str) -> Any:
    """``path/name/...``, keeping a URL's storage options."""
    if is_remote(path):
        joined = "/".join([str.__str__(path).rstrip("/"), *(n.strip("/") for n in names)])
        return Location(joined, options(path))
    return str(Path(local(path), *names))


def parent(path: Any) -> Any:
    """The folder holding ``path`` (a URL's prefix, with its options)."""
    if is_remote(path):
        head = str(path).rstrip("/").rsplit("/", 1)[0]
        return Location(head, options(path))
    return str(Path(local(path)).parent)


def name(path: Any) -> str:
    """The last component of ``path``."""
    return str(path).rstrip("/").rsplit("/", 1)[-1] if is_remote(path) else Path(path).name


def exists(path: Any) -> bool:
    """Whether anything (a file, a folder, a prefix holding objects) is at ``path``."""
    if not is_remote(path):
        return Path(local(path)).exists()
    fs, where = filesystem(path)
    fs.invalidate_cache(where)  # other processes write here too
    return bool(fs.exists(where))


def is_dir(path: Any) -> bool:
    """Whether ``path`` is a folder (a prefix holding objects on object storage)."""
    if not is_remote(path):
        return Path(local(path)).is_dir()
    fs, where = filesystem(path)
    fs.invalidate_cache(where)
    return bool(fs.isdir(where))


def entries(path: Any) -> list[str]:
    """The names directly inside folder ``path`` (empty when there is none)."""
    if not is_remote(path):
        p = Path(local(path))
        return sorted(e.name for e in p.iterdir()) if p.is_dir() else []
    fs, where = filesystem(path)
    fs.invalidate_cache(where)
    try:
        listed = fs.ls(where, detail=False)
    except FileNotFoundError:
        return []
    return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in listed)


def read_bytes(path: Any) -> bytes:
    """The content of file ``path`` (:class:`FileNotFoundError` when there is none)."""
    if not is_remote(path):
        return Path(local(path)).read_bytes()
    fs, where = filesystem(path)
    return bytes(fs.cat_file(where))


def write_bytes(path: Any, data: bytes) -> None:
    """Write file ``path`` whole: a local file via a temporary name and a rename; an object
    in one request (object stores never show a half-written object)."""
    if not is_remote(path):
        out = Path(local(path))
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.partial")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            tmp.replace(out)
        finally:
            tmp.unlink(missing_ok=True)
        return
    fs, where = filesystem(path)
    fs.pipe_file(where, data)


def size(path: Any) -> int:
    """Bytes of file ``path``, or of every file under folder ``path`` (0 if none)."""
    if not is_remote(path):
        p = Path(local(path))
        if p.is_file():
            return p.stat().st_size
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    fs, where = filesystem(path)
    fs.invalidate_cache(where)
    try:
        return int(fs.du(where, total=True))
    except FileNotFoundError:
        return 0


def remove_tree(path: Any) -> None:
    """Remove folder ``path`` and everything in it."""
    if not is_remote(path):
        shutil.rmtree(local(path))
        return
    fs, where = filesystem(path)
    fs.rm(where, recursive=True)
    fs.invalidate_cache(where)


def access_error(exc: BaseException, path: Any) -> DistforestError | None:
    """The one-line error for a URL that cannot be reached, or None if ``exc`` is another
    problem: a missing fsspec package (exit 5), a refused access or a missing bucket (exit 6).
    """
    shown = display(path)
    why = " ".join(display(str(exc) or type(exc).__name__).split())
    proto = protocol(path) or "file"
    if isinstance(exc, ImportError):
        need = PACKAGES.get(proto, f"the fsspec package for {proto}://")
        return MissingDependencyError(f"{shown}: {proto}:// needs {need}; install it ({why})")
    if isinstance(exc, PermissionError):
        return StoreError(
            f"access to {shown} refused: {why}; check the credentials (for S3 "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, AWS_ENDPOINT_URL for "
            "another server; or input/output.storage_options in the pipeline)"
        )
    if isinstance(exc, FileNotFoundError) and "bucket" in why.lower():
        return StoreError(f"{shown}: no such bucket ({why}); create it or correct the URL")
    return None


def zarr_store(path: Any, *, read_only: bool = False) -> Any:
    """What to hand to ``zarr.open_*`` for ``path``: the local path, or an
    ``FsspecStore`` made from the URL and its storage options."""
    if not is_remote(path):
        return local(path)
    from zarr.storage import FsspecStore

    return FsspecStore.from_url(str(path), storage_options=options(path) or None,
                                read_only=read_only)  # fmt: skip
