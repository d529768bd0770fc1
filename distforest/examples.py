"""The example pipelines and cluster files shipped with distforest, found by name.

The canonical files are the repository's top-level ``pipelines/*.yaml`` and
``cluster_configs/*.yaml``.  Building the package (``setup.py``'s ``build_py``)
copies them to ``distforest/data/pipelines/`` and
``distforest/data/cluster_configs/`` inside the package, so an installed
distforest has them too; a source checkout (or an editable install) reads the
top-level folders directly.  ``tests/test_examples.py`` checks that a build
ships copies identical to the top-level files.

The shipped pipelines name the bundled data by paths relative to the folder
that holds the ``distforest`` package (``distforest/data/breast_cancer.csv``):
:func:`bundled_path` resolves such a path wherever distforest is installed.

A module of the package root: the command line and the cluster loader use it.
"""

from __future__ import annotations

from pathlib import Path

#: The kinds of shipped files: folder name -> what they are.
KINDS = {"pipelines": "pipeline", "cluster_configs": "cluster file"}

_PACKAGE = Path(__file__).resolve().parent


def shipped_dir(kind: str) -> Path | None:
    """The folder of the shipped ``kind`` files (``pipelines`` or ``cluster_configs``).

    Inside the installed package first, else the source checkout's top-level
    folder; None when neither exists.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    for folder in (_PACKAGE / "data" / kind, _PACKAGE.parent / kind):
        if folder.is_dir() and any(folder.glob("*.yaml")):
            return folder
    return None


def names(kind: str) -> list[str]:
    """The names (file stems) of the shipped ``kind`` files, sorted."""
    folder = shipped_dir(kind)
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder else []


def find(kind: str, name: str) -> Path | None:
    """The shipped file called ``name`` (``"main"`` or ``"main.yaml"``), if there is one.

    Only a bare name is looked up: a value with a folder in it is a path.
    """
    if not name or Path(name).name != name:
        return None
    folder = shipped_dir(kind)
    if folder is None:
        return None
    path = folder / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    return path if path.is_file() else None


def bundled_path(relative: str) -> Path | None:
    """Where a path of a shipped pipeline (``distforest/data/...``) is, if it exists.

    The shipped pipelines name the bundled data relative to the folder holding
    the ``distforest`` package (the repository root in a checkout).
    """
    path = Path(relative)
    if path.is_absolute() or not path.parts or path.parts[0] != "distforest":
        return None
    found = _PACKAGE.parent / path
    return found if found.exists() else None


def data_files() -> list[Path]:
    """The bundled data sets (``distforest/data/*.csv``)."""
    return sorted((_PACKAGE / "data").glob("*.csv"))
