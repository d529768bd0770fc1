"""No endless wait: a run that makes no progress stops with exit code 75."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from distributed import Client, LocalCluster

from distforest.errors import StalledError
from distforest.parallel import tasks


def _slow(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@pytest.fixture
def small_cluster():
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
    ):
        yield cluster, client


def test_no_worker_left_stops_instead_of_waiting_forever(small_cluster, monkeypatch):
    cluster, client = small_cluster
    monkeypatch.setenv("DISTFOREST_NO_WORKER_TIMEOUT", "1")
    cluster.scale(0)  # the nannies gave up: nobody will ever run the tasks
    deadline = time.time() + 10
    while client.scheduler_info()["workers"] and time.time() < deadline:
        time.sleep(0.05)
    start = time.monotonic()
    with pytest.raises(StalledError, match=r"no worker left .* 3 task\(s\) waiting") as err:
        list(tasks.run_tasks(client, _slow, [(0.0,)] * 3, name="orphans"))
    assert err.value.exit_code == 75
    assert time.monotonic() - start < 10


def test_no_task_finishing_stops_after_the_stall_timeout(small_cluster, monkeypatch):
    _, client = small_cluster
    monkeypatch.setenv("DISTFOREST_STALL_TIMEOUT", "1")
    got = []
    with pytest.raises(StalledError, match="no task finished for"):
        for _, value in tasks.run_tasks(client, _slow, [(0.0,), (4.0,)], name="stuck"):
            got.append(value)
    assert got == [0.0]  # the finished task was delivered before giving up


def test_bad_timeout_setting(small_cluster, monkeypatch):
    _, client = small_cluster
    monkeypatch.setenv("DISTFOREST_STALL_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="DISTFOREST_STALL_TIMEOUT must be a positive number"):
        list(tasks.run_tasks(client, _slow, [(0.0,)], name="x"))


def test_sending_data_with_no_worker_left_stops(small_cluster, monkeypatch):
    cluster, client = small_cluster
    monkeypatch.setenv("DISTFOREST_NO_WORKER_TIMEOUT", "1")
    cluster.scale(0)
    deadline = time.time() + 10
    while client.scheduler_info()["workers"] and time.time() < deadline:
        time.sleep(0.05)
    start = time.monotonic()
    with pytest.raises(StalledError, match="no worker left to send the data to for 1 s"):
        tasks.scatter(client, list(range(1000)))
    assert time.monotonic() - start < 10


def _die() -> None:
    import os

    os._exit(1)  # the worker process dies, as under the OOM killer


@pytest.fixture
def process_worker():
    """One worker process (with its nanny), for tests that kill it; a task survives one
    death of its worker (dask's allowed-failures 1)."""
    import dask

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 1}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
    ):
        yield client


def _kill_worker_after(client: Client, seconds: float) -> tuple[list[int], threading.Timer]:
    """SIGKILL the one worker process in ``seconds``; its pid and the timer."""
    pids = list(client.run(os.getpid).values())
    killer = threading.Timer(seconds, lambda: os.kill(pids[0], signal.SIGKILL))
    killer.start()
    return pids, killer


def test_a_task_whose_workers_keep_dying_stops_with_exit_75(process_worker):
    with pytest.raises(StalledError, match="died more than 1 times") as err:
        list(tasks.run_tasks(process_worker, _die, [()], name="doomed", retries=0))
    assert err.value.exit_code == 75


def _slow_on(data: np.ndarray, seconds: float) -> int:
    time.sleep(seconds)
    return len(data)


def test_tasks_cancelled_because_their_data_died_with_the_workers_stop_with_exit_75(
    process_worker,
):
    shared = tasks.scatter(process_worker, np.arange(1000))  # on the one worker only
    _, killer = _kill_worker_after(process_worker, 1.0)
    with pytest.raises(StalledError, match=r"holding the data .* all died") as err:
        list(tasks.run_tasks(process_worker, _slow_on, [(shared, 3.0)] * 3, name="orphaned"))
    killer.join()
    assert err.value.exit_code == 75


def test_the_runner_sends_lost_data_again_and_finishes(process_worker, caplog):
    """The one worker holding the shared data is killed: the nanny starts a new one, the
    runner sends the data again and every task gives its (deterministic) answer."""
    from distforest.parallel.execution import Runner

    runner = Runner(process_worker)
    shared = runner.share(np.arange(1000))
    pids, killer = _kill_worker_after(process_worker, 1.0)
    got = dict(runner.run(_slow_on, [(shared, 2.0), (shared, 0.1), (shared, 0.1)], name="x"))
    killer.join()
    assert got == {0: 1000, 1: 1000, 2: 1000}
    assert list(process_worker.run(os.getpid).values()) != pids  # it really was a new worker
    assert "the workers holding data sent to" in caplog.text and "sending it again" in caplog.text


def test_a_scatter_that_never_ends_stops_with_exit_75(client, monkeypatch):
    """The broadcast's replication was once seen to retry a dead worker for ever."""
    import asyncio

    async def forever(*args, **kwargs):
        await asyncio.sleep(3600)

    monkeypatch.setenv("DISTFOREST_NO_WORKER_TIMEOUT", "1")
    monkeypatch.setattr(client, "_scatter", forever)
    with pytest.raises(StalledError) as err:
        tasks.scatter(client, np.zeros(10))
    assert err.value.exit_code == 75


def test_dask_computation_with_no_worker_left_stops(small_cluster, monkeypatch):
    """dask's own computations (readers, ``da.store``) in an execution block are guarded too:
    no endless wait, exit 75; a future the user made before the block is left alone."""
    import dask.array as da

    import distforest

    cluster, client = small_cluster
    monkeypatch.setenv("DISTFOREST_NO_WORKER_TIMEOUT", "1")
    users = client.submit(_slow, 0.0)
    assert users.result() == 0.0
    cluster.scale(0)
    deadline = time.time() + 10
    while client.scheduler_info()["workers"] and time.time() < deadline:
        time.sleep(0.05)
    start = time.monotonic()
    with (
        pytest.raises(StalledError, match=r"no worker left for .* while dask computed") as err,
        distforest.execution(client=client),
    ):
        da.ones(10, chunks=5).sum().compute()
    assert err.value.exit_code == 75
    assert time.monotonic() - start < 15
    assert users.status == "lost"  # its data left with the worker; not cancelled by the guard


def test_dask_computation_in_a_block_still_works(small_cluster):
    import dask.array as da

    import distforest

    _, client = small_cluster
    with distforest.execution(client=client):
        assert float(da.ones(10, chunks=5).sum().compute()) == 10.0
