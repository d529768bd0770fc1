"""Sphinx configuration of the distforest documentation (``make docs``).

The pages are Markdown (MyST); the command-line reference comes from the click
commands (sphinx-click), the API reference from the numpydoc docstrings
(autodoc, autosummary, numpydoc) and the gallery from ``docs/examples/plot_*.py``
(sphinx-gallery, run at build time on the bundled data).  ``make docs`` builds
with ``-W``: a warning is an error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# The gallery's scripts run in this process: small inputs run in process anyway,
# and no example may start a cluster.
os.environ.setdefault("MPLBACKEND", "Agg")

from distforest import __version__  # noqa: E402

project = "distforest"
author = "the distforest authors"
copyright = "the distforest authors"
version = release = __version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx_click",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "examples/README.rst"] + [
    f"auto_examples/*.{ext}" for ext in ("ipynb", "py", "zip", "json")
]

# Markdown: heading anchors so that pages can link to sections (page.md#settings).
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# Fences whose language Pygments does not know (cron) are shown as plain text.
suppress_warnings = ["misc.highlighting_failure"]

# API reference: one page per public name, parameters from the numpydoc sections.
autosummary_generate = True
autodoc_typehints = "none"  # the numpydoc "Parameters" sections carry the types
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False


def _skip_member(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated metadata-routing setters (set_fit_request, ...)."""
    return True if name.startswith("set_") and name.endswith("_request") else skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)


intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
}
# The build must not need the network: intersphinx is used only when its
# inventories are reachable (DISTFOREST_DOCS_INTERSPHINX=1).
if not os.environ.get("DISTFOREST_DOCS_INTERSPHINX"):
    intersphinx_mapping = {}

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
}

html_theme = "pydata_sphinx_theme"
html_title = f"distforest {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []
