"""The fast red-team groups of ``bench_faults.py``: the pytest cases of issue 29, run as they are.

The cases are defined once, in the test files (tables such as
``tests/test_red_team.py``'s ``BAD`` or ``tests/test_hostile_yaml.py``'s
``HOSTILE``, and one test per case elsewhere); this module runs them with
pytest in this process and records, per case, every command the case ran
through the CLI (``click.testing.CliRunner.invoke``): its exit code and its
``distforest: error:`` line, and whether any output held a traceback.

A case is *handled* when its test passes (the test asserts the documented
exit code, one error line holding what it names, nothing left behind, and
for readers the right numbers: nothing silent) and no command it ran printed
a traceback.  A case is *silent* when its test fails and its last command
exited 0 (a refusal that did not happen, or wrong numbers with exit 0).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: group -> (test files or node ids, pytest -k expression or "")
FAST_GROUPS: dict[str, tuple[tuple[str, ...], str]] = {
    "yaml": (("tests/test_hostile_yaml.py",), ""),
    "numbers": (("tests/test_odd_numbers.py",), ""),
    "traversal": (("tests/test_output_names.py",), ""),
    "symlinks": (
        ("tests/test_symlinks.py", "tests/test_lock_files.py"),
        "not lease and not conditional_write",
    ),
    "corrupt": (("tests/test_corrupt_chunks.py",), ""),
    "bounds": (("tests/test_bounds.py",), ""),
    "cluster": (
        (
            "tests/test_cluster_timeout.py",
            "tests/test_cluster.py::test_refused_connection_is_reported_at_once_not_after_the_timeout",
            "tests/test_cluster.py::test_silent_scheduler_gets_the_timeout",
            "tests/test_cluster.py::test_default_local_cluster_refuses_clients_without_the_runs_credentials",
        ),
        "",
    ),
    "cli": (("tests/test_red_team.py",), ""),
    # issue 43, one group per class (tests/test_operator_edges.py)
    "readonly": (("tests/test_operator_edges.py",), "never_writes"),
    "claims": (("tests/test_operator_edges.py",), "a_second or existing_output"),
    "secrets": (("tests/test_operator_edges.py",), "secret"),
    "deadlines": (
        ("tests/test_operator_edges.py",),
        "never_answers or deadline_settings or unreached or without_gcsfs",
    ),
    "parts": (("tests/test_operator_edges.py",), "bad_part or csv_part or parquet_part"),
    "limits": (("tests/test_operator_edges.py",), "sizes or empty_feature or sigterm"),
    "engines": (("tests/test_operator_edges.py",), "cluster_script"),
}
"""The fast groups: hostile YAML, odd numbers, traversal, symlinks, corrupt chunks,
bounds, cluster reachability and the workers' HTTP check, the CLI table; and issue 43's
classes: inputs read-only, outputs claimed, secrets, object-storage deadlines, parts of a
folder, limits and SIGTERM, the real-engine script's imports."""


@dataclass
class Outcome:
    """What one pytest case did."""

    group: str
    nodeid: str
    doc: str
    passed: bool = False
    seconds: float = 0.0
    #: (exit code, error line or "", printed a traceback) per CLI command of the case
    commands: list[tuple[int, str, bool]] = field(default_factory=list)

    @property
    def traceback(self) -> bool:
        return any(tb for _, _, tb in self.commands)

    @property
    def handled(self) -> bool:
        return self.passed and not self.traceback

    @property
    def silent(self) -> bool:
        return not self.passed and bool(self.commands) and self.commands[-1][0] == 0


class _Recorder:
    """A pytest plugin: each case's outcome and the CLI commands it ran."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.outcomes: dict[str, Outcome] = {}
        self.current: Outcome | None = None

    def pytest_runtest_setup(self, item: Any) -> None:
        doc = (getattr(item, "function", None).__doc__ or "").strip().splitlines()
        self.outcomes[item.nodeid] = Outcome(self.group, item.nodeid, doc[0] if doc else "")
        self.current = None  # a fixture's commands (fitting the models to damage) do not count

    def pytest_runtest_call(self, item: Any) -> None:
        self.current = self.outcomes[item.nodeid]

    def pytest_runtest_teardown(self, item: Any) -> None:
        self.current = None

    def pytest_runtest_logreport(self, report: Any) -> None:
        outcome = self.outcomes.get(report.nodeid)
        if outcome is None:
            return
        if report.when == "call":
            outcome.passed, outcome.seconds = report.passed, report.duration
        elif report.failed:  # an error in setup or teardown
            outcome.passed = False

    def record(self, result: Any) -> None:
        if self.current is None:
            return
        output = result.output or ""
        errors = [x for x in output.splitlines() if x.startswith(("distforest: error:", "Error:"))]
        self.current.commands.append(
            (int(result.exit_code), errors[-1] if errors else "", "Traceback" in output)
        )


def run_group(group: str) -> list[Outcome]:
    """Run one fast group's pytest cases in this process; their outcomes."""
    import click.testing
    import pytest

    targets, keyword = FAST_GROUPS[group]
    recorder = _Recorder(group)
    real = click.testing.CliRunner.invoke

    def invoke(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(self, *args, **kwargs)
        recorder.record(result)
        return result

    click.testing.CliRunner.invoke = invoke  # type: ignore[method-assign]
    try:
        argv = [str(ROOT / t) for t in targets]
        argv += ["-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT)]
        if keyword:
            argv += ["-k", keyword]
        tick = time.monotonic()
        pytest.main(argv, plugins=[recorder])
        print(f"{group}: {len(recorder.outcomes)} cases in {time.monotonic() - tick:.1f} s")
    finally:
        click.testing.CliRunner.invoke = real  # type: ignore[method-assign]
    return list(recorder.outcomes.values())


def describe(outcome: Outcome) -> tuple[str, str, str]:
    """The table's case name, exit codes seen, and last error line of one outcome."""
    name = outcome.nodeid.split("::", 1)[1]
    codes = ", ".join(str(c) for c, _, _ in outcome.commands) or "- (Python API)"
    lines = [line for _, line, _ in outcome.commands if line]
    line = lines[-1] if lines else (outcome.doc or "")
    return name, codes, line if len(line) <= 220 else line[:217] + "..."
