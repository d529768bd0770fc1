"""Every command of README.md, run as written, so that the README cannot drift.

The ```` ```bash ```` blocks are run line by line through the command line (in
this process, with click's test runner) and the ```` ```python ```` blocks are
executed in order in one namespace, as a notebook would; each from its own
temporary folder (not the repository root), which holds the files the README
names, made from the bundled data:

- ``data.csv``: the bundled breast-cancer table (699 rows, ``Id``, ``Class``);
- ``data.parquet``: the same table as Parquet, ``Id`` dropped and ``Class``
  renamed ``y``;
- ``train.csv`` / ``test.csv``: a small regression table (column ``price``);
- ``S.npy``, ``labels.csv``, ``Q.npy`` (SimForest: an RBF similarity of 200
  ionosphere rows, their labels, and 50 other rows against them;
  ``distances.npy``, ``Qdist.npy``: their Euclidean distances), ``new.csv``
  (20 complete breast-cancer rows without ``Class``), ``X.csv``, ``D.npy``,
  ``A.csv``, ``B.csv`` (SMERF: 120 ionosphere rows, the distance 1 where their
  classes differ, and 20 + 10 other rows);
- for the Python blocks, the names they use (``X``, ``y``, ``df``, ``V``, ...)
  are set by :data:`PYTHON_SETUP` before the block that first uses them.

The Python blocks run inside ``distforest.execution("synchronous")`` (in this
process; the README's own ``distforest.execution(client=...)`` block still
reaches the test session's cluster, its ``scheduler_address``), where a
notebook would start a LocalCluster per call.

What the test changes, and only this (so that the whole README runs in seconds):

- sizes: :data:`SMALLER` rewrites tree counts (``--trees 500`` -> ``--trees 12``,
  ``n_estimators=1000`` -> ``n_estimators=12``, ...), :data:`EXTRA_OPTIONS` adds
  ``--iterations 2`` to ``impute`` and ``--trees 12`` where the README leaves the
  default (``simforest fit``, ``smerf fit``), and pipelines run with ``--set`` overrides of
  their tree counts (:data:`PIPELINE_SIZES`);
- ``[...]`` marks an optional part of a command line: the line runs without it;
  ``a|b|c`` lists choices: the line runs with the first;
- ``2026-11-21`` (the date in an example path) becomes today's date;
- a line that would start the default LocalCluster uses the test session's
  cluster (``session_cluster``);
- lines listed in :data:`SKIP` are not run, each for the reason given there (a
  remote scheduler, a make target); the test checks that every listed line is
  still in the README, so a skip cannot outlive its line.

A line fails the test when its exit code is not 0 (or, for lines listed in
:data:`EXPECTED_EXIT`, not the documented one).
"""

from __future__ import annotations

import datetime as _dt
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.metrics.pairwise import rbf_kernel

import distforest
from distforest.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DATA = ROOT / "distforest" / "data"

#: Tree counts, as (pattern, replacement), applied to every command line and Python block.
SMALLER = [
    (r"--trees \d+", "--trees 12"),
    (r"n_estimators=\d+", "n_estimators=12"),
    (r"n_init=10\b", "n_init=2"),
    (r"ProximityForest\(random_state=0\)", "ProximityForest(n_estimators=12, random_state=0)"),
    (r"SimilarityForestClassifier\(\)", "SimilarityForestClassifier(n_estimators=12)"),
    (r"ProximityForest\(\)", "ProximityForest(n_estimators=12)"),
]
#: Options added to a command (command name -> options), for the same reason.
EXTRA_OPTIONS = {"impute": ["--iterations", "2"], "simforest fit": ["--trees", "12"],
                 "smerf fit": ["--trees", "12"]}  # fmt: skip
#: ``--set`` overrides given to ``distforest run`` per pipeline (their tree counts).
PIPELINE_SIZES = {
    "main": ["forest.n_estimators=12"],
    "nightly_impute": ["forest.n_estimators=12", "impute.iterations=2"],
    "xforest_cluster": ["xforest.n_estimators=12"],
    "simforest": ["simforest.n_estimators=12"],
}
#: A substring of a README line -> why the test does not run that line.
SKIP = {
    "tcp://scheduler-host:8786": "needs a Dask scheduler on another machine",
    "s3://bucket/": "needs an S3 server: tests/test_object_storage.py runs these commands "
    "against a local one",
}
#: A substring of a README line -> the exit code the README promises for it.
EXPECTED_EXIT: dict[str, int] = {}


def _blocks(lang: str) -> list[tuple[int, str]]:
    """(first line number, text) of every fenced block of ``lang`` in the README."""
    text = README.read_text(encoding="utf-8")
    found = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if m.group(1) == lang:
            found.append((text[: m.start()].count("\n") + 2, m.group(2)))
    return found


def _command_lines() -> list[tuple[int, str]]:
    """(line number, command) of every bash block: continuations joined, comments cut."""
    lines = []
    for start, text in _blocks("bash"):
        pending, first = "", 0
        for offset, raw in enumerate(text.splitlines()):
            line = raw if not pending else pending + " " + raw.strip()
            first = first if pending else start + offset
            if line.endswith("\\"):
                pending = line[:-1].rstrip()
                continue
            pending = ""
            line = re.sub(r"(^|\s)#.*$", "", line).strip()  # a comment, not a '#' in a word
            if line:
                lines.append((first, line))
    return lines


def _runnable(line: str) -> str:
    """The command as the test runs it: smaller sizes, no optional parts, today's date."""
    line = re.sub(r"\s*\[[^\]]*\]", "", line)
    line = re.sub(r"(?<=\s)([\w.-]+)(?:\|[\w.-]+)+", r"\1", line)
    for pattern, new in SMALLER:
        line = re.sub(pattern, new, line)
    return line.replace("2026-11-21", _dt.date.today().isoformat())


def _write_inputs(folder: Path) -> None:
    shutil.copy(DATA / "breast_cancer.csv", folder / "data.csv")
    cancer = pd.read_csv(DATA / "breast_cancer.csv")
    cancer.drop(columns="Id").rename(columns={"Class": "y"}).to_parquet(folder / "data.parquet")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(160, 4))
    price = 3 * X[:, 0] - 2 * X[:, 1] + X[:, 2] * X[:, 3] + rng.normal(scale=0.1, size=160)
    table = pd.DataFrame(X, columns=["rooms", "area", "age", "distance"]).assign(price=price)
    table.iloc[:120].to_csv(folder / "train.csv", index=False)
    table.iloc[120:].drop(columns="price").to_csv(folder / "test.csv", index=False)
    cancer = cancer.dropna()
    cancer.iloc[600:620].drop(columns="Class").to_csv(folder / "new.csv", index=False)
    cancer.iloc[620:640].drop(columns="Class").to_csv(folder / "tonight.csv", index=False)
    iono = pd.read_csv(DATA / "ionosphere.csv")
    X = iono.drop(columns=["Class", "V2"])  # V2 is constant
    Z = ((X - X.mean()) / X.std()).to_numpy()
    labels = iono["Class"].to_numpy()
    np.save(folder / "S.npy", rbf_kernel(Z[:200], gamma=0.05))
    np.save(folder / "Q.npy", rbf_kernel(Z[200:250], Z[:200], gamma=0.05))
    pd.DataFrame({"label": labels[:200]}).to_csv(folder / "labels.csv", index=False)
    from scipy.spatial.distance import cdist

    np.save(folder / "distances.npy", cdist(Z[:200], Z[:200]))
    np.save(folder / "Qdist.npy", cdist(Z[200:250], Z[:200]))
    X.iloc[:120].to_csv(folder / "X.csv", index=False)
    np.save(folder / "D.npy", (labels[:120, None] != labels[None, :120]).astype(float))
    X.iloc[120:140].to_csv(folder / "A.csv", index=False)
    X.iloc[140:150].to_csv(folder / "B.csv", index=False)


def test_every_skip_names_a_line_still_in_the_readme():
    text = README.read_text(encoding="utf-8")
    for marker in (*SKIP, *EXPECTED_EXIT):
        assert marker in text, f"SKIP/EXPECTED_EXIT lists {marker!r}, no longer in README.md"


@pytest.fixture
def session_cluster(client, monkeypatch):
    """Lines that would start a LocalCluster use the test session's cluster instead.

    (Starting one takes seconds, per line.)  A line naming its own cluster
    (``--cluster local``) still starts it.
    """
    from distforest.parallel import cluster, cluster_config

    address = client.scheduler.address
    monkeypatch.setattr(cluster, "default_cluster_config", lambda *a, **k: cluster_config._parse(
        {"kind": "address", "address": address}, "<the test session's cluster>"))  # fmt: skip


def test_the_readme_command_lines(tmp_path, monkeypatch, session_cluster):
    _write_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert not (tmp_path / "pipelines").exists()  # not the repository root
    runner = CliRunner()
    lines = _command_lines()
    skipped = [line for _, line in lines if any(marker in line for marker in SKIP)]
    assert {m for m in SKIP if any(m in line for line in skipped)} == set(SKIP)
    ran = 0
    for number, line in lines:
        if line in skipped:
            continue
        args = _runnable(line).split()
        assert args[0] == "distforest", f"README.md:{number}: not a distforest command: {line}"
        args = args[1:]
        args += EXTRA_OPTIONS.get(args[0], EXTRA_OPTIONS.get(" ".join(args[:2]), []))
        if args[0] == "run":
            for item in PIPELINE_SIZES.get(Path(args[1]).stem, []):
                args += ["--set", item]
        if "*" in " ".join(args):  # a shell glob, as the shell would expand it
            args = [a for arg in args for a in (sorted(map(str, Path().glob(arg))) or [arg])]
        result = runner.invoke(cli, ["-q", *args])
        want = next((code for m, code in EXPECTED_EXIT.items() if m in line), 0)
        assert result.exit_code == want, (
            f"README.md:{number}: `{line}` exited {result.exit_code} (expected {want}):\n"
            f"{result.output[-2000:]}"
        )
        ran += 1
    assert ran == len(lines) - len(skipped) >= 25


#: First line of a Python block -> the code that makes the names it uses, run before it.
#: The blocks run in order in one namespace (a notebook session), so later blocks also
#: see what earlier ones made (``pf``).
PYTHON_SETUP: dict[str, str | None] = {
    "from distforest import ProximityForest, open_store": """
table = pd.read_csv("data.csv")
X, y = table.drop(columns=["Id", "Class"]), table["Class"]
V = np.random.default_rng(0).normal(size=(len(X), 2))
X_new = X.iloc[:5]
""",
    'clf = ProximityForest(task="classification", random_state=0).fit(X, y)': """
from sklearn.model_selection import GridSearchCV, cross_val_score
X_test, y_test = X.iloc[-50:], y.iloc[-50:]
v = X.iloc[:, 0].fillna(0).to_numpy(dtype=float)
""",
    "from distforest import ProximityImputer": """
df = table.drop(columns=["Id"])
new_rows = df.iloc[20:30]
""",
    "import distforest": """
scheduler_address = SCHEDULER
X_small, y_small = X.iloc[:100], y.iloc[:100]
""",
    "from distforest.forests.pairwise import pairwise": """
complete = pd.read_csv(DATA / "ionosphere.csv")
X, y = complete.drop(columns=["Class"]).to_numpy(), complete["Class"].to_numpy()
""",
    "from distforest import XForest": """
X_new = X[:5]
V = np.random.default_rng(0).normal(size=(len(X), 2))
""",
    "from distforest import SimilarityForestClassifier": """
from sklearn.metrics.pairwise import rbf_kernel
objects = (X - X.mean(axis=0)) / (X.std(axis=0) + 1e-12)
S = rbf_kernel(objects[:200], gamma=0.05)
Q = rbf_kernel(objects[200:], objects[:200], gamma=0.05)
y_all, y = y, y[:200]
objects = objects[:200]
my_function = lambda a, b: rbf_kernel(a, b, gamma=0.05)
""",
    "from distforest.store.inputs import ingest": None,
    "from distforest import SMERF": """
X = objects[:120]
D = (y[:120, None] != y[None, :120]).astype(float)
A, B = objects[120:130], objects[130:140]
""",
}


#: The exports/ folder of the partitioned-input block: two Parquet parts, and the same
#: table as a dask DataFrame.
EXPORTS = """
import dask.dataframe as dd
Path("exports").mkdir()
parts = pd.read_csv(DATA / "ionosphere.csv").rename(columns={"Class": "label"}).drop(columns="V2")
parts.iloc[:180].to_parquet("exports/part-0.parquet")
parts.iloc[180:].to_parquet("exports/part-1.parquet")
dask_frame = dd.from_pandas(parts, npartitions=2)
"""


def _setup(text: str) -> str | None:
    """The setup of a block: by its first line, or by a line it contains (``None`` keys)."""
    lines = text.splitlines()
    if lines[0] in PYTHON_SETUP and PYTHON_SETUP[lines[0]] is not None:
        return PYTHON_SETUP[lines[0]]
    if "from distforest.store.inputs import ingest" in lines:
        return EXPORTS
    return None


def test_every_python_setup_names_a_block():
    firsts = [line for _, text in _blocks("python") for line in text.splitlines()]
    for first in PYTHON_SETUP:
        assert first in firsts, f"PYTHON_SETUP names {first!r}, no longer a README block"


def test_the_readme_python_blocks(tmp_path, monkeypatch, client):
    shutil.copy(DATA / "breast_cancer.csv", tmp_path / "data.csv")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {
        "np": np, "pd": pd, "Path": Path, "DATA": DATA, "SCHEDULER": client.scheduler.address,
    }  # fmt: skip
    blocks = _blocks("python")
    assert len(blocks) >= 8
    for start, text in blocks:
        setup = _setup(text)
        if setup:
            exec(compile(setup, f"<setup of README.md:{start}>", "exec"), namespace)
        code = text
        for pattern, new in SMALLER:
            code = re.sub(pattern, new, code)
        try:
            with distforest.execution("synchronous"):  # no cluster per call: see the docstring
                exec(compile(code, f"README.md:{start}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"the Python block at README.md:{start} fails: {exc!r}") from exc
