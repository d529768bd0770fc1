"""What the command line prints besides results (issue 44, point 8): a Python warning is
one ``distforest: warning: ...`` line, ``-q`` drops dask's shutdown noise, Ctrl-C promises a
resume only when work was kept, an existing output is worded one way, and every option a
message suggests exists for the command that printed it."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import warnings
from pathlib import Path

import click
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.jobs.progress import setup_logging
from distforest.store import run_store


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


# -- messages that point the right way (issue 44, point 8) ----------------------------------

DATA = Path(__file__).resolve().parents[1] / "distforest" / "data"


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("store_made", [False, True])
def test_ctrl_c_offers_to_resume_only_when_work_was_kept(store_made, tmp_path, monkeypatch):
    """Ctrl-C during the fit of a command that has written no store yet: no promise of a
    resume (fails on main: it always said "finished work is kept")."""
    monkeypatch.setattr(run_store, "WRITTEN_HERE", set())

    def interrupted(*args, **kwargs):
        if store_made:
            run_store.RunStore.create(tmp_path / "made.zarr", attrs={})
        raise KeyboardInterrupt

    # the fit of `proximity` comes before its store is made
    monkeypatch.setattr("distforest.forests.proximity_forest.ProximityForest.fit", interrupted)
    result = _cli("proximity", DATA / "ionosphere.csv", "--target", "Class", "--trees", "3",
                  "--out", tmp_path / "p.zarr")  # fmt: skip
    assert result.exit_code == 130
    said = [line for line in result.stderr.splitlines() if line.startswith("distforest:")]
    if store_made:
        assert said == ["distforest: interrupted; finished work is kept: run the same command "
                        "again to resume"]  # fmt: skip
    else:
        assert said == ["distforest: interrupted; no result was written yet: run the same "
                        "command again to start over"]  # fmt: skip


#: A command that finds its output already there: arguments (OUT: the existing output).
EXISTING = {
    "outliers": ["outliers", DATA / "ionosphere.csv", "--target", "Class", "--out", "OUT.csv"],
    "mds": ["mds", DATA / "ionosphere.csv", "--target", "Class", "--out", "OUT.csv"],
    "impute": ["impute", DATA / "breast_cancer.csv", "--target", "Class", "--out", "OUT.csv"],
    "importances": ["importances", DATA / "ionosphere.csv", "--target", "Class", "--out",
                    "OUT.csv"],
}  # fmt: skip
ONE_WORDING = re.compile(r"^distforest: error: output '.+' already exists; (.+) to replace it, "
                         r"or choose another path$")  # fmt: skip


def _options_of(argv: list[str]) -> set[str]:
    """The options of the (sub)command ``argv`` names."""
    command: click.Command = cli
    ctx = click.Context(cli)
    for word in argv:
        if not isinstance(command, click.Group):
            break
        found = command.get_command(ctx, word)
        if found is None:
            break
        command = found
    return {o for p in command.params for o in getattr(p, "opts", ()) if o.startswith("--")}


@pytest.mark.parametrize("command", EXISTING)
def test_one_wording_for_existing_outputs_and_its_fix_exists(command, tmp_path):
    """Every command words an existing output the same way, and the option it names is one
    the command has; run with it, the command replaces the output."""
    out = tmp_path / "OUT.csv"
    argv = [*EXISTING[command][:-1], out, "--trees", "3"]
    out.write_text("mine\n")
    result = _cli(*argv)
    assert result.exit_code == 6, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("distforest:")]
    match = ONE_WORDING.match(lines[-1])
    assert match, lines
    fix = match.group(1).split()
    assert fix[0] == "pass" and fix[1] in _options_of([str(a) for a in argv]), fix
    again = _cli(*argv, fix[1])
    assert again.exit_code == 0, again.output
    assert out.read_text() != "mine\n"


def test_python_words_an_existing_store_alike(tmp_path):
    """The writers' and stores' refusals have the same wording, with Python's keyword."""
    from distforest.errors import OutputExists

    run_store.RunStore.create(tmp_path / "s.zarr", attrs={"job": "x", "spec_hash": "y"})
    with pytest.raises(OutputExists) as refused:
        run_store.check_can_create(tmp_path / "s.zarr", overwrite=False)
    assert ONE_WORDING.match(f"distforest: error: {refused.value}")
    assert "pass overwrite=True to replace it" in str(refused.value)


def test_run_names_its_own_fix_for_an_existing_output(tmp_path):
    """``run`` has no --overwrite: its message names the pipeline's key and the --set that
    gives it, and that command line replaces the output."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"input: {{path: {DATA / 'ionosphere.csv'}, target: Class}}\n"
                        "forest: {n_estimators: 3}\noutliers: {out: o.csv}\n"
                        f"output: {{dir: {tmp_path}, store: run.zarr}}\n")  # fmt: skip
    (tmp_path / "o.csv").write_text("mine\n")
    result = _cli("run", pipeline)
    assert result.exit_code == 6, result.output
    match = ONE_WORDING.match(result.stderr.strip().splitlines()[-1])
    assert match, result.stderr
    suggested = re.search(r"--set (\S+?)\)?$", match.group(1))
    assert suggested and "--overwrite" not in match.group(1).replace("output.overwrite", "")
    assert "--set" in _options_of(["run"])
    again = _cli("run", pipeline, "--set", suggested.group(1))
    assert again.exit_code == 0, again.output
    assert (tmp_path / "o.csv").read_text() != "mine\n"


#: Commands run on a table whose first column looks like a row ID: each prints the warning,
#: whose suggested options must be the command's own.
ID_WARNED = {
    "outliers": ["outliers", "T", "--trees", "3", "--out", "o.csv"],
    "similarity": ["similarity", "T", "--out", "s.zarr"],
    "neighbors": ["neighbors", "T", "--k", "3", "--out", "n.zarr"],
    "xforest": ["xforest", "T", "--trees", "4", "--out", "x.zarr"],
    "knn fit": ["knn", "fit", "T", "--target", "c", "--k", "3", "--out", "k.zarr"],
    "simforest fit": ["simforest", "fit", "T", "--target", "c", "--trees", "3", "--out", "m.zarr"],
    "impute": ["impute", "T", "--trees", "3", "--out", "i.csv"],
}  # fmt: skip


@pytest.mark.parametrize("command", ID_WARNED)
def test_suggested_options_exist_for_the_command(command, tmp_path):
    """The warning about an ID used as a feature suggests --id and --drop: every option a
    message names exists for the command that printed it, and the suggested command line
    runs without the warning (fails on main for the commands without --id)."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(30, 2)), columns=["a", "b"])
    frame["c"] = np.where(frame["a"] > 0, "x", "y")
    if command == "impute":
        frame.loc[[1, 4], "b"] = np.nan
    frame.insert(0, "row_id", np.arange(30) + 100)
    frame.to_csv(tmp_path / "t.csv", index=False)
    argv = [str(tmp_path / "t.csv") if a == "T" else a for a in ID_WARNED[command]]
    argv = [str(tmp_path / a) if a.endswith((".csv", ".zarr")) and a != argv[0] and "/" not in a
            else a for a in argv]  # fmt: skip
    if command in ("similarity", "neighbors", "xforest", "outliers", "impute"):
        argv += ["--drop", "c"] if command in ("similarity", "neighbors") else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _cli(*argv)
    assert first.exit_code == 0, first.output
    warned = [str(w.message) for w in caught if "looks like a row ID" in str(w.message)]
    assert warned, first.stderr
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", warned[0]))
    assert options and options <= _options_of(argv), (options, warned[0])
    suggestion = re.search(r"pass (--id \S+)", warned[0])
    assert suggestion
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = _cli(*argv, *suggestion.group(1).split(), "--overwrite")
    assert again.exit_code == 0, again.output
    assert not [w for w in caught if "looks like a row ID" in str(w.message)]


#: Options named in distforest's strings that are not distforest's: click's own, and dask's
#: ``dask scheduler --scheduler-file`` (a cluster message tells how to start one);
#: ``--directory`` is a name the output checks look for, not a suggestion; ``--no`` the prefix
#: the generated flag pairs put before a name (``--no-bootstrap``).
NOT_OURS = {"--help", "--scheduler-file", "--directory", "--no"}


def test_every_option_a_message_names_exists():
    """Every ``--option`` in a string of distforest's source (messages, help, fixes) is an
    option of some distforest command: a suggestion never names an option nobody has."""
    import ast

    def options(command: click.Command, ctx: click.Context, seen: set[str]) -> set[str]:
        seen |= {o for p in command.params for o in getattr(p, "opts", ()) if o[:2] == "--"}
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                options(command.get_command(ctx, name), ctx, seen)
        return seen

    known = options(cli, click.Context(cli), set())
    named: dict[str, set[str]] = {}
    for path in (Path(__file__).resolve().parents[1] / "distforest").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*[a-z])", node.value):
                    named.setdefault(option, set()).add(path.name)
    unknown = {o: sorted(where) for o, where in named.items() if o not in known | NOT_OURS}
    assert not unknown, unknown
    assert {"--overwrite", "--id", "--drop", "--restart", "--set"} <= set(named)


MISSPELT = {
    "command": (["proximty"], "No such command 'proximty'; did you mean 'proximity'?"),
    "option": (["proximity", "t.csv", "--out", "p.zarr", "--tres", "3"],
               "No such option '--tres'; did you mean '--trees'?"),
    "subcommand option": (["knn", "fit", "t.csv", "--out", "m.zarr", "--kk", "3"],
                          "No such option '--kk'; did you mean '--k'?"),
    "choice": (["proximity", "t.csv", "--out", "p.zarr", "--kind", "extra-tree"],
               "'extra-tree' is not one of 'random-forest', 'extra-trees'; did you mean "
               "'extra-trees'?"),
    "pipeline key": (["run", "p.yaml", "--set", "forest.n_estimator=3", "--dry-run"],
                     "did you mean 'n_estimators'?"),
    "pipeline kind": (["run", "k.yaml", "--dry-run"],
                      "kind 'proximty' is not a kind of job; did you mean 'proximity'?"),
}  # fmt: skip


@pytest.mark.parametrize("what", MISSPELT)
def test_one_did_you_mean_for_every_misspelling(what, tmp_path, monkeypatch):
    """Every misspelling gets the same suggestion (errors.did_you_mean): one closest name,
    after a semicolon, not click's own list of possibilities."""
    monkeypatch.chdir(tmp_path)
    Path("t.csv").write_text("a,b\n1,2\n3,4\n")
    Path("p.yaml").write_text("input: {path: t.csv}\noutput: {dir: out}\n")
    Path("k.yaml").write_text("kind: proximty\ninput: {path: t.csv}\noutput: {dir: out}\n")
    argv, expected = MISSPELT[what]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert expected in text, result.output
    assert "Did you mean one of" not in text and "(Did you mean" not in text
