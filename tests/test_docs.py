"""The documentation site builds without a warning, and its gallery's examples run.

``make docs`` builds the whole site with ``-W`` and runs the gallery (a few
minutes on a loaded 2-core machine).  Here the same build runs with the
gallery's scripts not executed (``-D plot_gallery=0``: the pages, the
command-line reference from the click commands and the API reference from the
docstrings; about 40 s on that machine), and each gallery script runs on its
own, in this process, as sphinx-gallery runs it.  A docstring that breaks the
numpydoc/reST rendering, a page link or heading anchor that does not resolve,
or a command whose help text is not valid reST fails the build test.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = sorted((DOCS / "examples").glob("plot_*.py"))


def test_the_site_builds_without_warnings(tmp_path):
    from sphinx.cmd.build import build_main

    warnings = tmp_path / "warnings.txt"
    status = build_main(["-W", "--keep-going", "-q", "-b", "html", "-D", "plot_gallery=0",
                         "-w", str(warnings), str(DOCS), str(tmp_path / "html")])  # fmt: skip
    assert status == 0, warnings.read_text()
    html = tmp_path / "html"
    for page in ("index", "getting_started", "cli", "api", "design", "auto_examples/index"):
        assert (html / f"{page}.html").is_file(), page
    cli = (html / "cli.html").read_text(encoding="utf-8")
    assert "distforest proximity" in cli and "--trees" in cli  # generated from the commands
    api = (html / "generated" / "distforest.ProximityForest.html").read_text(encoding="utf-8")
    assert "n_estimators" in api  # the numpydoc Parameters section


def test_the_gallery_has_the_examples_the_issue_names():
    names = {p.stem for p in EXAMPLES}
    assert names >= {"plot_proximity_heatmap", "plot_mds", "plot_outliers",
                     "plot_xforest_clusters", "plot_simforest", "plot_smerf"}  # fmt: skip


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_gallery_example_runs(script, monkeypatch, tmp_path):
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    before = set(plt.get_fignums())
    runpy.run_path(str(script), run_name="__main__")
    drawn = set(plt.get_fignums()) - before
    assert drawn, f"{script.name} drew no figure"
    for number in drawn:
        plt.close(number)
