"""distforest's settings: the ``distforest`` section of ``dask.config``.

Timeouts, the in-process thresholds, the CPU-hour cap and the cache sizes live
where Dask users look for settings (and where a cluster's configuration already
lives).  The defaults come from ``distforest.yaml`` next to this module,
registered with :func:`dask.config.update_defaults` when this module is first
imported.  A setting can then be changed like any Dask setting::

    dask.config.set({"distforest.stall-timeout": 600})      # in a block or for good
    DASK_DISTFOREST__STALL_TIMEOUT=600 distforest run ...     # read when dask is imported
    # or a YAML file in ~/.config/dask/ with  distforest: {stall-timeout: 600}

The older environment variables (``DISTFOREST_STALL_TIMEOUT`` and the others in
:data:`SETTINGS`) still work; they are read at each use and win over the
configuration when set.  Workers of a cluster read the values the driver had
when the cluster started (distributed passes the configuration on).

This module is at the package root so that every room may use it; the kernels do
not (they never import Dask).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import dask.config
import yaml

from distforest.errors import ParameterError


@dataclass(frozen=True)
class Setting:
    """One setting: its older environment variable (if it had one), its kind and use."""

    env: str | None
    #: "seconds", "hours", "count" or "bytes".
    kind: str
    help: str


#: Name (under ``distforest.``) -> the setting.  The defaults are in ``distforest.yaml``.
SETTINGS: dict[str, Setting] = {
    "stall-timeout": Setting(
        "DISTFOREST_STALL_TIMEOUT", "seconds",
        "no task finished for this long: the run stops, exit 75, resumable"),
    "no-worker-timeout": Setting(
        "DISTFOREST_NO_WORKER_TIMEOUT", "seconds",
        "no worker at all for this long: the run stops, exit 75, resumable"),
    "cluster-timeout": Setting(
        "DISTFOREST_CLUSTER_TIMEOUT", "seconds",
        "a cluster not reachable, or without a worker, after this long: exit 5"),
    "storage-connect-timeout": Setting(
        None, "seconds",
        "object storage (s3://, gs://, abfs://) not connected within this long: the attempt "
        "fails"),
    "storage-read-timeout": Setting(
        None, "seconds",
        "object storage that sends nothing for this long while answering: the attempt fails"),
    "storage-attempts": Setting(
        None, "count",
        "attempts of each S3 request before the command stops with exit 6 (gcsfs and "
        "adlfs make their own, bounded, attempts)"),
    "max-cpu-hours": Setting(
        "DISTFOREST_MAX_CPU_HOURS", "hours",
        "a job whose estimate needs more computing is refused up front (exit 2)"),
    "in-process-cells": Setting(
        None, "count",
        "inputs of at most this many cells (rows x features, plus n x n of an input "
        "matrix) run in this process when no cluster is named: every command and estimator"),
    "in-memory-cells": Setting(
        None, "count",
        "matrices of at most this many cells are kept in memory; a larger one needs "
        "store=... (written tile by tile) or, as an input, a Zarr store"),
    "block-cache-bytes": Setting(
        None, "bytes",
        "row blocks a worker keeps while writing a forest matrix's tiles"),
    "row-cache-bytes": Setting(
        None, "bytes",
        "whole matrix rows a reader keeps (SimForest on a row-chunked Zarr matrix)"),
    "fit-task-bytes": Setting(
        None, "bytes",
        "per-row results (leaves, in-bag counts, a refined forest's nodes) one fit task holds "
        "for its batch of trees: on more rows, fewer trees a task"),
}  # fmt: skip

_DEFAULTS_FILE = Path(__file__).with_name("distforest.yaml")
_KINDS = {
    "seconds": "a positive number of seconds",
    "hours": "a positive number of hours",
    "count": "a whole number >= 0",
    "bytes": "a whole number of bytes >= 0",
}


def _register_defaults() -> None:
    with _DEFAULTS_FILE.open(encoding="utf-8") as f:
        defaults = yaml.safe_load(f)
    dask.config.update_defaults(defaults)


_register_defaults()


def _lookup(name: str) -> Setting:
    if name not in SETTINGS:
        from distforest.errors import did_you_mean

        raise ParameterError(
            f"no distforest setting {name!r}{did_you_mean(name, SETTINGS)}; the settings are "
            f"{', '.join(SETTINGS)}"
        )
    return SETTINGS[name]


def _legacy(setting: Setting) -> str | None:
    """The value of the setting's older environment variable, if set and not empty."""
    return os.environ.get(setting.env) or None if setting.env else None


def source(name: str) -> str:
    """Where ``name``'s value comes from, for messages: the variable if set, else the key.

    E.g. ``"DISTFOREST_MAX_CPU_HOURS"`` or ``"distforest.max-cpu-hours"``.
    """
    setting = _lookup(name)
    return str(setting.env) if _legacy(setting) else f"distforest.{name}"


def how_to_set(name: str) -> str:
    """The ways to change ``name``, for messages."""
    setting = _lookup(name)
    if _legacy(setting):
        return str(setting.env)
    env = "DASK_DISTFOREST__" + name.upper().replace("-", "_")
    return f"distforest.{name} (dask.config, or {env} in the environment)"


def get(name: str) -> float | int:
    """The value of ``distforest.<name>``, checked.

    The older environment variable (:attr:`Setting.env`) wins when it is set;
    otherwise ``dask.config.get("distforest.<name>")``.

    Raises
    ------
    ParameterError
        An unknown setting, or a value that is not of the setting's kind; the
        message names where the value came from.
    """
    setting = _lookup(name)
    raw = _legacy(setting) or dask.config.get(f"distforest.{name}")
    try:
        if setting.kind in ("seconds", "hours"):
            value: float | int = float(raw)
            ok = value > 0
        else:
            value = int(raw) if not isinstance(raw, float) or raw.is_integer() else -1
            ok = value >= 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ParameterError(
            f"{source(name)} must be {_KINDS[setting.kind]}, got {raw!r}; set it to such a "
            f"value or remove it (default: {_default(name)})"
        )
    return value


def _default(name: str) -> float | int:
    with _DEFAULTS_FILE.open(encoding="utf-8") as f:
        return yaml.safe_load(f)["distforest"][name]


def defaults() -> dict[str, float | int]:
    """Every setting's default, as registered from ``distforest.yaml``."""
    with _DEFAULTS_FILE.open(encoding="utf-8") as f:
        return dict(yaml.safe_load(f)["distforest"])
