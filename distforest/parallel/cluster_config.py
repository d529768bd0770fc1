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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from distforest._schema import (
    NO_DEFAULT,
    BadValue,
    Key,
    any_value,
    boolean,
    check_mapping,
    int_at_least,
    path_string,
    plain_mapping,
    string,
    string_list,
    string_mapping,
)
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
# Value checkers: return the normalised value or raise BadValue(expected)
# --------------------------------------------------------------------------


def _byte_size(value: Any, *, allow_auto: bool) -> str | int | float:
    expected = 'a size such as "4GiB" or "500MB", or a number of bytes'
    if allow_auto:
        expected += ', or "auto"'
    if isinstance(value, bool):
        raise BadValue(expected)
    if isinstance(value, int | float):
        if value <= 0:
            raise BadValue(expected)
        return value
    if not isinstance(value, str):
        raise BadValue(expected)
    if allow_auto and value.strip().lower() == "auto":
        return "auto"
    from dask.utils import parse_bytes

    try:
        if parse_bytes(value) <= 0:
            raise ValueError(value)
    except (ValueError, TypeError) as exc:
        raise BadValue(expected) from exc
    return value


def _memory_limit(value: Any) -> str | int | float:
    return _byte_size(value, allow_auto=True)


def _job_memory(value: Any) -> str | int | float:
    return _byte_size(value, allow_auto=False)


def _walltime(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadValue(
            'a quoted string such as "01:00:00"',
            "YAML reads an unquoted 1:30:00 as the number 5400: quote it",
        )
    return value


def _log_level(value: Any) -> str | bool:
    expected = f"one of {', '.join(_LOG_LEVELS)}, or false to keep every log"
    if value is False:
        return False
    if not isinstance(value, str) or value.strip().upper() not in _LOG_LEVELS:
        raise BadValue(expected)
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
        raise BadValue(expected)
    address = value.strip()
    if "://" not in address:
        address = "tcp://" + address
    scheme, host, port = _split_address(address)
    if scheme not in _ADDRESS_SCHEMES:
        raise BadValue(
            expected, f"the scheme must be one of {', '.join(s + '://' for s in _ADDRESS_SCHEMES)}"
        )
    if scheme != "ucx" and (not host or not port.isdigit()):
        raise BadValue(expected, "give both a host and a port")
    return address


# --------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------


_TLS_SCHEMA: Mapping[str, Key] = {
    "ca_file": Key(path_string, example="ca_file: /path/to/ca.pem"),
    "cert_file": Key(path_string, example="cert_file: /path/to/client-cert.pem"),
    "key_file": Key(path_string, example="key_file: /path/to/client-key.pem"),
    "require_encryption": Key(boolean),
}

# Options passed through to the remote Worker/Nanny and Scheduler of an SSH
# cluster.  A fixed list: options such as ``preload`` or ``plugins`` would
# import arbitrary modules.
_SSH_WORKER_OPTIONS: Mapping[str, Key] = {
    name: Key(any_value)
    for name in (
        "n_workers nthreads memory_limit local_directory death_timeout interface host protocol "
        "dashboard dashboard_address resources lifetime lifetime_stagger lifetime_restart"
    ).split()
}
_SSH_SCHEDULER_OPTIONS: Mapping[str, Key] = {
    name: Key(any_value)
    for name in "port host interface protocol dashboard dashboard_address idle_timeout".split()
}

_JOBQUEUE_SCHEMA: dict[str, Key] = {
    "cores": Key(int_at_least(1), example="cores: 8"),
    "memory": Key(_job_memory, example='memory: "16GiB"'),
    "processes": Key(int_at_least(1)),
    "walltime": Key(_walltime),
    "queue": Key(string),
    "account": Key(string),
    "job_extra_directives": Key(string_list()),
    "job_script_prologue": Key(string_list()),
    "local_directory": Key(string),
    "log_directory": Key(string),
    "interface": Key(string),
    "jobs": Key(int_at_least(1), default=1),
}

_SCHEMAS: Mapping[str, Mapping[str, Key]] = {
    "local": {
        "n_workers": Key(int_at_least(1)),  # default: the usable CPUs
        "threads_per_worker": Key(int_at_least(1), default=1),
        "memory_limit": Key(_memory_limit, default="auto"),
        "dashboard": Key(boolean, default=False),
        "local_directory": Key(path_string),
        "silence_logs": Key(_log_level, default="WARNING"),
    },
    "address": {
        "address": Key(_scheduler_address, required=True, example="address: tcp://10.0.0.5:8786"),
        "tls": Key(plain_mapping, schema=_TLS_SCHEMA),
    },
    "ssh": {
        "hosts": Key(
            string_list(
                2,
                "the first host runs the scheduler and the others run workers; "
                "repeat a host to run a worker next to the scheduler",
            ),
            required=True,
            example="hosts: [node0, node1, node2]",
        ),
        "connect_options": Key(plain_mapping),
        "worker_options": Key(plain_mapping, schema=_SSH_WORKER_OPTIONS),
        "scheduler_options": Key(plain_mapping, schema=_SSH_SCHEDULER_OPTIONS),
        "remote_python": Key(string),
    },
    "slurm": _JOBQUEUE_SCHEMA,
    "pbs": {**_JOBQUEUE_SCHEMA, "resource_spec": Key(string)},
    "sge": {**_JOBQUEUE_SCHEMA, "resource_spec": Key(string)},
    "lsf": _JOBQUEUE_SCHEMA,
    "kubernetes": {
        "name": Key(string),
        "image": Key(string),
        "n_workers": Key(int_at_least(0)),
        "resources": Key(plain_mapping),
        "namespace": Key(string),
        "env": Key(string_mapping),
    },
}


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


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
    options = check_mapping(
        data,
        schema,
        where=f"for cluster kind {kind!r}",
        prefix="",
        source=source,
        error=error,
        extra_allowed=("kind",),
    )
    for key, spec in schema.items():
        if key not in options and spec.default is not NO_DEFAULT:
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
