"""The run report's retry count (distforest.parallel.monitor.AttemptCounter)."""

from __future__ import annotations

import os

import pytest
from distributed import Client, LocalCluster

from distforest.parallel.monitor import (
    PLUGIN_NAME,
    AttemptCounter,
    RunMonitor,
    _attempts_on_scheduler,
)


class _Scheduler:
    def __init__(self, plugin: AttemptCounter) -> None:
        self.plugins = {plugin.name: plugin}


def _counts(plugin: AttemptCounter) -> dict[str, int]:
    return dict(_attempts_on_scheduler(_Scheduler(plugin)))


def test_a_task_sent_again_before_it_finished_is_a_retry():
    plugin = AttemptCounter()
    for start, finish in [
        ("waiting", "processing"),
        ("processing", "released"),  # its worker died
        ("released", "waiting"),
        ("waiting", "processing"),
        ("processing", "memory"),
    ]:
        plugin.transition("fit-trees-1a2b3c4d-0", start, finish)
    assert _counts(plugin) == {"fit-trees": 1}


@pytest.mark.parametrize("end", ["memory", "erred", "forgotten"])
def test_a_task_run_again_after_it_ended_is_not_a_retry(end):
    plugin = AttemptCounter()
    for _ in range(3):  # e.g. its result released, then asked for by the next compute
        plugin.transition("tiles-1a2b3c4d-1", "waiting", "processing")
        plugin.transition("tiles-1a2b3c4d-1", "processing", end)
    assert _counts(plugin) == {"tiles": 0}


def _pid() -> int:
    return os.getpid()


def test_computing_the_same_key_twice_on_a_cluster_reports_no_retry():
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                     dashboard_address=None) as cluster,
        Client(cluster) as client,
        RunMonitor(client) as monitor,
    ):  # fmt: skip
        for _ in range(2):
            future = client.submit(_pid, key="same-key-0", pure=False)
            assert future.result() == os.getpid()
            del future
            client.run_on_scheduler(lambda dask_scheduler: None)  # let the release land
        tasks = monitor.tasks()
    assert tasks == {"same-key": {"tasks": 1, "retries": 0}}, tasks


def test_the_count_ends_with_the_run():
    """A scheduler shared by several runs keeps no plugin of a finished run."""
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                     dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        for _ in range(2):
            with RunMonitor(client) as monitor:
                assert client.submit(_pid, pure=False).result() == os.getpid()
                assert monitor.tasks() == {"pid": {"tasks": 1, "retries": 0}}
            assert PLUGIN_NAME not in cluster.scheduler.plugins
