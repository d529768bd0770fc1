"""Tests of distforest.parallel.cluster: config files, errors, a real LocalCluster."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest
import yaml
from distributed import Client

from distforest.errors import ClusterError, ConfigError, MissingDependencyError, ParameterError
from distforest.parallel.cluster import (
    KINDS,
    ClusterConfig,
    connect,
    default_cluster_config,
    load_cluster_config,
    parse_cluster_config,
)

CONFIG_DIR = Path(__file__).resolve().parents[1] / "cluster_configs"
CONFIG_FILES = sorted(CONFIG_DIR.glob("*.yaml")) + sorted(CONFIG_DIR.glob("*.yml"))


def _write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------
# Shipped config files
# --------------------------------------------------------------------------


def test_the_expected_example_files_are_shipped():
    names = {p.name for p in CONFIG_FILES}
    for expected in ("local", "address", "ssh", "slurm", "pbs", "kubernetes"):
        assert f"{expected}.yaml" in names


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_every_shipped_config_parses(path):
    config = load_cluster_config(path)
    assert config.kind in KINDS
    assert config.source == str(path)
    # Each file is commented for the user who copies it.
    assert path.read_text(encoding="utf-8").lstrip().startswith("#")
    # as_dict round-trips through YAML to the same config.
    again = parse_cluster_config(yaml.safe_load(yaml.safe_dump(config.as_dict())), str(path))
    assert again == config


def test_local_yaml_values():
    config = load_cluster_config(CONFIG_DIR / "local.yaml")
    assert config.kind == "local"
    assert config.options["n_workers"] == 2
    assert config.options["threads_per_worker"] == 1
    assert config.options["dashboard"] is False


def test_options_are_read_only():
    config = parse_cluster_config({"kind": "ssh", "hosts": ["a", "b"], "worker_options": {}})
    with pytest.raises(TypeError):
        config.options["hosts"] = ["c"]  # type: ignore[index]
    assert isinstance(config.options["hosts"], tuple)


# --------------------------------------------------------------------------
# A real LocalCluster with processes
# --------------------------------------------------------------------------


def test_local_yaml_starts_a_loopback_cluster_with_processes():
    with connect(cluster=CONFIG_DIR / "local.yaml", timeout=30) as client:
        assert client.submit(lambda x: x + 1, 1).result() == 2
        info = client.scheduler_info()
        assert client.scheduler.address.startswith("tls://127.0.0.1:")  # loopback, TLS
        workers = info["workers"]
        assert len(workers) == 2
        for address, worker in workers.items():
            assert address.startswith("tls://127.0.0.1:")
            assert worker["nthreads"] == 1
        pids = client.run(os.getpid)
        assert os.getpid() not in pids.values()
        assert len(set(pids.values())) == 2
        cluster = client.cluster
    # The cluster connect() started is closed on exit.
    assert cluster.status.name == "closed"
    assert client.status == "closed"


# --------------------------------------------------------------------------
# Bad configs
# --------------------------------------------------------------------------


def test_unknown_key_names_file_key_allowed_and_closest(tmp_path):
    path = _write(tmp_path, "kind: local\nn_worker: 2\n")
    with pytest.raises(ConfigError) as info:
        load_cluster_config(path)
    message = str(info.value)
    assert str(path) in message
    assert "'n_worker'" in message
    assert "threads_per_worker" in message  # the allowed keys are listed
    assert "did you mean 'n_workers'?" in message


def test_unknown_nested_key_gives_its_path(tmp_path):
    path = _write(tmp_path, "kind: address\naddress: tls://h:8786\ntls:\n  ca_fil: x.pem\n")
    with pytest.raises(ConfigError, match=r"'tls\.ca_fil'.*did you mean 'ca_file'"):
        load_cluster_config(path)


def test_ssh_worker_options_cannot_preload_modules():
    with pytest.raises(ConfigError, match=r"'worker_options\.preload'"):
        parse_cluster_config(
            {"kind": "ssh", "hosts": ["a", "b"], "worker_options": {"preload": ["evil"]}}
        )


def test_wrong_type_names_key_value_and_expected_type(tmp_path):
    path = _write(tmp_path, "kind: local\nn_workers: two\n")
    with pytest.raises(ConfigError) as info:
        load_cluster_config(path)
    message = str(info.value)
    assert str(path) in message
    assert "'n_workers'" in message
    assert "'two'" in message
    assert "integer" in message


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"kind": "local", "n_workers": True}, "n_workers"),
        ({"kind": "local", "n_workers": 0}, "n_workers"),
        ({"kind": "local", "memory_limit": "lots"}, "memory_limit"),
        ({"kind": "local", "dashboard": "yes"}, "dashboard"),
        ({"kind": "slurm", "walltime": 3600}, "walltime"),
        ({"kind": "ssh", "hosts": ["only-one"]}, "hosts"),
        ({"kind": "address", "address": "http://h:8786"}, "address"),
    ],
)
def test_bad_values_are_config_errors(data, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        parse_cluster_config(data)


def test_unquoted_walltime_gets_a_quoting_hint(tmp_path):
    path = _write(tmp_path, "kind: slurm\nwalltime: 1:30:00\n")
    with pytest.raises(ConfigError, match="quote it"):
        load_cluster_config(path)


def test_unknown_kind(tmp_path):
    path = _write(tmp_path, "kind: slurmm\n")
    with pytest.raises(ConfigError) as info:
        load_cluster_config(path)
    message = str(info.value)
    assert "'kind'" in message and "'slurmm'" in message
    assert "did you mean 'slurm'?" in message


def test_a_kind_cannot_name_a_class():
    with pytest.raises(ConfigError, match="'kind'"):
        parse_cluster_config({"kind": "distributed.LocalCluster"})


@pytest.mark.parametrize(
    ("data", "key"),
    [({"kind": "address"}, "address"), ({"kind": "ssh"}, "hosts"), ({"n_workers": 2}, "kind")],
)
def test_missing_required_key(data, key):
    with pytest.raises(ConfigError, match=f"missing required key '{key}'"):
        parse_cluster_config(data, source="my.yaml")


def test_options_block_is_rejected_with_a_hint():
    with pytest.raises(ConfigError, match="top level"):
        parse_cluster_config({"kind": "local", "options": {"n_workers": 2}})


@pytest.mark.parametrize("text", ["", "- kind: local\n", "kind: [local\n"])
def test_empty_list_or_broken_yaml(tmp_path, text):
    with pytest.raises(ConfigError):
        load_cluster_config(_write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_cluster_config(tmp_path / "nope.yaml")


# --------------------------------------------------------------------------
# Missing optional packages
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "module", "extra"),
    [
        ("slurm.yaml", "dask_jobqueue", "jobqueue"),
        ("pbs.yaml", "dask_jobqueue", "jobqueue"),
        ("ssh.yaml", "asyncssh", "ssh"),
        ("kubernetes.yaml", "dask_kubernetes.operator", "kubernetes"),
    ],
)
def test_missing_extra_gives_pip_command(monkeypatch, name, module, extra):
    # A None entry in sys.modules makes every import of that module fail.
    monkeypatch.setitem(sys.modules, module, None)
    config = load_cluster_config(CONFIG_DIR / name)
    with pytest.raises(MissingDependencyError) as info:
        with connect(cluster=config):
            pytest.fail("connect() must not yield without the package")
    message = str(info.value)
    assert f"pip install 'distforest[{extra}]'" in message
    assert f"{config.kind!r}" in message


# --------------------------------------------------------------------------
# connect(): addresses and arguments
# --------------------------------------------------------------------------


def test_unreachable_scheduler_fails_fast():
    address = f"tcp://127.0.0.1:{_closed_port()}"
    start = time.perf_counter()
    with pytest.raises(ClusterError) as info:
        with connect(scheduler=address, timeout=2):
            pytest.fail("connect() must not yield without a scheduler")
    assert time.perf_counter() - start < 15
    message = str(info.value)
    assert f"could not reach the Dask scheduler at {address}" in message
    assert "firewalls" in message


def test_scheduler_and_cluster_together_are_refused():
    with pytest.raises(ParameterError, match="not both"):
        with connect(scheduler="tcp://127.0.0.1:8786", cluster=CONFIG_DIR / "local.yaml"):
            pass


def test_bad_scheduler_address_is_refused_before_connecting():
    with pytest.raises(ParameterError, match="scheduler address"):
        with connect(scheduler="http://example.org"):
            pass


def test_size_overrides_only_apply_to_local_clusters():
    with pytest.raises(ParameterError, match="n_workers"):
        with connect(scheduler="tcp://127.0.0.1:8786", n_workers=3):
            pass


def test_scheduler_without_scheme_means_tcp():
    config = parse_cluster_config({"kind": "address", "address": "10.0.0.5:8786"})
    assert config.options["address"] == "tcp://10.0.0.5:8786"


def test_default_cluster_config():
    config = default_cluster_config(n_workers=3, memory_limit="1GiB")
    assert isinstance(config, ClusterConfig)
    assert config.kind == "local" and config.source == "<default>"
    assert config.options["n_workers"] == 3
    assert config.options["threads_per_worker"] == 1
    assert config.options["memory_limit"] == "1GiB"
    assert config.options["dashboard"] is False
    assert default_cluster_config().options["n_workers"] >= 1
    with pytest.raises(ParameterError, match="threads_per_worker"):
        default_cluster_config(threads_per_worker=0)


def test_relative_tls_paths_resolve_next_to_the_file(tmp_path):
    path = _write(tmp_path, "kind: address\naddress: tls://h:8786\ntls:\n  ca_file: certs/ca.pem\n")
    config = load_cluster_config(path)
    assert config.options["tls"]["ca_file"] == str(tmp_path / "certs" / "ca.pem")


def test_default_local_cluster_refuses_clients_without_the_runs_credentials():
    """Another local user cannot connect (and so cannot run code as us)."""
    from distforest.parallel.cluster import connect

    with connect(n_workers=1, threads_per_worker=1) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert client.submit(sum, [1, 2]).result() == 3  # our own client works
        for target in (address, address.replace("tls://", "tcp://")):
            with pytest.raises(Exception):  # noqa: B017 - any refusal will do
                Client(target, timeout=3)
        # dask's scheduler always has an HTTP server: on a random loopback port, no dashboard
        ports = client.run_on_scheduler(
            lambda dask_scheduler: [
                s.getsockname() for s in dask_scheduler.http_server._sockets.values()
            ]
        )
        assert ports and all(host == "127.0.0.1" and port != 8787 for host, port, *_ in ports)
