"""What the command line prints besides results (issue 44, point 8): a Python warning is
one ``distforest: warning: ...`` line, and ``-q`` drops dask's shutdown noise."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from distforest.cli.progress import setup_logging


def test_a_warning_is_one_distforest_line(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(40, 3)), columns=list("abc"))
    frame.insert(0, "row_id", np.arange(40))  # an ID used as a feature: a warning
    frame.to_csv(tmp_path / "t.csv", index=False)
    done = subprocess.run(
        [sys.executable, "-m", "distforest", "-q", "proximity", str(tmp_path / "t.csv"),
         "--trees", "3", "--out", str(tmp_path / "p.zarr")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "looks like a row ID" in line]
    assert len(lines) == 1 and lines[0].startswith("distforest: warning: "), done.stderr
    assert "UserWarning" not in done.stderr and ".py:" not in done.stderr


def test_quiet_drops_the_nannys_shutdown_lines():
    nanny = logging.getLogger("distributed.nanny")
    kept: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record.getMessage())

    handler = Keep()
    nanny.addHandler(handler)
    # An earlier test of the same pytest worker may have silenced distributed's logs (its
    # LocalCluster's level, or a logging config that disabled the existing loggers).
    level, disabled, off = nanny.level, nanny.disabled, logging.root.manager.disable
    filters = list(nanny.filters)
    nanny.setLevel(logging.WARNING)
    nanny.disabled = False
    nanny.filters[:] = []
    logging.disable(logging.NOTSET)
    try:
        setup_logging(quiet=True, verbose=False)
        nanny.warning("Worker process still alive after 4.0 seconds, killing")
        nanny.warning("Restarting worker")  # other warnings are kept
        assert kept == ["Restarting worker"]
        setup_logging(quiet=False, verbose=False)
        nanny.warning("Worker process still alive after 4.0 seconds, killing")
        assert kept[-1].startswith("Worker process still alive")
    finally:
        nanny.removeHandler(handler)
        nanny.setLevel(level)
        nanny.disabled = disabled
        nanny.filters[:] = filters
        logging.disable(off)
        setup_logging(quiet=False, verbose=False)


def _suggested(output: str) -> list[str]:
    """The command lines a message suggests (between backquotes, starting 'distforest')."""
    import re

    return [m for m in re.findall(r"`([^`]+)`", output) if m.startswith("distforest ")]


def test_a_changed_pipeline_suggests_a_command_run_has_and_it_works(tmp_path):
    import shlex

    from click.testing import CliRunner

    from distforest.cli.main import cli

    bc = Path(__file__).resolve().parents[1] / "distforest" / "data" / "breast_cancer.csv"
    yaml = tmp_path / "p.yaml"
    body = (
        f"input: {{path: {bc}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: TREES, random_state: 0}\n"
        f"output: {{dir: {tmp_path / 'out'}, store: run.zarr}}\n"
    )
    yaml.write_text(body.replace("TREES", "4"))
    first = CliRunner().invoke(cli, ["-q", "run", str(yaml)], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    yaml.write_text(body.replace("TREES", "5"))
    refused = CliRunner().invoke(cli, ["-q", "run", str(yaml)], catch_exceptions=False)
    assert refused.exit_code == 6 and "--overwrite" not in refused.output, refused.output
    commands = _suggested(refused.output)
    assert commands, refused.output
    for line in commands:
        done = CliRunner().invoke(cli, ["-q", *shlex.split(line)[1:]], catch_exceptions=False)
        assert done.exit_code == 0, (line, done.output)
