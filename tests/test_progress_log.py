"""Progress an operator can read in a log (issue 39, item 5): without a terminal, each
stage logs its tasks done out of the total and the time left at a steady interval.

The interval itself is checked on :class:`ProgressLog` with a clock of the test's
(at least every 60 s over two hours of tasks; every tenth of a short stage); the runs
check that the callback reaches the stages of a job through the run protocol: the
``proximity`` command in a subprocess with its output in a file, and jobs of other
classes (X-Forest, similarity) in this process."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.jobs.progress import ProgressLog

ROOT = Path(__file__).resolve().parents[1]
BC = str(ROOT / "distforest" / "data" / "breast_cancer.csv")
LINE = re.compile(r"(\w[\w-]*): (\d+) of (\d+) tasks done \((\d+)%\), .* spent, about .* left")


def test_a_long_stage_logs_counts_and_time_left_at_least_every_minute(caplog):
    """1,000 tasks finishing one every 7 s (about two hours): a line at least every 60 s,
    each with the count, the total and a time left that the rate so far predicts."""
    now = [0.0]
    log = ProgressLog(clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="distforest"):
        log("tiles", 0, 1000)
        for done in range(1, 1001):
            now[0] += 7.0
            log("tiles", done, 1000)
    times, lines = [], [r.getMessage() for r in caplog.records]
    for message in lines:
        found = LINE.match(message)
        if found:
            done, total = int(found.group(2)), int(found.group(3))
            assert total == 1000 and 0 < done < 1000
            times.append(done * 7.0)
    assert lines[0] == "tiles: 0 of 1000 tasks done, started"
    assert lines[-1].startswith("tiles: 1000 of 1000 tasks done in ")
    gaps = [b - a for a, b in zip([0.0, *times], [*times, 7000.0], strict=True)]
    assert len(times) > 100 and max(gaps) <= 60.0, max(gaps)
    # the rate so far is steady: the time left said is the time that was left
    halfway = next(m for m in lines if " 500 of 1000 " in m or " 499 of 1000 " in m)
    assert "about 58." in halfway, halfway  # 500 tasks x 7 s = 58.3 min


def test_a_short_stage_logs_every_tenth_of_its_tasks(caplog):
    now = [0.0]
    log = ProgressLog(clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="distforest"):
        for done in range(0, 51):
            log("fit", done, 50)
    counts = [int(m.group(2)) for r in caplog.records if (m := LINE.match(r.getMessage()))]
    assert counts == [5, 10, 15, 20, 25, 30, 35, 40, 45]


def test_a_run_with_its_output_in_a_file_logs_progress(tmp_path):
    """The command line, stderr redirected to a file (no terminal): each stage's counts
    and time left are in the log."""
    log = tmp_path / "run.log"
    with log.open("w") as fh:
        done = subprocess.run(
            [sys.executable, "-m", "distforest", "proximity", BC, "--target", "Class", "--drop",
             "Id", "--trees", "9", "--tile-size", "64", "--out", str(tmp_path / "p.zarr")],
            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False,
        )  # fmt: skip
    text = log.read_text()
    assert done.returncode == 0, text
    found = [LINE.search(line) for line in text.splitlines()]
    stages = {m.group(1) for m in found if m}
    assert any(s.endswith("tiles") for s in stages), text  # 66 tiles: a line every 10 %
    assert re.search(r"tiles: 66 of 66 tasks done in ", text), text


ION = str(ROOT / "distforest" / "data" / "ionosphere.csv")
#: Commands of other job classes than proximity's, with the stages whose counts they log:
#: the callback reaches every job's stages through runs.execute, not one command's code.
OTHER_JOBS = {
    "xforest": (["xforest", ION, "--target", "Class", "--trees", "10", "--tile-size", "128"],
                {"fit", "tiles"}),
    "similarity": (["similarity", BC, "--drop", "Id", "--drop", "Class", "--drop",
                    "Bare.nuclei", "--tile-size", "128"], {"tiles"}),
}  # fmt: skip


@pytest.mark.parametrize("command", list(OTHER_JOBS))
def test_other_jobs_log_their_stages_counts_without_a_terminal(tmp_path, command):
    """In this process, stderr not a terminal (the runner's): each stage that submits
    counted tasks logs them, down to its last line (all done, in how long)."""
    args, stages = OTHER_JOBS[command]
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "o.zarr")])
    assert result.exit_code == 0, result.output
    ends = dict(re.findall(r"(\w+): (\d+) of \2 tasks done in ", result.output))
    assert stages <= set(ends), result.output
    assert all(int(n) > 1 for n in ends.values()), ends
