"""Progress an operator can read in a log (issue 39, item 5): without a terminal, each
stage logs its tasks done out of the total and the time left at a steady interval.

The interval itself is checked on :class:`ProgressLog` with a clock of the test's
(at least every 60 s over two hours of tasks; every tenth of a short stage); then whole
jobs of different stage shapes run in this process with stderr not a terminal (as with
their output redirected to a file) and that clock: every stage that submits counted
tasks logs them, with the time left, at least every 60 s of the clock, down to its last
line."""

from __future__ import annotations

import functools
import itertools
import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_job_stages import _command

from distforest.cli.main import cli
from distforest.jobs import progress
from distforest.jobs.progress import ProgressLog
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
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


#: Jobs of different stage shapes (test_job_stages' commands, with more options): a forest
#: fitted in batches then its matrix in 66 tiles; query batches of a k-NN model; a
#: SimForest fitted in batches; a plain similarity matrix in 21 tiles; impute's fit batches
#: of every pass as one count (8: one column's forest of 4 batches, 2 passes; rfgap: one
#: forest of 4 batches a pass).  Name -> (test_job_stages' command, more options).
SHAPES = {"proximity": ("proximity", ["--tile-size", "64"]),
          "knn predict": ("knn predict", []), "simforest fit": ("simforest fit", []),
          "similarity": ("similarity", []), "impute": ("impute", []),
          "impute rfgap": ("impute", ["--proximity", "rfgap"])}  # fmt: skip
#: Seconds of the test's clock between two progress calls: every task is slow.
TASK_SECONDS = 40.0
UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}


def _seconds(text: str) -> float:
    """A duration as :func:`~distforest.jobs.stages.seconds_text` wrote it."""
    number, unit = text.split()
    return float(number.replace(",", "")) * UNITS[unit]


@pytest.mark.parametrize("command", list(SHAPES))
def test_every_stage_of_a_job_logs_counts_and_time_left_at_least_every_minute(tmp_path,
                                                                              monkeypatch,
                                                                              command):  # fmt: skip
    """Each task ends 40 s (of the test's clock) after the one before: the stages' lines
    come at least every 60 s (every tenth of the tasks alone would leave 7 tiles of the
    66, 4.7 min, between two lines), each with the time left that its rate so far
    predicts, and each stage that planned counted tasks ends with all of them done."""
    now = [0.0]

    def clock() -> float:
        now[0] += TASK_SECONDS
        return now[0]

    monkeypatch.setattr(progress, "ProgressLog", functools.partial(ProgressLog, clock=clock))
    name, options = SHAPES[command]
    args, _, store = _command(tmp_path, name)
    result = CliRunner().invoke(cli, [*args, *options])  # stderr: not a terminal
    assert result.exit_code == 0, result.output
    lines: dict[str, list[str]] = {}
    for line in result.output.splitlines():
        found = re.search(r"distforest: (\w[\w-]*): (\d+ of \d+ tasks done.*)$", line)
        if found:
            lines.setdefault(found.group(1), []).append(found.group(2))
    ends = {}
    for stage, said in lines.items():
        assert re.fullmatch(r"0 of \d+ tasks done, started", said[0]), said
        last = re.fullmatch(r"(\d+) of \1 tasks done in (.+)", said[-1])
        assert last, said
        ends[stage] = int(last.group(1))
        spent = [0.0]
        for middle in said[1:-1]:
            found = LINE.match(f"{stage}: {middle}")
            assert found, middle
            done, total = int(found.group(2)), int(found.group(3))
            parts = re.search(r"\), (.+) spent, about (.+) left$", middle)
            assert parts, middle
            spent.append(_seconds(parts.group(1)))
            left = _seconds(parts.group(2))
            assert left == pytest.approx(spent[-1] * (total - done) / done, rel=0.1, abs=4)
        spent.append(_seconds(last.group(2)))
        gaps = [b - a for a, b in itertools.pairwise(spent)]
        assert max(gaps) <= 60.0, (stage, said)
    record = RunStore.open(store).attrs["stages"]
    planned = sorted(e["planned_tasks"] for e in record.values() if e.get("planned_tasks"))
    assert sorted(ends.values()) == planned, (ends, planned)
    assert max(planned) > 10 or command != "proximity"


@pytest.mark.parametrize("proximity", ["column", "rfgap"])
def test_an_imputer_counts_the_tree_batches_of_every_pass_as_one_stage(proximity):
    """``ProximityImputer``'s ``"impute"`` progress counts every forest's tree batches of
    every pass, one by one: as many as the forests' own ``"fit"`` tasks (rfgap) or the
    passes it ran x the column's 8 batches (column, which stops on missForest's rule
    after 5 of 6 passes here: the count ends at the tasks done, not at the 48 planned)."""
    import pandas as pd

    from distforest.apps.column_impute import COLUMN_TASKS
    from distforest.apps.impute import ProximityImputer

    table = pd.read_csv(ROOT / "distforest" / "data" / "breast_cancer.csv").drop(columns="Id")
    heard: list[tuple[str, int, int]] = []
    imputer = ProximityImputer(iterations=6, proximity=proximity, n_estimators=8,
                               random_state=0)  # fmt: skip
    imputer.set_execution("synchronous", progress=lambda *said: heard.append(said))
    imputer.fit(table.drop(columns="Class"), table["Class"])
    counts = [(done, total) for stage, done, total in heard if stage == "impute"]
    fits = [(done, total) for stage, done, total in heard if stage == "fit"]
    if proximity == "column":  # one column with missing cells: 8 batches a pass, no "fit"
        per_pass, passes = COLUMN_TASKS, 5
        assert not fits
    else:  # the forest's own batches, each pass
        per_pass, passes = fits[0][1], 6
        assert {total for _, total in fits} == {per_pass} and per_pass > 1
        assert len([done for done, _ in fits if done]) == passes * per_pass
    assert len(imputer.history_) == passes
    planned, ran = 6 * per_pass, passes * per_pass
    expected = [(done, planned) for done in range(ran + 1)]
    assert counts == expected + ([(ran, ran)] if ran < planned else [])
