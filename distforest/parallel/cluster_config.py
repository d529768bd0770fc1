"""Cluster files: each kind in its library's own terms, checked by introspection.

A cluster YAML file is flat: a top-level ``kind:`` and, next to it, the
keywords of that kind's class (see ``cluster_configs/`` for one commented
example per kind)::

    kind: local                 # distributed.LocalCluster
    n_workers: 2
    threads_per_worker: 1

Every keyword the class accepts works: the allowed keys are read from the
real signatures (:mod:`distforest.parallel.cluster_keys`), so a typo gets a
"did you mean" and a new library option needs no change here.  Next to them
sit distforest's own keys, kept explicit below (``kind``, ``address``,
``tls``, ``insecure``, ``jobs``, ``dashboard``, ``silence_logs``).  A
dask-jobqueue configuration file (``jobqueue: slurm: {...}``, the format of
``~/.config/dask/jobqueue.yaml``) is accepted as it is and handed to
dask-jobqueue through ``dask.config``.

Only the kinds of :data:`KINDS` exist and each maps to one fixed class; a file
can never name a class or module to import (it is read with
``yaml.safe_load``, and the keys that would load code are refused with their
reason).  Checking a file of a kind imports its library (not the cluster):
when the library is missing the error gives the ``pip install`` command.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from distforest import examples
from distforest._schema import (
    NO_DEFAULT,
    BadValue,
    Checker,
    Key,
    any_value,
    boolean,
    check_mapping,
    int_at_least,
    load_yaml,
    path_string,
    plain_mapping,
    string_list,
    yaml_problem,
)
from distforest.errors import ConfigError, DistforestError, ParameterError, did_you_mean
from distforest.parallel.cluster_keys import (
    BACKENDS,
    JOBQUEUE_KINDS,
    REFUSED,
    accepted_keys,
    jobqueue_config_keys,
)

__all__ = [
    "KINDS",
    "ClusterConfig",
    "default_cluster_config",
    "is_loopback",
    "load_cluster_config",
    "parse_cluster_config",
]

KINDS: tuple[str, ...] = ("local", "address", "ssh", *JOBQUEUE_KINDS, "kubernetes")
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
        The validated, read-only keys of the file (nested mappings are
        read-only too and lists are tuples): keywords of the kind's class and
        distforest's own keys.  For kind ``local`` the defaults are filled in;
        the batch-queue kinds always have ``jobs``; every kind but ``local``
        has ``insecure``.
    source : str
        The file the config was read from, ``"<default>"`` or ``"<dict>"``.
    jobqueue : Mapping[str, Any]
        For a dask-jobqueue configuration file: its ``jobqueue.<kind>``
        section as written (dask-jobqueue reads it through ``dask.config``);
        empty otherwise.
    """

    kind: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "<dict>"
    jobqueue: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def as_dict(self) -> dict[str, Any]:
        """Return the config as plain YAML-ready data.

        Returns
        -------
        dict
            ``{"kind": kind, **options}`` (plus ``{"jobqueue": {kind: ...}}``
            for a dask-jobqueue file) with plain dicts and lists, suitable for
            ``yaml.safe_dump`` or JSON, and accepted back by
            :func:`parse_cluster_config`.
        """
        out = {"kind": self.kind, **_thaw(self.options)}
        if self.jobqueue:
            out["jobqueue"] = {self.kind: _thaw(self.jobqueue)}
        return out


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


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address or ``localhost``) is this machine only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _dashboard(value: Any) -> bool | str:
    expected = 'true, false, or the address to serve it on such as "127.0.0.1:8787"'
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.rpartition(":")[2].isdigit():
        return value.strip()
    raise BadValue(expected, "the dashboard listens on 127.0.0.1 only unless you name an address")


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
# distforest's own keys, and value checks of well-known library keys
# --------------------------------------------------------------------------


_TLS_SCHEMA: Mapping[str, Key] = {
    "ca_file": Key(path_string, example="ca_file: /path/to/ca.pem"),
    "cert_file": Key(path_string, example="cert_file: /path/to/client-cert.pem"),
    "key_file": Key(path_string, example="key_file: /path/to/client-key.pem"),
    "require_encryption": Key(boolean),
}

_INSECURE = Key(boolean, default=False)
_JOBS = Key(int_at_least(1), default=1)

#: Keys that are distforest's, not the library's, per kind.
_OWN: Mapping[str, Mapping[str, Key]] = {
    "local": {
        "dashboard": Key(_dashboard, default=False),
        "silence_logs": Key(_log_level, default="CRITICAL"),
    },
    "address": {
        "address": Key(_scheduler_address, example="address: tcp://10.0.0.5:8786"),
        "scheduler_file": Key(path_string, example="scheduler_file: scheduler.json"),
        "tls": Key(plain_mapping, schema=_TLS_SCHEMA),
        "insecure": _INSECURE,
    },
    "ssh": {"insecure": _INSECURE},
    **{kind: {"jobs": _JOBS, "insecure": _INSECURE} for kind in JOBQUEUE_KINDS},
    "kubernetes": {"insecure": _INSECURE},
}

_HOSTS_HINT = (
    "the first host runs the scheduler and the others run workers; "
    "repeat a host to run a worker next to the scheduler"
)

#: Checks of library keys whose bad values would otherwise fail late or obscurely.
_VALUES: Mapping[str, Mapping[str, Checker]] = {
    "local": {
        "n_workers": int_at_least(1),
        "threads_per_worker": int_at_least(1),
        "memory_limit": _memory_limit,
        "local_directory": path_string,
    },
    "ssh": {"hosts": string_list(2, _HOSTS_HINT)},
    **{
        kind: {
            "cores": int_at_least(1),
            "processes": int_at_least(1),
            "memory": _job_memory,
            "walltime": _walltime,
            "job_extra_directives": string_list(),
            "job_script_prologue": string_list(),
        }
        for kind in JOBQUEUE_KINDS
    },
    "kubernetes": {"n_workers": int_at_least(0)},
}

_REQUIRED: Mapping[str, Mapping[str, str]] = {"ssh": {"hosts": "hosts: [node0, node1, node2]"}}

#: Defaults distforest gives a LocalCluster (n_workers: the usable CPUs).
_LOCAL_DEFAULTS: Mapping[str, Any] = {"threads_per_worker": 1, "memory_limit": "auto"}


def _schema(kind: str) -> dict[str, Key]:
    """Own keys, plus every key the library of ``kind`` accepts (introspected)."""
    schema: dict[str, Key] = dict(_OWN[kind])
    if kind == "address":
        return schema
    keys, nested = accepted_keys(kind)
    values, required = _VALUES.get(kind, {}), _REQUIRED.get(kind, {})
    for key in sorted(keys):
        if key in schema:
            continue
        sub = nested.get(key)
        schema[key] = Key(
            values.get(key, plain_mapping if sub is not None else any_value),
            required=key in required,
            example=required.get(key, ""),
            default=_LOCAL_DEFAULTS.get(key, NO_DEFAULT) if kind == "local" else NO_DEFAULT,
            schema=None if sub is None else {k: Key(any_value) for k in sorted(sub)},
        )
    return schema


def _refuse(data: Mapping[Any, Any], kind: str, source: str, error: type[DistforestError]) -> None:
    """Refuse the library keys a file may not give (:data:`REFUSED`), nested ones too."""
    _, nested = accepted_keys(kind) if kind != "address" else (None, {})
    where = [("", data)] + [
        (f"{name}.", data[name]) for name in nested if isinstance(data.get(name), Mapping)
    ]
    for prefix, mapping in where:
        for key in mapping:
            if str(key) in REFUSED and not (kind == "kubernetes" and key == "env"):
                raise error(
                    f"{source}: key {prefix + str(key)!r} is accepted by the {kind!r} cluster "
                    f"class but not from a cluster file: {REFUSED[str(key)]}. Remove it."
                )


def _refuse_remote_scheduler_file(
    data: Mapping[Any, Any], kind: str, source: str, error: type[DistforestError]
) -> None:
    """An SSH cluster's workers may not wait for a scheduler file.

    They would wait for it on their hosts, for ever, and SSHCluster with them:
    distforest cannot bound that wait.  Its workers join its own scheduler.
    """
    options = data.get("worker_options")
    if kind == "ssh" and isinstance(options, Mapping) and "scheduler_file" in options:
        raise error(
            f"{source}: key 'worker_options.scheduler_file' is refused: the SSH cluster's "
            "workers join the scheduler it starts, and a worker waiting on its host for a file "
            "would hang the start. Remove it; to reach a scheduler that writes a scheduler file, "
            "use `kind: address` with `scheduler_file:`."
        )


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


def _parse_jobqueue(
    data: Mapping[Any, Any], source: str, error: type[DistforestError]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A dask-jobqueue configuration file: the chosen section, checked by its own keys."""
    sections = data["jobqueue"]
    kinds = [k for k in sections if k in JOBQUEUE_KINDS] if isinstance(sections, Mapping) else []
    kind = data.get("kind")
    if kind is None and len(kinds) == 1:
        kind = kinds[0]
    if not isinstance(kind, str) or kind not in kinds:
        found = list(sections) if isinstance(sections, Mapping) else sections
        raise error(
            f"{source}: 'jobqueue' must hold the section of one scheduler distforest can use "
            f"({', '.join(JOBQUEUE_KINDS)}), found {found!r}; "
            "with several sections, add `kind: slurm` (for example) next to 'jobqueue'."
        )
    section = sections[kind]
    if not isinstance(section, Mapping):
        raise error(f"{source}: 'jobqueue.{kind}' must be a mapping, got {section!r}.")
    allowed = jobqueue_config_keys(kind)
    for raw in section:
        key = str(raw).replace("_", "-")
        if key not in allowed:
            raise error(
                f"{source}: unknown key 'jobqueue.{kind}.{raw}' of dask-jobqueue's configuration"
                f"{did_you_mean(key, allowed)}. Allowed keys: {', '.join(sorted(allowed))}."
            )
    own = {k: v for k, v in data.items() if k not in ("jobqueue", "kind")}
    options = check_mapping(
        own, _OWN[kind], where="next to 'jobqueue'", prefix="", source=source, error=error
    )
    return {"kind": kind, **options}, {str(k): v for k, v in section.items()}


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
    jobqueue: dict[str, Any] = {}
    if "jobqueue" in data:
        data, jobqueue = _parse_jobqueue(data, source, error)
    if "kind" not in data:
        raise error(
            f"{source}: missing required key 'kind'. Allowed kinds: {', '.join(KINDS)} "
            "(for example `kind: local`), or a dask-jobqueue file (`jobqueue: slurm: ...`)."
        )
    kind = data["kind"]
    if not isinstance(kind, str) or kind not in KINDS:
        hint = did_you_mean(kind, list(KINDS)) if isinstance(kind, str) else ""
        raise error(
            f"{source}: unknown cluster kind {kind!r} at key 'kind'{hint}. "
            f"Allowed kinds: {', '.join(KINDS)}."
        )
    _refuse(data, kind, source, error)
    _refuse_remote_scheduler_file(data, kind, source, error)
    schema = _schema(kind)
    owner = "distforest" if kind == "address" else BACKENDS[kind].attr
    options = check_mapping(
        data,
        schema,
        where=f"for cluster kind {kind!r} ({owner} and distforest's own keys)",
        prefix="",
        source=source,
        error=error,
        extra_allowed=("kind",),
    )
    for key, spec in schema.items():
        if key not in options and spec.default is not NO_DEFAULT:
            options[key] = spec.default
    if kind == "local":
        options.setdefault("n_workers", _available_cpus())
        if "dashboard_address" in options and options["dashboard"] is False:
            if "dashboard" in data:
                raise error(
                    f"{source}: 'dashboard: false' and 'dashboard_address' contradict each other; "
                    "give `dashboard: <address>` alone to serve it there."
                )
            options["dashboard"] = options.pop("dashboard_address")
    if kind == "address":
        _check_one_address(options, source, error)
        if "address" in options:
            _check_transport(options, source, error)
        if "scheduler_file" in options and base_dir is not None:
            options["scheduler_file"] = str(base_dir / options["scheduler_file"])
        if "tls" in options and base_dir is not None:
            options["tls"] = {
                k: (str(base_dir / v) if k.endswith("_file") and not os.path.isabs(v) else v)
                for k, v in options["tls"].items()
            }
    return ClusterConfig(
        kind=kind, options=_freeze(options), source=source, jobqueue=_freeze(jobqueue)
    )


def _check_one_address(
    options: Mapping[str, Any], source: str, error: type[DistforestError]
) -> None:
    """Kind ``address`` names its scheduler once: ``address`` or ``scheduler_file``."""
    given = [key for key in ("address", "scheduler_file") if key in options]
    if len(given) == 1:
        return
    problem = (
        "gives both 'address' and 'scheduler_file': keep one"
        if given
        else "missing required key 'address' (or 'scheduler_file')"
    )
    raise error(
        f"{source}: {problem}, e.g. `address: tcp://10.0.0.5:8786`, or "
        "`scheduler_file: scheduler.json` (the file `dask scheduler --scheduler-file` "
        "writes; waited for up to distforest.cluster-timeout)."
    )


def _check_transport(options: Mapping[str, Any], source: str, error: type[DistforestError]) -> None:
    """Plain tcp:// off this machine only with ``insecure: true``."""
    scheme, host, _ = _split_address(options["address"])
    if scheme == "tcp" and not is_loopback(host) and not options["insecure"]:
        raise error(
            f"{source}: the scheduler address {options['address']!r} is plain tcp:// to another "
            "machine: anyone on the network could read the data or send results distforest "
            "would unpickle. Use tls:// with a 'tls' block (ca_file, cert_file, key_file), or "
            "add `insecure: true` if the network is trusted."
        )


def check_worker_size(key: str, value: Any) -> Any:
    """A LocalCluster's ``n_workers``, ``threads_per_worker`` or ``memory_limit`` checked as
    a cluster file's: the command line's ``--workers``, ``--threads`` and ``--memory-limit``
    accept and refuse the same values (:class:`~distforest.errors.ParameterError`)."""
    try:
        return _VALUES["local"][key](value)
    except BadValue as exc:
        raise ParameterError(f"{key} must be {exc.expected}, got {value!r}") from None


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
        A YAML file shaped like those in ``cluster_configs/``, or the bare name
        of a shipped one (``"local"``, ``"slurm"``, ...; see
        :mod:`distforest.examples`) when no such file exists here.  Relative TLS
        and scheduler file paths (kind ``address``) are resolved against the
        file's folder.

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
    shipped = None if path.exists() else examples.find("cluster_configs", str(path))
    path = shipped or path
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        from distforest.errors import did_you_mean

        known = examples.names("cluster_configs")
        raise ConfigError(
            f"cluster config file not found: {source!r}{did_you_mean(source, known)}. Give a "
            f"file, or the name of a shipped one ({', '.join(known)}); `distforest examples "
            "DIR` copies them for editing."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read cluster config file {source!r}: {exc}") from exc
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {yaml_problem(exc)}") from exc
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
