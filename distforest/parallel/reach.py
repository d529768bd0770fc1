"""Reaching a cluster within a documented time, or exit 5 with one line.

Every way of reaching a cluster is bounded by one setting,
``distforest.cluster-timeout`` (default 60 s; ``DISTFOREST_CLUSTER_TIMEOUT``
or ``DASK_DISTFOREST__CLUSTER_TIMEOUT`` in the environment):

- a scheduler address: a refused connection or an unknown host is reported
  at once; a peer that accepts but never answers dask's identity request is
  given up after the timeout (dask's own client would wait for ever);
- a scheduler file (``scheduler_file:``, the JSON file ``dask scheduler
  --scheduler-file`` writes): waited for by distforest, outside dask's event
  loop (a Nanny reading a missing file blocks that loop for good), until it
  appears and holds an address, or the timeout;
- a started cluster (local, SSH, dask-jobqueue, Kubernetes): its first worker
  must join within what is left of the timeout.

Each failure is a :class:`~distforest.errors.ClusterError` (exit 5) naming
what was waited for, the limit and where it is set.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from distforest import settings
from distforest.errors import ClusterError
from distforest.parallel.cluster_config import _split_address

__all__ = ["Deadline", "connect_client", "read_scheduler_file", "wait_for_first_worker"]

#: Seconds between two looks at a scheduler file that is not there yet.
_POLL = 0.2


@dataclass(frozen=True)
class Deadline:
    """How long a cluster may take to come up, shared by every step of :func:`connect`.

    Attributes
    ----------
    seconds : float
        The whole allowance.
    label : str
        Where it comes from, for messages: ``"distforest.cluster-timeout=60 s"``
        or ``"timeout=2 s"`` when a caller passed one.
    fix : str
        How to change it, for messages.
    """

    seconds: float
    label: str
    fix: str
    end: float = field(default=0.0)

    @classmethod
    def start(cls, timeout: float | None = None) -> Deadline:
        """A deadline from now: ``timeout`` seconds, or the ``cluster-timeout`` setting."""
        if timeout is None:
            seconds = float(settings.get("cluster-timeout"))
            label = f"{settings.source('cluster-timeout')}={seconds:g} s"
            fix = f"raise {settings.how_to_set('cluster-timeout')}"
        else:
            seconds = float(timeout)
            label, fix = f"timeout={seconds:g} s", "pass a larger timeout"
        return cls(seconds, label, fix, time.monotonic() + seconds)

    def remaining(self, floor: float = 0.0) -> float:
        """Seconds left (at least ``floor``)."""
        return max(self.end - time.monotonic(), floor)


# --------------------------------------------------------------------------
# A scheduler address
# --------------------------------------------------------------------------


def connect_client(target: Any, address: str, limit: Deadline, security: Any) -> Any:
    """A ``distributed.Client`` for ``target`` (an address or a started cluster), in time.

    Raises
    ------
    ClusterError
        Refused, unknown host, or no answer before ``limit``.
    """
    from distributed import Client

    if isinstance(target, str):
        refused = probe_tcp(address, min(limit.remaining(0.5), 2.0), silence_ok=True)
        if refused:  # refused or unknown host: say so now, not after the whole timeout
            raise ClusterError(
                f"could not reach the Dask scheduler at {address}: {refused}; "
                "check the address and that the scheduler is running"
            )
        # dask's own client waits forever for a peer that accepts but never
        # answers: ask the scheduler who it is first, with a deadline.
        silent = handshake(address, security, limit.remaining(0.5))
        if silent:
            raise ClusterError(
                f"could not reach the Dask scheduler at {address}: {silent} ({limit.label}); "
                "check that the address is a Dask scheduler's and the TLS settings of the "
                f"cluster file, or {limit.fix}"
            )
    # the scheduler answered (or was just started): its client gets at least 10 s,
    # whatever a slow start of a LocalCluster on a busy machine left of the deadline
    timeout = limit.remaining(10.0)
    try:
        return Client(target, timeout=timeout, security=security)
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        probe = probe_tcp(address, min(timeout, 2.0))
        if probe:
            reason = f"{reason} ({probe})"
        raise ClusterError(
            f"could not reach the Dask scheduler at {address}: {reason}; "
            "check the address, that the scheduler is running, and firewalls"
        ) from exc


def handshake(address: str, security: Any, timeout: float) -> str:
    """Say why the scheduler at ``address`` does not answer an identity request, or ""."""
    from distributed.comm import connect as comm_connect
    from distributed.security import Security

    args = (security or Security()).get_connection_args("client")

    async def ask() -> None:
        comm = await asyncio.wait_for(comm_connect(address, timeout=timeout, **args), timeout)
        try:
            await asyncio.wait_for(comm.write({"op": "identity", "reply": True}), timeout)
            await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()

    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(ask())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="distforest-handshake", daemon=True)
    thread.start()
    thread.join(timeout + 2.0)
    if thread.is_alive():
        return f"no answer within {timeout:g} s"
    if not failure:
        return ""
    exc = failure[0]
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return f"connected, but no answer within {timeout:g} s"
    return f"{type(exc).__name__}: {exc}"


def probe_tcp(address: str, timeout: float, *, silence_ok: bool = False) -> str:
    """Say why a plain TCP connection to ``address`` fails, or "" if it works.

    With ``silence_ok`` a connection that merely times out counts as working
    (the client then waits its own timeout): only refusals and unknown hosts
    are reported.
    """
    scheme, host, port = _split_address(address)
    if scheme not in ("tcp", "tls") or not port.isdigit():
        return ""
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return ""
    except TimeoutError:
        return "" if silence_ok else f"TCP connection to {host}:{port}: timed out"
    except OSError as exc:
        return f"TCP connection to {host}:{port}: {exc.strerror or exc}"


# --------------------------------------------------------------------------
# A scheduler file
# --------------------------------------------------------------------------


def _address_in(path: str) -> tuple[str | None, str]:
    """The scheduler address a scheduler file holds, or None and why not (yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None, "did not appear"
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot be read ({exc})"
    except ValueError:  # being written, or not a scheduler file
        return None, "holds no JSON"
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or not address.strip():
        return None, "holds no scheduler address (no 'address' key)"
    return address.strip(), ""


def read_scheduler_file(path: str, source: str, limit: Deadline) -> str:
    """Wait until the scheduler file ``path`` holds an address, and return it.

    Parameters
    ----------
    path : str
        The JSON file a scheduler writes (``dask scheduler --scheduler-file``).
    source : str
        The cluster file naming it, for messages.
    limit : Deadline
        How long to wait in all.

    Raises
    ------
    ClusterError
        The file did not appear, or held no address, before ``limit``.
    """
    while True:
        address, why = _address_in(path)
        if address is not None:
            return address
        if limit.remaining() <= 0:
            break
        time.sleep(min(_POLL, limit.remaining()))
    where = "" if os.path.isabs(path) else f" (in {os.getcwd()})"
    raise ClusterError(
        f"{source}: the scheduler file {path!r}{where} {why} within {limit.label}; start the "
        f"scheduler with `dask scheduler --scheduler-file {path}` or correct the path, or "
        f"{limit.fix} if the scheduler starts later"
    )


# --------------------------------------------------------------------------
# A started cluster's first worker
# --------------------------------------------------------------------------

_NO_WORKER_HINT = {
    "local": "the local worker processes did not register (out of memory? see the log above)",
    "ssh": "check that every worker host can reach the scheduler's address and runs the same "
    "Python with distforest installed",
    "kubernetes": "check the pods (kubectl get pods) and their image",
}
_QUEUE_HINT = (
    "the batch jobs may still wait in the queue (squeue, qstat, bjobs) or failed to start "
    "(their job logs)"
)


def wait_for_first_worker(client: Any, kind: str, source: str, limit: Deadline) -> None:
    """Wait until a started cluster has a worker, for what is left of ``limit``.

    Raises
    ------
    ClusterError
        No worker joined in time.
    """
    try:
        client.wait_for_workers(1, timeout=limit.remaining(1.0))
    except TimeoutError as exc:
        hint = _NO_WORKER_HINT.get(kind, _QUEUE_HINT)
        raise ClusterError(
            f"the {kind!r} cluster of {source} has no worker after {limit.label}: {hint}; "
            f"{limit.fix} if its workers take longer to start"
        ) from exc
