"""Build hook: ship the top-level example folders inside the package.

The canonical example files are the repository's ``pipelines/*.yaml`` and
``cluster_configs/*.yaml``; ``build_py`` copies them to
``distforest/data/pipelines/`` and ``distforest/data/cluster_configs/`` of the
built package, where :mod:`distforest.examples` finds them after a regular
(non-editable) install.  Everything else is in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
EXAMPLE_FOLDERS = ("pipelines", "cluster_configs")


def copy_examples(build_lib: str | Path) -> list[Path]:
    """Copy the example folders into the built package under ``build_lib``."""
    copied = []
    for kind in EXAMPLE_FOLDERS:
        target = Path(build_lib) / "distforest" / "data" / kind
        target.mkdir(parents=True, exist_ok=True)
        for src in sorted((HERE / kind).glob("*.yaml")):
            shutil.copyfile(src, target / src.name)
            copied.append(target / src.name)
    return copied


class BuildWithExamples(build_py):
    """``build_py`` plus copies of the example folders under ``distforest/data/``."""

    def run(self) -> None:
        super().run()
        copy_examples(self.build_lib)


if __name__ == "__main__":  # run by the build backend (importing only defines copy_examples)
    setup(cmdclass={"build_py": BuildWithExamples})
