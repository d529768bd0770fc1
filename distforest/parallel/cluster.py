"""Connect to a Dask cluster: a LocalCluster by default, or one described in YAML.

The cluster YAML files, their validation and :class:`ClusterConfig` live in
:mod:`distforest.parallel.cluster_config`; this module starts or reaches the
cluster a config describes.  The config names (:data:`KINDS`,
:class:`ClusterConfig`, :func:`load_cluster_config`,
:func:`parse_cluster_config`, :func:`default_cluster_config`) are re-exported
here, so ``from distforest.parallel.cluster import ...`` reaches all of them.

Every kind maps to one fixed class below; a config can never name a class or
module to import.  Optional backends are imported lazily, only when a cluster
of that kind is started, so that every config file can be parsed on any
machine.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distforest.errors import (
    ClusterError,
    ConfigError,
    DistforestError,
    MissingDependencyError,
    ParameterError,
)
from distforest.parallel.cluster_config import (
    KINDS,
    ClusterConfig,
    _parse,
    _size_options,
    _split_address,
    _thaw,
    default_cluster_config,
    load_cluster_config,
    parse_cluster_config,
)

if TYPE_CHECKING:
    import distributed

__all__ = [
    "KINDS",
    "ClusterConfig",
    "connect",
    "default_cluster_config",
    "load_cluster_config",
    "parse_cluster_config",
    "use_client",
]

logger = logging.getLogger(__name__)

_JOBQUEUE_KINDS = ("slurm", "pbs", "sge", "lsf")


# --------------------------------------------------------------------------
# The fixed table of backends: the only modules this file ever imports lazily
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Backend:
    module: str  # module holding the cluster class
    attr: str  # cluster class (or factory) name in that module
    needs: str | None = None  # optional module that must import, or None
    package: str | None = None  # pip package providing it
    extra: str | None = None  # distforest extra installing it


_BACKENDS: Mapping[str, _Backend] = {
    "local": _Backend("distributed", "LocalCluster"),
    "ssh": _Backend("distributed.deploy.ssh", "SSHCluster", "asyncssh", "asyncssh", "ssh"),
    "slurm": _Backend(
        "dask_jobqueue", "SLURMCluster", "dask_jobqueue", "dask-jobqueue", "jobqueue"
    ),
    "pbs": _Backend("dask_jobqueue", "PBSCluster", "dask_jobqueue", "dask-jobqueue", "jobqueue"),
    "sge": _Backend("dask_jobqueue", "SGECluster", "dask_jobqueue", "dask-jobqueue", "jobqueue"),
    "lsf": _Backend("dask_jobqueue", "LSFCluster", "dask_jobqueue", "dask-jobqueue", "jobqueue"),
    "kubernetes": _Backend(
        "dask_kubernetes.operator",
        "KubeCluster",
        "dask_kubernetes.operator",
        "dask-kubernetes",
        "kubernetes",
    ),
}


def _cluster_class(kind: str) -> Any:
    """Import and return the cluster class of ``kind`` from the fixed table."""
    backend = _BACKENDS[kind]
    if backend.needs is not None:
        try:
            importlib.import_module(backend.needs)
        except ImportError as exc:
            raise MissingDependencyError(
                f"cluster kind {kind!r} needs {backend.package}, which cannot be imported "
                f"({exc}): pip install 'distforest[{backend.extra}]'"
            ) from exc
    return getattr(importlib.import_module(backend.module), backend.attr)


# --------------------------------------------------------------------------
# Starting clusters
# --------------------------------------------------------------------------


def _local_kwargs(opts: Mapping[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "n_workers": opts["n_workers"],
        "threads_per_worker": opts["threads_per_worker"],
        "processes": True,
        "host": "127.0.0.1",
        # TLS with credentials made for this run: another local user cannot connect
        # to the scheduler or the workers (and so cannot run code as this user).
        "security": True,
        # dask always starts an HTTP server on the scheduler; it gets a random
        # loopback port, and (see _start_local) no routes when the dashboard is off
        "dashboard_address": "127.0.0.1:0",
        "scheduler_kwargs": {"dashboard": bool(opts["dashboard"])},
        "silence_logs": (getattr(logging, opts["silence_logs"]) if opts["silence_logs"] else False),
    }
    # "auto" is left to LocalCluster, which then shares memory between workers.
    if opts["memory_limit"] != "auto":
        kwargs["memory_limit"] = opts["memory_limit"]
    if "local_directory" in opts:
        kwargs["local_directory"] = opts["local_directory"]
    return kwargs


def _jobqueue_kwargs(kind: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in opts.items() if k != "jobs"}
    # SGE and LSF call the accounting string "project" (passed as -P).
    if kind in ("sge", "lsf") and "account" in kwargs:
        kwargs["project"] = kwargs.pop("account")
    return kwargs


# Each key of the ``tls`` block and the ``Security`` argument it sets.
_SECURITY_ARGS: Mapping[str, str] = {
    "ca_file": "tls_ca_file",
    "cert_file": "tls_client_cert",
    "key_file": "tls_client_key",
    "require_encryption": "require_encryption",
}


def _security(config: ClusterConfig) -> Any:
    """``distributed.security.Security`` for the ``tls`` block, or None."""
    tls = config.options.get("tls")
    if not tls:
        return None
    for key in ("ca_file", "cert_file", "key_file"):
        if key in tls and not os.path.isfile(tls[key]):
            raise ConfigError(
                f"{config.source}: key 'tls.{key}' names a file that does not exist: {tls[key]!r}."
            )
    from distributed.security import Security

    kwargs = {arg: tls[key] for key, arg in _SECURITY_ARGS.items() if key in tls}
    try:
        return Security(**kwargs)
    except Exception as exc:
        raise ConfigError(f"{config.source}: invalid 'tls' settings: {exc}") from exc


def _start_cluster(config: ClusterConfig) -> Any:
    """Create the cluster object for every kind except ``address``."""
    kind, opts = config.kind, _thaw(config.options)
    cls = _cluster_class(kind)
    try:
        if kind == "local":
            return _start_local(cls, _local_kwargs(opts))
        if kind in ("ssh", "kubernetes"):
            return cls(**opts)
        if kind in _JOBQUEUE_KINDS:
            cluster = cls(**_jobqueue_kwargs(kind, opts))
            try:
                cluster.scale(jobs=opts["jobs"])
            except BaseException:
                cluster.close()
                raise
            return cluster
    except DistforestError:
        raise
    except Exception as exc:
        raise ClusterError(
            f"could not start the {kind!r} cluster described by {config.source}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"no starter for cluster kind {kind!r}")  # pragma: no cover


def _start_local(cls: Any, kwargs: dict[str, Any], attempts: int = 2) -> Any:
    """Start a LocalCluster, once more if a worker died while it started.

    A worker process killed during start-up (the OOM killer, an operator)
    makes the whole start fail; a nightly run should not fail for that.
    """
    import dask

    routes: dict[str, Any] = {} if kwargs.get("scheduler_kwargs", {}).get("dashboard", True) else {
        "distributed.scheduler.http.routes": []  # dashboard off: the HTTP server serves nothing
    }  # fmt: skip
    for attempt in range(1, attempts + 1):
        try:
            with dask.config.set(routes):
                return cls(**kwargs)
        except Exception as exc:
            if attempt == attempts:
                raise
            logger.warning("the local cluster failed to start (%s); trying again", exc)
    raise AssertionError("unreachable")  # pragma: no cover


def _connect_client(target: Any, address: str, timeout: float, security: Any) -> Any:
    from distributed import Client

    try:
        return Client(target, timeout=timeout, security=security)
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        probe = _probe_tcp(address, min(timeout, 2.0))
        if probe:
            reason = f"{reason} ({probe})"
        raise ClusterError(
            f"could not reach the Dask scheduler at {address}: {reason}; "
            "check the address, that the scheduler is running, and firewalls"
        ) from exc


def _probe_tcp(address: str, timeout: float) -> str:
    """Say why a plain TCP connection to ``address`` fails, or "" if it works."""
    scheme, host, port = _split_address(address)
    if scheme not in ("tcp", "tls") or not port.isdigit():
        return ""
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return ""
    except OSError as exc:
        return f"TCP connection to {host}:{port}: {exc.strerror or exc}"


def _close_quietly(obj: Any, what: str) -> None:
    try:
        obj.close()
    except Exception as exc:  # never hide the caller's own exception
        logger.warning("closing the Dask %s failed: %s", what, exc)


def _resolve(
    scheduler: str | None,
    cluster: str | Path | ClusterConfig | None,
    n_workers: int | None,
    threads_per_worker: int | None,
    memory_limit: str | None,
) -> ClusterConfig:
    if scheduler is not None and cluster is not None:
        raise ParameterError(
            f"give either scheduler={scheduler!r} or cluster={str(cluster)!r}, not both: "
            "scheduler is shorthand for a cluster config of kind 'address'."
        )
    if scheduler is not None:
        config = _parse(
            {"kind": "address", "address": scheduler}, "scheduler", error=ParameterError
        )
    elif cluster is None:
        return default_cluster_config(n_workers, threads_per_worker, memory_limit)
    elif isinstance(cluster, ClusterConfig):
        config = cluster
    elif isinstance(cluster, str | os.PathLike):
        config = load_cluster_config(cluster)
    else:
        raise ParameterError(
            "cluster must be a path to a cluster YAML file or a ClusterConfig, "
            f"got {cluster!r} ({type(cluster).__name__})."
        )

    overrides = _size_options(n_workers, threads_per_worker, memory_limit)
    if not overrides:
        return config
    accepted = {"local": set(overrides), "kubernetes": {"n_workers"}}.get(config.kind, set())
    rejected = sorted(set(overrides) - accepted)
    if rejected:
        raise ParameterError(
            f"{', '.join(rejected)} cannot override a cluster of kind {config.kind!r} "
            f"({config.source}); set the size in the cluster config file instead."
        )
    return _parse({**config.as_dict(), **overrides}, config.source, error=ParameterError)


@contextlib.contextmanager
def connect(
    *,
    scheduler: str | None = None,
    cluster: str | Path | ClusterConfig | None = None,
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit: str | None = None,
    timeout: float = 10.0,
) -> Iterator[distributed.Client]:
    """Connect to (and, if needed, start) a Dask cluster for the ``with`` block.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler, e.g. ``"tcp://10.0.0.5:8786"``:
        shorthand for a config of kind ``address``.
    cluster : str, Path or ClusterConfig, optional
        A cluster YAML file (see ``cluster_configs/``) or a loaded config.
        Give at most one of ``scheduler`` and ``cluster``; with neither, a
        LocalCluster on 127.0.0.1 is started (:func:`default_cluster_config`).
    n_workers, threads_per_worker, memory_limit : optional
        Override the size of a ``local`` cluster (``n_workers`` also of a
        ``kubernetes`` one).  Other kinds take their size from the file.
    timeout : float, default 10.0
        Seconds to wait for the scheduler to answer.

    Yields
    ------
    distributed.Client
        A client, also set as the default Dask scheduler inside the block.
        On exit (normal or by exception) the client is closed, and so is
        the cluster if this function started it.

    Raises
    ------
    ParameterError
        Both ``scheduler`` and ``cluster`` given, or a bad override.
    ConfigError
        The cluster file is invalid.
    MissingDependencyError
        The kind needs an optional package that is not installed; the message
        gives the ``pip install 'distforest[...]'`` command.
    ClusterError
        The scheduler could not be reached within ``timeout`` or the cluster
        failed to start.

    Notes
    -----
    Local workers are separate processes started with ``spawn``: a script
    using this must guard its entry point with ``if __name__ == "__main__":``.
    Batch-queue kinds (slurm, pbs, sge, lsf) submit ``jobs`` jobs and return
    at once; tasks wait in the scheduler until the jobs start.

    Examples
    --------
    >>> with connect(n_workers=2) as client:  # doctest: +SKIP
    ...     client.submit(sum, [1, 2]).result()
    3
    """
    config = _resolve(scheduler, cluster, n_workers, threads_per_worker, memory_limit)
    cluster_obj = None
    if config.kind == "address":
        address = config.options["address"]
        client = _connect_client(address, address, timeout, _security(config))
    else:
        cluster_obj = _start_cluster(config)
        address = getattr(cluster_obj, "scheduler_address", config.kind)
        try:
            client = _connect_client(cluster_obj, address, timeout, None)
        except BaseException:
            _close_quietly(cluster_obj, "cluster")
            raise
    try:
        yield client
    finally:
        _close_quietly(client, "client")
        if cluster_obj is not None:
            _close_quietly(cluster_obj, "cluster")


@contextlib.contextmanager
def use_client(
    client: Any = None, *, scheduler: str | None = None, cluster: str | Path | None = None
) -> Iterator[Any]:
    """The client an estimator call should run on.

    In order: the ``client`` given; a cluster from ``scheduler`` or
    ``cluster``; the current default ``distributed`` client (one made in a
    notebook); else a LocalCluster for the duration of the block.

    Parameters
    ----------
    client : distributed.Client, optional
    scheduler : str, optional
    cluster : str or Path, optional

    Yields
    ------
    distributed.Client
    """
    if client is not None:
        yield client
        return
    if scheduler is None and cluster is None:
        from distributed import get_client

        try:
            current = get_client()
        except ValueError:
            current = None
        if current is not None:
            yield current
            return
    with connect(scheduler=scheduler, cluster=cluster) as started:
        yield started
