"""Broken inputs fed to the CLI: each gets a clear message, a non-zero exit and no
store marked complete (nothing half-published)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
GOOD_ROWS = "".join(f"{i},{(i * 7) % 11},{i % 2}\n" for i in range(40))


def _text(content: str | bytes, name: str = "data.csv") -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        path = tmp / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path

    return make


def _unreadable(tmp: Path) -> Path:
    """A path that exists but cannot be read as a file (permissions do not stop root)."""
    path = tmp / "folder.csv"
    path.mkdir()
    return path


def _zarr_3d(tmp: Path) -> Path:
    path = tmp / "cube.zarr"
    zarr.create_array(str(path), shape=(4, 3, 2), dtype="f8")[...] = 0.0
    return path


def _zarr_1d(tmp: Path) -> Path:
    path = tmp / "vector.zarr"
    zarr.create_array(str(path), shape=(10,), dtype="f8")[...] = np.arange(10.0)
    return path


#: name -> (make the input, extra args, exit code, words the message must hold)
CASES = {
    "missing file": (lambda tmp: tmp / "nope.csv", [], 3, ["no such file", "nope.csv"]),
    "unreadable file": (_unreadable, [], 3, ["folder.csv"]),
    "binary garbage": (_text(b"\x00\x89PNG\x00\xff\xfe" * 50), [], 3, ["data.csv"]),
    "wrong delimiter": (
        _text("a,b,Class\n" + GOOD_ROWS.replace(",", ";")),
        ["--target", "Class"],
        3,
        ["data.csv", "header is separated by ','", "data rows by ';'"],
    ),
    "mixed types": (
        _text("a,b,Class\n" + GOOD_ROWS.replace("7,", "seven,", 1)),
        ["--target", "Class"],
        3,
        ["column 'b'", "'seven'", "--na-values"],
    ),
    "infinite value": (
        _text("a,b,Class\n" + GOOD_ROWS.replace("3,", "inf,", 1)),
        ["--target", "Class"],
        3,
        ["infinite values"],
    ),
    "NaN in the target": (
        _text("a,b,Class\n" + GOOD_ROWS.replace(",1\n", ",\n", 1)),
        ["--target", "Class"],
        3,
        ["target 'Class' is missing in 1 row"],
    ),
    "empty file": (_text(""), [], 3, ["the file is empty"]),
    "header only": (_text("a,b,Class\n"), [], 3, ["no data rows"]),
    "one row": (_text("a,b,Class\n1,2,0\n"), [], 3, ["single row"]),
    "duplicate column names": (_text("a,a,Class\n" + GOOD_ROWS), [], 3, ["duplicate column"]),
    "unknown target": (
        _text("a,b,Class\n" + GOOD_ROWS),
        ["--target", "class"],
        3,
        ["no column 'class'", "did you mean 'Class'"],
    ),
    "zarr array of the wrong shape (3-D)": (_zarr_3d, [], 3, ["cube.zarr", "3-D"]),
    "zarr array of the wrong shape (1-D)": (_zarr_1d, [], 3, ["vector.zarr", "2-D"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_clearly(name, tmp_path):
    make, extra, code, words = CASES[name]
    source = make(tmp_path)
    out = tmp_path / "out.zarr"
    args = ["-q", "proximity", str(source), "--out", str(out), "--trees", "3", *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == code, (name, result.output)
    message = result.output.strip().splitlines()[-1]
    assert message.startswith("distforest: error:"), (name, message)
    for word in words:
        assert word in message, (name, word, message)
    assert "Traceback" not in result.output
    assert not out.exists() or not RunStore.open(out).is_complete


def test_bad_pipeline_yaml_is_refused_before_any_work(tmp_path):
    bc = ROOT / "distforest" / "data" / "breast_cancer.csv"
    path = tmp_path / "p.yaml"
    path.write_text(
        f"input: {{path: {bc}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 5, random_stat: 0}\n"
        f"output: {{dir: {tmp_path / 'out'}}}\n"
    )
    result = CliRunner().invoke(cli, ["-q", "run", str(path)])
    assert result.exit_code == 4
    assert (
        "p.yaml: unknown key 'forest.random_stat' in section 'forest'; did you mean 'random_state'?"
        in (result.output)
    )
    assert not (tmp_path / "out").exists()
