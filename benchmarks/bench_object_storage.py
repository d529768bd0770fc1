"""Proximity on a local S3 server (moto's standalone server) vs local disk.

Runs ``distforest proximity`` twice as a user would (a new process each time): input
and store on local disk, then input and store at ``s3://`` URLs on a moto server on
127.0.0.1 reached through a small counting TCP relay, so the bytes sent to and received
from the server are measured on the wire.  The two proximity matrices are compared.

    python benchmarks/bench_object_storage.py --n 20000 --trees 100 \\
        --workdir /tmp/dfobj --out benchmarks/results/object_storage.md

The server is a Python process on the same machine: the times say what distforest's
object-storage path costs (requests, no local rename, no shared disk), not what a
cloud object store's latency or bandwidth would give.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _measure import parser as make_parser  # noqa: E402
from _measure import write_markdown  # noqa: E402


def request_kind(method: str, target: str) -> str:
    """What a request line is for: ``"<where>: <METHOD> <what>"``.

    ``where`` is the run lock, the input, the store's root (its attributes: stages,
    status) or the store's array or group the object belongs to (``proximity``,
    ``leaves``, ``forest``, ...: the phase that writes it); ``what`` is a chunk, metadata
    (``zarr.json``) or a listing.
    """
    path, _, query = target.partition("?")
    if ".lock" in path:
        where = "lock"
    elif "/in/" in path:
        where = "input"
    elif ".zarr" in path:
        inner = path.split(".zarr", 1)[1].strip("/")
        where = "store root" if inner in ("", "zarr.json") else inner.split("/")[0]
    else:
        where = "bucket" if "prefix=" in query or "list-type" in query else "other"
    prefix = query.split("prefix=", 1)[1].split("&")[0] if "prefix=" in query else ""
    if method == "GET" and ("list-type" in query or "prefix=" in query):
        what = "listing"
        if ".zarr" in prefix.replace("%2F", "/"):
            inner = prefix.replace("%2F", "/").split(".zarr", 1)[1].strip("/")
            where = "store root" if not inner else inner.split("/")[0]
    elif "/c/" in path or "/c" == path[-2:]:
        what = "chunk"
    elif path.endswith(("zarr.json", ".zattrs", ".zgroup", ".zarray")):
        what = "metadata"
    else:
        what = "object"
    return f"{where}: {method} {what}"


class Relay:
    """Forward 127.0.0.1:port to ``target``, counting the bytes in each direction, the
    TCP connections and the HTTP requests (by kind, from their request lines)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent = self.received = 0
        self.connections = 0
        self.requests: dict[str, int] = {}
        self.closed_by_server = 0
        self._lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.server.accept()
            upstream = socket.create_connection(self.target)
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream, "sent"),
                             daemon=True).start()  # fmt: skip
            # (responses carry "Connection: close" when the server will not keep it open)
            threading.Thread(target=self._pump, args=(upstream, client, "received"),
                             daemon=True).start()  # fmt: skip

    def _pump(self, src: socket.socket, dst: socket.socket, counter: str) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
                with self._lock:
                    setattr(self, counter, getattr(self, counter) + len(data))
                    self._count(data, counter)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _count(self, data: bytes, counter: str) -> None:
        """Requests by kind (request lines) and responses closing their connection.
        Approximate: a line split across two reads is missed (none were, checked: the
        requests counted equal the responses' status lines)."""
        for line in data.split(b"\r\n"):
            if counter == "sent" and line.endswith((b" HTTP/1.1", b" HTTP/1.0")):
                method, _, rest = line.decode("latin-1").partition(" ")
                if method in ("GET", "PUT", "HEAD", "POST", "DELETE"):
                    kind = request_kind(method, rest.rsplit(" ", 1)[0])
                    self.requests[kind] = self.requests.get(kind, 0) + 1
            elif counter == "received" and line.lower() == b"connection: close":
                self.closed_by_server += 1

    def reset(self) -> None:
        with self._lock:
            self.sent = self.received = self.connections = self.closed_by_server = 0
            self.requests = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(300):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start")


#: Run the CLI counting the ``S3FileSystem`` instances it creates (written at exit to the
#: file named by ``BENCH_S3FS_COUNT``): each instance has its own connection pool.
COUNTING_MAIN = """
import atexit, os, threading
counts = {}
try:
    import s3fs
    created = s3fs.S3FileSystem.__init__
    def init(self, *args, **kwargs):
        key = "async" if kwargs.get("asynchronous") else "sync"
        counts[key] = counts.get(key, 0) + 1
        created(self, *args, **kwargs)
    s3fs.S3FileSystem.__init__ = init
    def dump():
        with open(os.environ["BENCH_S3FS_COUNT"], "w") as fh:
            fh.write(repr(counts))
    if os.environ.get("BENCH_S3FS_COUNT"):
        atexit.register(dump)
except ImportError:
    pass
from distforest.cli.main import main
main()
"""


def run(args: list[str], env: dict[str, str]) -> float:
    cmd = [sys.executable, "-c", COUNTING_MAIN, "-q", *args]
    tick = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - tick
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return wall


def local_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dfobj"))
    parser.add_argument("--out", type=Path, default=None, help="Markdown result file")
    opts = parser.parse_args()

    import pandas as pd
    from sklearn.datasets import make_classification

    work = opts.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    X, y = make_classification(opts.n, opts.features, n_informative=10, random_state=0)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(opts.features)])
    frame["y"] = y
    data = work / "data.parquet"
    frame.to_parquet(data, index=False)

    port = free_port()
    server = start_moto(port)
    relay = Relay(("127.0.0.1", port))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{relay.port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    os.environ.update({k: env[k] for k in env if k.startswith("AWS_")})
    try:
        import s3fs

        fs = s3fs.S3FileSystem()
        fs.mkdir("bench")
        fs.put(str(data), "bench/in/data.parquet")
        forest = ["--target", "y", "--trees", str(opts.trees), "--seed", "0"]
        load_before = os.getloadavg()[0]
        local_wall = run(["proximity", str(data), *forest, "--out", str(work / "p.zarr")], env)
        relay.reset()
        counted = work / "s3fs_instances.txt"
        s3_env = {**env, "BENCH_S3FS_COUNT": str(counted)}
        s3_wall = run(["proximity", "s3://bench/in/data.parquet", *forest, "--out",
                       "s3://bench/out/p.zarr"], s3_env)  # fmt: skip
        instances = counted.read_text() if counted.exists() else "not counted"
        sent, received, connections = relay.sent, relay.received, relay.connections
        requests, closed = dict(sorted(relay.requests.items())), relay.closed_by_server
        load_after = os.getloadavg()[0]
        fs.invalidate_cache()
        stored = int(fs.du("bench/out/p.zarr", total=True))
        objects = len(fs.find("bench/out/p.zarr"))

        import zarr

        from distforest import location

        a = zarr.open_array(str(work / "p.zarr"), path="proximity", mode="r")[...]
        b = zarr.open_array(location.zarr_store("s3://bench/out/p.zarr", read_only=True),
                            path="proximity", mode="r")[...]  # fmt: skip
        identical = bool(np.array_equal(a, b))
    finally:
        server.terminate()
        server.wait(10)

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    result = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "command": "python benchmarks/bench_object_storage.py " + " ".join(sys.argv[1:]),
        "n": opts.n, "features": opts.features, "trees": opts.trees,
        "local_wall_s": round(local_wall, 2), "s3_wall_s": round(s3_wall, 2),
        "local_store_bytes": local_bytes(work / "p.zarr"),
        "s3_store_bytes": stored, "s3_objects": objects,
        "bytes_sent": sent, "bytes_received": received, "connections": connections,
        "requests": requests, "requests_total": sum(requests.values()),
        "responses_closing_connection": closed,
        "s3fs_instances": instances,
        "input_bytes": data.stat().st_size,
        "identical_proximity": identical,
        "load_average_before_after": [round(load_before, 1), round(load_after, 1)],
        "cpus": os.cpu_count(), "python": platform.python_version(),
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if opts.out:
        write_markdown(opts.out, markdown(result))


#: Where requests go, grouped by the phase that mostly makes them.
AREAS = (
    ("run lock", ("lock",)),
    ("input", ("input",)),
    ("store attributes (root zarr.json: status, spec, stages)", ("store root",)),
    (
        "fit: forest, leaves, in-bag, coordinates, target",
        (
            "forest",
            "leaves",
            "inbag",
            "tree",
            "tree_importances",
            "target",
            "sample",
            "sample_i",
            "sample_j",
        ),
    ),
    ("tiles: proximity matrix and its done flags", ("proximity", "done")),
)


def request_table(requests: dict[str, int]) -> str:
    """Requests by area (rows) and what they touch (columns), with totals."""
    whats = ("chunk", "metadata", "listing", "object")
    rows: dict[str, dict[str, int]] = {}
    for key, count in requests.items():
        where, _, rest = key.partition(": ")
        what = rest.split(" ", 1)[1]
        area = next((a for a, names in AREAS if where in names), "other (zarr v2 probes, bucket)")
        rows.setdefault(area, dict.fromkeys(whats, 0))[what] += count
    order = [a for a, _ in AREAS if a in rows] + [a for a in rows if a not in dict(AREAS)]
    lines = [
        "| requests to | chunks | metadata (zarr.json) | listings | other objects (HEAD, "
        "lock, input) | total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for area in order:
        c = rows[area]
        lines.append(
            f"| {area} | " + " | ".join(str(c[w]) for w in whats) + f" | {sum(c.values())} |"
        )
    total = {w: sum(rows[a][w] for a in rows) for w in whats}
    lines.append(
        "| **all** | "
        + " | ".join(str(total[w]) for w in whats)
        + f" | **{sum(total.values())}** |"
    )
    return "\n".join(lines)


def markdown(r: dict) -> str:
    mb = 1e6
    s3_row = " | ".join([
        "| S3 (moto, loopback)", f"{r['s3_wall_s']:.1f} s", f"{r['s3_store_bytes'] / mb:.1f} MB",
        str(r["s3_objects"]), f"{r['bytes_sent'] / mb:.1f} MB",
        f"{r['bytes_received'] / mb:.1f} MB", f"{r['connections']} |",
    ])  # fmt: skip
    before, after = r["load_average_before_after"]
    if before < 1.0:  # "after" counts the benchmark's own processes
        load = (f"Measured once on an otherwise quiet machine (load average {before} before, "
                f"{after} after; the runs themselves use up to 2 cores).")  # fmt: skip
    else:
        load = (f"**DRAFT (shared machine)**: load average {before} before, {after} after: "
                "other jobs shared the 2 cores before it started, the times are inflated and "
                "only their ratio says something.")  # fmt: skip
    return f"""# Object storage: proximity on a local S3 server vs local disk

{load}

- Date: {r["date"]}, commit {r["commit"]}
- Command: `{r["command"]}`
- Data: `make_classification({r["n"]}, {r["features"]}, n_informative=10, random_state=0)`
  as Parquet ({r["input_bytes"] / mb:.1f} MB), target `y`, {r["trees"]} trees, seed 0.
- S3: moto's standalone server on 127.0.0.1 (a Python process on the same machine)
  behind a counting TCP relay; credentials and endpoint from the `AWS_*` variables only.
- Times: wall-clock seconds of the whole `distforest proximity` process (start-up
  included); small inputs run in the CLI's process (no cluster) in both cases.

| where | wall | store | objects | bytes sent to S3 | bytes received from S3 | connections |
|---|---:|---:|---:|---:|---:|---:|
| local disk | {r["local_wall_s"]:.1f} s | {r["local_store_bytes"] / mb:.1f} MB | - | - | - | - |
{s3_row}

Proximity matrices identical (every cell): **{r["identical_proximity"]}**.
S3 / local wall time: {r["s3_wall_s"] / r["local_wall_s"]:.2f}.
Bytes sent: the store's objects plus request headers,
metadata writes and lock renewals; bytes received: the input file, metadata reads and
responses.  The server shares the loaded CPUs with distforest.

## Why so many TCP connections: one per request, closed by the server

The relay also reads the HTTP request lines and response headers that pass through it:
**{r["requests_total"]} requests, {r["connections"]} TCP connections, and
{r["responses_closing_connection"]} responses carrying `Connection: close`**.  moto's
standalone server (werkzeug) closes the connection after every response, so each
request opens a new one: the connection count is the request count, not a failure of
distforest or s3fs to reuse connections.  `S3FileSystem` instances the CLI process
created (its constructor counted, by kind): {r["s3fs_instances"]}.
fsspec keeps one instance per set of options and process, and, for the
asynchronous instances zarr's `FsspecStore` asks for, per thread: a worker on a cluster
keeps one per thread for the whole run, each with its own aiobotocore connection pool,
which keeps connections open for the next request when the server allows it; this
benchmark cannot show that, its server never allows it.

What the requests are for (from their paths):

{request_table(r["requests"])}

Chunks are a small part: most requests are zarr metadata (`zarr.json` read and
checked with HEAD each time an array or group is opened, on object storage without the
local path's cached handles) and listings (opening a group, checking a store exists).
Each costs a round trip, whatever its size.  Not reduced here.
"""


if __name__ == "__main__":
    main()
