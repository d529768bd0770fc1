"""Tests of distforest.parallel.cluster: config files, errors, a real LocalCluster."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from distributed import Client

from distforest.errors import ClusterError, ConfigError, MissingDependencyError, ParameterError
from distforest.parallel.cluster import (
    KINDS,
    ClusterConfig,
    connect,
    default_cluster_config,
    engine_report,
    load_cluster_config,
    parse_cluster_config,
)
from distforest.parallel.cluster_keys import BACKENDS, REFUSED

NEEDS_JOBQUEUE = pytest.mark.skipif(
    importlib.util.find_spec("dask_jobqueue") is None, reason="needs dask-jobqueue"
)
NEEDS_SSH = pytest.mark.skipif(
    importlib.util.find_spec("asyncssh") is None, reason="needs asyncssh"
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


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_every_shipped_config_parses(path):
    kind = yaml.safe_load(path.read_text(encoding="utf-8"))["kind"]
    backend = BACKENDS.get(kind)
    if backend is not None and backend.needs and not _has(backend.needs):
        # Keys are checked against the library: without it, say what to install.
        with pytest.raises(
            MissingDependencyError, match=f"pip install 'distforest\\[{backend.extra}"
        ):
            load_cluster_config(path)
        return
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
    pytest.importorskip("asyncssh")
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


def _modules_loaded(names):
    import sys

    return all(name in sys.modules for name in names)


def test_local_workers_import_the_task_modules_before_taking_tasks():
    """Done before the worker registers, not on a thread racing the tasks' own imports
    (two threads in Zarr's import cycle gave a worker a half-initialised module)."""
    from distforest.parallel.local_cluster import PRELOAD, local_kwargs
    from distforest.parallel.preload import MODULES

    opts = {"dashboard": False, "silence_logs": None, "preload": "mine"}
    assert local_kwargs(opts)["preload"] == ["mine", PRELOAD]
    with connect(n_workers=1, timeout=30) as client:
        loaded = client.run(_modules_loaded, MODULES)
        assert loaded and all(loaded.values()), loaded


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
    pytest.importorskip("asyncssh")
    with pytest.raises(ConfigError, match=r"'worker_options\.preload'.*import or run code"):
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
        pytest.param({"kind": "slurm", "walltime": 3600}, "walltime", marks=NEEDS_JOBQUEUE),
        pytest.param({"kind": "ssh", "hosts": ["only-one"]}, "hosts", marks=NEEDS_SSH),
        ({"kind": "address", "address": "http://h:8786"}, "address"),
    ],
)
def test_bad_values_are_config_errors(data, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        parse_cluster_config(data)


@NEEDS_JOBQUEUE
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
    [
        ({"kind": "address"}, "address"),
        pytest.param({"kind": "ssh"}, "hosts", marks=NEEDS_SSH),
        ({"n_workers": 2}, "kind"),
    ],
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
    ("name", "module", "extra", "package"),
    [
        ("slurm.yaml", "dask_jobqueue", "jobqueue", "dask-jobqueue"),
        ("pbs.yaml", "dask_jobqueue", "jobqueue", "dask-jobqueue"),
        ("ssh.yaml", "asyncssh", "ssh", "asyncssh"),
        ("kubernetes.yaml", "dask_kubernetes.operator", "kubernetes", "dask-kubernetes"),
    ],
)
def test_missing_library_gives_pip_command(monkeypatch, name, module, extra, package):
    # A None entry in sys.modules makes every import of that module fail.
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError) as info:
        load_cluster_config(CONFIG_DIR / name)
    message = str(info.value)
    assert f"pip install 'distforest[{extra}]'" in message
    assert package in message


def test_refused_connection_is_reported_at_once_not_after_the_timeout():
    address = f"tcp://127.0.0.1:{_closed_port()}"
    start = time.perf_counter()
    with pytest.raises(ClusterError) as info:
        with connect(scheduler=address, timeout=30):
            pytest.fail("connect() must not yield without a scheduler")
    assert time.perf_counter() - start < 3  # not the 30 s timeout
    message = str(info.value)
    assert f"could not reach the Dask scheduler at {address}" in message
    assert "refused" in message.lower()


def test_silent_scheduler_gets_the_timeout():
    """A port that accepts but never answers: the timeout applies (and is respected)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        start = time.perf_counter()
        with pytest.raises(ClusterError, match="could not reach"):
            with connect(scheduler=address, timeout=2):
                pytest.fail("connect() must not yield without a scheduler")
        assert 1.5 < time.perf_counter() - start < 15


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
    config = parse_cluster_config({"kind": "address", "address": "127.0.0.1:8786"})
    assert config.options["address"] == "tcp://127.0.0.1:8786"


@pytest.mark.parametrize("host", ["10.0.0.5", "node7.example.org", "[2001:db8::1]"])
def test_plain_tcp_off_this_machine_needs_insecure(host):
    with pytest.raises(ConfigError, match="insecure: true") as info:
        parse_cluster_config({"kind": "address", "address": f"tcp://{host}:8786"}, "c.yaml")
    assert "tls://" in str(info.value) and f"{host}:8786" in str(info.value)
    config = parse_cluster_config(
        {"kind": "address", "address": f"tcp://{host}:8786", "insecure": True}
    )
    assert config.options["insecure"] is True
    # tls:// and loopback need nothing
    parse_cluster_config({"kind": "address", "address": f"tls://{host}:8786"})
    for loop in ("127.0.0.1", "127.3.4.5", "localhost", "[::1]"):
        parse_cluster_config({"kind": "address", "address": f"tcp://{loop}:8786"})
    # the Python shorthand: an explicit option, else a ParameterError before any connection
    with pytest.raises(ParameterError, match="insecure"):
        with connect(scheduler=f"tcp://{host}:8786"):
            pass


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


_INTRUDER = """
import sys
from distributed import Client
for target in sys.argv[1:]:
    try:
        Client(target, timeout=3)
    except Exception as exc:
        print("refused", target, type(exc).__name__)
    else:
        print("CONNECTED", target)
"""


def _listening(pid: int) -> set[tuple[str, int]]:
    """(host, port) of the TCP sockets a process listens on."""
    import psutil

    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def _dask_ports(client: Client) -> set[tuple[str, int]]:
    """(host, port) of the scheduler and the nannies (which live in this process)."""
    addresses = [client.scheduler.address]
    addresses += [w["nanny"] for w in client.scheduler_info()["workers"].values()]
    return {(a.split("://")[1].rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in addresses}


def test_default_local_cluster_refuses_clients_without_the_runs_credentials():
    """Another local process cannot connect (and so cannot run code as us)."""
    before = _listening(os.getpid())
    with connect(n_workers=1, threads_per_worker=1) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert client.submit(sum, [1, 2]).result() == 3  # our own client works
        plain = address.replace("tls://", "tcp://")
        out = subprocess.run(
            [sys.executable, "-c", _INTRUDER, address, plain],
            capture_output=True, text=True, timeout=120,
        ).stdout  # fmt: skip
        assert f"refused {address}" in out and f"refused {plain}" in out, out
        # Dashboard off: the scheduler (in this process) listens on its TLS port only,
        # no HTTP server (no 8787, nothing that gives the address away).
        assert _listening(os.getpid()) - before == _dask_ports(client)
        assert client.dashboard_link is None or engine_report(client)["dashboard"] is None
        # nor do the workers (dask's serve /health, /metrics to any local user otherwise)
        (served,) = client.run(_worker_http).values()
        assert served == (False, {}), served


def _worker_http(dask_worker: Any) -> tuple[bool, dict]:  # runs on the worker
    return hasattr(dask_worker, "http_server"), dict(dask_worker.service_ports)


@pytest.mark.parametrize("dashboard", [True, "127.0.0.1:{port}"])
def test_dashboard_on_binds_loopback_or_the_address_named(dashboard):
    if isinstance(dashboard, str):
        dashboard = dashboard.format(port=_closed_port())
    config = parse_cluster_config({"kind": "local", "n_workers": 1, "dashboard": dashboard})
    before = _listening(os.getpid())
    with connect(cluster=config) as client:
        http = _listening(os.getpid()) - before - _dask_ports(client)
        assert len(http) == 1, http
        host, port = http.pop()
        assert host == "127.0.0.1"
        if isinstance(dashboard, str):
            assert port == int(dashboard.rsplit(":", 1)[1])
        report = engine_report(client)
        assert report["dashboard"] is not None and str(port) in report["dashboard"]


# --------------------------------------------------------------------------
# Keys in the libraries' own terms (introspected signatures)
# --------------------------------------------------------------------------


JQ, K8S = "dask_jobqueue", "dask_kubernetes"


@pytest.mark.parametrize(
    ("data", "module"),
    [
        ({"kind": "local", "processes": False, "dashboard_address": "127.0.0.1:0"}, None),
        ({"kind": "local", "lifetime": "1h", "worker_dashboard_address": ":0"}, None),
        ({"kind": "slurm", "worker_extra_args": ["--lifetime", "1h"], "job_mem": "1G"}, JQ),
        ({"kind": "pbs", "resource_spec": "select=1:ncpus=2", "job_directives_skip": ["-j"]}, JQ),
        ({"kind": "ssh", "hosts": ["a", "b"], "worker_options": {"lifetime": "1h"}}, "asyncssh"),
        ({"kind": "kubernetes", "worker_command": "dask worker", "idle_timeout": 60}, K8S),
    ],
)  # fmt: skip
def test_keys_the_library_accepts_are_accepted(data, module):
    if module:
        pytest.importorskip(module)
    config = parse_cluster_config(data)
    for key, value in data.items():
        if key not in ("kind", "dashboard_address"):
            assert config.as_dict()[key] == value


def test_a_new_library_keyword_works_without_changing_distforest(monkeypatch):
    """The allowed keys come from the class's signature, not from a list in distforest."""
    from distforest.parallel import cluster_keys

    class NewerLocalCluster:
        def __init__(self, n_workers=None, brand_new_option=None, **worker_kwargs):
            pass

    real = cluster_keys.backend_class
    monkeypatch.setattr(
        cluster_keys,
        "backend_class",
        lambda kind: NewerLocalCluster if kind == "local" else real(kind),
    )
    monkeypatch.setattr(
        "distforest.parallel.cluster_config.accepted_keys", cluster_keys.accepted_keys
    )
    config = parse_cluster_config({"kind": "local", "brand_new_option": 3})
    assert config.options["brand_new_option"] == 3
    with pytest.raises(ConfigError, match="did you mean 'brand_new_option'"):
        parse_cluster_config({"kind": "local", "brand_new_opton": 3})


def test_every_named_localcluster_keyword_is_accepted_or_refused_with_a_reason():
    from distributed import LocalCluster, Nanny, Worker

    for target in (LocalCluster, Nanny, Worker):
        for name, p in inspect.signature(target).parameters.items():
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            if name in REFUSED:
                with pytest.raises(ConfigError, match="not from a cluster file"):
                    parse_cluster_config({"kind": "local", name: None})
            else:
                try:
                    parse_cluster_config({"kind": "local", name: None})
                except ConfigError as exc:  # a value check (None is no integer): not "unknown"
                    assert "unknown key" not in str(exc), name


def test_the_kubernetes_file_speaks_kubeclusters_own_keywords():
    """No Kubernetes here: the shipped file is held to KubeCluster's real signature.

    dask-kubernetes is in the ``test`` extra, so this runs in ``make test``.
    """
    from dask_kubernetes.operator import KubeCluster

    data = yaml.safe_load((CONFIG_DIR / "kubernetes.yaml").read_text(encoding="utf-8"))
    keywords = set(inspect.signature(KubeCluster).parameters)
    assert set(data) - {"kind"} <= keywords, set(data) - {"kind"} - keywords
    config = load_cluster_config(CONFIG_DIR / "kubernetes.yaml")
    assert {k: v for k, v in config.as_dict().items() if k in keywords} == {
        k: v for k, v in data.items() if k != "kind"
    }
    # and a key KubeCluster does not take is refused with the closest one
    with pytest.raises(ConfigError, match="did you mean 'n_workers'"):
        parse_cluster_config({**data, "n_worker": 2})


@NEEDS_JOBQUEUE
def test_jobqueue_typo_gets_did_you_mean(tmp_path):
    path = _write(tmp_path, "kind: slurm\ncores: 1\nmemory: 1GB\nworker_extra_arg: []\n")
    with pytest.raises(ConfigError, match="did you mean 'worker_extra_args'"):
        load_cluster_config(path)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"kind": "local", "preload": ["evil"]}, "preload"),
        ({"kind": "local", "worker_class": "evil.Worker"}, "worker_class"),
        ({"kind": "local", "env": {"LD_PRELOAD": "/tmp/evil.so"}}, "env"),
        ({"kind": "local", "scheduler_kwargs": {"preload": ["evil"]}}, "scheduler_kwargs.preload"),
        ({"kind": "local", "security": True}, "security"),
    ],
)
def test_keys_that_would_run_code_are_refused_with_the_reason(data, key):
    with pytest.raises(ConfigError) as info:
        parse_cluster_config(data, "c.yaml")
    message = str(info.value)
    assert f"key {key!r}" in message and "not from a cluster file" in message


_JOBQUEUE_FILE = """\
# the format of ~/.config/dask/jobqueue.yaml
jobqueue:
  slurm:
    cores: 1
    memory: 1GB
    processes: 1
    walltime: '00:10:00'
    job-extra-directives: ["--comment=distforest-test"]
    worker-extra-args: ["--lifetime", "2h"]
    scheduler-options: {host: 127.0.0.1, dashboard_address: "127.0.0.1:0"}
jobs: 2
"""


@NEEDS_JOBQUEUE
def test_a_dask_jobqueue_config_file_is_accepted_as_it_is(tmp_path):
    from distforest.parallel.cluster import _jobqueue_settings

    config = load_cluster_config(_write(tmp_path, _JOBQUEUE_FILE))
    assert config.kind == "slurm" and config.options["jobs"] == 2
    assert config.jobqueue["job-extra-directives"] == ("--comment=distforest-test",)
    again = parse_cluster_config(yaml.safe_load(yaml.safe_dump(config.as_dict())))
    assert again.jobqueue == config.jobqueue and again.kind == "slurm"
    # dask-jobqueue reads the section itself: the job script it writes has it
    from dask_jobqueue import SLURMCluster

    with _jobqueue_settings(config):
        cluster = SLURMCluster()
        try:
            script = cluster.job_script()
        finally:
            cluster.close()
    assert "#SBATCH --comment=distforest-test" in script
    assert "--lifetime 2h" in script
    assert "#SBATCH -t 00:10:00" in script


@NEEDS_JOBQUEUE
def test_a_dask_jobqueue_file_with_a_typo(tmp_path):
    text = _JOBQUEUE_FILE.replace("job-extra-directives", "job-extra-directive")
    with pytest.raises(ConfigError, match="did you mean 'job-extra-directives'"):
        load_cluster_config(_write(tmp_path, text))
    with pytest.raises(ConfigError, match="did you mean 'jobs'"):
        load_cluster_config(_write(tmp_path, _JOBQUEUE_FILE.replace("jobs:", "job:")))


@NEEDS_SSH
def test_a_started_cluster_with_a_network_scheduler_needs_insecure():
    """Checked before anything starts: no SSH connection is tried."""
    config = parse_cluster_config({"kind": "ssh", "hosts": ["127.0.0.1", "127.0.0.1"]}, "s.yaml")
    with pytest.raises(ConfigError, match=r"s\.yaml.*insecure: true"):
        with connect(cluster=config):
            pytest.fail("started without insecure")
