"""The benchmark harness: every script imports, and the one measuring module measures.

The benchmarks themselves run by hand (``python -m benchmarks NAME``); here every
script is imported (not run), the runner lists them all, and ``_measure`` is run on
tiny cases whose memory is known: a block that allocates 200 MB in this process, a
child process that allocates 150 MB, and the result files it writes.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import _measure  # noqa: E402  (benchmarks/ is not a package)

MB = 2**20


def _runner():
    spec = importlib.util.spec_from_file_location("benchmarks_runner", BENCH / "__main__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNNER = _runner()
SCRIPTS = RUNNER.scripts()


def test_the_runner_lists_every_script_of_benchmarks():
    programs = {
        p.stem.removeprefix("bench_")
        for p in BENCH.glob("*.py")
        if not p.name.startswith("_") and "__main__" in p.read_text()
    }
    assert set(SCRIPTS) == programs
    # the twins are one script each, chosen by an input-kind option
    assert "xforest_stored" not in SCRIPTS and "smerf_stored" not in SCRIPTS
    listed = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout  # fmt: skip
    assert [line.split()[0] for line in listed.splitlines()] == list(SCRIPTS)
    assert "X-Forest benchmark" in listed


def test_an_unknown_benchmark_is_refused_with_the_names():
    with pytest.raises(SystemExit, match=r"no benchmark named 'nope'.*xforest"):
        RUNNER.run("nope", [])


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_script_imports_and_parses_its_options_with_the_harness(name, monkeypatch):
    path = SCRIPTS[name]
    monkeypatch.setattr(sys, "argv", [str(path)])
    spec = importlib.util.spec_from_file_location(f"bench_script_{name}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)  # defines, runs nothing: main() is behind __main__
    calls = [
        node.func
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
    ]
    names = {getattr(f, "id", None) or getattr(f, "attr", None) for f in calls}
    assert "ArgumentParser" not in names, "build the parser with _measure.parser"
    assert names & {"make_parser", "parser"}, "the options come from _measure.parser"


def test_only_the_measuring_module_samples_memory_or_reads_getrusage():
    owners = {}
    for path in BENCH.glob("*.py"):
        text = path.read_text()
        for needle in ("getrusage", "ru_maxrss", "memory_info(", "tracemalloc", "import psutil",
                       "/proc/meminfo", "/proc/cpuinfo", "RESULT_PREFIX +"):  # fmt: skip
            if needle in text:
                owners.setdefault(path.name, []).append(needle)
    assert set(owners) == {"_measure.py"}, owners


def test_measure_sees_the_driver_a_child_and_each_phase(tmp_path):
    hold = 200 * MB
    child = ("import time, numpy as np; a = np.ones(150 * 2**20 // 8); a[:] = 2; "
             "time.sleep(1.0)")  # fmt: skip
    with _measure.Measure("tiny") as m:
        with m.phase("allocate") as allocate:
            block = np.ones(hold // 8)
            block[:] = 1.0
            m._sampler.sample()  # a phase shorter than a sampling interval: its end counts
        del block
        with m.phase("child"):
            subprocess.run([sys.executable, "-c", child], check=True)
    r = m.result
    assert [p["name"] for p in r["phases"]] == ["allocate", "child"]
    assert allocate["peak_rss_driver_bytes"] >= hold
    assert r["driver_peak_bytes"] >= allocate["peak_rss_driver_bytes"] * 0.95
    others = [p for p in r["processes"] if p["role"] != "driver"]
    assert max(p["peak_bytes"] for p in others) >= 150 * MB
    assert r["phases"][1]["peak_rss_tree_bytes"] >= 150 * MB
    assert r["peak_rss_tree_bytes"] >= max(p["peak_bytes"] for p in r["processes"])
    assert r["wall_s"] >= r["phases"][1]["wall_s"] >= 1.0
    assert r["load_start"]["cpus"] >= 1 and "foreign_cpu_s" in r


def test_run_measured_reads_the_command_and_its_result_line(tmp_path):
    code = (f"import numpy as np, time, sys; sys.path.insert(0, {str(BENCH)!r}); "
            "import _measure; a = np.ones(120 * 2**20 // 8); a[:] = 3; time.sleep(0.6); "
            "_measure.emit({'sum': float(a[:10].sum())})")  # fmt: skip
    r = _measure.run_measured([sys.executable, "-c", code], tmp_path, "tiny")
    assert r["returncode"] == 0 and r["child"] == {"sum": 30.0}
    driver = [p for p in r["processes"] if p["role"] == "driver"]
    assert len(driver) == 1 and driver[0]["peak_bytes"] >= 120 * MB
    if Path(_measure.TIME_BIN).exists():
        assert r["max_rss_single_bytes"] >= 120 * MB
    assert not list(tmp_path.iterdir())  # nothing left where it ran


def test_write_result_writes_the_json_and_the_markdown_table(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTFOREST_BENCH_COMMAND", "python -m benchmarks tiny --n 3")
    rows = [{"n": 3, "wall_s": 0.25, "peak_mb": 12}, {"n": 30, "wall_s": 2.5, "peak_mb": 40}]
    js, md = _measure.write_result("tiny", rows, title="Tiny", notes="Read me.",
                                   results=tmp_path)  # fmt: skip
    data = json.loads(js.read_text())
    assert data["rows"] == rows and data["command"] == "python -m benchmarks tiny --n 3"
    assert data["commit"] and data["machine"]["cores"] >= 1 and "numpy" in data["versions"]
    text = md.read_text()
    assert text.startswith("# Tiny\n")
    for fact in ("- Date: ", "- Machine: ", "- Command: `python -m benchmarks tiny --n 3`",
                 "- Commit: ", "- Load when written: "):  # fmt: skip
        assert fact in text
    assert "| n | wall_s | peak_mb |\n|---|---|---|\n| 3 | 0.25 | 12 |\n| 30 | 2.5 | 40 |" in text
    assert text.rstrip().endswith("Read me.")


def test_the_runner_runs_a_script_and_sends_its_results_elsewhere(tmp_path):
    """``python -m benchmarks --results DIR NAME`` end to end, on the smallest case."""
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--results", str(out), "rss_by_process", "--out",
         str(tmp_path / "rss.json"), "--", sys.executable, "-c",
         "import time; time.sleep(1); print('hello')"],  # (long enough to be sampled)
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "rss.json").read_text())
    assert summary["returncode"] == 0 and summary["processes"][0]["role"] == "driver"
