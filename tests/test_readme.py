"""Every command of README.md and of the docs/ pages, run as written, so that no page goes stale.

Each page is read as a list of fenced blocks, in order:

- ```` ```bash ```` blocks: one command per line (``\\`` continuations joined,
  ``#`` comments cut), each run through the command line in this process
  (click's test runner);
- ```` ```python ```` blocks: executed in order in one namespace per page, as a
  notebook would;
- ```` ```text ```` blocks right after a run block: the output the page claims
  for that block; the test finds it in that block's output, lines in order, ``...``
  standing for any text (a whole line of ``...``: any lines);
- other languages (``yaml``, ``cron``, ``ini``, plain fences) are not run, and
  may not hold a ``distforest`` command line (it would be one nobody runs).

A block that cannot run here is marked in the page itself, by an HTML comment
on the line before its fence: ``<!-- not run by ...: REASON -->`` (invisible on
GitHub and in the site).  The test lists those blocks with their reasons and
fails on a mark that gives no reason.  A ``bash`` line may not hold
``[optional parts]`` or ``a|b`` choices: every line must paste into a shell.

**README.md** is run exactly as written, in a temporary folder laid out as a
fresh clone is (``distforest examples .`` copies the pipelines, the cluster
files and ``distforest/data/``): the same sizes, the same files, the same
``--cluster local``.

**The docs/ pages** run one test each, in a folder made the same way, after
the block of ``docs/getting_started.md`` that makes the example files of the
guide (``data.parquet``, ``train.csv``, ``S.npy``, ...; the block starts with
:data:`FILES_BLOCK`).  So that all pages run in tens of seconds, and only for
this, the test changes:

- sizes: :data:`SMALLER` rewrites tree counts (``--trees 500`` -> ``--trees 12``,
  ``n_estimators=1000`` -> ``n_estimators=12``, ...), :data:`EXTRA_OPTIONS` adds
  ``--iterations 2`` to ``impute`` and ``--trees 12`` where a page leaves the
  default (``simforest fit``, ``smerf fit``), and pipelines run with ``--set``
  overrides of their tree counts (:data:`PIPELINE_SIZES`);
- clusters: ``--cluster local`` and a line that would start the default
  LocalCluster use the test session's cluster (README.md's ``--cluster local``
  starts a real one);
- the shell: ``$(date +%F)`` becomes today's date and a glob its matches, as
  the shell would make them;
- Python blocks: the two names that stand for the reader's own things (a
  scheduler's address, a folder of exports) are made by :data:`PYTHON_SETUP`
  before their block, and the blocks run inside
  ``distforest.execution("synchronous")``.

A line fails the test when its exit code is not 0 (or, for lines listed in
:data:`EXPECTED_EXIT`, not the documented one).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import distforest
from distforest.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DATA = ROOT / "distforest" / "data"
#: The docs/ pages with commands, in the order of the site's table of contents.
PAGES = ["getting_started", "matrices", "larger_than_memory", "clusters", "pipelines",
         "proximities", "xforest", "simforest", "smerf", "knn"]  # fmt: skip
#: Pages without a runnable block (checked: they hold none).
NOT_RUN_PAGES = ["design", "index"]
#: The first line of the block of docs/getting_started.md that makes the example files.
FILES_BLOCK = "# the example files of this guide, made from the bundled tables"
#: The HTML comment that marks a block the test does not run, with its reason.
NOT_RUN = re.compile(r"<!--\s*not run by [^:]*:\s*(?P<reason>.*?)\s*-->\s*$", re.S)

#: Tree counts, as (pattern, replacement), applied to docs/ command lines and Python blocks.
SMALLER = [
    (r"--trees \d+", "--trees 12"),
    (r"n_estimators=\d+", "n_estimators=12"),
    (r"n_init=10\b", "n_init=2"),
    (r"ProximityForest\(random_state=0\)", "ProximityForest(n_estimators=12, random_state=0)"),
    (r"SimilarityForestClassifier\(\)", "SimilarityForestClassifier(n_estimators=12)"),
    (r"ProximityForest\(\)", "ProximityForest(n_estimators=12)"),
]
#: Options added to a docs/ command (command name -> options), for the same reason.
EXTRA_OPTIONS = {"impute": ["--iterations", "2"], "simforest fit": ["--trees", "12"],
                 "smerf fit": ["--trees", "12"]}  # fmt: skip
#: ``--set`` overrides given to ``distforest run`` per pipeline (their tree counts).
PIPELINE_SIZES = {
    "main": ["forest.n_estimators=12"],
    "nightly_impute": ["forest.n_estimators=12", "impute.iterations=2"],
    "xforest_cluster": ["xforest.n_estimators=12"],
    "simforest": ["simforest.n_estimators=12"],
}
#: A substring of a page's line -> the exit code the page promises for it.
EXPECTED_EXIT: dict[str, int] = {}


@dataclass
class Block:
    """A fenced block of a page: where, its language, its text, why it is not run."""

    page: str
    line: int  # the line of its first content line
    lang: str
    text: str
    not_run: str | None  # the reason, for a block marked as not run
    follows: bool  # only blank lines between the previous block and this one


def _blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order."""
    text = path.read_text(encoding="utf-8")
    found, end = [], 0
    for m in re.finditer(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", text, re.S | re.M):
        before = text[: m.start()].rstrip("\n")
        mark = NOT_RUN.search(before[before.rfind("<!--") :]) if before.endswith("-->") else None
        if before.endswith("-->") and mark is None:
            pytest.fail(f"{path.name}:{before.count(chr(10)) + 1}: a comment before a block "
                        "that is not `<!-- not run by ...: REASON -->`")  # fmt: skip
        if mark is not None and not mark.group("reason"):
            pytest.fail(f"{path.name}:{before.count(chr(10)) + 1}: a block marked as not run "
                        "without a reason")  # fmt: skip
        found.append(Block(path.name, text[: m.start()].count("\n") + 2, m.group(1).strip(),
                           m.group(2), mark.group("reason") if mark else None,
                           not text[end : m.start()].strip()))  # fmt: skip
        end = m.end()
    return found


def _command_lines(block: Block) -> list[tuple[int, str]]:
    """(line number, command) of a bash block: continuations joined, comments cut."""
    lines = []
    pending, first = "", 0
    for offset, raw in enumerate(block.text.splitlines()):
        line = raw if not pending else pending + " " + raw.strip()
        first = first if pending else block.line + offset
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        pending = ""
        line = re.sub(r"(^|\s)#.*$", "", line).strip()  # a comment, not a '#' in a word
        if line:
            lines.append((first, line))
    return lines


def _claimed(expected: str) -> re.Pattern[str]:
    """The regular expression of a ``text`` block: its lines in order, ``...`` any text."""
    parts = []
    for line in expected.strip("\n").splitlines():
        if line.strip() == "...":
            parts.append(r"(?:.*\n)*?")
        else:
            pieces = [re.escape(p) for p in line.rstrip().split("...")]
            parts.append(r"[ \t]*" + ".*".join(pieces) + r"[ \t]*\n")
    return re.compile("^" + "".join(parts), re.M)


class _Page:
    """Runs one page's blocks in order in the current folder."""

    def __init__(self, path: Path, *, as_written: bool, namespace: dict[str, Any]):
        self.path, self.as_written, self.namespace = path, as_written, namespace
        self.runner = CliRunner()
        self.ran = 0

    def where(self, number: int) -> str:
        return f"{self.path.relative_to(ROOT)}:{number}"

    def command(self, number: int, line: str) -> str:
        assert not re.search(r"\s\[[^\]]*\]", line), (
            f"{self.where(number)}: `[...]` in a command line does not paste into a shell: {line}"
        )
        assert not re.search(r"(?<=\s)[\w.-]+(?:\|[\w.-]+)+(?=\s|$)", line), (
            f"{self.where(number)}: `a|b` in a command line is a shell pipe: {line}"
        )
        args = self.runnable(line).split()
        assert args[0] == "distforest", f"{self.where(number)}: not a distforest command: {line}"
        args = args[1:]
        if not self.as_written:
            args += EXTRA_OPTIONS.get(args[0], EXTRA_OPTIONS.get(" ".join(args[:2]), []))
            if args[0] == "run":
                for item in PIPELINE_SIZES.get(Path(args[1]).stem, []):
                    args += ["--set", item]
        if "*" in " ".join(args):  # a shell glob, as the shell would expand it
            args = [a for arg in args for a in (sorted(map(str, Path().glob(arg))) or [arg])]
        result = self.runner.invoke(cli, args)
        want = next((code for m, code in EXPECTED_EXIT.items() if m in line), 0)
        assert result.exit_code == want, (
            f"{self.where(number)}: `{line}` exited {result.exit_code} (expected {want}):\n"
            f"{result.output[-2000:]}"
        )
        self.ran += 1
        return result.output

    def runnable(self, line: str) -> str:
        line = line.replace("$(date +%F)", _dt.date.today().isoformat())
        if self.as_written:
            return line
        for pattern, new in SMALLER:
            line = re.sub(pattern, new, line)
        return line.replace("--cluster local", f"--scheduler {self.namespace['SCHEDULER']}")

    def python(self, block: Block) -> str:
        code = block.text
        setup = PYTHON_SETUP.get(code.splitlines()[0]) if not self.as_written else None
        if setup:
            exec(compile(setup, f"<setup of {self.where(block.line)}>", "exec"), self.namespace)
        if not self.as_written:
            for pattern, new in SMALLER:
                code = re.sub(pattern, new, code)
        out = io.StringIO()
        context = contextlib.nullcontext() if self.as_written else distforest.execution(
            "synchronous")  # fmt: skip
        try:
            with context, contextlib.redirect_stdout(out):
                exec(compile(code, self.where(block.line), "exec"), self.namespace)
        except Exception as exc:
            raise AssertionError(f"the Python block at {self.where(block.line)} fails: "
                                 f"{exc!r}\n{out.getvalue()[-2000:]}") from exc  # fmt: skip
        self.ran += 1
        return out.getvalue()

    def run(self, blocks: list[Block]) -> list[str]:
        """Run the blocks; returns the reasons of the blocks marked as not run."""
        output: str | None = None
        not_run = []
        for block in blocks:
            if block.not_run is not None:
                not_run.append(f"{self.where(block.line)}: {block.not_run}")
                output = None
            elif block.lang == "bash":
                output = "".join(self.command(n, line) for n, line in _command_lines(block))
            elif block.lang == "python":
                output = self.python(block)
            elif block.lang == "text" and block.follows and output is not None:
                assert _claimed(block.text).search(output), (
                    f"{self.where(block.line)}: the output the page claims is not the output "
                    f"of the block before it.\nclaimed:\n{block.text}\ngot:\n{output[-3000:]}"
                )
            else:
                assert not re.search(r"^\s*distforest ", block.text, re.M), (
                    f"{self.where(block.line)}: a distforest command in a `{block.lang}` "
                    "block, which the test does not run (make it bash, or mark it not run)"
                )
                output = None
        return not_run


def _clone_layout(folder: Path) -> None:
    """The folder as a fresh clone has it: pipelines/, cluster_configs/, distforest/data/."""
    result = CliRunner().invoke(cli, ["-q", "examples", str(folder)])
    assert result.exit_code == 0, result.output
    assert (folder / "distforest" / "data" / "breast_cancer.csv").is_file()


@pytest.fixture
def session_cluster(client, monkeypatch):
    """Lines that would start the default LocalCluster use the test session's cluster.

    (Starting one takes seconds, per line.)
    """
    from distforest.parallel import cluster, cluster_config

    address = client.scheduler.address
    monkeypatch.setattr(cluster, "default_cluster_config", lambda *a, **k: cluster_config._parse(
        {"kind": "address", "address": address}, "<the test session's cluster>"))  # fmt: skip


def test_the_readme_runs_as_written(tmp_path, monkeypatch):
    """Every block of README.md, in order, in a folder laid out as a fresh clone."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200, "README.md is the front door: under 200 lines"
    _clone_layout(tmp_path)
    monkeypatch.chdir(tmp_path)
    page = _Page(README, as_written=True, namespace={})
    not_run = page.run(_blocks(README))
    assert page.ran >= 8
    # the set-up commands, the virtualenv, a real Slurm cluster and the benchmarks,
    # each with its reason
    assert len(not_run) == 4, not_run


def test_the_readme_links_resolve():
    """Every relative link of README.md names a file of the repository."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), f"README.md links to {link}, which does not exist"


def test_every_page_is_run_or_listed():
    pages = {p.stem for p in DOCS.glob("*.md")}
    assert pages == set(PAGES) | set(NOT_RUN_PAGES), pages ^ (set(PAGES) | set(NOT_RUN_PAGES))
    for name in NOT_RUN_PAGES:
        blocks = _blocks(DOCS / f"{name}.md")
        assert not [b for b in blocks if b.lang in ("bash", "python")], name


def test_every_python_setup_names_a_block():
    firsts = [b.text.splitlines()[0] for p in PAGES for b in _blocks(DOCS / f"{p}.md")
              if b.lang == "python"]  # fmt: skip
    for first in PYTHON_SETUP:
        assert first in firsts, f"PYTHON_SETUP names {first!r}, no longer a block of docs/"


@pytest.mark.parametrize("name", PAGES)
def test_the_docs_page_runs(name, tmp_path, monkeypatch, session_cluster, client):
    """Every block of one docs/ page, in order, after the example files' block."""
    _clone_layout(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {
        "np": np, "pd": pd, "Path": Path, "DATA": DATA, "SCHEDULER": client.scheduler.address,
    }  # fmt: skip
    page = _Page(DOCS / f"{name}.md", as_written=False, namespace=namespace)
    blocks = _blocks(DOCS / f"{name}.md")
    files = [b for b in _blocks(DOCS / "getting_started.md") if b.text.startswith(FILES_BLOCK)]
    assert len(files) == 1, "docs/getting_started.md lost the block of the example files"
    if name != "getting_started":
        page.python(files[0])
    page.run(blocks)
    assert page.ran >= 1, f"docs/{name}.md: no block ran"


#: First line of a docs/ Python block -> the code that makes the names it uses, run
#: before it: names that stand for the reader's own (a scheduler's address, a folder
#: of exports).  Every other block makes its data itself from the bundled tables or
#: the example files, or uses what an earlier block of its page made (the blocks of a
#: page run in order in one namespace, a notebook session).
PYTHON_SETUP: dict[str, str] = {
    "import distforest": """
from distforest import ProximityForest
scheduler_address = SCHEDULER
X_small, y_small = X.iloc[:100], y.iloc[:100]
""",
    "from distforest import ProximityForest": """
import dask.dataframe as dd
Path("exports").mkdir()
parts = pd.read_csv(DATA / "ionosphere.csv").rename(columns={"Class": "label"}).drop(columns="V2")
parts.iloc[:180].to_parquet("exports/part-0.parquet")
parts.iloc[180:].to_parquet("exports/part-1.parquet")
dask_frame = dd.from_pandas(parts, npartitions=2)
""",
}


def test_a_line_that_does_not_paste_fails(tmp_path):
    page = _Page(README, as_written=True, namespace={})
    for line in ("distforest impute data.csv --out x.csv [--proximity column]",
                 "distforest impute data.csv --proximity column|rfimpute --out x.csv"):  # fmt: skip
        with pytest.raises(AssertionError, match="shell"):
            page.command(1, line)
    with pytest.raises(AssertionError, match="not a distforest command"):
        page.command(1, "ls -l")


def test_a_claimed_output_must_match_in_order():
    claimed = _claimed("store:   .../p.zarr\nstatus:  complete\n...\ntiles:   1 of 1 written\n")
    good = "store:   /tmp/x/p.zarr\nstatus:  complete\njob: a\nstages: b\ntiles:   1 of 1 written\n"
    assert claimed.search(good)
    assert not claimed.search(good.replace("complete", "running"))
    assert not claimed.search(
        "status:  complete\nstore:   /tmp/x/p.zarr\ntiles:   1 of 1 written\n"
    )


def test_a_mark_without_a_reason_or_an_unknown_comment_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- not run by x:  -->\n```bash\ndistforest info a.zarr\n```\n")
    with pytest.raises(pytest.fail.Exception, match="without a reason"):
        _blocks(page)
    page.write_text("<!-- skip -->\n```bash\ndistforest info a.zarr\n```\n")
    with pytest.raises(pytest.fail.Exception, match="not run by"):
        _blocks(page)
    page.write_text("<!-- not run by x: no server -->\n```bash\ndistforest info a.zarr\n```\n")
    assert [b.not_run for b in _blocks(page)] == ["no server"]
