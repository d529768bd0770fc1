"""One function marks an output complete: :func:`distforest.store.run_store.complete_output`.

Estimators, commands and the run protocol's last step all call it, so what "complete"
means (the status set, then the consolidated metadata written last) is decided once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import distforest
from distforest.store.run_store import STATUS_COMPLETE, STATUS_RUNNING, RunStore, complete_output

PACKAGE = Path(distforest.__file__).parent


def _mark_complete_calls() -> list[tuple[str, str]]:
    """(module, innermost enclosing function or ``<module>``) of every ``.mark_complete(...)``
    call in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        owner: dict[int, str] = {}
        for func in ast.walk(tree):  # outer functions first: inner ones overwrite
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                owner.update({id(node): func.name for node in ast.walk(func)})
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "mark_complete":
                where = path.relative_to(PACKAGE).as_posix()
                found.append((where, owner.get(id(node), "<module>")))
    return found


def test_one_function_in_the_package_marks_an_output_complete() -> None:
    assert _mark_complete_calls() == [("store/run_store.py", "complete_output")]


def test_complete_output_marks_the_store_complete(tmp_path: Path) -> None:
    rs = RunStore.create(tmp_path / "out.zarr", attrs={})
    rs.mark_running()
    assert RunStore.open(rs.path).attrs["status"] == STATUS_RUNNING
    complete_output(rs)
    assert RunStore.open(rs.path).attrs["status"] == STATUS_COMPLETE
