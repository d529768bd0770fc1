"""Where the package asks what kind of input it was given: store/source.py only (issue 38
allows three places besides; none is left).

The question has had many spellings (``partitioned_input``, ``by_partitions``,
``is_dask_frame``, ``holds_rows``, ``fit_stored``, ``fit_dask_frame``, a
``PendingInput`` or ``isinstance(..., StoredTable)`` test).  A call site is a use of
one of those names in code: not its definition, an import, a type annotation, a
string or a comment.  Read from each module's syntax tree.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Any

import distforest

#: The spellings of "is this input read by partitions?".
KIND_NAMES = frozenset({"partitioned_input", "by_partitions", "is_dask_frame", "holds_rows",
                        "fit_stored", "fit_dask_frame", "PendingInput"})  # fmt: skip
#: The module that decides the kind of an input.
SOURCE_MODULE = "store/source.py"
#: Call sites allowed outside it (a job that must choose how to read a path before any
#: source exists gives ``read_as`` its reading of each kind instead).
ALLOWED = 0
#: Files whose call sites other work in progress removes (their counts may only fall).
KNOWN: dict[str, int] = {}


def _annotations(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside type annotations."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        notes: list[ast.AST | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            notes.append(node.returns)
        elif isinstance(node, ast.arg | ast.AnnAssign):
            notes.append(node.annotation)
        for note in notes:
            if note is not None:
                inside |= {id(n) for n in ast.walk(note)}
    return inside


def kind_checks(text: str) -> int:
    """The call sites in a module's source that ask what kind of input it is."""
    tree = ast.parse(text)
    skip = _annotations(tree)
    count = 0
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Name) and node.id in KIND_NAMES:
            count += 1
        elif isinstance(node, ast.Attribute) and node.attr in KIND_NAMES:
            count += 1
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "isinstance" and len(node.args) == 2
              and "StoredTable" in ast.unparse(node.args[1])):  # fmt: skip
            count += 1
    return count


def package_checks() -> Counter[str]:
    root = Path(distforest.__file__).parent
    counts: Counter[str] = Counter()
    for path in sorted(root.rglob("*.py")):
        found = kind_checks(path.read_text(encoding="utf-8"))
        if found:
            counts[path.relative_to(root).as_posix()] = found
    return counts


def test_the_counter_sees_uses_and_not_definitions() -> None:
    text = '''
from x import partitioned_input, PendingInput
def by_partitions(a: PendingInput) -> PendingInput:
    """partitioned_input in prose"""
    return 1
class PendingInput: ...
if partitioned_input(p) or plan.by_partitions:  # holds_rows
    isinstance(t, StoredTable | int)
    isinstance(t, Table)
    t = PendingInput(d)
'''
    assert kind_checks(text) == 4


def test_input_kind_is_asked_in_the_source_module_only() -> None:
    counts = package_checks()
    outside = {f: n for f, n in counts.items() if f != SOURCE_MODULE}
    grown = {f: n for f, n in outside.items() if n > KNOWN.get(f, 0)}
    assert not grown, (
        f"new input-kind checks outside {SOURCE_MODULE}: {grown}; take a RowSource from "
        "distforest.store.source.open_source (or open_input) and use its protocol"
    )
    others = {f: n for f, n in outside.items() if f not in KNOWN}
    remainder = sum(n for f, n in outside.items() if f in KNOWN)
    assert sum(others.values()) <= ALLOWED, (
        f"{sum(others.values())} input-kind checks outside {SOURCE_MODULE} (at most "
        f"{ALLOWED}): {others}; known remainder not yet removed: {remainder} in {KNOWN}"
    )


def test_read_as_gives_each_kind_its_reading(tmp_path: Path) -> None:
    """``read_as``: a folder of parts (or a reference that is one) by partitions, a small
    file whole unless ``partitions=True``; a missing reference (None) is not asked."""
    import pandas as pd

    from distforest.store.source import read_as

    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]})
    frame.to_csv(tmp_path / "one.csv", index=False)
    (tmp_path / "parts").mkdir()
    frame.to_parquet(tmp_path / "parts" / "part-0.parquet", index=False)
    one, parts = str(tmp_path / "one.csv"), str(tmp_path / "parts")

    def how(X: str, **options: Any) -> tuple[str, str]:
        return read_as(X, whole=lambda x: ("whole", x), parts=lambda x: ("parts", x), **options)

    assert how(one) == ("whole", one)
    assert how(parts) == ("parts", parts)
    assert how(one, also=(None,)) == ("whole", one)
    assert how(one, also=(parts,)) == ("parts", one)
    assert how(one, partitions=True) == ("parts", one)
