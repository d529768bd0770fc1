"""No endless wait: a run that makes no progress stops with exit code 75."""

from __future__ import annotations

import time

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
    with pytest.raises(ValueError, match="DISTFOREST_STALL_TIMEOUT must be a number"):
        list(tasks.run_tasks(client, _slow, [(0.0,)], name="x"))
