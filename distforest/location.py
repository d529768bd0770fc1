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

Every object-storage protocol (S3, Google Cloud Storage, Azure) is opened with
connect and read timeouts from the distforest settings (:func:`deadlines`), and
what fails to reach it is one line (:func:`access_error`).  An output that is
already there is refused in one wording for every command, naming the store of
the run that wrote it (:func:`existing_output`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from distforest.errors import DistforestError, MissingDependencyError, OutputExists, StoreError

#: Protocols that are the local file system.
LOCAL_PROTOCOLS = frozenset({"file", "local"})
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@")
#: ``scheme://user:password@`` anywhere in a text (the credentials part of a URL).
_USERINFO_ANYWHERE = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^/@\s'\"<>]+)@")
#: Option names (fsspec, botocore, gcsfs, adlfs, signed URLs) whose values are secrets.
SECRET_OPTIONS = frozenset({
    "key", "secret", "token", "password", "passwd", "access_key", "secret_key", "session_token",
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "account_key",
    "sas_token", "client_secret", "connection_string", "credential", "credentials",
    "security_token", "x-amz-security-token", "x-amz-credential", "x-amz-signature",
    "signature", "awsaccesskeyid", "sig",
})  # fmt: skip
_NAMES = "|".join(sorted((re.escape(n) for n in SECRET_OPTIONS), key=len, reverse=True))
#: ``'name': 'value'`` (a dict's repr, JSON) and ``name=value`` (query strings, keywords).
_QUOTED_OPTION = re.compile(rf"""(?i)(['"]({_NAMES})['"]\s*:\s*)(['"])(.*?)\3""")
_ASSIGNED_OPTION = re.compile(rf"""(?i)(\b({_NAMES})=)(['"]?)([^\s'"&,;)}}]+)\3""")
#: Secret values seen by this process (storage options, a URL's user and password).
_SECRETS: set[str] = set()
HIDDEN = "***"


def remember_secrets(value: Any) -> None:
    """Remember the secrets in ``value`` so that :func:`scrub` removes them wherever they
    appear: the values of :data:`SECRET_OPTIONS` in a mapping (nested too), and the user
    and password of every URL in a text."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if str(key).lower() in SECRET_OPTIONS and isinstance(inner, (str, bytes)):
                text = inner.decode(errors="replace") if isinstance(inner, bytes) else inner
                if len(text) >= 6:  # (a shorter one would hide common words)
                    _SECRETS.add(text)
            else:
                remember_secrets(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            remember_secrets(inner)
    elif isinstance(value, str):
        for match in _USERINFO_ANYWHERE.finditer(value):
            for part in match.group(2).split(":"):
                if len(part) >= 6:
                    from urllib.parse import unquote

                    _SECRETS.update({part, unquote(part)})


def scrub(text: str) -> str:
    """``text`` without secrets: the one scrubber of messages, logs, reports, store
    attributes and tracebacks (third-party exception text included).

    Removes a URL's ``user:password@``, the values of :data:`SECRET_OPTIONS`
    written ``'name': 'value'`` or ``name=value``, and every secret
    :func:`remember_secrets` has seen.
    """
    if not text:
        return text
    text = _USERINFO_ANYWHERE.sub(r"\1", text)
    text = _QUOTED_OPTION.sub(lambda m: f"{m.group(1)}{m.group(3)}{HIDDEN}{m.group(3)}", text)
    text = _ASSIGNED_OPTION.sub(lambda m: f"{m.group(1)}{m.group(3)}{HIDDEN}{m.group(3)}", text)
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def is_secret_option(name: str) -> bool:
    """Whether option ``name`` (``a.b.key``: its last part) holds a secret, or lies within
    ``storage_options`` (whose values are never shown)."""
    parts = str(name).lower().split(".")
    return parts[-1] in SECRET_OPTIONS or "storage_options" in parts


class ScrubbedStream:
    """A text stream writing through :func:`scrub` (the command line's stdout and stderr:
    its messages, log lines, warnings and tracebacks)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(scrub(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class Location(str):
    """A URL (the string itself) with the fsspec ``storage_options`` to reach it.

    The options are not part of the string: printing, hashing, comparing or
    JSON-encoding a Location sees the URL only.
    """

    storage_options: dict[str, Any]

    def __new__(cls, url: str, storage_options: dict[str, Any] | None = None) -> Location:
        self = super().__new__(cls, url)
        self.storage_options = dict(storage_options or {})
        remember_secrets(self.storage_options)
        remember_secrets(url)
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


def open_options(path: Any) -> dict[str, Any]:
    """What fsspec opens ``path`` with: its :func:`options` over the deadlines of its
    object storage (:func:`deadlines`; the user's own values win)."""
    return _merged(deadlines(protocol(path) if isinstance(path, str) else None), options(path))


#: Each object-storage protocol's fsspec package (``s3fs``, ``gcsfs``, ``adlfs``): the one
#: whose storage options :func:`deadlines` fills, for every protocol it serves.
STORAGE_LIBRARIES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs",
                     "abfs": "adlfs", "abfss": "adlfs", "az": "adlfs"}  # fmt: skip
#: How to install each package, for the message of a missing one.
INSTALL = {"s3fs": "s3fs (pip install 'distforest[s3]')", "gcsfs": "gcsfs (pip install gcsfs)",
           "adlfs": "adlfs (pip install adlfs)"}  # fmt: skip
#: Where each package finds its server and its credentials, for messages.
ENDPOINT_HINT = {
    "s3fs": "AWS_ENDPOINT_URL or storage_options.endpoint_url",
    "gcsfs": "STORAGE_EMULATOR_HOST or storage_options.endpoint_url",
    "adlfs": "storage_options.account_name or connection_string",
}
CREDENTIALS_HINT = {
    "s3fs": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or key/secret "
            "in storage_options",
    "gcsfs": "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file (or run "
             "gcloud auth application-default login), or token in storage_options",
    "adlfs": "set AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN or "
             "AZURE_STORAGE_CONNECTION_STRING, or account_key/sas_token in storage_options",
}  # fmt: skip
#: Protocols given connect and read timeouts and bounded retries.
DEADLINE_PROTOCOLS = frozenset(STORAGE_LIBRARIES)
#: Attempts of one request gcsfs makes (its own, fixed), and the most it waits between two.
GCSFS_ATTEMPTS, GCSFS_BACKOFF = 6, 32.0


def deadlines(proto: str | None) -> dict[str, Any]:
    """The storage options that bound every request to object storage of ``proto``.

    From the settings ``distforest.storage-connect-timeout``,
    ``storage-read-timeout`` and ``storage-attempts``, in the words of the
    protocol's fsspec package (empty for other protocols):

    - s3fs (``s3://``): botocore's ``connect_timeout``, ``read_timeout`` and
      attempts per request (``config_kwargs``; s3fs's own retries are turned
      off in :func:`filesystem`);
    - gcsfs (``gs://``): ``requests_timeout``, the timeout of every request
      (aiohttp's: connecting, and waiting for the next bytes of an answer);
      gcsfs retries a timed-out request itself, a fixed number of times
      (:data:`GCSFS_ATTEMPTS`);
    - adlfs (``abfs://``, ``az://``): ``connection_timeout`` and
      ``read_timeout`` of every blob transfer; the Azure SDK's retry policy
      makes the attempts.
    """
    library = STORAGE_LIBRARIES.get(proto or "")
    if library is None:
        return {}
    from distforest import settings

    connect = settings.get("storage-connect-timeout")
    read = settings.get("storage-read-timeout")
    if library == "gcsfs":
        try:
            from aiohttp import ClientTimeout  # gcsfs's HTTP client
        except ImportError:  # no aiohttp, no gcsfs: the missing package is the message
            return {}
        return {"requests_timeout": ClientTimeout(sock_connect=connect, sock_read=read)}
    if library == "adlfs":
        return {"connection_timeout": connect, "read_timeout": read}
    attempts = max(1, int(settings.get("storage-attempts")))
    return {
        "config_kwargs": {
            "connect_timeout": connect,
            "read_timeout": read,
            "retries": {"max_attempts": attempts, "mode": "standard"},
        },
    }


def request_deadline(path: Any) -> float | None:
    """Seconds one request to ``path``'s object store may take in all (every attempt of it),
    for calls that take a ``timeout``; None where no deadline is set (:func:`deadlines`) or
    the attempts are not distforest's to count (adlfs)."""
    proto = protocol(path) if isinstance(path, str) else None
    if proto not in DEADLINE_PROTOCOLS:
        return None
    from distforest import settings

    each = float(settings.get("storage-connect-timeout") + settings.get("storage-read-timeout"))
    library = STORAGE_LIBRARIES[str(proto)]
    if library == "gcsfs":
        return GCSFS_ATTEMPTS * (each + GCSFS_BACKOFF) + 1
    if library == "adlfs":  # the Azure SDK's retry policy: its attempts are not known here
        return None
    return max(1, int(settings.get("storage-attempts"))) * each + 1


def _merged(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` over ``base``, mappings merged key by key (the user's values win)."""
    out = dict(base)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def why(exc: BaseException) -> str:
    """The text of ``exc`` (a third party's too) in one line, scrubbed of secrets."""
    return " ".join(scrub(str(exc) or type(exc).__name__).split())


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen and len(seen) < 20:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return seen


def is_deadline(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a timeout."""
    return _named(exc, "Timeout")


def _named(exc: BaseException, *names: str) -> bool:
    return any(n in cls.__name__ for e in _chain(exc) for cls in type(e).__mro__ for n in names)


def display(path: Any) -> str:
    """``path`` as text for messages: a URL loses any ``user:password@`` part."""
    return scrub(_USERINFO.sub(r"\1", str(path)))


def resolved(path: Any) -> str:
    """``path`` as outputs are reported: a local path made absolute, a URL as it is."""
    if is_remote(path):
        return str(path)
    return str(Path(local(path)).resolve())


def filesystem(path: str) -> tuple[Any, str]:
    """The fsspec file system of URL ``path`` and the path within it."""
    from fsspec.core import url_to_fs

    fs, where = url_to_fs(str(path), **open_options(path))
    if STORAGE_LIBRARIES.get(protocol(path) or "") == "s3fs" and hasattr(fs, "retries"):
        fs.retries = 1  # botocore's attempts (distforest.storage-attempts) are the retries
    return fs, where


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


#: Exception names (of botocore, google-auth, gcsfs, azure-core and aiohttp) that mean the
#: credentials are missing or refused.
CREDENTIAL_ERRORS = ("NoCredentialsError", "PartialCredentialsError", "InvalidAccessKeyId",
                     "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                     "DefaultCredentialsError", "RefreshError", "ClientAuthenticationError",
                     "CredentialUnavailableError")  # fmt: skip
#: Exception names that mean the server could not be reached at all.
CONNECTION_ERRORS = ("EndpointConnectionError", "ConnectionRefused", "ClientConnectorError",
                     "ServiceRequestError")  # fmt: skip


def access_error(exc: BaseException, path: Any) -> DistforestError | None:
    """The one-line error for a URL that cannot be reached, or None if ``exc`` is another
    problem: a missing fsspec package (exit 5); no answer within the deadline, no server,
    missing or refused credentials, a missing bucket (exit 6).  The message names the URL
    (without credentials), the setting or variable to change, and the package's words.
    """
    shown = display(path)
    reason = why(exc)
    proto = protocol(path) or "file"
    library = STORAGE_LIBRARIES.get(proto, "")
    if isinstance(exc, ImportError):
        need = INSTALL.get(library, library or f"the fsspec package for {proto}://")
        return MissingDependencyError(f"{shown}: {proto}:// needs {need}; install it ({reason})")
    endpoint = ENDPOINT_HINT.get(library, "the URL or storage_options")
    if library and is_deadline(exc):
        from distforest import settings

        attempts = {"gcsfs": f"{GCSFS_ATTEMPTS} attempts (gcsfs's own)",
                    "adlfs": "the Azure SDK's own attempts"}.get(
            library, f"distforest.storage-attempts={settings.get('storage-attempts')}")  # fmt: skip
        return StoreError(
            f"{shown}: no answer from the object store within the deadline "
            f"(distforest.storage-connect-timeout={settings.get('storage-connect-timeout'):g} "
            f"s, distforest.storage-read-timeout={settings.get('storage-read-timeout'):g} s, "
            f"{attempts}; {reason}): check the endpoint ({endpoint}) or raise these settings"
        )
    if _named(exc, *CONNECTION_ERRORS):
        return StoreError(f"{shown}: cannot connect to the object store ({reason}); check the "
                          f"endpoint ({endpoint}) and that the server runs")  # fmt: skip
    credentials = CREDENTIALS_HINT.get(library, "check the credentials in storage_options")
    if _named(exc, *CREDENTIAL_ERRORS):
        return StoreError(f"{shown}: no usable credentials ({reason}); {credentials}")
    if isinstance(exc, PermissionError) or (library and reason.startswith("Forbidden")):
        return StoreError(
            f"access to {shown} refused: {reason}; check the credentials: {credentials} (or "
            "input/output.storage_options in the pipeline)"
        )
    if isinstance(exc, FileNotFoundError) and "bucket" in reason.lower():
        return StoreError(f"{shown}: no such bucket ({reason}); create it or correct the URL")
    return None


#: The run report beside a run's outputs (written by :mod:`distforest.jobs.report`): it
#: names the run's store and the files its stages wrote.
RUN_REPORT = "report.json"


def same_file(a: Any, b: Any) -> bool:
    """Whether two paths or URLs name the same file (local paths: after links)."""
    if is_remote(a) or is_remote(b):
        return display(a).rstrip("/") == display(b).rstrip("/")
    return os.path.realpath(local(a)) == os.path.realpath(local(b))


def written_by(path: Any) -> str | None:
    """The store of the run that wrote output ``path``, as the run report beside it records
    (the report files themselves, or a file one of its stages wrote); None if not known."""
    report = join(parent(path), RUN_REPORT)
    try:
        data = json.loads(read_bytes(report))
    except Exception:  # no report, not JSON, not reachable: nothing to tell
        return None
    if not isinstance(data, dict) or not isinstance(data.get("store"), str):
        return None
    stages = data.get("stages")
    stages = stages if isinstance(stages, dict) else {}
    files = [f for stage in stages.values() if isinstance(stage, dict)
             for f in (stage.get("outputs") or {}).values() if isinstance(f, str)]  # fmt: skip
    ours = name(path) in (RUN_REPORT, "report.md") or any(same_file(path, f) for f in files)
    return str(data["store"]) if ours else None


def existing_output(path: Any) -> OutputExists:
    """The one refusal of an output that already exists (exit 6), for every command and
    writer: names the path, the store of the run that wrote it when its report says so
    (:func:`written_by`), and how to replace it."""
    store = written_by(path)
    return OutputExists(
        display(path), f" (written by the run of the store {store!r})" if store else ""
    )


def zarr_store(path: Any, *, read_only: bool = False) -> Any:
    """What to hand to ``zarr.open_*`` for ``path``: the local path, or an
    ``FsspecStore`` made from the URL and its storage options."""
    if not is_remote(path):
        return local(path)
    from zarr.storage import FsspecStore

    return FsspecStore.from_url(str(path), storage_options=open_options(path) or None,
                                read_only=read_only)  # fmt: skip
