"""No import circle between the modules of distforest, and a command line that is a
shell (it imports only jobs, errors and settings), read from the import graph.

grimp (import-linter's graph) lists every import of every module, including
those made inside functions and under ``if TYPE_CHECKING:``.  Two modules are
in a circle when each imports the other, directly or through others: the
circle of a module is what it imports (upstream) that also imports it
(downstream).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp


def import_circles(package: str) -> list[set[str]]:
    """The circles (strongly connected sets of two or more modules) of ``package``."""
    graph = grimp.build_graph(package)
    modules = sorted(m for m in graph.modules if m == package or m.startswith(f"{package}."))
    seen: set[str] = set()
    circles = []
    for module in modules:
        if module in seen:
            continue
        circle = {module} | (
            graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        )
        seen |= circle
        if len(circle) > 1:
            circles.append(circle)
    return circles


def test_finds_a_circle(tmp_path, monkeypatch) -> None:
    """The finder sees a circle through a function-level import, and none where there is none."""
    pkg = tmp_path / "circlepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circlepkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from circlepkg import c\n")
    (pkg / "c.py").write_text("import circlepkg.a\n")
    (pkg / "d.py").write_text("import circlepkg.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles("circlepkg") == [{"circlepkg.a", "circlepkg.b", "circlepkg.c"}]


def test_no_import_circle() -> None:
    circles = import_circles("distforest")
    assert not circles, f"import circles: {[sorted(c) for c in circles]}"


#: What the command line may import of the package (besides itself): ``pyproject.toml``'s
#: import-linter contract "the command line is a shell" says the same.
SHELL_ALLOWED = ("distforest.cli", "distforest.jobs", "distforest.errors", "distforest.settings",
                 "distforest._version")  # fmt: skip


def outside_imports(graph: grimp.ImportGraph, source: str,
                    allowed: tuple[str, ...]) -> dict[str, set[str]]:  # fmt: skip
    """Module of ``source`` -> the modules of its package it imports directly that are not
    in ``allowed`` (a package or a module of it)."""
    package = source.split(".")[0]
    found: dict[str, set[str]] = {}
    for module in sorted(m for m in graph.modules if m == source or m.startswith(f"{source}.")):
        bad = {m for m in graph.find_modules_directly_imported_by(module)
               if m.startswith(f"{package}.")
               and not any(m == a or m.startswith(f"{a}.") for a in allowed)}  # fmt: skip
        if bad:
            found[module] = bad
    return found


def test_finds_an_import_outside_the_allowed(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "shellpkg"
    (pkg / "cli").mkdir(parents=True)
    for name in ("__init__.py", "cli/__init__.py", "jobs.py", "store.py"):
        (pkg / name).write_text("")
    (pkg / "cli" / "a.py").write_text("from shellpkg import jobs\n")
    (pkg / "cli" / "b.py").write_text("def f():\n    import shellpkg.store\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("shellpkg")
    found = outside_imports(graph, "shellpkg.cli", ("shellpkg.cli", "shellpkg.jobs"))
    assert found == {"shellpkg.cli.b": {"shellpkg.store"}}


def test_the_command_line_is_a_shell() -> None:
    """cli/ imports only jobs, errors and settings (modules import-linter's contract would
    exempt by ``ignore_imports`` are left out here too)."""
    config = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c.get("source_modules") == ["distforest.cli"])  # fmt: skip
    exempt = {line.split(" -> ")[0] for line in contract.get("ignore_imports", [])}
    found = outside_imports(grimp.build_graph("distforest"), "distforest.cli", SHELL_ALLOWED)
    assert {m: sorted(b) for m, b in found.items() if m not in exempt} == {}
    forbidden = set(contract["forbidden_modules"])
    top = {m.split(".")[0] + "." + m.split(".")[1] for m in grimp.build_graph("distforest").modules
           if m.count(".") >= 1}  # fmt: skip
    assert forbidden == top - {*SHELL_ALLOWED, "distforest.data"} - {"distforest.__main__"}
