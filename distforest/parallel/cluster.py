"""Connect to a Dask cluster: a LocalCluster by default, or one described in YAML.

The cluster YAML files, their validation and :class:`ClusterConfig` live in
:mod:`distforest.parallel.cluster_config`; this module starts or reaches the
cluster a config describes.  The config names (:data:`KINDS`,
:class:`ClusterConfig`, :func:`load_cluster_config`,
:func:`parse_cluster_config`, :func:`default_cluster_config`) are re-exported
here, so ``from distforest.parallel.cluster import ...`` reaches all of them.

Every kind maps to one fixed class (:data:`~distforest.parallel.cluster_keys.BACKENDS`);
a config can never name a class or module to import.  Optional backends are
imported lazily, only when a file of that kind is checked or started.

Failures are quick and say what to do: a refused connection is reported at
once, a scheduler that stays silent, a scheduler file that never appears and
a started cluster without a worker end after ``distforest.cluster-timeout``
(:mod:`distforest.parallel.reach`), plain ``tcp://``
off this machine needs ``insecure: true``, a script without its
``if __name__ == "__main__":`` guard is told so in one line, and inside a
joblib worker or other child process no cluster is started (see
:func:`distforest.parallel.local_cluster.in_child_process`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distforest._schema import BadValue
from distforest.errors import ClusterError, ConfigError, DistforestError, ParameterError
from distforest.parallel.cluster_config import (
    KINDS,
    ClusterConfig,
    _check_transport,
    _parse,
    _scheduler_address,
    _size_options,
    _split_address,
    _thaw,
    default_cluster_config,
    is_loopback,
    load_cluster_config,
    parse_cluster_config,
)
from distforest.parallel.cluster_keys import JOBQUEUE_KINDS, backend_class
from distforest.parallel.local_cluster import in_child_process, in_dask_task, start_local
from distforest.parallel.reach import (
    Deadline,
    connect_client,
    read_scheduler_file,
    wait_for_first_worker,
)

if TYPE_CHECKING:
    import distributed

__all__ = [
    "KINDS",
    "ClusterConfig",
    "connect",
    "default_cluster_config",
    "engine_report",
    "load_cluster_config",
    "parse_cluster_config",
    "use_client",
]

logger = logging.getLogger(__name__)

#: What :func:`connect` started or reached, per client (read by :func:`engine_report`).
_ENGINES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


# --------------------------------------------------------------------------
# Starting clusters
# --------------------------------------------------------------------------


def _library_kwargs(config: ClusterConfig) -> dict[str, Any]:
    """The file's keys that go to the cluster class (distforest's own keys removed)."""
    own = {"jobs", "insecure"}
    return {k: v for k, v in _thaw(config.options).items() if k not in own}


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


def _jobqueue_settings(config: ClusterConfig) -> Any:
    """``dask.config`` set to a dask-jobqueue file's section, for the cluster's lifetime."""
    import dask

    return dask.config.set(
        {f"jobqueue.{config.kind}.{k}": _thaw(v) for k, v in config.jobqueue.items()}
    )


def _start_cluster(config: ClusterConfig, stack: contextlib.ExitStack, limit: Deadline) -> Any:
    """Create the cluster object for every kind except ``address``.

    Settings the cluster reads while it runs (a dask-jobqueue file's section)
    stay in force until ``stack`` closes.  A local worker's ``scheduler_file``
    is waited for here, within ``limit`` (dask's Nanny would wait for it for
    ever, blocking the cluster's event loop); SSH connections get ``limit`` as
    asyncssh's ``connect_timeout`` unless the file sets one.
    """
    kind = config.kind
    if kind == "local":
        if config.options.get("scheduler_file"):
            read_scheduler_file(str(config.options["scheduler_file"]), config.source, limit)
        try:
            return start_local(_thaw(config.options))
        except DistforestError:
            raise
        except Exception as exc:
            raise ClusterError(
                f"could not start the local cluster described by {config.source}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    cls = backend_class(kind)
    kwargs = _library_kwargs(config)
    if kind == "ssh":
        kwargs["connect_options"] = _with_connect_timeout(kwargs.get("connect_options"), limit)
    if kind in ("ssh", *JOBQUEUE_KINDS):
        # refused before anything starts (a cluster closed right after its start
        # can leave remote workers behind); checked again on the real address
        host = (kwargs.get("scheduler_options") or {}).get("host")
        _check_started_transport(config, f"tcp://{host or '0.0.0.0'}:0")
    try:
        if kind in JOBQUEUE_KINDS:
            if config.jobqueue:
                stack.enter_context(_jobqueue_settings(config))
            cluster = cls(**kwargs)
            try:
                cluster.scale(jobs=config.options["jobs"])
            except BaseException:
                cluster.close()
                raise
            return cluster
        return cls(**kwargs)
    except DistforestError:
        raise
    except Exception as exc:
        raise ClusterError(
            f"could not start the {kind!r} cluster described by {config.source}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _with_connect_timeout(options: Any, limit: Deadline) -> Any:
    """SSH ``connect_options`` (one mapping, or one per host) with a connect timeout."""
    seconds = max(1, math.ceil(limit.remaining()))
    if isinstance(options, list):
        return [{"connect_timeout": seconds, **o} for o in options]
    return {"connect_timeout": seconds, **(options or {})}


def _address_of(config: ClusterConfig, limit: Deadline) -> str:
    """A kind ``address`` config's scheduler address, read from its scheduler file if so.

    An address read from a file is checked as the file's own would be
    (plain tcp:// off this machine needs ``insecure: true``).
    """
    if "address" in config.options:
        return str(config.options["address"])
    path = str(config.options["scheduler_file"])
    found = read_scheduler_file(path, config.source, limit)
    try:
        address = _scheduler_address(found)
    except BadValue as exc:
        raise ClusterError(
            f"{config.source}: the scheduler file {path!r} holds {found!r}, not {exc.expected}"
        ) from None
    _check_transport({**config.options, "address": address}, config.source, ConfigError)
    return address


def _check_started_transport(config: ClusterConfig, address: str) -> None:
    """A started cluster whose scheduler is plain tcp:// off loopback needs ``insecure``."""
    scheme, host, _ = _split_address(address)
    if scheme == "tcp" and not is_loopback(host) and not config.options.get("insecure"):
        where = address if not address.endswith(":0") else f"{host} (scheduler_options: host)"
        raise ConfigError(
            f"{config.source}: the {config.kind!r} cluster's scheduler would listen on {where}, "
            "plain tcp:// reachable from the network: anyone there could connect and run code "
            "in the workers. Add `insecure: true` to the file if the network is trusted, or "
            "bind the scheduler to loopback (scheduler_options: {host: 127.0.0.1}) when every "
            "worker runs on this machine."
        )


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
    insecure: bool = False,
) -> ClusterConfig:
    if scheduler is not None and cluster is not None:
        raise ParameterError(
            f"give either scheduler={scheduler!r} or cluster={str(cluster)!r}, not both: "
            "scheduler is shorthand for a cluster config of kind 'address'."
        )
    if scheduler is not None:
        config = _parse(
            {"kind": "address", "address": scheduler, "insecure": insecure},
            "scheduler",
            error=ParameterError,
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
    timeout: float | None = None,
    insecure: bool = False,
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
    timeout : float, optional
        Seconds the cluster may take to come up: a silent scheduler to
        answer, a scheduler file to appear, a started cluster's first worker
        to join (a refused connection is reported at once).  Default: the
        ``distforest.cluster-timeout`` setting (60 s).
    insecure : bool, default False
        Allow ``scheduler`` to be a plain ``tcp://`` address of another
        machine (the cluster file's ``insecure: true``).  Without it, only
        loopback may be reached without TLS.

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
        The scheduler could not be reached, its scheduler file did not
        appear, or no worker joined within ``timeout``; or the cluster
        failed to start.

    Notes
    -----
    Local workers are separate processes started with ``spawn``: a script
    using this must guard its entry point with ``if __name__ == "__main__":``.
    Batch-queue kinds (slurm, pbs, sge, lsf) submit ``jobs`` jobs; like every
    started kind, the block begins once the first worker joined, and a job
    still waiting in the queue after ``timeout`` is exit 5 (raise
    ``distforest.cluster-timeout`` to the queue wait you accept).

    Examples
    --------
    >>> with connect(n_workers=2) as client:  # doctest: +SKIP
    ...     client.submit(sum, [1, 2]).result()
    3
    """
    config = _resolve(scheduler, cluster, n_workers, threads_per_worker, memory_limit, insecure)
    limit = Deadline.start(timeout)
    with contextlib.ExitStack() as stack:
        cluster_obj = None
        if config.kind == "address":
            address = _address_of(config, limit)
            client = connect_client(address, address, limit, _security(config))
            stack.callback(_close_quietly, client, "client")
        else:
            cluster_obj = _start_cluster(config, stack, limit)
            stack.callback(_close_quietly, cluster_obj, "cluster")
            address = getattr(cluster_obj, "scheduler_address", config.kind)
            _check_started_transport(config, address)
            client = connect_client(cluster_obj, address, limit, None)
            stack.callback(_close_quietly, client, "client")
            if config.options.get("n_workers") != 0:  # a Kubernetes cluster may start empty
                wait_for_first_worker(client, config.kind, config.source, limit)
        _ENGINES[client] = {
            "engine": config.kind,
            "class": "distributed.Client" if cluster_obj is None else _class_name(cluster_obj),
            "cluster_file": config.source,
            "scheduler": client.scheduler.address,
            "dashboard": _dashboard_link(client),
        }
        logger.info("cluster: %s at %s (%s)", config.kind, client.scheduler.address, config.source)
        yield client


def _class_name(obj: Any) -> str:
    cls = type(obj)
    if cls.__module__.startswith("distforest."):  # our LocalCluster subclass
        cls = cls.__mro__[1]
    return f"{cls.__module__.split('.')[0]}.{cls.__name__}"


def _dashboard_link(client: Any) -> str | None:
    try:
        services = client.scheduler_info().get("services", {})
    except Exception:
        return None
    return client.dashboard_link if "dashboard" in services else None


def engine_report(client: Any) -> dict[str, Any]:
    """Which engine and addresses a run used, for its report.

    Parameters
    ----------
    client : distributed.Client or None
        A client from :func:`connect` (or any client; None: in-process).

    Returns
    -------
    dict
        ``engine`` (the cluster kind, ``"client"`` for a client made
        elsewhere, ``"in-process"``), ``class``, ``cluster_file``,
        ``scheduler`` address, ``dashboard`` link (None when off), ``tls``
        (whether the scheduler address is ``tls://``) and the ``workers``'
        addresses at the time of the call.
    """
    if client is None:
        return {"engine": "in-process", "scheduler": None, "workers": [], "tls": False}
    info = dict(_ENGINES.get(client) or {"engine": "client", "scheduler": client.scheduler.address})
    try:
        info["workers"] = sorted(client.scheduler_info(n_workers=-1)["workers"])
    except Exception:  # a scheduler that went away: report what is known
        info["workers"] = []
    info["tls"] = str(info.get("scheduler", "")).startswith("tls://")
    return info


@contextlib.contextmanager
def use_client(
    client: Any = None, *, scheduler: str | None = None, cluster: str | Path | None = None
) -> Iterator[Any]:
    """The client an estimator call should run on.

    In order: the ``client`` given; a cluster from ``scheduler`` or
    ``cluster``; the current default ``distributed`` client (one made in a
    notebook); None (run in this process) inside a Dask task (whose worker's
    client would otherwise be used: waiting in a worker thread for tasks
    queued behind it deadlocks) and inside a child process such as a
    joblib worker of ``GridSearchCV(n_jobs=2)``, where starting a cluster per
    process would oversubscribe the machine (and its workers could not
    start); else a LocalCluster for the duration of the block.

    Parameters
    ----------
    client : distributed.Client, optional
    scheduler : str, optional
    cluster : str or Path, optional

    Yields
    ------
    distributed.Client or None
        None: run the tasks in this process.
    """
    if client is not None:
        yield client
        return
    if scheduler is None and cluster is None:
        if in_dask_task():
            # inside a Dask task (a GridSearchCV fit under joblib's dask backend): the
            # worker's client would queue tasks behind the very task waiting for them,
            # a deadlock when every worker thread runs such a fit; run here instead
            logger.debug("in a Dask task: running in-process, no nested tasks")
            yield None
            return
        from distributed import get_client

        try:
            current = get_client()
        except ValueError:
            current = None
        if current is not None:
            yield current
            return
        if in_child_process():
            logger.debug("in a child process: running in-process, no cluster started")
            yield None
            return
    with connect(scheduler=scheduler, cluster=cluster) as started:
        yield started
