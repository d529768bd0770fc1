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


def copy_to(directory: str, overwrite: bool = False) -> str:
    """Copy the shipped pipelines, cluster files and bundled data into ``directory``
    (``distforest examples DIR``); returns what was copied, as the command prints it.

    The data go to ``DIR/distforest/data/``, where the pipelines name them.
    Existing files are refused unless ``overwrite``.
    """
    import shutil

    from distforest.errors import StoreError

    target = Path(directory)
    plan: list[tuple[Path, Path]] = []
    for kind in KINDS:
        folder = shipped_dir(kind)
        if folder is None:
            raise StoreError(f"this installation of distforest ships no {kind}/; reinstall it")
        plan += [(src, target / kind / src.name) for src in sorted(folder.glob("*.yaml"))]
    plan += [(src, target / "distforest" / "data" / src.name) for src in data_files()]
    existing = [str(dst) for _, dst in plan if dst.exists()]
    if existing and not overwrite:
        shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if existing[3:] else "")
        raise StoreError(f"{shown} already exist(s); pass --overwrite or choose another DIR")
    try:
        for src, dst in plan:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    except OSError as exc:
        raise StoreError(
            f"cannot write {str(exc.filename or target)!r}: {exc.strerror}; choose another DIR"
        ) from None
    kinds = {kind: sum(dst.parts[-2] == kind for _, dst in plan) for kind in KINDS}
    return (
        f"copied {kinds['pipelines']} pipelines, {kinds['cluster_configs']} cluster files and "
        f"{len(data_files())} data sets into {str(target.resolve())!r}\n"
        f"  try: cd {directory} && distforest run pipelines/main.yaml"
    )


def shipped_pipeline(pipeline: str, overrides: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """A pipeline given by the name of a shipped example: its file, and its data found.

    ``distforest run main`` (no file ``main`` here) runs the shipped
    ``pipelines/main.yaml``.  Its input names the bundled data relative to the
    folder holding the package (``distforest/data/...``); when that path does
    not exist here, ``--set`` overrides point it at the installed copy (the
    user's own ``--set`` come after, and win).
    """
    import yaml

    path = None if Path(pipeline).exists() else find("pipelines", pipeline)
    if path is None:
        return pipeline, overrides
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    moved = []
    for section, key in (("input", "path"), ("input", "labels")):
        value = (data.get(section) or {}).get(key)
        found = bundled_path(value) if isinstance(value, str) else None
        if found is not None and not Path(str(value)).exists():
            moved.append(f"{section}.{key}={found}")
    predict = (data.get("knn") or {}).get("predict")
    if isinstance(predict, dict) and isinstance(predict.get("input"), str):
        found = bundled_path(predict["input"])
        if found is not None and not Path(predict["input"]).exists():
            moved.append(
                "knn.predict="
                + yaml.safe_dump({**predict, "input": str(found)}, default_flow_style=True).strip()
            )
    return str(path), (*moved, *overrides)
