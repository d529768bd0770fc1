"""List and run the benchmarks: ``python -m benchmarks [--results DIR] [NAME [options]]``.

Without NAME: every benchmark with the first line of its docstring.  With
NAME (``xforest`` runs ``bench_xforest.py``, ``wine_picture`` runs
``wine_picture.py``): runs that script as its own ``__main__`` with the
options that follow (``python -m benchmarks NAME --help`` lists them).
``--results DIR`` writes the result files there instead of
benchmarks/results (a smoke run must not overwrite the recorded figures).
``make bench NAME=... ARGS="..."`` is the same command.
"""

from __future__ import annotations

import ast
import os
import runpy
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def scripts() -> dict[str, Path]:
    """Every benchmark script by name: the files of benchmarks/ that run as a program."""
    found = {}
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_"):
            continue
        tree = ast.parse(path.read_text())
        if not any(_is_main_guard(node) for node in tree.body):
            continue  # a module the scripts import (multi_impute, fault_cases)
        name = path.stem.removeprefix("bench_")
        found[name] = path
    return found


def _is_main_guard(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def summary(path: Path) -> str:
    """The first line of a script's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def run(name: str, argv: list[str], results: str | None = None) -> None:
    """Run benchmark ``name`` with ``argv`` as if called as ``python benchmarks/FILE argv``."""
    known = scripts()
    if name not in known:
        raise SystemExit(f"no benchmark named {name!r}; the benchmarks are: {', '.join(known)} "
                         "(python -m benchmarks lists them)")  # fmt: skip
    path = known[name]
    if results:
        os.environ["DISTFOREST_BENCH_RESULTS"] = str(Path(results).resolve())
    command = ["python", "-m", "benchmarks", *(["--results", results] if results else []), name,
               *argv]  # fmt: skip
    os.environ.setdefault("DISTFOREST_BENCH_COMMAND", shlex.join(command))
    sys.path.insert(0, str(HERE))
    sys.argv = [str(path), *argv]
    runpy.run_path(str(path), run_name="__main__")


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    results = None
    if args[:1] == ["--results"]:
        if len(args) < 2:
            raise SystemExit("--results needs a folder: python -m benchmarks --results DIR NAME")
        results, args = args[1], args[2:]
    if not args or args[0] in ("-l", "--list", "list"):
        known = scripts()
        width = max(map(len, known))
        for name, path in known.items():
            print(f"{name:<{width}}  {summary(path)}")
        return
    if args[0] in ("-h", "--help"):
        print(__doc__)
        return
    run(args[0], args[1:], results)


if __name__ == "__main__":
    main()
