"""Real Dask engines on this machine, end to end: ``make test-cluster`` (run as root).

Not part of ``make test``.  Installs what it needs (Debian packages with
apt-get: openssh-server, slurm-wlm, munge), starts every daemon itself on
127.0.0.1 and stops it at the end:

- ``standalone``: a ``dask scheduler`` and two ``dask worker`` processes,
  reached with ``--scheduler tcp://127.0.0.1:PORT``;
- ``ssh``: an ``sshd`` on 127.0.0.1 with a host key and a user key made for
  the run, ``cluster_configs/ssh.yaml`` (dask's SSHCluster) with the port and
  key added to its ``connect_options``;
- ``slurm``: a single-node Slurm (``munged``, ``slurmctld``, ``slurmd``) and
  ``cluster_configs/slurm.yaml`` (dask-jobqueue's SLURMCluster, 2 jobs).

On each engine the main pipeline (``pipelines/main.yaml``) and the X-Forest
pipeline (``pipelines/xforest_cluster.yaml``) run twice: once plainly, once
with a worker killed while the job runs (SIGKILL of a worker process; for
Slurm ``scancel`` of its job): the worker chosen is one the run's scheduler
shows running a task, and the kill counts only if the scheduler then lost
that worker while the run was still going (else the script fails).  Every
stored array and every CSV output is compared byte for byte with a
LocalCluster run of the same pipeline (same seed).  The table goes to
``benchmarks/results/clusters.md``; its hand-written section from
``## What I saw`` on is kept.

Usage::

    python .ci/test_cluster.py [standalone] [ssh] [slurm]   # default: all three
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import yaml
import zarr

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
PIPELINES = {"main": "pipelines/main.yaml", "xforest": "pipelines/xforest_cluster.yaml"}
#: When a "worker killed" run kills: the main pipeline once its forest is
#: saved (the store exists: tiles, imputation, MDS), X-Forest during its fit
#: (its tile phase is 3 tasks, too short to aim at).
#: When the kill comes: once this file of the run exists, or (None) as soon as a worker
#: runs a task.  The main pipeline's kill used to wait for its store (the forest saved),
#: but on a quiet machine its tiles then took under three seconds and the run ended
#: before a busy worker could be found (ssh and slurm, 2026-11-29): both now kill
#: during the fit, which every engine lands.
KILL_AFTER: dict[str, str | None] = {"main": None, "xforest": None}
LANDED = "LANDED during work"
ENGINES = ("standalone", "ssh", "slurm")
WORK = Path(tempfile.mkdtemp(prefix="distforest-clusters-"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def apt_install(*packages: str) -> None:
    missing = [
        p for p in packages if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode
    ]
    if missing:
        log(f"apt-get install {' '.join(missing)}")
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", *missing],
            check=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )


# --------------------------------------------------------------------------
# Running a pipeline and comparing its outputs
# --------------------------------------------------------------------------


def run_pipeline(
    name: str, out: Path, cluster: list[str], kill: Callable[[int], str] | None, limit: float
) -> dict:
    """Run one pipeline; with ``kill``, call it with the run's pid mid-run.

    The kill comes once the pipeline's :data:`KILL_AFTER` file exists (at
    once if None).  A run still going after ``limit`` seconds is stopped
    (SIGTERM) and run again: the rerun resumes the store (that is what a
    nightly rerun does).
    """
    args = [PY, "-m", "distforest", "-q", "run", PIPELINES[name], "--set", f"output.dir={out}"]
    args += cluster
    log_path = out.with_name(out.name + ".stderr")
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def launch() -> subprocess.Popen[bytes]:
        # stderr to a file: a pipe nobody reads while the kill waits could fill
        with log_path.open("ab") as err:
            return subprocess.Popen(args, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err)

    start = time.perf_counter()
    proc = launch()
    killed = ""
    if kill is not None:
        after = KILL_AFTER[name]
        deadline = time.monotonic() + 120
        while after and proc.poll() is None and time.monotonic() < deadline:
            if any(out.glob(after)):
                break
            time.sleep(0.1)
        killed = kill(proc.pid) if proc.poll() is None else "NOT KILLED: the run ended first"
        killed = f"{'forest saved' if after else 'during the fit'}: {killed}"
    hung = ""
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        hung = f"no end after {limit:.0f} s, stopped (exit {proc.returncode}); rerun resumed"
        proc = launch()
        proc.wait(timeout=1800)
    stderr = log_path.read_text(errors="replace")
    seconds = time.perf_counter() - start
    report = out / "report.json"
    data = json.loads(report.read_text()) if report.exists() else {}
    return {
        "rc": proc.returncode,
        "seconds": seconds,
        "stderr": stderr[-3000:],
        "killed": killed,
        "hung": hung,
        "retries": data.get("retries"),
        "engine": data.get("engine"),
    }


def arrays(store: Path) -> dict[str, bytes]:
    group = zarr.open_group(str(store), mode="r", use_consolidated=False)
    out: dict[str, bytes] = {}

    def walk(g, prefix: str) -> None:
        for name, a in g.arrays():
            out[prefix + name] = np.asarray(a[...]).tobytes()
        for name, sub in g.groups():
            if name != "done":  # per-tile completion records (timestamps)
                walk(sub, f"{prefix}{name}/")

    walk(group, "")
    return out


def outputs(folder: Path) -> dict[str, bytes]:
    """Every array of every store and every CSV file in a run's folder."""
    found: dict[str, bytes] = {}
    for store in sorted(folder.glob("*.zarr")):
        found.update({f"{store.name}/{k}": v for k, v in arrays(store).items()})
    for csv in sorted(folder.glob("*.csv")):
        found[csv.name] = csv.read_bytes()
    return found


def compare(a: dict[str, bytes], b: dict[str, bytes]) -> tuple[bool, str]:
    differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    only = sorted(set(a) ^ set(b))
    ok = not differ and not only and bool(a)
    detail = f"{len(a)} arrays/files" if ok else f"differ {differ[:5]} only-one-side {only[:5]}"
    return ok, detail


# --------------------------------------------------------------------------
# Engines: each yields (cluster arguments, kill function)
# --------------------------------------------------------------------------


def _listening(pids: list[int]) -> list[str]:
    addresses = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for c in psutil.Process(pid).net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN:
                    addresses.append(f"tcp://{c.laddr.ip}:{c.laddr.port}")
    return addresses


def _schedulers(candidates: list[str], timeout: float = 3.0) -> list[str]:
    """The addresses among ``candidates`` where a Dask scheduler answers.

    A scheduler process also listens with its dashboard (HTTP): dask's
    ``Client`` waits there until the server closes, that is until the run
    ends, so every candidate is first asked who it is, with a deadline.
    """
    from distforest.parallel.reach import handshake

    answering = []
    for address in candidates:
        why = handshake(address, None, timeout)
        if not why:
            answering.append(address)
    return answering


def _kill_busy_worker(
    schedulers: Callable[[], list[str]],
    kill: Callable[[str, int], str],
    driver: int,
    timeout: float = 120,
) -> str:
    """Kill a worker that is running a task, and say whether the run still went on.

    ``schedulers`` lists candidate addresses of the run's scheduler (asked
    again until one answers: it may still be starting); ``kill(address,
    pid)`` kills the worker and says how.  The kill counts as landed during
    work when the worker was processing tasks, and the scheduler noticed the
    loss while the run (process ``driver``) was still going.
    """
    from distributed import Client

    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline and _alive(driver):
        candidates = schedulers()
        answering = _schedulers(candidates)
        seen = [f"{a}{'' if a in answering else ' (no scheduler there)'}" for a in candidates]
        for address in answering:
            with contextlib.suppress(OSError), Client(address, timeout=10) as client:
                while time.monotonic() < deadline:
                    busy = [(w, len(keys)) for w, keys in client.processing().items() if keys]
                    if busy:
                        worker, n_tasks = busy[0]
                        pid = client.run(os.getpid, workers=[worker])[worker]
                        how = kill(worker, pid)
                        return f"{how}; {_landed(client, worker, n_tasks, driver)}"
                    if not _alive(driver):
                        break
                    time.sleep(0.05)
        time.sleep(0.5)
    if not _alive(driver):
        return f"NOT KILLED: the run ended first (candidates {seen or 'none'})"
    return f"NOT KILLED: no worker running a task within {timeout:.0f} s ({seen or 'no port'})"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (an ended child not yet waited for does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _landed(client: Any, worker: str, n_tasks: int, driver: int) -> str:
    """Whether the kill of ``worker`` (running ``n_tasks`` tasks) landed during the run."""
    deadline = time.monotonic() + 60
    gone = False
    while time.monotonic() < deadline and not gone:
        with contextlib.suppress(Exception):
            gone = worker not in client.scheduler_info(n_workers=-1)["workers"]
        time.sleep(0.1)
    running = _alive(driver)
    if gone and running:
        return f"{LANDED}: {n_tasks} task(s) on it, run still going after its loss"
    return f"NOT LANDED: {n_tasks} task(s) on it, worker removed={gone}, run still going={running}"


def _sigkill(address: str, pid: int) -> str:
    os.kill(pid, signal.SIGKILL)
    return f"SIGKILL pid {pid} ({address})"


@contextlib.contextmanager
def standalone() -> Iterator[tuple[list[str], Callable[[], str], str]]:
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = WORK / "standalone"
    logs.mkdir()
    sched = subprocess.Popen(
        [
            PY,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-dashboard",
        ],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=(logs / "scheduler.log").open("wb"),
    )
    workers = [
        subprocess.Popen(
            [
                PY,
                "-m",
                "distributed.cli.dask_worker",
                address,
                "--nthreads",
                "1",
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--name",
                f"w{i}",
            ],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=(logs / f"worker{i}.log").open("wb"),
        )
        for i in range(2)
    ]
    procs = [sched, *workers]
    try:
        _wait_for_workers(address, 2)

        def kill(driver: int) -> str:
            # a worker process running a task (its nanny starts a new one)
            return _kill_busy_worker(lambda: [address], _sigkill, driver)

        yield (
            ["--scheduler", address],
            kill,
            (
                f"dask scheduler --host 127.0.0.1 --port {port} --no-dashboard; "
                f"2 x dask worker {address} --nthreads 1"
            ),
        )
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(30)


def _wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(n, timeout=120)


@contextlib.contextmanager
def ssh() -> Iterator[tuple[list[str], Callable[[], str], str]]:
    apt_install("openssh-server")
    d = WORK / "ssh"
    d.mkdir()
    port = free_port()
    for key in ("host_key", "user_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True
        )
    shutil.copy(d / "user_key.pub", d / "authorized_keys")
    os.chmod(d / "authorized_keys", 0o600)
    host_pub = (d / "host_key.pub").read_text().split()[:2]
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_pub)}\n")
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
        f"PidFile {d / 'sshd.pid'}\nUsePAM no\n"
        f"SetEnv PYTHONPATH={ROOT}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    sshd = subprocess.Popen(
        [shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=(d / "sshd.log").open("wb"),
    )
    try:
        time.sleep(1.0)
        config = yaml.safe_load((ROOT / "cluster_configs" / "ssh.yaml").read_text())
        config["connect_options"] = {
            **(config.get("connect_options") or {}),
            "port": port,
            "client_keys": [str(d / "user_key")],
            "known_hosts": str(d / "known_hosts"),
        }
        path = d / "ssh.yaml"
        path.write_text(yaml.safe_dump(config))

        def kill(driver: int) -> str:
            # the scheduler started over SSH: find its port, then a busy worker
            started = psutil.Process(driver).create_time()

            def scheds() -> list[str]:  # this run's scheduler, not a closing earlier one
                pids = [
                    p.pid
                    for p in psutil.process_iter(["cmdline", "create_time"])
                    if "distributed.cli.dask_spec" in " ".join(p.info["cmdline"] or [])
                    and "Scheduler" in " ".join(p.info["cmdline"] or [])
                    and p.info["create_time"] >= started
                ]
                return _listening(pids)

            return _kill_busy_worker(scheds, _sigkill, driver)

        yield (
            ["--cluster", str(path)],
            kill,
            (
                f"sshd -f {d / 'sshd_config'} (127.0.0.1:{port}, key made for the run); "
                "cluster_configs/ssh.yaml + connect_options {port, client_keys, known_hosts}"
            ),
        )
    finally:
        sshd.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            sshd.wait(30)


SLURM_CONF = """\
ClusterName=distforest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmdSpoolDir={d}/slurmd
StateSaveLocation={d}/slurmctld
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@contextlib.contextmanager
def slurm() -> Iterator[tuple[list[str], Callable[[], str], str]]:
    apt_install("slurm-wlm", "munge")
    d = WORK / "slurm"
    (d / "slurmd").mkdir(parents=True)
    (d / "slurmctld").mkdir()
    host = socket.gethostname().split(".")[0]
    mem = int(psutil.virtual_memory().total / 2**20 * 0.8)
    conf = SLURM_CONF.format(host=host, d=d, cpus=os.cpu_count(), mem=mem)
    etc = Path("/etc/slurm")
    etc.mkdir(exist_ok=True)
    saved = (etc / "slurm.conf").read_text() if (etc / "slurm.conf").exists() else None
    (etc / "slurm.conf").write_text(conf)
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            subprocess.run(["mungekey", "--create", "--force"], check=True)
            shutil.chown(key, "munge", "munge")
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        if subprocess.run(["munge", "-n"], capture_output=True).returncode:
            daemons.append(subprocess.Popen(["runuser", "-u", "munge", "--", "munged", "-F"]))
            time.sleep(1.0)
        daemons.append(
            subprocess.Popen(
                ["slurmctld", "-D", "-i"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        daemons.append(
            subprocess.Popen(["slurmd", "-D"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        deadline = time.monotonic() + 60
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
            if state.returncode == 0 and state.stdout.strip() in ("idle", "mixed"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"slurm did not come up: {state.stdout} {state.stderr}")
            time.sleep(1.0)

        def scancel(address: str, pid: int) -> str:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            job = next(e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"SLURM_JOB_ID="))
            subprocess.run(["scancel", job], check=True)
            return f"scancel {job} (worker {address})"

        def kill(driver: int) -> str:
            # the scheduler lives in the driver; cancel the job of a worker running a task
            return _kill_busy_worker(lambda: _listening([driver]), scancel, driver)

        yield (
            ["--cluster", str(ROOT / "cluster_configs" / "slurm.yaml")],
            kill,
            (
                f"single-node Slurm ({host}, {os.cpu_count()} CPUs): munged, slurmctld, slurmd; "
                "cluster_configs/slurm.yaml (SLURMCluster, 2 jobs)"
            ),
        )
    finally:
        subprocess.run(["scancel", "--user", "root"], capture_output=True)
        for p in reversed(daemons):
            p.terminate()
        for p in daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(30)
        if saved is None:
            (etc / "slurm.conf").unlink(missing_ok=True)
        else:
            (etc / "slurm.conf").write_text(saved)


STARTERS = {"standalone": standalone, "ssh": ssh, "slurm": slurm}


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def main(engines: list[str]) -> int:
    log(f"work folder {WORK}")
    load_before = os.getloadavg()
    rows = []
    baseline: dict[str, dict[str, bytes]] = {}
    limits: dict[str, float] = {}
    for name in PIPELINES:
        out = WORK / "local" / name
        r = run_pipeline(name, out, ["--workers", "2", "--threads", "1"], None, 1800)
        log(f"LocalCluster {name}: rc {r['rc']} in {r['seconds']:.1f} s")
        if r["rc"]:
            print(r["stderr"])
            return 1
        baseline[name] = outputs(out)
        limits[name] = max(180.0, 6 * r["seconds"])
        rows.append(("LocalCluster (2 workers x 1 thread)", name, "plain", r, True, "reference"))
    setups = {}
    for engine in engines:
        try:
            with STARTERS[engine]() as (cluster, kill, setup):
                setups[engine] = setup
                for name in PIPELINES:
                    for mode in ("plain", "worker killed"):
                        out = WORK / engine / name / mode.replace(" ", "_")
                        r = run_pipeline(
                            name, out, cluster, kill if mode != "plain" else None, limits[name]
                        )
                        same, detail = (False, r["stderr"][-400:].replace("\n", " "))
                        if r["rc"] == 0:
                            same, detail = compare(baseline[name], outputs(out))
                        log(
                            f"{engine} {name} {mode}: rc {r['rc']} {r['seconds']:.1f} s "
                            f"identical={same} {r['killed']} retries={r['retries']}"
                        )
                        rows.append((engine, name, mode, r, same, detail))
        except Exception as exc:  # an engine that cannot start: recorded, the others still run
            log(f"{engine} could not run: {type(exc).__name__}: {exc}")
            setups[engine] = f"FAILED TO START: {type(exc).__name__}: {exc}"
    write_results(rows, setups, engines, load_before)
    missed = [f"{r[0]} {r[1]}" for r in rows if r[2] != "plain" and LANDED not in r[3]["killed"]]
    ok = all(r[4] for r in rows) and all(not s.startswith("FAILED") for s in setups.values())
    if missed:
        log(f"kills that did not land during work: {', '.join(missed)}")
    log("all identical, every kill landed" if ok and not missed else "SOME RUNS FAILED OR DIFFER")
    return 0 if ok and not missed else 1


NOTES = "## What I saw"


def _load(avg: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.2f}" for x in avg)


def write_results(rows, setups, engines, load_before) -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    mem = psutil.virtual_memory().total / 2**30
    lines = [
        "# Real engines on one machine: bit identity with a LocalCluster run",
        "",
        f"- Date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- Machine: {os.cpu_count()} cores, {mem:.0f} GiB memory, {sys.platform}",
        f"- Commit: {commit}{' (with uncommitted changes)' if dirty else ''}",
        f"- Command: `make test-cluster` (= `python .ci/test_cluster.py {' '.join(engines)}`)",
        f"- Load average (1, 5, 15 min) at the start: {_load(load_before)}; "
        f"at the end: {_load(os.getloadavg())}",
        "- Timings were taken while other engineers worked on the same 2 cores: they are",
        "  drafts, not benchmarks.  Identity does not depend on load.",
        "- Each pipeline runs as `distforest -q run PIPELINE --set output.dir=DIR` plus the",
        "  engine's option; every Zarr array (per-tile `done/` records aside) and every CSV",
        "  output is compared byte for byte with the LocalCluster run of the same pipeline.",
        "",
        "## Engines",
        "",
        *(f"- **{e}**: {s}" for e, s in setups.items()),
        "- **kubernetes**: cannot run here (no Kubernetes cluster on this machine);",
        "  `cluster_configs/kubernetes.yaml` is checked against `KubeCluster`'s signature",
        "  by `tests/test_cluster.py` (dask-kubernetes is in the `test` extra).",
        "",
        "## Runs",
        "",
        "| engine | pipeline | run | exit | seconds | kill | stall | retried tasks | identical "
        "| detail |",
        "|---|---|---|---:|---:|---|---|---:|---|---|",
    ]
    for engine, name, mode, r, same, detail in rows:
        lines.append(
            f"| {engine} | {name} | {mode} | {r['rc']} | {r['seconds']:.1f} | "
            f"{r['killed'] or '-'} | {r['hung'] or '-'} | "
            f"{r['retries'] if r['retries'] is not None else '-'} | "
            f"{same} | {detail} |"
        )
    engines_seen = {r[0]: r[3]["engine"] for r in rows if r[3]["engine"]}
    lines += ["", "## What the run reports said about the engine", ""]
    lines += [f"- {e}: `{json.dumps(info)}`" for e, info in engines_seen.items()]
    path = ROOT / "benchmarks" / "results" / "clusters.md"
    old = path.read_text() if path.exists() else ""
    notes = old[old.index(NOTES) :] if NOTES in old else ""  # written by hand: kept
    path.write_text("\n".join(lines) + "\n" + ("\n" + notes if notes else ""))
    log(f"wrote {path}")


if __name__ == "__main__":
    chosen = sys.argv[1:] or list(ENGINES)
    unknown = set(chosen) - set(ENGINES)
    if unknown:
        sys.exit(f"unknown engine(s) {sorted(unknown)}; choose from {', '.join(ENGINES)}")
    sys.exit(main(chosen))
