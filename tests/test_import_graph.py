"""No import circle between the modules of distforest, read from the import graph.

grimp (import-linter's graph) lists every import of every module, including
those made inside functions and under ``if TYPE_CHECKING:``.  Two modules are
in a circle when each imports the other, directly or through others: the
circle of a module is what it imports (upstream) that also imports it
(downstream).
"""

from __future__ import annotations

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
