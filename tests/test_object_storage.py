"""Inputs and stores on object storage: a local S3 server (moto's standalone server).

The proximity CLI, the imputation pipeline and a k-NN pipeline run with input and
store on S3 and on local disk: the arrays are the same.  A killed driver's run
resumes, a second run is refused while the first holds the lease, and missing
packages, refused credentials and missing buckets are one line with exit 5 or 6.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from distforest import location
from distforest.cli.main import cli
from distforest.store.lock import StoreLock, lock_path, read_lock
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
BC = ROOT / "distforest" / "data" / "breast_cancer.csv"
IONO = ROOT / "distforest" / "data" / "ionosphere.csv"
#: What the pipelines give as credentials: must never be written anywhere.
SECRET = "sEcReT-never-written-9f3b"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(**env: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **env},
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the local S3 server did not start")


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """A local S3 server on a free port; the AWS variables point at it (as s3fs's tests do)."""
    proc, endpoint = _start_server()
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir("bkt")
    fs.put(str(BC), "bkt/in/bc.csv")
    fs.put(str(IONO), "bkt/in/iono.csv")
    try:
        yield env
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        proc.terminate()
        proc.wait(10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def arrays(store: str | Path) -> dict[str, np.ndarray]:
    """Every array of a store, local or at a URL, by path."""
    group = zarr.open_group(location.zarr_store(str(store), read_only=True), mode="r",
                            use_consolidated=False)  # fmt: skip
    out: dict[str, np.ndarray] = {}

    def walk(g: zarr.Group, prefix: str) -> None:
        for name, arr in g.arrays():
            out[prefix + name] = arr[...]
        for name, sub in g.groups():
            walk(sub, f"{prefix}{name}/")

    walk(group, "")
    return out


def assert_same_arrays(a: str | Path, b: str | Path) -> None:
    left, right = arrays(a), arrays(b)
    assert sorted(left) == sorted(right)
    for name in left:
        np.testing.assert_array_equal(left[name], right[name], err_msg=name)


def invoke(*args: str) -> object:
    return CliRunner().invoke(cli, ["-q", *map(str, args)])


def test_proximity_cli_on_s3_matches_local_disk(s3, tmp_path):
    args = ["--target", "Class", "--drop", "Id", "--trees", "8", "--tile-size", "256"]
    url = "s3://bkt/prox/p.zarr"
    remote = invoke("proximity", "s3://bkt/in/bc.csv", *args, "--out", url)
    assert remote.exit_code == 0, remote.output
    local = invoke("proximity", BC, *args, "--out", tmp_path / "p.zarr")
    assert local.exit_code == 0, local.output
    assert RunStore.open(url, require_complete=True).attrs["n_trees"] == 8
    assert_same_arrays(url, tmp_path / "p.zarr")
    assert arrays(url)["proximity"].any()
    assert not location.exists(lock_path(url))  # removed when the run ended
    again = invoke("proximity", "s3://bkt/in/bc.csv", *args, "--out", url)
    assert again.exit_code == 0 and "already complete" in again.output, again.output
    state = invoke("status", url)
    assert state.exit_code == 0 and "complete" in state.output, state.output


def _pipeline(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def _options(endpoint: str) -> str:
    return f"{{key: testing, secret: {SECRET}, client_kwargs: {{endpoint_url: '{endpoint}'}}}}"


def _every_object(prefix: str) -> dict[str, bytes]:
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    return {p: fs.cat_file(p) for p in fs.find(prefix)}


def _forget_s3_settings() -> None:
    import s3fs

    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.pop(key, None)
    s3fs.S3FileSystem.clear_instance_cache()


def _set_s3_settings(env: dict[str, str]) -> None:
    import s3fs

    os.environ.update(env)
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def forgetful_workers(client, s3):
    """The session's workers without the S3 variables for one test, restored after it
    (other tests' tasks may run there: the session client is dask's default)."""
    yield client
    client.run(_set_s3_settings, s3)


def _opened_s3() -> bool:
    import s3fs

    return bool(s3fs.S3FileSystem._cache)


def test_impute_pipeline_on_s3_with_explicit_options_matches_local_and_keeps_no_secret(
    s3, tmp_path, capfd, forgetful_workers
):
    """On a cluster whose workers have no S3 variables: the pipeline's storage options
    travel with the tasks, which write the proximity tiles to the store themselves."""
    client = forgetful_workers
    common = (
        f"cluster: {{scheduler: '{client.scheduler.address}'}}\n"
        "forest: {n_estimators: 8, random_state: 0, tile_size: 256}\n"
        "impute: {out: imputed.csv, iterations: 2, n_estimators: 8}\n"
        "outliers: {out: outliers.csv}\n"
    )
    opts = _options(s3["AWS_ENDPOINT_URL"])
    remote = _pipeline(tmp_path / "remote.yaml", common + (
        f"input: {{path: s3://bkt/in/bc.csv, target: Class, drop: [Id], storage_options: {opts}}}\n"
        f"output: {{dir: s3://bkt/imp, store: run.zarr, storage_options: {opts}}}\n"))  # fmt: skip
    local = _pipeline(tmp_path / "local.yaml", common + (
        f"input: {{path: {BC}, target: Class, drop: [Id]}}\n"
        f"output: {{dir: {tmp_path / 'imp'}, store: run.zarr}}\n"))  # fmt: skip
    first = invoke("run", remote)
    assert first.exit_code == 0, first.output
    assert any(client.run(_opened_s3).values())  # the tile tasks wrote to S3 themselves
    assert invoke("run", local).exit_code == 0
    assert_same_arrays("s3://bkt/imp/run.zarr", tmp_path / "imp" / "run.zarr")
    objects = _every_object("bkt/imp")
    for name in ("imputed.csv", "outliers.csv"):
        assert objects[f"bkt/imp/{name}"] == (tmp_path / "imp" / name).read_bytes(), name
    report = json.loads(objects["bkt/imp/report.json"])
    assert report["store"] == "s3://bkt/imp/run.zarr"
    # the credentials given in the pipeline are in no object, output or log line
    leaked = [k for k, v in objects.items() if SECRET.encode() in v]
    assert not leaked
    captured = capfd.readouterr()
    assert SECRET not in first.output + captured.out + captured.err


def test_knn_pipeline_on_s3_matches_local_disk(s3, tmp_path, client):
    body = (
        "neighbors: {metric: euclidean, k: 5, normalize: zscore, out: neighbors.zarr}\n"
        "knn: {task: classification, k: 5, weights: distance, metric: euclidean,\n"
        "      normalize: range, model: model.zarr,\n"
        "      predict: {input: %s, out: predictions.csv}}\n"
        f"cluster: {{scheduler: '{client.scheduler.address}'}}\n"
    )
    opts = _options(s3["AWS_ENDPOINT_URL"])
    remote = _pipeline(tmp_path / "r.yaml", body % IONO + (
        f"input: {{path: s3://bkt/in/iono.csv, target: Class, storage_options: {opts}}}\n"
        f"output: {{dir: s3://bkt/knn, storage_options: {opts}}}\n"))  # fmt: skip
    local = _pipeline(
        tmp_path / "l.yaml",
        body % IONO
        + (f"input: {{path: {IONO}, target: Class}}\noutput: {{dir: {tmp_path / 'knn'}}}\n"),
    )
    result = invoke("run", remote)
    assert result.exit_code == 0, result.output
    assert invoke("run", local).exit_code == 0
    for store in ("neighbors.zarr", "model.zarr"):
        assert_same_arrays(f"s3://bkt/knn/{store}", tmp_path / "knn" / store)
    assert arrays("s3://bkt/knn/neighbors.zarr")["neighbor_index"].shape == (351, 5)
    objects = _every_object("bkt/knn")
    assert objects["bkt/knn/predictions.csv"] == (tmp_path / "knn" / "predictions.csv").read_bytes()
    assert "bkt/knn/report.json" in objects
    assert not [k for k, v in objects.items() if SECRET.encode() in v]


def test_python_api_store_at_a_location_with_options_equals_the_local_one(
    s3, tmp_path, small_classification
):
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.location import Location

    X, y = small_classification
    options = {"key": "testing", "secret": SECRET,
               "client_kwargs": {"endpoint_url": s3["AWS_ENDPOINT_URL"]}}  # fmt: skip
    url = Location("s3://bkt/api/p.zarr", options)
    forest = ProximityForest(n_estimators=6, random_state=0, tile_size=64).fit(X, y)
    remote = forest.proximity("oob", store=url).values
    local = forest.proximity("oob", store=tmp_path / "p.zarr").values
    np.testing.assert_array_equal(remote, local)
    rs = RunStore.open(url, require_complete=True)
    assert rs.path == "s3://bkt/api/p.zarr" and location.size(url) > 0
    done = rs.done_tiles("proximity_oob")  # the upper triangle: tiles are mirrored
    assert done[np.triu_indices(len(done))].all()
    assert not [k for k, v in _every_object("bkt/api").items() if SECRET.encode() in v]


def test_second_run_refused_while_the_lease_is_held_and_a_dead_lease_taken_over(s3, tmp_path):
    import dask.config

    url = "s3://bkt/lock/p.zarr"
    args = ["proximity", "s3://bkt/in/bc.csv", "--target", "Class", "--drop", "Id",
            "--trees", "4", "--out", url]  # fmt: skip
    with StoreLock(url, run_id="other"):
        assert read_lock(url)["run_id"] == "other"
        busy = invoke(*args)
    assert busy.exit_code == 7, busy.output
    assert "being written by run other" in busy.output and "Traceback" not in busy.output
    assert not location.exists(url)
    assert not location.exists(lock_path(url))  # released: removed

    # a holder that died: its lease expired and no renewal comes -> taken over
    dead = {"run_id": "dead", "pid": 1, "host": "h", "token": "t0", "lease_seconds": 0.3,
            "distforest_lock": 1, "expires": time.time() - 5}  # fmt: skip
    location.write_bytes(lock_path(url), json.dumps(dead).encode())
    with dask.config.set({"distforest.lock.lease": 3}):
        taken = invoke(*args)
    assert taken.exit_code == 0, taken.output
    assert not location.exists(lock_path(url))

    # a foreign object at the lock's name is never replaced
    location.write_bytes(lock_path(url), b"my notes")
    refused = invoke(*args, "--overwrite")
    assert refused.exit_code == 6 and "not a lock distforest wrote" in refused.output
    assert location.read_bytes(lock_path(url)) == b"my notes"


def test_resume_after_the_driver_is_killed(s3, tmp_path):
    url = "s3://bkt/kill/p.zarr"
    args = ["proximity", "s3://bkt/in/bc.csv", "--target", "Class", "--drop", "Id",
            "--trees", "10", "--tile-size", "256", "--out"]  # fmt: skip
    env = {**os.environ, "DASK_DISTFOREST__LOCK__LEASE": "2", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", "from distforest.cli.main import main; main()", "-q", *args]
    proc = subprocess.Popen([*cmd, url], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # killed once the fit is saved
        try:
            if "fit" in (RunStore.open(url).attrs.get("stages") or {}):
                break
        except Exception:
            pass
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert not RunStore.open(url).is_complete
    assert read_lock(url) is not None  # the dead run's lease is left behind
    time.sleep(3)  # its 2 s lease runs out (a live lease is refused: exit 7)
    again = invoke(*args, url)  # the next run, here (the dead run's lease is what matters)
    assert again.exit_code == 0, again.output[-2000:]
    assert "resumed" in again.stdout, again.stdout
    local = invoke(*args, tmp_path / "p.zarr")
    assert local.exit_code == 0, local.output
    assert_same_arrays(url, tmp_path / "p.zarr")


def test_missing_bucket_missing_package_and_refused_credentials_are_one_line(s3, tmp_path):
    out = invoke("proximity", BC, "--target", "Class", "--trees", "2", "--out",
                 "s3://no-such-bucket/p.zarr")  # fmt: skip
    assert out.exit_code == 6 and "no such bucket" in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1
    inp = invoke("proximity", "s3://no-such-bucket/x.csv", "--target", "Class", "--out",
                 tmp_path / "p.zarr")  # fmt: skip
    assert inp.exit_code == 6 and "no such bucket" in inp.output, inp.output
    missing = invoke("proximity", BC, "--target", "Class", "--out", "gcs://b/p.zarr")
    assert missing.exit_code == 5 and "gcsfs" in missing.output, missing.output

    proc, endpoint = _start_server(INITIAL_NO_AUTH_ACTION_COUNT="0")  # checks every key
    try:
        opts = {"key": "wrong", "secret": SECRET, "client_kwargs": {"endpoint_url": endpoint}}
        path = _pipeline(
            tmp_path / "creds.yaml",
            (
                f"input: {{path: {BC}, target: Class, drop: [Id]}}\n"
                "forest: {n_estimators: 2}\n"
                f"output: {{dir: s3://bkt/creds, storage_options: {json.dumps(opts)}}}\n"
            ),
        )
        refused = invoke("run", path)
    finally:
        proc.terminate()
        proc.wait(10)
    assert refused.exit_code == 6 and "access to s3://bkt/creds" in refused.output, refused.output
    assert "check the credentials" in refused.output and SECRET not in refused.output
    assert len(refused.output.strip().splitlines()) == 1


# -- tables on S3 read by partitions, as local folders and globs are ----------------------


def _put_parts(tmp_path: Path) -> tuple[Path, Path]:
    """breast_cancer.csv as a folder of three Parquet parts and as three CSV files, on
    local disk and (same bytes) on the S3 server."""
    import pandas as pd
    import s3fs

    df = pd.read_csv(BC)
    folder, csvs = tmp_path / "parts", tmp_path / "csvs"
    folder.mkdir()
    csvs.mkdir()
    for k, start in enumerate(range(0, len(df), 200)):
        piece = df.iloc[start : start + 200]
        piece.to_parquet(folder / f"chunk-{k}.snappy", index=False)
        piece.to_csv(csvs / f"day-{k}.csv", index=False)
    fs = s3fs.S3FileSystem()
    for f in [*folder.iterdir(), *csvs.iterdir()]:
        fs.put(str(f), f"bkt/{f.parent.name}/{f.name}")
    fs.invalidate_cache()
    return folder, csvs


def _by_partitions(store: str | Path) -> bool:
    return "input" in RunStore.open(store).group  # rows the trees read, written by tasks


def test_parquet_folder_and_csv_glob_on_s3_are_read_by_partitions_as_local_ones(
    s3, tmp_path, monkeypatch
):
    from distforest.store import source as big_input

    folder, csvs = _put_parts(tmp_path)
    # one tile (the default size): the tiles' writes to S3 are test_proximity_cli_on_s3's
    args = ["--target", "Class", "--drop", "Id", "--trees", "6", "--seed", "2"]
    read_whole: list[object] = []  # the whole-table reader of URLs must not be called

    def whole(*args: object, **kwargs: object) -> None:
        read_whole.append(args)
        pytest.fail(f"{args[0]} read whole")

    monkeypatch.setattr("distforest.io.tables._read_url", whole)
    for name, remote_in, local_in in (
        ("parquet", "s3://bkt/parts", folder),
        ("glob", "s3://bkt/csvs/day-*.csv", csvs / "day-*.csv"),
    ):
        assert big_input.by_partitions(remote_in)
        url = f"s3://bkt/out-{name}/p.zarr"
        remote = invoke("proximity", remote_in, *args, "--out", url)
        assert remote.exit_code == 0, remote.output
        local = invoke("proximity", local_in, *args, "--out", tmp_path / f"{name}.zarr")
        assert local.exit_code == 0, local.output
        assert _by_partitions(url) and _by_partitions(tmp_path / f"{name}.zarr")
        assert_same_arrays(url, tmp_path / f"{name}.zarr")
        assert arrays(url)["proximity"].any()
    assert not read_whole


def test_a_file_on_s3_over_the_threshold_is_read_by_partitions(s3, tmp_path, monkeypatch):
    from distforest.store import source as big_input

    assert not big_input.by_partitions("s3://bkt/in/bc.csv")  # 125 kB: read whole
    monkeypatch.setattr(big_input, "PARTITIONED_BYTES", 10_000)
    assert big_input.by_partitions("s3://bkt/in/bc.csv")
    args = ["--target", "Class", "--drop", "Id", "--trees", "6", "--seed", "4"]  # one tile
    url = "s3://bkt/big/p.zarr"
    remote = invoke("proximity", "s3://bkt/in/bc.csv", *args, "--out", url)
    assert remote.exit_code == 0, remote.output
    local = invoke("proximity", BC, *args, "--out", tmp_path / "p.zarr")
    assert local.exit_code == 0, local.output
    assert _by_partitions(url) and _by_partitions(tmp_path / "p.zarr")
    assert_same_arrays(url, tmp_path / "p.zarr")
    attrs = RunStore.open(url).group["input"].attrs
    assert attrs["source"] == "s3://bkt/in/bc.csv"  # the URL, not a local copy


def test_a_bad_value_in_a_part_on_s3_names_its_url(s3, tmp_path):
    import s3fs

    rows = BC.read_text().splitlines()
    fs = s3fs.S3FileSystem()
    fs.pipe_file("bkt/bad/a.csv", ("\n".join(rows[:100]) + "\n").encode())
    header, bad = rows[0], rows[100].split(",")
    bad[2] = "#REF!"  # Cell.size
    fs.pipe_file("bkt/bad/b.csv", ("\n".join([header, ",".join(bad)]) + "\n").encode())
    result = invoke("proximity", "s3://bkt/bad/*.csv", "--target", "Class", "--drop", "Id",
                    "--trees", "4", "--out", tmp_path / "x.zarr")  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "s3://bkt/bad/b.csv" in result.output and "'#REF!'" in result.output, result.output


def test_workers_without_s3_settings_read_the_parts_with_the_pipelines_options(
    s3, tmp_path, forgetful_workers
):
    """On a cluster, the partitions' tasks carry the input's storage options: workers
    that know nothing of the server read the parts themselves."""
    client = forgetful_workers
    _, csvs = _put_parts(tmp_path)
    common = (
        f"cluster: {{scheduler: '{client.scheduler.address}'}}\n"
        "forest: {n_estimators: 6, random_state: 3, tile_size: 256}\n"
    )
    opts = _options(s3["AWS_ENDPOINT_URL"])
    remote = _pipeline(tmp_path / "remote.yaml", common + (
        f"input: {{path: 's3://bkt/csvs/day-*.csv', target: Class, id: Id, "
        f"storage_options: {opts}}}\n"
        f"output: {{dir: {tmp_path / 'r'}, store: run.zarr}}\n"))  # fmt: skip
    local = _pipeline(tmp_path / "local.yaml", common + (
        f"input: {{path: '{csvs / 'day-*.csv'}', target: Class, id: Id}}\n"
        f"output: {{dir: {tmp_path / 'l'}, store: run.zarr}}\n"))  # fmt: skip
    first = invoke("run", remote)
    assert first.exit_code == 0, first.output
    assert any(client.run(_opened_s3).values())  # the workers read S3 themselves
    assert invoke("run", local).exit_code == 0
    assert _by_partitions(tmp_path / "r" / "run.zarr")
    assert_same_arrays(tmp_path / "r" / "run.zarr", tmp_path / "l" / "run.zarr")
    ids = arrays(tmp_path / "r" / "run.zarr")["sample"]
    np.testing.assert_array_equal(ids[:2], [1000025, 1002945])  # the Id column, not 0, 1
