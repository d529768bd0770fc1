"""Which keys a cluster file may give: read from the cluster libraries themselves.

Every cluster kind maps to one fixed class (:data:`BACKENDS`).  The keys a
file of that kind accepts are the parameters of that class's real signature
(:func:`inspect.signature`), plus the parameters of the classes it passes its
``**kwargs`` on to (a LocalCluster's extra keywords go to each ``Nanny`` and
``Worker``, a ``SLURMCluster``'s to its ``SLURMJob``), so every key the
library accepts works and nothing is kept by hand but the short list of
:data:`REFUSED` keys, which would make distforest import or run code in its
own process, or replace what distforest manages (the event loop, the TLS
credentials).

The library is imported only to read its signatures; when it is not
installed, :func:`backend_class` says which package to install.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from distforest.errors import MissingDependencyError

__all__ = [
    "BACKENDS",
    "JOBQUEUE_KINDS",
    "REFUSED",
    "Backend",
    "accepted_keys",
    "backend_class",
    "jobqueue_config_keys",
]

JOBQUEUE_KINDS: tuple[str, ...] = ("slurm", "pbs", "sge", "lsf")
"""Kinds submitting their workers as batch jobs through dask-jobqueue."""


@dataclass(frozen=True)
class Backend:
    """Where the class of one cluster kind lives and what provides it."""

    module: str  #: module holding the cluster class
    attr: str  #: cluster class (or factory function) in that module
    needs: str | None = None  #: optional module that must import, or None
    package: str | None = None  #: pip package providing it
    extra: str | None = None  #: distforest extra installing it


_JQ = ("dask_jobqueue", "dask-jobqueue", "jobqueue")

BACKENDS: Mapping[str, Backend] = {
    "local": Backend("distributed", "LocalCluster"),
    "ssh": Backend("distributed.deploy.ssh", "SSHCluster", "asyncssh", "asyncssh", "ssh"),
    "slurm": Backend("dask_jobqueue", "SLURMCluster", *_JQ),
    "pbs": Backend("dask_jobqueue", "PBSCluster", *_JQ),
    "sge": Backend("dask_jobqueue", "SGECluster", *_JQ),
    "lsf": Backend("dask_jobqueue", "LSFCluster", *_JQ),
    "kubernetes": Backend(
        "dask_kubernetes.operator",
        "KubeCluster",
        "dask_kubernetes.operator",
        "dask-kubernetes",
        "kubernetes",
    ),
}
"""The fixed table of cluster classes: the only modules distforest imports for a file."""

#: Keys the libraries accept but a cluster file may not give, and why.
REFUSED: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "preload",
            "preload_argv",
            "preload_nanny",
            "preload_nanny_argv",
            "plugins",
            "extensions",
            "services",
            "worker_services",
            "service_kwargs",
            "executor",
            "data",
            "WorkerStateClass",
            "worker_class",
            "scheduler_cls",
            "scheduler_class",
            "job_cls",
            "worker_module",
            "jupyter",
            "config",
            "env",
        ),
        "it would make distforest import or run code in its own or its local workers' processes",
    ),
    **dict.fromkeys(
        ("loop", "asynchronous", "start"), "distforest runs the cluster in its own event loop"
    ),
    "security": "TLS comes from the 'tls' block of the file (kind address) or is made for "
    "the run (kind local)",
}


def backend_class(kind: str) -> Any:
    """Import and return the cluster class (or factory) of ``kind`` from :data:`BACKENDS`.

    Raises
    ------
    MissingDependencyError
        The package providing it is not installed; the message gives the
        ``pip install`` command.
    """
    backend = BACKENDS[kind]
    if backend.needs is not None:
        try:
            importlib.import_module(backend.needs)
        except ImportError as exc:
            raise MissingDependencyError(
                f"cluster kind {kind!r} needs {backend.package}, which cannot be imported "
                f"({exc}): pip install 'distforest[{backend.extra}]' "
                f"(or pip install {backend.package})"
            ) from exc
    return getattr(importlib.import_module(backend.module), backend.attr)


def _parameters(*targets: Any) -> set[str]:
    """Named parameters of the callables (``self`` and ``*args``/``**kwargs`` left out)."""
    names: set[str] = set()
    for target in targets:
        for name, p in inspect.signature(target).parameters.items():
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and name != "self":
                names.add(name)
    return names


def _worker_keys() -> set[str]:
    from distributed import Nanny, Worker

    return _parameters(Nanny, Worker)


def _scheduler_keys() -> set[str]:
    from distributed import Scheduler

    return _parameters(Scheduler)


def _job_keys(cls: Any) -> set[str]:
    job_cls = cls.job_cls
    return _parameters(*[c.__init__ for c in job_cls.__mro__ if "__init__" in vars(c)])


def accepted_keys(kind: str) -> tuple[frozenset[str], Mapping[str, frozenset[str]]]:
    """The keys the library of ``kind`` accepts, and those of its nested option mappings.

    Parameters
    ----------
    kind : str
        A key of :data:`BACKENDS`.

    Returns
    -------
    keys : frozenset of str
        Top-level keys, :data:`REFUSED` ones included (the caller refuses them
        with their reason).
    nested : Mapping
        For an option that is itself a mapping of keywords (``worker_options``,
        ``scheduler_options``), the keys that mapping accepts.

    Raises
    ------
    MissingDependencyError
        The library of ``kind`` is not installed.
    """
    return _accepted_keys(backend_class(kind), kind)


@cache
def _accepted_keys(cls: Any, kind: str) -> tuple[frozenset[str], Mapping[str, frozenset[str]]]:
    nested: dict[str, set[str]] = {}
    if kind == "local":
        keys = _parameters(cls) | _worker_keys()  # **worker_kwargs go to Nanny, then Worker
        nested["scheduler_kwargs"] = _scheduler_keys()
    elif kind == "ssh":
        from distributed import SpecCluster

        keys = _parameters(cls, SpecCluster)  # **kwargs go to SpecCluster
        nested["worker_options"] = _worker_keys() | {"n_workers"}
        nested["scheduler_options"] = _scheduler_keys()
    elif kind in JOBQUEUE_KINDS:
        keys = _parameters(cls) | _job_keys(cls)  # **job_kwargs go to the Job class
        nested["scheduler_options"] = _scheduler_keys()
    else:
        keys = _parameters(cls)
    return frozenset(keys), {k: frozenset(v) for k, v in nested.items()}


def jobqueue_config_keys(kind: str) -> frozenset[str]:
    """Keys of dask-jobqueue's own configuration section ``jobqueue.<kind>``.

    Read from the defaults dask-jobqueue registers with ``dask.config`` when
    imported (its ``jobqueue.yaml``), with ``-`` as written there.
    """
    backend_class(kind)
    import dask

    return frozenset(dask.config.get(f"jobqueue.{kind}"))
