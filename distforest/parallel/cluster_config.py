"""Cluster configs: the YAML schema of every cluster kind and its validation.

A cluster YAML file is flat: a top-level ``kind:`` and, next to it, the keys
of that kind (see ``cluster_configs/`` for one commented example per kind)::

    kind: local
    n_workers: 2
    threads_per_worker: 1

Only the kinds of :data:`KINDS` exist and each maps to one fixed class in
:mod:`distforest.parallel.cluster`; a file can never name a class or module
to import (and it is read with ``yaml.safe_load``, so no Python tags either).
Every key is checked: an unknown key, a wrong type or a missing required key
raises :class:`~distforest.errors.ConfigError` naming the file, the key, the
bad value and the fix.

Nothing here imports a cluster backend, so that every config file can be
parsed on any machine; :mod:`distforest.parallel.cluster` starts and reaches
the cluster a config describes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from distforest.errors import ConfigError, DistforestError, ParameterError, did_you_mean

__all__ = [
    "KINDS",
    "ClusterConfig",
    "default_cluster_config",
    "load_cluster_config",
    "parse_cluster_config",
]

KINDS: tuple[str, ...] = ("local", "address", "ssh", "slurm", "pbs", "sge", "lsf", "kubernetes")
"""Every cluster kind a config may name."""

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_ADDRESS_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")


# --------------------------------------------------------------------------
# The config object
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterConfig:
    """A validated description of the Dask cluster to connect to.

    Build it with :func:`load_cluster_config`, :func:`parse_cluster_config` or
    :func:`default_cluster_config`, never by hand: the constructor does not
    validate.

    Attributes
    ----------
    kind : str
        One of :data:`KINDS`.
    options : Mapping[str, Any]
        The validated, read-only options of that kind (nested mappings are
        read-only too and lists are tuples).  For kind ``local`` every option
        is present with its default filled in; for the other kinds only the
        keys given, plus ``jobs`` for the batch-queue kinds.
    source : str
        The file the config was read from, ``"<default>"`` or ``"<dict>"``.
    """

    kind: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "<dict>"

    def as_dict(self) -> dict[str, Any]:
        """Return the config as plain YAML-ready data (``kind`` plus options).

        Returns
        -------
        dict
            ``{"kind": kind, **options}`` with plain dicts and lists, suitable
            for ``yaml.safe_dump`` or JSON, and accepted back by
            :func:`parse_cluster_config`.
        """
        return {"kind": self.kind, **_thaw(self.options)}


# --------------------------------------------------------------------------
# Value checkers: return the normalised value or raise _BadValue(expected)
# --------------------------------------------------------------------------


class _BadValue(Exception):
    """Raised by a checker; ``expected`` describes the accepted values."""

    def __init__(self, expected: str, hint: str = "") -> None:
        super().__init__(expected)
        self.expected = expected
        self.hint = hint


Checker = Callable[[Any], Any]


def _int_at_least(minimum: int) -> Checker:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise _BadValue(f"an integer >= {minimum}")
        return value

    return check


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _BadValue("a non-empty string")
    return value


def _path_string(value: Any) -> str:
    return os.path.expanduser(_string(value))


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _BadValue("true or false")
    return value


def _string_list(min_length: int = 0, hint: str = "") -> Checker:
    def check(value: Any) -> tuple[str, ...]:
        expected = "a list of strings" + (
            f" with at least {min_length} entries" if min_length else ""
        )
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise _BadValue(expected, hint)
        if any(not isinstance(item, str) for item in value) or len(value) < min_length:
            raise _BadValue(expected, hint)
        return tuple(value)

    return check


def _byte_size(value: Any, *, allow_auto: bool) -> str | int | float:
    expected = 'a size such as "4GiB" or "500MB", or a number of bytes'
    if allow_auto:
        expected += ', or "auto"'
    if isinstance(value, bool):
        raise _BadValue(expected)
    if isinstance(value, int | float):
        if value <= 0:
            raise _BadValue(expected)
        return value
    if not isinstance(value, str):
        raise _BadValue(expected)
    if allow_auto and value.strip().lower() == "auto":
        return "auto"
    from dask.utils import parse_bytes

    try:
        if parse_bytes(value) <= 0:
            raise ValueError(value)
    except (ValueError, TypeError) as exc:
        raise _BadValue(expected) from exc
    return value


def _memory_limit(value: Any) -> str | int | float:
    return _byte_size(value, allow_auto=True)


def _job_memory(value: Any) -> str | int | float:
    return _byte_size(value, allow_auto=False)


def _walltime(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _BadValue(
            'a quoted string such as "01:00:00"',
            "YAML reads an unquoted 1:30:00 as the number 5400: quote it",
        )
    return value


def _log_level(value: Any) -> str | bool:
    expected = f"one of {', '.join(_LOG_LEVELS)}, or false to keep every log"
    if value is False:
        return False
    if not isinstance(value, str) or value.strip().upper() not in _LOG_LEVELS:
        raise _BadValue(expected)
    return value.strip().upper()


def _split_address(address: str) -> tuple[str, str, str]:
    """Split ``"scheme://host:port"`` into scheme, host and port ("" where absent)."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    host, _, port = rest.rpartition(":")
    return scheme, host, port


def _scheduler_address(value: Any) -> str:
    expected = 'a scheduler address such as "tcp://10.0.0.5:8786" or "tls://host:8786"'
    if not isinstance(value, str) or not value.strip():
        raise _BadValue(expected)
    address = value.strip()
    if "://" not in address:
        address = "tcp://" + address
    scheme, host, port = _split_address(address)
    if scheme not in _ADDRESS_SCHEMES:
        raise _BadValue(
            expected, f"the scheme must be one of {', '.join(s + '://' for s in _ADDRESS_SCHEMES)}"
        )
    if scheme != "ucx" and (not host or not port.isdigit()):
        raise _BadValue(expected, "give both a host and a port")
    return address


def _any_value(value: Any) -> Any:
    return value


def _plain_mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _BadValue("a mapping (key: value pairs)")
    return {str(k): v for k, v in value.items()}


def _string_mapping(value: Any) -> Mapping[str, str]:
    expected = "a mapping of names to strings or numbers"
    if not isinstance(value, Mapping):
        raise _BadValue(expected)
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise _BadValue(expected)
        out[str(k)] = str(v)
    return out


# --------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------


_NO_DEFAULT = object()


@dataclass(frozen=True)
class _Key:
    """One allowed key: its checker, whether it is required, its default."""

    check: Checker
    required: bool = False
    default: Any = _NO_DEFAULT
    example: str = ""
    schema: Mapping[str, _Key] | None = None  # a nested mapping with fixed keys


_TLS_SCHEMA: Mapping[str, _Key] = {
    "ca_file": _Key(_path_string, example="ca_file: /path/to/ca.pem"),
    "cert_file": _Key(_path_string, example="cert_file: /path/to/client-cert.pem"),
    "key_file": _Key(_path_string, example="key_file: /path/to/client-key.pem"),
    "require_encryption": _Key(_boolean),
}

# Options passed through to the remote Worker/Nanny and Scheduler of an SSH
# cluster.  A fixed list: options such as ``preload`` or ``plugins`` would
# import arbitrary modules.
_SSH_WORKER_OPTIONS: Mapping[str, _Key] = {
    name: _Key(_any_value)
    for name in (
        "n_workers nthreads memory_limit local_directory death_timeout interface host protocol "
        "dashboard dashboard_address resources lifetime lifetime_stagger lifetime_restart"
    ).split()
}
_SSH_SCHEDULER_OPTIONS: Mapping[str, _Key] = {
    name: _Key(_any_value)
    for name in "port host interface protocol dashboard dashboard_address idle_timeout".split()
}

_JOBQUEUE_SCHEMA: dict[str, _Key] = {
    "cores": _Key(_int_at_least(1), example="cores: 8"),
    "memory": _Key(_job_memory, example='memory: "16GiB"'),
    "processes": _Key(_int_at_least(1)),
    "walltime": _Key(_walltime),
    "queue": _Key(_string),
    "account": _Key(_string),
    "job_extra_directives": _Key(_string_list()),
    "job_script_prologue": _Key(_string_list()),
    "local_directory": _Key(_string),
    "log_directory": _Key(_string),
    "interface": _Key(_string),
    "jobs": _Key(_int_at_least(1), default=1),
}

_SCHEMAS: Mapping[str, Mapping[str, _Key]] = {
    "local": {
        "n_workers": _Key(_int_at_least(1)),  # default: the usable CPUs
        "threads_per_worker": _Key(_int_at_least(1), default=1),
        "memory_limit": _Key(_memory_limit, default="auto"),
        "dashboard": _Key(_boolean, default=False),
        "local_directory": _Key(_path_string),
        "silence_logs": _Key(_log_level, default="WARNING"),
    },
    "address": {
        "address": _Key(_scheduler_address, required=True, example="address: tcp://10.0.0.5:8786"),
        "tls": _Key(_plain_mapping, schema=_TLS_SCHEMA),
    },
    "ssh": {
        "hosts": _Key(
            _string_list(
                2,
                "the first host runs the scheduler and the others run workers; "
                "repeat a host to run a worker next to the scheduler",
            ),
            required=True,
            example="hosts: [node0, node1, node2]",
        ),
        "connect_options": _Key(_plain_mapping),
        "worker_options": _Key(_plain_mapping, schema=_SSH_WORKER_OPTIONS),
        "scheduler_options": _Key(_plain_mapping, schema=_SSH_SCHEDULER_OPTIONS),
        "remote_python": _Key(_string),
    },
    "slurm": _JOBQUEUE_SCHEMA,
    "pbs": {**_JOBQUEUE_SCHEMA, "resource_spec": _Key(_string)},
    "sge": {**_JOBQUEUE_SCHEMA, "resource_spec": _Key(_string)},
    "lsf": _JOBQUEUE_SCHEMA,
    "kubernetes": {
        "name": _Key(_string),
        "image": _Key(_string),
        "n_workers": _Key(_int_at_least(0)),
        "resources": _Key(_plain_mapping),
        "namespace": _Key(_string),
        "env": _Key(_string_mapping),
    },
}


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


def _check_keys(
    data: Mapping[Any, Any],
    schema: Mapping[str, _Key],
    *,
    where: str,
    prefix: str,
    source: str,
    error: type[DistforestError],
    extra_allowed: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Validate ``data`` against ``schema``; return normalised values (no defaults)."""
    allowed = sorted([*extra_allowed, *schema])
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key)
        path = prefix + key
        if key in extra_allowed:
            continue
        if key not in schema:
            hint = did_you_mean(key, allowed)
            if key == "options" and not prefix:
                hint += "; put the keys of the kind at the top level, next to 'kind'"
            raise error(
                f"{source}: unknown key {path!r} {where}{hint}. Allowed keys: {', '.join(allowed)}."
            )
        spec = schema[key]
        try:
            checked = spec.check(value)
        except _BadValue as bad:
            hint = f" ({bad.hint})" if bad.hint else ""
            raise error(
                f"{source}: key {path!r} must be {bad.expected}, "
                f"got {value!r} ({type(value).__name__}){hint}."
            ) from None
        if spec.schema is not None:
            checked = _check_keys(
                checked,
                spec.schema,
                where=f"in {path!r}",
                prefix=path + ".",
                source=source,
                error=error,
            )
        out[key] = checked
    for key, spec in schema.items():
        if spec.required and key not in out:
            example = f" (for example `{spec.example}`)" if spec.example else ""
            raise error(f"{source}: missing required key {prefix + key!r} {where}{example}.")
    return out


def _available_cpus() -> int:
    """CPUs this process may use (respects affinity masks, e.g. in batch jobs)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _size_options(
    n_workers: int | None, threads_per_worker: int | None, memory_limit: str | None
) -> dict[str, Any]:
    """The worker-size arguments that were given (not None), keyed by option name."""
    sizes = {
        "n_workers": n_workers,
        "threads_per_worker": threads_per_worker,
        "memory_limit": memory_limit,
    }
    return {k: v for k, v in sizes.items() if v is not None}


def _parse(
    data: Any,
    source: str,
    *,
    base_dir: Path | None = None,
    error: type[DistforestError] = ConfigError,
) -> ClusterConfig:
    if not isinstance(data, Mapping):
        raise error(
            f"{source}: a cluster config must be a mapping with a 'kind' key, "
            f"got {type(data).__name__} ({data!r:.80}). Start from a file in cluster_configs/."
        )
    if "kind" not in data:
        raise error(
            f"{source}: missing required key 'kind'. Allowed kinds: {', '.join(KINDS)} "
            "(for example `kind: local`)."
        )
    kind = data["kind"]
    if not isinstance(kind, str) or kind not in KINDS:
        hint = did_you_mean(kind, list(KINDS)) if isinstance(kind, str) else ""
        raise error(
            f"{source}: unknown cluster kind {kind!r} at key 'kind'{hint}. "
            f"Allowed kinds: {', '.join(KINDS)}."
        )
    schema = _SCHEMAS[kind]
    options = _check_keys(
        data,
        schema,
        where=f"for cluster kind {kind!r}",
        prefix="",
        source=source,
        error=error,
        extra_allowed=("kind",),
    )
    for key, spec in schema.items():
        if key not in options and spec.default is not _NO_DEFAULT:
            options[key] = spec.default
    if kind == "local" and "n_workers" not in options:
        options["n_workers"] = _available_cpus()
    if kind == "address" and "tls" in options and base_dir is not None:
        options["tls"] = {
            k: (str(base_dir / v) if k.endswith("_file") and not os.path.isabs(v) else v)
            for k, v in options["tls"].items()
        }
    return ClusterConfig(kind=kind, options=_freeze(options), source=source)


def parse_cluster_config(data: Mapping[str, Any], source: str = "<dict>") -> ClusterConfig:
    """Validate a cluster description already loaded from YAML or built in code.

    Parameters
    ----------
    data : Mapping
        ``{"kind": <one of KINDS>, <key of that kind>: <value>, ...}``: the
        flat shape of the files in ``cluster_configs/``.
    source : str, default "<dict>"
        Where ``data`` came from; it starts every error message.

    Returns
    -------
    ClusterConfig
        The validated config, defaults of kind ``local`` filled in.

    Raises
    ------
    ConfigError
        If ``kind`` is missing or unknown, a key is unknown (the message gives
        the allowed keys and the closest one), a value has the wrong type, or
        a required key is missing.

    Examples
    --------
    >>> cfg = parse_cluster_config({"kind": "local", "n_workers": 2})
    >>> cfg.options["threads_per_worker"]
    1
    """
    return _parse(data, source)


def load_cluster_config(path: str | Path) -> ClusterConfig:
    """Read and validate a cluster YAML file.

    Parameters
    ----------
    path : str or Path
        A YAML file shaped like those in ``cluster_configs/``.  Relative TLS
        file paths (kind ``address``) are resolved against the file's folder.

    Returns
    -------
    ClusterConfig
        The validated config, with ``source`` set to ``path``.

    Raises
    ------
    ConfigError
        If the file is missing, is not valid YAML, or fails validation (see
        :func:`parse_cluster_config`).
    """
    path = Path(path).expanduser()
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"cluster config file not found: {source!r}. "
            "Copy and edit one of the examples in cluster_configs/."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read cluster config file {source!r}: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if data is None:
        raise ConfigError(f"{source}: the file is empty; it needs at least `kind: local`.")
    return _parse(data, source, base_dir=path.resolve().parent)


def default_cluster_config(
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit: str | None = None,
) -> ClusterConfig:
    """Return the config of the default cluster: a LocalCluster on loopback.

    Parameters
    ----------
    n_workers : int, optional
        Worker processes; default the number of CPUs this process may use.
    threads_per_worker : int, optional
        Threads per worker; default 1 (the tree kernels release the GIL
        through numba, but one thread per process keeps memory predictable).
    memory_limit : str, optional
        Memory limit per worker such as ``"4GiB"``; default ``"auto"``
        (system memory shared equally between the workers).

    Returns
    -------
    ClusterConfig
        Kind ``local`` with ``source="<default>"``.

    Raises
    ------
    ParameterError
        If an argument has the wrong type or value.
    """
    data: dict[str, Any] = {
        "kind": "local",
        **_size_options(n_workers, threads_per_worker, memory_limit),
    }
    return _parse(data, "<default>", error=ParameterError)
