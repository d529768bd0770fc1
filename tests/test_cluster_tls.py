"""A real ``dask scheduler`` and ``dask worker`` with TLS on loopback, certificates made here.

The documented way to reach a remote scheduler: ``tls://`` with the
certificate files named in the cluster file.  A self-signed CA signs the
scheduler's, the worker's and the client's certificates; a client without
them (or with a certificate from another CA) is refused.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distforest.errors import ClusterError
from distforest.parallel.cluster import connect, engine_report, load_cluster_config


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _write_pem(path: Path, key, cert) -> None:
    from cryptography.hazmat.primitives import serialization

    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_ca(folder: Path, name: str):
    """A self-signed certificate authority; returns (key, cert) and writes name.pem/.key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_pem(folder / name, key, cert)
    return key, cert


def make_cert(folder: Path, name: str, ca) -> None:
    """A certificate for 127.0.0.1 signed by ``ca``; writes name.pem/.key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    ca_key, ca_cert = ca
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_pem(folder / name, key, cert)


def _tls_args(folder: Path, name: str) -> list[str]:
    return [
        "--tls-ca-file", str(folder / "ca.pem"),
        "--tls-cert", str(folder / f"{name}.pem"),
        "--tls-key", str(folder / f"{name}.key"),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """A TLS scheduler and one worker, as separate processes on 127.0.0.1."""
    folder = tmp_path_factory.mktemp("tls")
    ca = make_ca(folder, "ca")
    for name in ("scheduler", "worker", "client"):
        make_cert(folder, name, ca)
    make_cert(folder, "stranger", make_ca(folder, "other-ca"))
    sched_file = folder / "scheduler.json"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--protocol",
                "tls",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
                *_tls_args(folder, "scheduler"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=(folder / "scheduler.log").open("wb"),
        )
    ]
    try:
        import json

        # the scheduler creates the file before it writes it: wait for whole JSON (a
        # loaded machine was seen to read it empty)
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the TLS scheduler did not start"
            assert procs[0].poll() is None, (folder / "scheduler.log").read_text()[-2000:]
            with contextlib.suppress(OSError, ValueError):
                address = json.loads(sched_file.read_text())["address"]
                break
            time.sleep(0.2)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "1",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                    *_tls_args(folder, "worker"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        yield folder, address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def _cluster_file(folder: Path, address: str, cert: str) -> Path:
    path = folder / f"{cert}-cluster.yaml"
    path.write_text(
        f"kind: address\naddress: {address}\ntls:\n  ca_file: ca.pem\n"
        f"  cert_file: {cert}.pem\n  key_file: {cert}.key\n",
        encoding="utf-8",
    )
    return path


def test_tls_cluster_file_reaches_the_scheduler_and_the_report_says_so(tls_cluster):
    folder, address = tls_cluster
    assert address.startswith("tls://127.0.0.1:")
    path = _cluster_file(folder, address, "client")
    with connect(cluster=path, timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        assert client.submit(lambda x: x * 2, 21).result() == 42
        report = engine_report(client)
    assert report["engine"] == "address"
    assert report["scheduler"] == address and report["tls"] is True
    assert report["cluster_file"] == str(path)
    assert len(report["workers"]) == 1 and report["workers"][0].startswith("tls://127.0.0.1:")
    assert load_cluster_config(path).options["tls"]["ca_file"] == str(folder / "ca.pem")


def test_without_the_certificates_the_client_is_refused_quickly(tls_cluster):
    _folder, address = tls_cluster
    start = time.perf_counter()
    with pytest.raises(ClusterError, match="could not reach the Dask scheduler"):
        with connect(scheduler=address, timeout=5):
            pytest.fail("connected without certificates")
    assert time.perf_counter() - start < 20


def test_a_certificate_from_another_ca_is_refused(tls_cluster):
    folder, address = tls_cluster
    with pytest.raises(ClusterError, match="could not reach the Dask scheduler"):
        with connect(cluster=_cluster_file(folder, address, "stranger"), timeout=5):
            pytest.fail("connected with a stranger's certificate")
