"""Red team, fast cases: bad input, hostile sizes and a full disk through the CLI.

Every case must end with one clear line (``distforest: error: ...``), the
documented exit code, no traceback and nothing half-written (no output file,
no store marked complete).  The slow cases (kill loops, SIGKILL at each
point, a real full tmpfs) are in ``benchmarks/bench_faults.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
BC = ROOT / "distforest" / "data" / "breast_cancer.csv"


def refused(args: list[str], code: int, *words: str) -> str:
    """Run the CLI; check the exit code, a one-line error holding ``words``, no traceback."""
    result = CliRunner().invoke(cli, ["-q", *args])
    output = result.output
    assert result.exit_code == code, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("distforest: error:")]
    assert len(errors) == 1, output
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


def nothing_complete(path: Path) -> None:
    """No output at ``path``, or a store that is not marked complete."""
    if path.suffix == ".zarr" and path.is_dir():
        assert not RunStore.open(path).is_complete
    else:
        assert not path.exists()


# -- impute names the user's file ------------------------------------------------


IMPUTE_INPUTS = {
    "infinite value": ("a,b,c\n1,2,3\n4,,6\n7,8,inf\n1,2,3\n", ["column 'c'", "infinite"]),
    "column never observed": ("a,b,c\n1,,3\n4,,6\n7,,9\n", ["['b']", "no observed value"]),
    "text in a numeric column": (
        "a,b,c\n" + "".join(f"{i},{i % 7},{i % 3}\n" for i in range(30)) + "7,eight,9\n4,,6\n",
        ["column 'b'", "'eight'"],
    ),
}


@pytest.mark.parametrize("case", list(IMPUTE_INPUTS))
def test_impute_errors_name_the_file_not_a_dataframe(tmp_path, case):
    text, words = IMPUTE_INPUTS[case]
    source = tmp_path / "survey.csv"
    source.write_text(text)
    out = tmp_path / "filled.csv"
    line = refused(["impute", str(source), "--out", str(out), "--trees", "3"], 3, *words)
    assert line.startswith(f"distforest: error: {source}:"), line
    assert "<pandas" not in line
    nothing_complete(out)


# -- a full disk -----------------------------------------------------------------


def _table(tmp_path: Path, rows: int = 60) -> Path:
    path = tmp_path / "points.csv"
    path.write_text(
        "a,b,c\n" + "".join(f"{i},{(i * 7) % 11},{(i * i) % 13}\n" for i in range(rows))
    )
    return path


#: command -> (arguments after INPUT, matrix name); tiles of 16 rows: 10 tile tasks on 60 rows
MATRIX_COMMANDS = {
    "similarity": (["--tile-size", "16"], "distance"),
    "xforest": (["--trees", "6", "--tile-size", "16"], "beta_similarity"),
    "proximity": (["--trees", "6", "--tile-size", "16"], "proximity"),
}


def _matrix_args(command: str, source: Path, out: Path) -> list[str]:
    return [command, str(source), "--out", str(out), *MATRIX_COMMANDS[command][0]]


@pytest.mark.parametrize("command", list(MATRIX_COMMANDS))
def test_disk_precheck_refuses_before_any_work(tmp_path, monkeypatch, command):
    from distforest.jobs import estimates

    monkeypatch.setattr(estimates, "free_space", lambda directory: 1000)
    out = tmp_path / "out" / "m.zarr"
    refused(_matrix_args(command, _table(tmp_path), out), 6, "not enough disk space",
            "only 1.0 kB are free")  # fmt: skip
    assert not out.exists()
    left = list(tmp_path.glob("out/*"))
    assert not left  # not even a lock file


@pytest.fixture(scope="module")
def threads_scheduler():
    """A cluster whose workers are threads of this process, so a patched disk reaches them."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=None) as cluster:  # fmt: skip
        yield cluster.scheduler_address


def _full_disk_after(monkeypatch, matrix: str, chunks: int) -> None:
    """Chunk files of ``matrix`` fail with ENOSPC once ``chunks`` were written (as zarr sees it).

    Only the matrix's own chunks count and fail, not its done record
    (``done/<matrix>/c/...``): a tile needs at most two chunk writes, so with
    ``chunks=3`` at least one tile is whole and marked done whatever order the
    worker threads write in (counting the done marks too made that a race).
    """
    import errno
    import os

    from zarr.storage import _local

    real, written = _local._put, [0]

    def put(path: Path, value, exclusive: bool = False):
        if f"/{matrix}/c/" in str(path) and f"/done/{matrix}/" not in str(path):
            written[0] += 1
            if written[0] > chunks:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, value, exclusive)

    monkeypatch.setattr(_local, "_put", put)


@pytest.mark.parametrize("command", list(MATRIX_COMMANDS))
def test_disk_full_while_writing_tiles_exits_6_and_the_rerun_resumes(
    tmp_path, monkeypatch, threads_scheduler, command, caplog
):
    import numpy as np

    source = _table(tmp_path)
    name = MATRIX_COMMANDS[command][1]
    cluster = ["--scheduler", threads_scheduler]
    clean, out = tmp_path / "clean.zarr", tmp_path / "full.zarr"
    assert (
        CliRunner().invoke(cli, ["-q", *_matrix_args(command, source, clean), *cluster]).exit_code
        == 0
    )

    with monkeypatch.context() as patch:
        _full_disk_after(patch, name, chunks=3)
        refused([*_matrix_args(command, source, out), *cluster], 6, f"of {name!r} to",
                "No space left on device", "run the same command again")  # fmt: skip
    # reported by the task, not raised in it: no worker logs a traceback or retries in vain
    assert not [r for r in caplog.records if "Compute Failed" in r.getMessage()]
    store = RunStore.open(out)
    assert not store.is_complete
    done = store.done_tiles(name)
    assert done is not None and 0 < done.sum() < done.size  # some tiles kept, some to do

    again = CliRunner().invoke(cli, ["-q", *_matrix_args(command, source, out), *cluster])
    assert again.exit_code == 0, again.output
    assert RunStore.open(out).is_complete
    np.testing.assert_array_equal(RunStore.open(out).read(name), RunStore.open(clean).read(name))


def test_disk_full_outside_the_tiles_is_one_line_exit_6(tmp_path, monkeypatch):
    """ENOSPC raised by the driver's own writes (here the first store file)."""
    import errno
    import os

    from zarr.storage import _local

    def put(path, value, exclusive=False):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(_local, "_put", put)
    out = tmp_path / "s.zarr"
    refused(["similarity", str(_table(tmp_path)), "--out", str(out)], 6, "No space left")
    nothing_complete(out)


# -- absurd sizes ----------------------------------------------------------------


def test_absurd_imputation_iterations_are_refused(tmp_path):
    source = tmp_path / "m.csv"
    source.write_text("a,b\n" + "".join(f"{i},{'' if i % 5 == 0 else i % 7}\n" for i in range(40)))
    out = tmp_path / "filled.csv"
    refused(["impute", str(source), "--out", str(out), "--iterations", "1000000"], 2,
            "iterations must be at most 100, got 1000000", "settles within 4 to 6")  # fmt: skip
    nothing_complete(out)


@pytest.mark.parametrize("command", ["xforest", "proximity"])
def test_absurd_tree_counts_are_refused_with_the_estimates(tmp_path, command):
    out = tmp_path / "m.zarr"
    args = [command, str(_table(tmp_path)), "--out", str(out), "--trees", "100000000"]
    words = ["too large to start", "memory: about", "the machine has", "it would write about",
             "CPU-hours", "number of trees (100,000,000)"]  # fmt: skip
    line = refused(args, 2, *words)
    assert " GB" in line  # the estimate is in gigabytes, not a bare byte count
    assert not out.exists()


def test_impute_trees_and_time_over_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTFOREST_MAX_CPU_HOURS", "0.00001")
    source = tmp_path / "m.csv"
    source.write_text("a,b\n" + "".join(f"{i},{'' if i % 5 == 0 else i % 7}\n" for i in range(40)))
    refused(["impute", str(source), "--out", str(tmp_path / "o.csv"), "--trees", "5000"], 2,
            "more than DISTFOREST_MAX_CPU_HOURS=1e-05", "set DISTFOREST_MAX_CPU_HOURS higher",
            "--trees (5,000)")  # fmt: skip
    monkeypatch.setenv("DISTFOREST_MAX_CPU_HOURS", "lots")
    refused(["impute", str(source), "--out", str(tmp_path / "o.csv")], 2,
            "DISTFOREST_MAX_CPU_HOURS must be a positive number of hours, got 'lots'")  # fmt: skip


def test_pipeline_with_absurd_iterations_is_invalid_before_any_work(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        f"input: {{path: {BC}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 5}\nimpute: {out: filled.csv, iterations: 1000000}\n"
        f"output: {{dir: {tmp_path / 'out'}}}\n"
    )
    refused(["run", str(path)], 4, "p.yaml: impute: iterations must be at most 100")
    assert not (tmp_path / "out").exists()


# -- many bad inputs, each refused before any cluster starts ----------------------


def _files(tmp: Path) -> None:
    (tmp / "ok.csv").write_text(
        "a,b,c\n" + "".join(f"{i},{(i * 7) % 11},{i % 2}\n" for i in range(40))
    )
    (tmp / "nan.csv").write_text(
        "a,b,c\n"
        + "".join(f"{i},{'' if i % 5 == 0 else (i * 7) % 11},{i % 2}\n" for i in range(40))
    )
    (tmp / "huge.csv").write_text(
        "a,b,c\n" + "".join(f"{i}e306,{i % 11},{i % 2}\n" for i in range(1, 40))
    )
    (tmp / "other.csv").write_text("x,y\n1,2\n3,4\n")
    (tmp / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (tmp / "list.yaml").write_text("- a\n- b\n")
    (tmp / "python.yaml").write_text("!!python/object/apply:os.system ['echo pwned']\n")
    (tmp / "broken.yaml").write_text("input: {path: [x\n")
    (tmp / "foreign").mkdir()
    (tmp / "foreign" / "notes.txt").write_text("mine")
    (tmp / "locked.zarr.lock").mkdir()
    (tmp / "afile").write_text("x")
    os.mkfifo(tmp / "pipe.csv")  # nobody ever writes to it
    os.mkfifo(tmp / "pipe.yaml")
    os.symlink(tmp / "loop_b.csv", tmp / "loop_a.csv")
    os.symlink(tmp / "loop_a.csv", tmp / "loop_b.csv")
    # issue 29: odd numbers, traversal, user files, hostile YAML
    (tmp / "eu.csv").write_text("a;b\n" + "".join(f"{i};{i},5\n" for i in range(30)) + "1;0.25\n")
    (tmp / "nv.csv").write_text("a;b\n" + "".join(f"{i};{i},5\n" for i in range(30)) + "1;n.v.\n")
    import pandas as pd

    pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [[1], [2, 3], []]}).to_parquet(tmp / "nested.parquet")
    (tmp / "cont.csv").write_text(
        "a,b,y\n" + "".join(f"{i},{i % 7},{i * 0.37 + 0.01}\n" for i in range(40))
    )
    (tmp / "escape.yaml").write_text(
        f"input: {{path: {BC}, target: Class}}\noutput: {{dir: {tmp / 'pout'}, "
        "store: ../../escaped.zarr}\n"
    )
    (tmp / "dup.yaml").write_text(
        f"input: {{path: {BC}, target: Class}}\nforest: {{n_estimators: 2}}\n"
        f"forest: {{n_estimators: 3}}\noutput: {{dir: {tmp / 'pout'}}}\n"
    )
    (tmp / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp / ".mine.zarr.partial").mkdir()
    (tmp / ".mine.zarr.partial" / "notes.txt").write_text("mine")
    (tmp / "nocluster.yaml").write_text(
        f"input: {{path: {BC}, target: Class, drop: [Id]}}\nforest: {{n_estimators: 5}}\n"
        f"cluster: {tmp / 'missing_cluster.yaml'}\noutput: {{dir: {tmp / 'pout'}}}\n"
    )


#: name -> (arguments, exit code, words of the error line, output that must not be left)
BAD = {
    "tile size below the minimum": (["proximity", "ok.csv", "--out", "o.zarr", "--tile-size", "0"],
                                    2, ["--tile-size", "x>=16"], "o.zarr"),
    "zero trees": (["proximity", "ok.csv", "--out", "o.zarr", "--trees", "0"], 2, ["--trees"],
                   "o.zarr"),
    "output inside a file": (["proximity", "ok.csv", "--out", "afile/o.zarr", "--trees", "3"], 6,
                             ["cannot write 'afile/o.zarr'", "'afile' is not a folder"],
                             "afile/o.zarr"),
    "overwrite a folder that is not a store": (
        ["proximity", "ok.csv", "--out", "foreign", "--trees", "3", "--overwrite"], 6,
        ["refusing to overwrite", "not a distforest store"], None),
    "lock path is a directory": (["proximity", "ok.csv", "--out", "locked.zarr", "--trees", "3"], 6,
                                 ["lock file", "Is a directory"], "locked.zarr"),
    "values beyond float32 (trees)": (["proximity", "huge.csv", "--out", "o.zarr", "--trees", "3"],
                                      3, ["huge.csv", "column 'a'", "float32"], "o.zarr"),
    "values beyond float32 (similarity)": (["similarity", "huge.csv", "--out", "o.zarr"], 3,
                                           ["huge.csv", "column 'a'", "float32"], "o.zarr"),
    "misspelt metric": (["similarity", "ok.csv", "--out", "o.zarr", "--metric", "euclidian"], 2,
                        ["unknown metric 'euclidian'"], "o.zarr"),
    "reference with other columns": (
        ["similarity", "ok.csv", "--reference", "other.csv", "--out", "o.zarr"], 3,
        ["other.csv has 2 feature column(s)", "ok.csv has 3"], "o.zarr"),
    "similarity of missing values": (["similarity", "nan.csv", "--out", "o.zarr"], 3,
                                     ["nan.csv has 8 missing", "column 'b'"], "o.zarr"),
    "reference with missing values": (
        ["similarity", "ok.csv", "--reference", "nan.csv", "--out", "o.zarr"], 3,
        ["nan.csv has 8 missing", "column 'b'"], "o.zarr"),
    "X-Forest on missing values": (["xforest", "nan.csv", "--out", "o.zarr", "--trees", "3"], 3,
                                   ["nan.csv", "missing values"], "o.zarr"),
    "beta above 1": (["xforest", "ok.csv", "--out", "o.zarr", "--beta", "2"], 2, ["--beta"],
                     "o.zarr"),
    "plot inside a file": (["xforest", "ok.csv", "--out", "o.zarr", "--trees", "3", "--plot",
                            "afile/p.png"], 6, ["cannot write 'afile/p.png'"], "o.zarr"),
    "impute into a folder": (["impute", "nan.csv", "--out", "foreign"], 6,
                             ["'foreign' already exists"], None),
    "impute misspelt target": (["impute", "nan.csv", "--out", "f.csv", "--target", "C"], 3,
                               ["nan.csv", "did you mean 'c'"], "f.csv"),
    "input is a FIFO nobody writes": (["similarity", "pipe.csv", "--out", "o.zarr"], 3,
                                      ["pipe.csv: not a regular file"], "o.zarr"),
    "input is a device": (["proximity", "/dev/zero", "--out", "o.zarr"], 3,
                          ["/dev/zero: not a regular file"], "o.zarr"),
    "input is a loop of links": (["impute", "loop_a.csv", "--out", "f.csv"], 3,
                                 ["loop_a.csv is a symbolic link that leads to no file"], "f.csv"),
    "pipeline is a FIFO": (["run", "pipe.yaml"], 4, ["not a regular file"], None),
    "missing pipeline": (["run", "nope.yaml"], 4, ["cannot read pipeline 'nope.yaml'"], None),
    "pipeline not UTF-8": (["run", "latin1.yaml"], 4, ["not UTF-8"], None),
    "pipeline is a list": (["run", "list.yaml"], 4, ["must be a mapping"], None),
    "pipeline with a python tag": (["run", "python.yaml"], 4,
                                   ["could not determine a constructor", "line 1, column 1"], None),
    "pipeline cut short": (["run", "broken.yaml"], 4, ["not valid YAML", "line 2"], None),
    "pipeline names a missing cluster file": (["run", "nocluster.yaml"], 4,
                                              ["cluster config file not found"], "pout"),
    "--set with a bad value": (["run", "nocluster.yaml", "--set", "forest.n_estimators=abc"], 4,
                               ["forest.n_estimators must be an integer"], "pout"),
    "status of a folder": (["status", "foreign"], 6, ["'foreign' is not a Zarr group"], None),
    "info of nothing": (["info", "missing.zarr"], 6, ["no such store"], None),
    "cluster a missing store": (["cluster", "missing.zarr", "--method", "spectral", "--k", "2",
                                 "--out", "l.csv"], 6, ["no such store"], "l.csv"),
    "predict with a missing model": (["knn", "predict", "missing.zarr", "ok.csv", "--out", "p.csv"],
                                     6, ["no such store"], "p.csv"),
    "zero neighbours": (["neighbors", "ok.csv", "--out", "n.zarr", "--k", "0"], 2, ["--k"],
                        "n.zarr"),
    "components as words": (["mds", "ok.csv", "--out", "m.csv", "--components", "two"], 2,
                            ["--components"], "m.csv"),
    "outliers misspelt target": (["outliers", "ok.csv", "--out", "x.csv", "--target", "Klass"], 3,
                                 ["no column 'Klass'"], "x.csv"),
    "a column mixing decimal marks": (["proximity", "eu.csv", "--out", "o.zarr", "--trees", "3"],
                                      3, ["column 'b'", "mixes decimal marks", "--decimal"],
                                      "o.zarr"),
    "decimal commas and a stray marker": (["similarity", "nv.csv", "--out", "o.zarr"], 3,
                                          ["'n.v.' (row 31)", "--na-values n.v."], "o.zarr"),
    "nested Parquet column": (["proximity", "nested.parquet", "--out", "o.zarr"], 3,
                              ["column 'b' holds nested values"], "o.zarr"),
    "mislabels with a continuous target": (["mislabels", "cont.csv", "--target", "y", "--out",
                                            "m.csv", "--trees", "2"], 3,
                                           ["continuous", "--task classification"], "m.csv"),
    "pipeline output outside output.dir": (["run", "escape.yaml"], 4,
                                           ["output.store", "inside output.dir"], "pout"),
    "pipeline with a duplicate key": (["run", "dup.yaml"], 4, ["duplicate key 'forest'"], "pout"),
    "pipeline nested 5,000 levels": (["run", "deep.yaml"], 4, ["nested more than"], None),
    "a user's folder at the partial name": (["proximity", "ok.csv", "--out", "mine.zarr",
                                             "--trees", "2"], 6,
                                            ["not made by distforest"], "mine.zarr"),
    "local workers beyond the machine": (["proximity", "ok.csv", "--out", "o.zarr", "--workers",
                                          "100000", "--trees", "2"], 2, ["local workers"],
                                         "o.zarr"),
    "memory limit in words": (["similarity", "ok.csv", "--out", "o.zarr", "--memory-limit", "lots"],
                              2, ["memory_limit", "'lots'"], "o.zarr"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_gets_one_clear_line_and_a_documented_code(tmp_path, monkeypatch, name):
    args, code, words, output = BAD[name]
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["-q", *args])
    assert result.exit_code == code, (name, result.output)
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    # distforest's own line, or click's usage error (exit 2) for a malformed option
    errors = [line for line in result.output.splitlines()
              if line.startswith(("distforest: error:", "Error: "))]  # fmt: skip
    assert len(errors) == 1, result.output
    for word in words:
        assert word in errors[0], (name, word, errors[0])
    if output:
        nothing_complete(tmp_path / output)


def test_the_store_being_resumed_or_replaced_counts_as_free_space(tmp_path, monkeypatch):
    from distforest.errors import StoreError
    from distforest.jobs import estimates

    store = tmp_path / "m.zarr"
    (store / "c").mkdir(parents=True)
    (store / "c" / "0").write_bytes(b"x" * 5000)
    monkeypatch.setattr(estimates, "free_space", lambda directory: 1000)
    estimates.check_disk(tmp_path, 6000, replaces=store)  # 1000 free + 5000 of the old store
    with pytest.raises(StoreError, match="not enough disk space"):
        estimates.check_disk(tmp_path, 6001, replaces=store)
    with pytest.raises(StoreError, match="not enough disk space"):
        estimates.check_disk(tmp_path, 6000)
