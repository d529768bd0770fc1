"""The rooms of docs/design.md section 2: data flows one way.

``io -> kernels -> parallel -> store -> forests -> apps -> jobs -> cli``: a room may
import the rooms to its left (and ``errors``/``_version``), never those to its
right; ``parallel`` and ``store`` do not import each other; ``kernels`` stays
free of dask, distributed, zarr, xarray and pandas.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "distforest"
ROOMS = ["io", "kernels", "parallel", "store", "forests", "apps", "jobs", "cli"]
KERNEL_FORBIDDEN = {"dask", "distributed", "zarr", "xarray", "pandas"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(room: str) -> list[Path]:
    return sorted((PACKAGE / room).rglob("*.py"))


@pytest.mark.parametrize("room", ROOMS)
def test_rooms_import_only_to_their_left(room):
    allowed = set(ROOMS[: ROOMS.index(room)])
    if room in ("parallel", "store"):
        allowed -= {"parallel", "store"}
    bad = []
    for path in _modules(room):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "distforest" and len(parts) > 1 and parts[1] in ROOMS:
                if parts[1] != room and parts[1] not in allowed:
                    bad.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not bad, "imports against the flow of docs/design.md: " + "; ".join(bad)


def test_kernels_use_arrays_only():
    bad = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in _modules("kernels")
        for name in _imports(path)
        if name.split(".")[0] in KERNEL_FORBIDDEN
    ]
    assert not bad, "; ".join(bad)


def test_the_rule_can_fail(tmp_path):
    """The checker itself sees a forbidden import."""
    bad = tmp_path / "m.py"
    bad.write_text("import zarr\nfrom distforest.cli import main\n")
    assert {"zarr", "distforest.cli"} <= _imports(bad)


def test_import_linter_contracts_are_kept(capsys):
    """The same rules, declared in pyproject.toml for `lint-imports` (make lint)."""
    from importlinter.cli import lint_imports

    code = lint_imports(config_filename=str(PACKAGE.parent / "pyproject.toml"))
    assert code == 0, capsys.readouterr().out[-2000:]
