"""Issue 43: what a careful operator's own configuration must not lose, leak or hang on.

One test (or a few) per class of the issue: inputs are read-only to a run,
outputs are claimed, no secret in any output, every remote call has a
deadline, every part of a folder is checked by name, limits and signals, and
the real-engine script still imports what it uses.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from distforest.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "distforest" / "data"
BC = DATA / "breast_cancer.csv"


def _digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` hashed (a changed, added or removed file changes it)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}  # fmt: skip


def _invoke(*args: str) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _one_error_line(result: object) -> str:
    lines = [x for x in result.output.splitlines() if x.startswith("distforest: error:")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output, result.output
    return lines[0]


# -- 7. the real-engine script imports what exists ---------------------------------------


def test_cluster_script_imports_only_what_exists():
    """``.ci/test_cluster.py`` loads, and every distforest name it imports (also inside its
    functions, where a rename shows only when an engine runs) exists."""
    path = ROOT / ".ci" / "test_cluster.py"
    spec = importlib.util.spec_from_file_location("ci_test_cluster", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its top-level imports
    assert callable(module._schedulers) and module._schedulers([]) == []
    imported = [(node.module, alias.name) for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("distforest")
                for alias in node.names]  # fmt: skip
    assert imported, "the script imports nothing of distforest: the check would check nothing"
    for name, attr in imported:
        assert hasattr(importlib.import_module(name), attr), f"{name}.{attr} is gone"


# -- 1. inputs are read-only to a run ----------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small saved forest (breast cancer, 5 trees) to score against."""
    tmp = tmp_path_factory.mktemp("edges")
    store = tmp / "model.zarr"
    fitted = _invoke("-q", "proximity", BC, "--target", "Class", "--id", "Id", "--trees", "5",
                     "--out", store)  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    return store


def _score_pipeline(folder: Path, model: Path, output: dict, score_out: str) -> Path:
    spec = {"kind": "score", "name": "nightly", "model": {"path": str(model)},
            "input": {"path": str(BC), "id": "Id"}, "score": {"out": score_out},
            "output": {"dir": str(folder), **output}}  # fmt: skip
    path = folder / f"score-{len(list(folder.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize(
    "case", ["store is the model", "csv inside the model", "cli csv inside the model"]
)
def test_a_run_never_writes_its_inputs_even_with_overwrite(model, tmp_path, case):
    """An output that is, or lies inside, the model it scores against is refused (exit 6,
    one line naming both) before anything is written, with overwrite too; the model stays
    byte for byte as it was."""
    import shutil

    store = tmp_path / "model.zarr"
    shutil.copytree(model, store)
    before = _digest(store)
    if case == "store is the model":
        pipeline = _score_pipeline(tmp_path, store, {"store": "model.zarr", "overwrite": True},
                                   "scores.csv")  # fmt: skip
        result = _invoke("-q", "run", pipeline)
    elif case == "csv inside the model":
        pipeline = _score_pipeline(tmp_path, store, {"store": "run.zarr", "overwrite": True},
                                   "model.zarr/zarr.json")  # fmt: skip
        result = _invoke("-q", "run", pipeline)
    else:
        result = _invoke("-q", "score", store, BC, "--id", "Id", "--out",
                         store / "zarr.json", "--overwrite")  # fmt: skip
    assert result.exit_code == 6, result.output
    line = _one_error_line(result)
    assert str(store.name) in line and "reads" in line
    assert _digest(store) == before
    assert not (tmp_path / "scores.csv").exists() and not (tmp_path / "report.json").exists()


# -- 2. outputs are claimed, not checked -------------------------------------------------


def test_a_second_run_into_the_same_folder_is_refused_naming_the_first_store(
    model, tmp_path, monkeypatch
):
    """Two scoring runs with different stores, one output folder and one output name: the
    second, started while the first writes, is refused (exit 7, one line naming the first
    run's store); the CSV and report.json are the first run's."""
    import json

    import pandas as pd

    import distforest.jobs.score as score_job

    first = _score_pipeline(tmp_path, model, {"store": "a.zarr"}, "scores.csv")
    second = _score_pipeline(tmp_path, model, {"store": "b.zarr"}, "scores.csv")
    real, seen, started = score_job.write_csv, [], []

    def write_csv(frame, path):
        if not started:  # the first run is writing: the second one starts now (once)
            started.append(path)
            seen.append(_invoke("-q", "run", second))
        return real(frame, path)

    monkeypatch.setattr(score_job, "write_csv", write_csv)
    result = _invoke("-q", "run", first)
    assert result.exit_code == 0, result.output
    assert seen and seen[0].exit_code == 7, seen and seen[0].output
    line = _one_error_line(seen[0])
    assert str(tmp_path / "a.zarr") in line, line
    report = json.loads((tmp_path / "report.json").read_text())
    assert str(tmp_path / "a.zarr") in json.dumps(report) and "b.zarr" not in json.dumps(report)
    assert len(pd.read_csv(tmp_path / "scores.csv")) == 699
    assert not (tmp_path / "b.zarr").exists()
    assert not list(tmp_path.glob("*.lock"))  # both locks released


# -- 6. limits and signals ---------------------------------------------------------------


IONO = DATA / "ionosphere.csv"  # 351 rows, 34 features


@pytest.mark.parametrize(
    "args, says",
    [
        (["neighbors", IONO, "--k", "99999999999"], "k=99999999999 but there are only 350"),
        (["proximity", IONO, "--target", "Class", "--trees", "3", "--min-samples-leaf", "5000"],
         "min_samples_leaf=5000 but the table has 351 rows"),
        (["proximity", IONO, "--target", "Class", "--trees", "3", "--max-features", "500"],
         "max_features=500 but the table has 34 features"),
    ],
)  # fmt: skip
def test_sizes_the_data_cannot_meet_are_refused_before_anything_is_written(tmp_path, args, says):
    """k above the rows (it allocated an n x k array: 255 TiB), a leaf size no tree can split
    and more features per split than the table has: exit 2, one line, no store."""
    result = _invoke("-q", *args, "--out", tmp_path / "out.zarr")
    assert result.exit_code == 2, result.output
    assert says in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_an_all_empty_feature_is_named_in_one_warning(tmp_path):
    """A feature with no value in any row is named in one warning line."""
    import pandas as pd

    from distforest import ProximityForest

    frame = pd.read_csv(IONO)
    frame["V3"] = float("nan")
    X, y = frame.drop(columns="Class"), frame["Class"]
    with pytest.warns(UserWarning, match=r"1 feature\(s\) have no value in any row \('V3'\)"):
        ProximityForest(n_estimators=2, random_state=0).fit(X, y)


SIGTERM_AFTER_FIT = """
import os, signal, sys
from distforest.jobs import runs
finish = runs.Stages.finish
def finished(self, name, *args, **kwargs):
    finish(self, name, *args, **kwargs)
    if name == "fit":  # what systemd or Slurm sends to stop a job, during the tiles
        os.kill(os.getpid(), signal.SIGTERM)
runs.Stages.finish = finished
sys.argv = ["distforest", *sys.argv[1:]]
from distforest.cli.main import main
main()
"""


def test_sigterm_is_handled_as_ctrl_c_exit_143_and_the_run_resumes_bit_for_bit(tmp_path):
    """SIGTERM during the tiles: exit 143 in one line, the lock released, the store
    resumable, and the resumed matrix identical to an uninterrupted run's."""
    import os
    import subprocess
    import sys

    import numpy as np
    import zarr

    from distforest.store.lock import StoreLock
    from distforest.store.run_store import RunStore

    out, clean = tmp_path / "p.zarr", tmp_path / "clean.zarr"
    args = ["proximity", str(IONO), "--target", "Class", "--trees", "4", "--tile-size", "64"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_FIT, *args, "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 143, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("distforest:")]
    assert lines == ["distforest: terminated (SIGTERM); finished work is kept: run the same "
                     "command again to resume"], proc.stderr  # fmt: skip
    assert not list(tmp_path.glob("*.lock"))
    with StoreLock(str(out), "test"):  # released: taken at once
        pass
    assert RunStore.open(out).status == "running"
    again = _invoke("-q", *args, "--out", out)
    assert again.exit_code == 0, again.output
    assert _invoke("-q", *args, "--out", clean).exit_code == 0
    resumed, whole = zarr.open_group(str(out)), zarr.open_group(str(clean))
    assert np.array_equal(resumed["proximity"][:], whole["proximity"][:])


# -- 3. no secret in any output ----------------------------------------------------------

KEY, SECRET = "AKIAEDGESKEY123", "edgesSeCrEt987654"
OPTION_KEY, OPTION_SECRET = "AKIAOTHERKEY77", "optSeCrEt55555"
SECRETS = (KEY, SECRET, OPTION_KEY, OPTION_SECRET)

#: A run whose input is read, and which then fails with a library's exception quoting the
#: URL with its credentials: Python prints the traceback.
TRACEBACK_WITH_SECRET = f"""
import sys
import distforest.jobs.proximity as job
def execute(*args, **kwargs):  # the run protocol, failing with a library's message
    raise RuntimeError("botocore said: no route to s3://{KEY}:{SECRET}@bkt/bc.csv "
                       "with {{'key': '{OPTION_KEY}', 'secret': '{OPTION_SECRET}'}}")
job.execute = execute
sys.argv = ["distforest", *sys.argv[1:]]
from distforest.cli.main import main
main()
"""


def test_no_secret_reaches_any_output(tmp_path):
    """Credentials given as a URL's user and password, as storage options and as a
    mis-typed storage_options string, through the command line and pipelines, on success
    and on failure (a library's message, a traceback): none of them is printed, logged,
    reported or stored."""
    import os
    import subprocess
    import sys

    import fsspec

    printed = []
    url = f"memory://{KEY}:{SECRET}@bkt/bc.csv"  # fsspec's memory file system: this process
    fsspec.filesystem("memory").pipe(url.removeprefix("memory://"), BC.read_bytes())
    pipeline = {"name": "p", "forest": {"n_estimators": 3}, "outliers": {"out": "o.csv"},
                "input": {"path": url, "target": "Class", "drop": ["Id"],
                          "storage_options": {"key": OPTION_KEY, "secret": OPTION_SECRET}},
                "output": {"dir": str(tmp_path / "out")}}  # fmt: skip
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(pipeline))
    result = _invoke("run", tmp_path / "ok.yaml")  # a run that succeeds: messages, logs
    assert result.exit_code == 0, result.output
    printed.append(result.output)
    pipeline["input"]["storage_options"] = f"key={OPTION_KEY} secret={OPTION_SECRET}"
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(pipeline))
    result = _invoke("run", tmp_path / "typo.yaml")  # a type error: never the value
    assert result.exit_code == 4, result.output
    assert (
        "storage_options" in _one_error_line(result) and "must be dict, got a str" in result.output
    )
    printed.append(result.output)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_EC2_METADATA_DISABLED": "true"}
    s3 = f"s3://{KEY}:{SECRET}@bkt/bc.csv"  # botocore's own message quotes the bucket
    for script, table in (("from distforest.cli.main import main; main()", s3),
                          (TRACEBACK_WITH_SECRET, str(BC))):  # fmt: skip
        proc = subprocess.run([sys.executable, "-c", script, "proximity", table, "--target",
                               "Class", "--out", str(tmp_path / "s3.zarr")],
                              capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
        assert proc.returncode != 0 and "distforest" in proc.stderr, proc.stderr
        printed.append(proc.stdout + proc.stderr)
    assert "Traceback" in printed[-1] and "botocore said" in printed[-1]  # the route ran
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert {"report.json", "zarr.json", "o.csv"} <= {p.name for p in written}
    for secret in SECRETS:
        for text in printed:
            assert secret not in text, text
        for path in written:
            assert secret.encode() not in path.read_bytes(), path


# -- 5. every part of a folder checked by name -------------------------------------------


def _parts(folder: Path, case: str) -> str:
    """Four Parquet parts of breast cancer, one of them damaged as ``case`` says; what the
    error line must name besides the part."""
    import os

    import pandas as pd

    frame = pd.read_csv(BC).drop(columns="Id")
    folder.mkdir()
    for i in range(4):
        frame.iloc[i * 175 : (i + 1) * 175].to_parquet(folder / f"part-{i}.parquet")
    bad, rows = folder / "part-2.parquet", frame.iloc[350:525].copy()
    if case == "missing column":
        rows.drop(columns="Mitoses").to_parquet(bad)
        return "no column 'Mitoses'"
    if case == "extra column":
        rows.assign(Extra=1.0).to_parquet(bad)
        return "a column 'Extra'"
    if case == "other type":
        rows.assign(Mitoses=rows["Mitoses"].astype(str)).to_parquet(bad)
        return "column 'Mitoses' as text, not number"
    if case == "empty part":
        bad.write_bytes(b"")
        return "empty (0 bytes)"
    if case == "not a table":
        bad.write_text("id,name\n1,a\n")
        return "not a Parquet table"
    outside = folder.parent / "elsewhere.parquet"
    rows.to_parquet(outside)
    bad.unlink()
    os.symlink(outside, bad)
    return "a link to"


PART_CASES = ["missing column", "extra column", "other type", "empty part", "not a table",
              "link outside"]  # fmt: skip


@pytest.mark.parametrize("case", PART_CASES)
def test_a_bad_part_of_a_folder_is_named_with_its_column(tmp_path, case):
    """A part missing a column, with an extra one or another type, empty, not a table, or a
    link leading outside the folder: exit 3, one line naming the part (and the column),
    before anything is written."""
    says = _parts(tmp_path / "parts", case)
    out = tmp_path / "p.zarr"  # (impute and score open folders the same way)
    result = _invoke("-q", "proximity", tmp_path / "parts", "--target", "Class", "--trees", "3",
                     "--out", out)  # fmt: skip
    assert result.exit_code == 3, result.output
    line = _one_error_line(result)
    assert "part-2.parquet" in line and says in line, line
    assert not out.exists()


# -- 4. every remote call has a deadline -------------------------------------------------


@pytest.fixture
def silent_endpoint():
    """An S3 endpoint on 127.0.0.1 that accepts every connection and never answers."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    held, stop = [], threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def _s3_cli(args: list, endpoint: str, **env: str):
    import os
    import subprocess
    import sys

    environ = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ENDPOINT_URL": endpoint,
               "AWS_ACCESS_KEY_ID": "k" * 16, "AWS_SECRET_ACCESS_KEY": "s" * 16,
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
               "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
               "DASK_DISTFOREST__STORAGE_CONNECT_TIMEOUT": "1",
               "DASK_DISTFOREST__STORAGE_READ_TIMEOUT": "1",
               "DASK_DISTFOREST__STORAGE_ATTEMPTS": "1", **env}  # fmt: skip
    environ = {k: v for k, v in environ.items() if v}
    return subprocess.run([sys.executable, "-m", "distforest", "-q", *map(str, args)],
                          capture_output=True, text=True, env=environ, timeout=90)  # fmt: skip


@pytest.mark.parametrize("side", ["input", "output", "no credentials"])
def test_object_storage_that_never_answers_or_has_no_credentials_exits_6(
    tmp_path, silent_endpoint, side
):
    """An endpoint that accepts and never answers (the input or the output side), and no
    credentials at all: exit 6 in one line naming the URL (and the deadline settings),
    within the deadline (it waited for ever: killed at 400 s)."""
    import time

    if side == "output":
        args = ["proximity", IONO, "--target", "Class", "--out", "s3://bkt/out/p.zarr"]
    else:
        args = ["proximity", "s3://bkt/in/table.csv", "--target", "Class",
                "--out", tmp_path / "p.zarr"]  # fmt: skip
    env = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""} if side == "no credentials" else {}
    tick = time.monotonic()
    proc = _s3_cli(args, silent_endpoint, **env)
    seconds = time.monotonic() - tick
    assert proc.returncode == 6, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("distforest: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    url = "s3://bkt/out/p.zarr" if side == "output" else "s3://bkt/in/table.csv"
    assert url in lines[0], lines[0]
    if side == "no credentials":
        assert "no usable credentials" in lines[0]
    else:
        assert "distforest.storage-read-timeout=1" in lines[0]
    assert seconds < 60
    assert not (tmp_path / "p.zarr").exists()


def test_a_distforest_worker_scrubs_its_own_output():
    """A worker of distforest's LocalCluster (its preload's dask_setup) prints its log lines
    and tracebacks through the one scrubber: a failed task's URL credentials never reach
    the terminal the workers share with the driver."""
    import subprocess
    import sys

    code = (
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "from distforest.parallel.preload import dask_setup\n"
        "dask_setup(None)\n"
        "logging.getLogger('distributed.worker').error("
        "'Compute Failed: s3://AKIAWORKER:wsecret123@bucket/x.parquet')\n"
        "print('token=wsecret456', file=sys.stderr)\n"
        "raise RuntimeError('open s3://AKIAWORKER:wsecret789@bucket/y failed')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    text = done.stdout + done.stderr
    assert "Compute Failed: s3://" in text and "RuntimeError" in text, text
    for secret in ("wsecret123", "wsecret456", "wsecret789", "AKIAWORKER:"):
        assert secret not in text, text


# -- 5. (continued) a CSV part holding text where the others hold numbers ----------------


def _csv_parts(folder: Path, *, text_in: str | None = None, empty: str | None = None,
               binary: bool = False) -> str:  # fmt: skip
    """Four CSV parts of breast cancer (a glob of them): ``text_in``'s values made words in
    part-2.csv, ``empty``'s values removed from every part, or (``binary``) part-2.csv
    bytes that are not text."""
    import pandas as pd

    frame = pd.read_csv(BC)
    folder.mkdir()
    for i in range(4):
        rows = frame.iloc[i * 175 : (i + 1) * 175].copy()
        if text_in is not None and i == 2:
            rows[text_in] = [f"w{k}" for k in range(len(rows))]
        if empty is not None:
            rows[empty] = float("nan")
        rows.to_csv(folder / f"part-{i}.csv", index=False)
    if binary:
        (folder / "part-2.csv").write_bytes(bytes(range(128, 256)) * 8)
    return str(folder / "part-*.csv")


def test_a_csv_part_that_is_not_text_is_named(tmp_path):
    """A part matched by ``*.csv`` holding bytes that are not UTF-8 text: exit 3, one line
    naming the part (it was a UnicodeDecodeError traceback, exit 1)."""
    source = _csv_parts(tmp_path / "parts", binary=True)
    result = _invoke("-q", "proximity", source, "--target", "Class", "--drop", "Id", "--trees",
                     "2", "--out", tmp_path / "p.zarr")  # fmt: skip
    assert result.exit_code == 3, result.output
    line = _one_error_line(result)
    assert "part-2.csv is not a text table (not UTF-8 text" in line, line
    assert not (tmp_path / "p.zarr").exists()


@pytest.mark.parametrize("command", ["impute", "score"])
def test_a_bad_parquet_part_is_named_by_impute_and_score_too(model, tmp_path, command):
    """The Parquet parts' check at open serves impute and score as it serves proximity: a
    part holding a column as text where the first holds numbers, exit 3 naming both."""
    says = _parts(tmp_path / "parts", "other type")
    out = tmp_path / "out"
    args = {
        "impute": ["impute", tmp_path / "parts", "--target", "Class", "--out", f"{out}/"],
        "score": ["score", model, tmp_path / "parts", "--out", out / "scores.csv"],
    }[command]  # fmt: skip
    result = _invoke("-q", *args)
    assert result.exit_code == 3, result.output
    line = _one_error_line(result)
    assert "part-2.parquet" in line and says in line, line
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("command", ["proximity", "impute", "score"])
def test_a_csv_part_with_text_where_the_others_have_numbers_is_named(model, tmp_path, command):
    """A CSV part whose column is words where every other part has numbers: exit 3, one line
    naming the part and the column, from proximity, impute and score alike, and nothing
    written (it was read as a categorical column: exit 0 with a made-up encoding, or a
    message naming no part)."""
    source = _csv_parts(tmp_path / "parts", text_in="Mitoses")
    out = tmp_path / "out"
    args = {
        "proximity": ["proximity", source, "--target", "Class", "--drop", "Id", "--trees", "3",
                      "--out", out / "p.zarr"],
        "impute": ["impute", source, "--target", "Class", "--drop", "Id", "--out", f"{out}/"],
        "score": ["score", model, source, "--id", "Id", "--out", out / "scores.csv"],
    }[command]  # fmt: skip
    result = _invoke("-q", *args)
    assert result.exit_code == 3, result.output
    line = _one_error_line(result)
    assert "part-2.csv" in line and "column 'Mitoses' as text (e.g. 'w0'), not number" in line
    assert "part-0.csv" in line, line  # the part it differs from
    assert not out.exists() or not any(out.iterdir())


# -- 6. (continued) an all-empty feature of rows read by partitions ----------------------


def test_an_all_empty_feature_of_rows_read_by_partitions_is_named_in_one_warning(tmp_path):
    """Rows read by partitions (a glob of CSV parts): a feature with no value in any part is
    named in the same one warning as rows in memory (the summaries' missing counts);
    where missing values are refused, the refusal says the column is empty."""
    import numpy as np

    from distforest import ProximityForest
    from distforest.errors import InputError
    from distforest.io.ingest import read_partitioned

    source = _csv_parts(tmp_path / "parts", empty="Mitoses")
    with pytest.warns(UserWarning) as seen:
        data = read_partitioned(source, target="Class", drop=("Id",))
    said = [str(w.message) for w in seen if "no value in any row" in str(w.message)]
    assert said == ["1 feature(s) have no value in any row ('Mitoses'): no tree can split on "
                    "them; drop them (--drop) or check the input"]  # fmt: skip
    column = np.asarray(data.X[:, list(data.encoding.features).index("Mitoses")])
    assert np.isnan(column).all() and data.encoding.empty_features == ("Mitoses",)
    with pytest.raises(InputError, match=r"column 'Mitoses' has no value in any row \(699 rows\)"):
        read_partitioned(source, target="Class", drop=("Id", "Bare.nuclei"), allow_missing=False)
    with pytest.warns(UserWarning, match=r"1 feature\(s\) have no value in any row \('Mitoses'\)"):
        ProximityForest(n_estimators=2, random_state=0).fit(source, "Class")


# -- 2. (continued) an existing output names the run that wrote it -----------------------


def _second_run_refused(model: Path, tmp_path: Path, csvs: tuple[str, str],
                        named: str) -> tuple[Path, Path]:  # fmt: skip
    """Run a scoring pipeline into ``a.zarr``, then one into ``b.zarr`` (CSV names
    ``csvs``, one folder): the second exits 6 in one line saying that output ``named``
    was written by the run of ``a.zarr``, and the folder is as the first run left it."""
    first = _score_pipeline(tmp_path, model, {"store": "a.zarr"}, csvs[0])
    second = _score_pipeline(tmp_path, model, {"store": "b.zarr"}, csvs[1])
    assert _invoke("-q", "run", first).exit_code == 0
    before = _digest(tmp_path)
    result = _invoke("-q", "run", second)
    assert result.exit_code == 6, result.output
    line = _one_error_line(result)
    assert f"output '{tmp_path / named}' already exists (written by the run of the " \
           f"store '{tmp_path / 'a.zarr'}')" in line, line  # fmt: skip
    assert _digest(tmp_path) == before
    return first, second


def test_an_existing_output_is_refused_naming_the_store_of_the_run_that_wrote_it(model, tmp_path):
    """A second run (another store, the same folder and output name) after the first one
    finished: exit 6 in one line naming the first run's store (from its report), the file
    and the report left as the first run wrote them; the same words from a command."""
    _second_run_refused(model, tmp_path, ("scores.csv", "scores.csv"), "scores.csv")
    again = _invoke("-q", "score", model, BC, "--id", "Id", "--out", tmp_path / "scores.csv")
    assert again.exit_code == 6 and str(tmp_path / "a.zarr") in _one_error_line(again)


def test_a_second_pipeline_does_not_replace_the_report_of_another_store(model, tmp_path):
    """Two scoring pipelines, other stores and other CSV names, one output folder: the
    second is refused (exit 6, one line naming the first run's store) instead of replacing
    the first one's report.json; nothing of the first run changes; with overwrite it runs,
    and a rerun of the first pipeline (its own store) is not refused."""
    first, second = _second_run_refused(model, tmp_path, ("a.csv", "b.csv"), "report.json")
    assert not (tmp_path / "b.csv").exists()
    assert _invoke("-q", "run", first).exit_code == 0  # the same store: nothing to refuse
    forced = _invoke("-q", "run", second, "--set", "output.overwrite=true")
    assert forced.exit_code == 0, forced.output
    assert str(tmp_path / "b.zarr") in (tmp_path / "report.json").read_text()


# -- 4. (continued) every object-storage protocol has a deadline -------------------------


@pytest.mark.parametrize("url", ["gs://bkt/in/t.csv", "gcs://bkt/t.csv", "abfs://ctr/t.csv",
                                 "az://ctr/t.csv", "s3://bkt/t.csv"])  # fmt: skip
def test_every_object_storage_protocol_is_opened_with_the_deadline_settings(url):
    """Google Cloud Storage and Azure get the connect and read timeouts too, in the words of
    their fsspec packages (gcsfs: ``requests_timeout``, aiohttp's timeouts; adlfs:
    ``connection_timeout`` and ``read_timeout``), from the distforest settings; a user's own
    storage option wins; the options survive pickling (they travel with the tasks)."""
    import pickle

    import dask.config

    from distforest import location, settings  # (its defaults first, then the block's values)

    assert settings.get("storage-attempts") == 2
    with dask.config.set({"distforest.storage-connect-timeout": 3,
                          "distforest.storage-read-timeout": 7}):  # fmt: skip
        opened = location.open_options(location.with_options(url, {"anon": True}))
        mine = location.open_options(location.with_options(url, {"read_timeout": 99}))
        bound = location.request_deadline(url)
    assert opened["anon"] is True and pickle.loads(pickle.dumps(opened)) == opened
    library = location.STORAGE_LIBRARIES[location.protocol(url)]
    if library == "gcsfs":
        import aiohttp

        timeout = opened["requests_timeout"]
        assert isinstance(timeout, aiohttp.ClientTimeout)
        assert (timeout.sock_connect, timeout.sock_read, timeout.total) == (3, 7, None)
        assert bound == location.GCSFS_ATTEMPTS * (10 + location.GCSFS_BACKOFF) + 1
    elif library == "adlfs":
        assert (opened["connection_timeout"], opened["read_timeout"]) == (3, 7)
        assert mine["read_timeout"] == 99 and bound is None  # (the Azure SDK's attempts)
    else:
        assert opened["config_kwargs"]["connect_timeout"] == 3
        assert opened["config_kwargs"]["read_timeout"] == 7
        assert bound == 2 * (3 + 7) + 1  # distforest.storage-attempts=2
    assert location.open_options(url.replace(url.split(":")[0], "memory")) == {}


class DefaultCredentialsError(Exception):
    """google-auth's name for no credentials found (gcsfs raises it)."""


class ClientAuthenticationError(Exception):
    """azure-core's name for refused credentials (adlfs raises it)."""


class ServiceResponseTimeoutError(Exception):
    """azure-core's name for a read that timed out."""


@pytest.mark.parametrize(
    "url, exc, code, says",
    [
        ("gs://KEYID:s3cr3tvalue@bkt/t.csv", ServiceResponseTimeoutError("read timed out"), 6,
         "distforest.storage-read-timeout=15 s"),
        ("gs://bkt/t.csv", DefaultCredentialsError("Could not automatically determine"), 6,
         "no usable credentials (Could not automatically determine); set "
         "GOOGLE_APPLICATION_CREDENTIALS"),
        ("abfs://ctr/t.csv", ClientAuthenticationError("Server failed to authenticate"), 6,
         "no usable credentials (Server failed to authenticate); set AZURE_STORAGE_ACCOUNT_KEY"),
        ("abfs://ctr/t.csv", ServiceResponseTimeoutError("timed out"), 6,
         "within the deadline (distforest.storage-connect-timeout=5 s, "
         "distforest.storage-read-timeout=15 s, the Azure SDK's own attempts"),
        ("gs://bkt/t.csv", ImportError("Please install gcsfs to access Google Storage"), 5,
         "gs:// needs gcsfs (pip install gcsfs)"),
        ("az://ctr/t.csv", ImportError("Install adlfs to access Azure"), 5,
         "az:// needs adlfs (pip install adlfs)"),
    ],
)  # fmt: skip
def test_a_google_or_azure_store_unreached_is_one_line_naming_the_url(url, exc, code, says):
    """No answer within the deadline, missing or refused credentials (the names gcsfs and
    adlfs raise) and a missing package: one line naming the URL without its credentials,
    what to set, and the exit code (6; 5 for a package to install)."""
    from distforest import location

    error = location.access_error(exc, url)
    assert error is not None and error.exit_code == code, (type(error), error)
    text = str(error)
    assert "\n" not in text and says in text, text
    assert location.display(url) in text and "s3cr3tvalue" not in text and "KEYID" not in text


def test_a_gs_url_without_gcsfs_is_one_line_exit_5_from_the_command_line(tmp_path):
    """``distforest proximity gs://...`` where gcsfs is not installed: exit 5, one line naming
    the URL and the package, nothing written."""
    pytest.importorskip("aiohttp")
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    result = _invoke("-q", "proximity", "gs://bkt/in/t.csv", "--target", "Class", "--out",
                     tmp_path / "p.zarr")  # fmt: skip
    assert result.exit_code == 5, result.output
    line = _one_error_line(result)
    assert "gs://bkt/in/t.csv" in line and "needs gcsfs" in line, line
    assert list(tmp_path.iterdir()) == []
