"""A cluster that does not come up within ``distforest.cluster-timeout`` is exit 5.

Every way of reaching one: a scheduler address with nothing listening (at
once) or a silent one, a scheduler file that never appears (kind ``address``
or a local worker's ``scheduler_file``, which dask's Nanny would wait for for
ever), a started cluster whose first worker never joins.  Each ends with one
line naming what was waited for and the setting.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
import time
from pathlib import Path

import dask
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.errors import ClusterError, ConfigError
from distforest.parallel.cluster import connect, load_cluster_config, parse_cluster_config
from distforest.parallel.reach import Deadline, wait_for_first_worker

BC = Path(__file__).resolve().parents[1] / "distforest" / "data" / "breast_cancer.csv"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cluster_files(tmp: Path) -> None:
    (tmp / "file.yaml").write_text("kind: address\nscheduler_file: never.json\n")
    (tmp / "local_file.yaml").write_text(
        f"kind: local\nn_workers: 1\nscheduler_file: {tmp / 'never.json'}\n"
    )
    (tmp / "empty.json").write_text("")
    (tmp / "garbage.yaml").write_text("kind: address\nscheduler_file: empty.json\n")


#: name -> (cluster option, words of the error line); the timeout is 2 s
NEVER_UP = {
    "a scheduler file that never appears": (
        ["--cluster", "file.yaml"],
        ["never.json' did not appear within", "DISTFOREST_CLUSTER_TIMEOUT=2 s", "file.yaml"],
    ),
    "a local worker's scheduler file that never appears": (
        ["--cluster", "local_file.yaml"],
        ["never.json' did not appear within", "DISTFOREST_CLUSTER_TIMEOUT=2 s"],
    ),
    "a scheduler file that stays empty": (
        ["--cluster", "garbage.yaml"],
        ["empty.json' holds no JSON within", "DISTFOREST_CLUSTER_TIMEOUT"],
    ),
    "an address with nothing listening": (
        ["--scheduler", "tcp://127.0.0.1:{closed}"],
        ["could not reach the Dask scheduler", "refused"],
    ),
    "an address that accepts but never answers": (
        ["--scheduler", "tcp://127.0.0.1:{silent}"],
        ["could not reach the Dask scheduler", "no answer within", "DISTFOREST_CLUSTER_TIMEOUT"],
    ),
}


@pytest.mark.parametrize("name", list(NEVER_UP))
def test_a_cluster_that_never_comes_up_is_exit_5_in_one_line(tmp_path, monkeypatch, name):
    option, words = NEVER_UP[name]
    _cluster_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DISTFOREST_CLUSTER_TIMEOUT", "2")
    with socket.socket() as silent:  # accepts connections, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        ports = {"closed": _closed_port(), "silent": silent.getsockname()[1]}
        option = [o.format(**ports) for o in option]
        start = time.perf_counter()
        args = ["proximity", str(BC), "--drop", "Id", "--trees", "2", "--out", "o.zarr", *option]
        result = CliRunner().invoke(cli, ["-q", *args])
        seconds = time.perf_counter() - start
    assert result.exit_code == ClusterError.exit_code, result.output
    assert "Traceback" not in result.output
    lines = [x for x in result.output.splitlines() if x.startswith("distforest: error:")]
    assert len(lines) == 1, result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert seconds < 20, seconds  # 2 s of waiting, not a hang
    assert not (tmp_path / "o.zarr").exists()


def test_the_setting_bounds_the_wait_and_is_named_from_dask_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("kind: address\nscheduler_file: sched.json\n")
    config = load_cluster_config(path)
    assert config.options["scheduler_file"] == str(tmp_path / "sched.json")  # next to the file
    start = time.perf_counter()
    with dask.config.set({"distforest.cluster-timeout": 1}):
        with pytest.raises(ClusterError) as info:
            with connect(cluster=config):
                pytest.fail("connected without a scheduler")
    assert 1.0 <= time.perf_counter() - start < 5
    assert "distforest.cluster-timeout=1 s" in str(info.value)
    assert "DASK_DISTFOREST__CLUSTER_TIMEOUT" in str(info.value)  # how to raise it


def test_a_scheduler_file_written_later_is_waited_for_and_used(tmp_path, client):
    path = tmp_path / "sched.json"
    config = parse_cluster_config({"kind": "address", "scheduler_file": str(path)}, "c.yaml")
    address = client.scheduler.address

    def write_later() -> None:
        time.sleep(1.0)
        path.write_text(json.dumps({"type": "Scheduler", "address": address}))

    writer = threading.Thread(target=write_later)
    writer.start()
    try:
        with connect(cluster=config, timeout=30) as reached:
            assert reached.scheduler.address == address
            assert reached.submit(sum, [1, 2]).result() == 3
    finally:
        writer.join()


def test_an_address_in_a_scheduler_file_is_checked_like_the_files_own(tmp_path):
    path = tmp_path / "sched.json"
    path.write_text(json.dumps({"address": "tcp://10.0.0.5:8786"}))
    config = parse_cluster_config({"kind": "address", "scheduler_file": str(path)}, "c.yaml")
    with pytest.raises(ConfigError, match="plain tcp:// to another machine"):
        with connect(cluster=config, timeout=2):
            pytest.fail("connected over plain tcp to another machine")
    path.write_text(json.dumps({"address": "http://x"}))
    with pytest.raises(ClusterError, match="holds 'http://x', not a scheduler address"):
        with connect(cluster=config, timeout=2):
            pytest.fail("connected to a non-scheduler address")


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"kind": "address"}, "missing required key 'address' (or 'scheduler_file')"),
        ({"kind": "address", "address": "tcp://127.0.0.1:1", "scheduler_file": "s.json"},
         "gives both"),
    ],
)  # fmt: skip
def test_kind_address_names_its_scheduler_once(data, words):
    with pytest.raises(ConfigError) as info:
        parse_cluster_config(data, "c.yaml")
    assert words in str(info.value)


def test_a_started_cluster_without_a_worker_is_exit_5():
    """As an SSH or batch cluster whose workers never join: the first-worker wait."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=None) as empty,
        Client(empty) as c,
    ):
        start = time.perf_counter()
        with pytest.raises(ClusterError) as info:
            wait_for_first_worker(c, "slurm", "slurm.yaml", Deadline.start(1))
        assert time.perf_counter() - start < 10
    message = str(info.value)
    assert "'slurm' cluster of slurm.yaml has no worker after timeout=1 s" in message
    assert "queue" in message


def test_connect_waits_for_a_started_clusters_first_worker(monkeypatch):
    """The wait is wired into connect() for every started kind (here a local one, emptied)."""
    from distributed import LocalCluster

    from distforest.parallel import cluster

    started = []

    def empty_cluster(options):
        started.append(LocalCluster(n_workers=0, processes=False, dashboard_address=None))
        return started[-1]

    monkeypatch.setattr(cluster, "start_local", empty_cluster)
    config = parse_cluster_config({"kind": "local", "n_workers": 1}, "local.yaml")
    with pytest.raises(ClusterError, match=r"'local' cluster of local\.yaml has no worker after"):
        with connect(cluster=config, timeout=1):
            pytest.fail("connect() yielded a cluster without a worker")
    assert started and started[0].status.name == "closed"  # closed on the way out


def test_ssh_connections_get_the_timeout_unless_the_file_sets_one():
    from distforest.parallel.cluster import _with_connect_timeout

    limit = Deadline.start(7)
    assert _with_connect_timeout(None, limit) == {"connect_timeout": 7}
    assert _with_connect_timeout({"connect_timeout": 3, "port": 22}, limit) == {
        "connect_timeout": 3,
        "port": 22,
    }
    assert _with_connect_timeout([{}, {"connect_timeout": 1}], limit) == [
        {"connect_timeout": 7},
        {"connect_timeout": 1},
    ]


@pytest.mark.skipif(importlib.util.find_spec("asyncssh") is None, reason="needs asyncssh")
def test_ssh_workers_may_not_wait_for_a_scheduler_file():
    """On their hosts that wait could not be bounded: refused before anything starts."""
    data = {"kind": "ssh", "hosts": ["a", "b"], "worker_options": {"scheduler_file": "s.json"}}
    with pytest.raises(ConfigError, match=r"worker_options\.scheduler_file' is refused"):
        parse_cluster_config(data, "ssh.yaml")


def test_a_bad_timeout_setting_is_refused(monkeypatch):
    from distforest import settings
    from distforest.errors import ParameterError

    monkeypatch.setenv("DISTFOREST_CLUSTER_TIMEOUT", "soon")
    with pytest.raises(ParameterError, match="DISTFOREST_CLUSTER_TIMEOUT must be a positive"):
        settings.get("cluster-timeout")
