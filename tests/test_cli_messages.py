"""What the command line prints besides results (issue 44, point 8): a Python warning is
one ``distforest: warning: ...`` line, and ``-q`` drops dask's shutdown noise."""

from __future__ import annotations

import logging
import subprocess
import sys

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
        setup_logging(quiet=False, verbose=False)
