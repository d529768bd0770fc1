"""Issue 43: what a careful operator's own configuration must not lose, leak or hang on.

One test (or a few) per class of the issue: inputs are read-only to a run,
outputs are claimed, no secret in any output, every remote call has a
deadline, every part of a folder is checked by name, limits and signals, and
the real-engine script still imports what it uses.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
from pathlib import Path

from click.testing import CliRunner

from distforest.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "distforest" / "data"
BC = DATA / "breast_cancer.csv"


def _digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` hashed (a changed, added or removed file changes it)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}  # fmt: skip


def _invoke(*args: str) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _one_error_line(result: object) -> str:
    lines = [x for x in result.output.splitlines() if x.startswith("distforest: error:")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output, result.output
    return lines[0]


# -- 7. the real-engine script imports what exists ---------------------------------------


def test_cluster_script_imports_only_what_exists():
    """``.ci/test_cluster.py`` loads, and every distforest name it imports (also inside its
    functions, where a rename shows only when an engine runs) exists."""
    path = ROOT / ".ci" / "test_cluster.py"
    spec = importlib.util.spec_from_file_location("ci_test_cluster", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its top-level imports
    assert callable(module._schedulers) and module._schedulers([]) == []
    imported = [(node.module, alias.name) for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("distforest")
                for alias in node.names]  # fmt: skip
    assert imported, "the script imports nothing of distforest: the check would check nothing"
    for name, attr in imported:
        assert hasattr(importlib.import_module(name), attr), f"{name}.{attr} is gone"
