"""``distforest examples DIR``: copy the shipped pipelines, cluster files and data.

After ``distforest examples DIR``, ``cd DIR`` and every example of the README
that names ``pipelines/...`` or ``cluster_configs/...`` works as it does in the
repository: the pipelines name their input as ``distforest/data/...``, so the
bundled data sets are copied to ``DIR/distforest/data/`` too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from distforest import examples
from distforest.errors import StoreError


@click.command("examples")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False), default=".")
@click.option("--overwrite", is_flag=True, help="Replace example files already in DIR.")
def examples_cmd(directory: str, overwrite: bool) -> None:
    """Copy the example pipelines, cluster files and bundled data into DIR.

    DIR (default: the current folder) gets pipelines/, cluster_configs/ and
    distforest/data/ (the data the pipelines read), so that
    `distforest run pipelines/main.yaml` works there as in the repository.
    The shipped files are also found by name from anywhere:
    `distforest run main`, `--cluster local`.
    """
    target = Path(directory)
    plan: list[tuple[Path, Path]] = []
    for kind in examples.KINDS:
        folder = examples.shipped_dir(kind)
        if folder is None:
            raise StoreError(f"this installation of distforest ships no {kind}/; reinstall it")
        plan += [(src, target / kind / src.name) for src in sorted(folder.glob("*.yaml"))]
    plan += [(src, target / "distforest" / "data" / src.name) for src in examples.data_files()]
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
    kinds = {kind: sum(dst.parts[-2] == kind for _, dst in plan) for kind in examples.KINDS}
    click.echo(
        f"copied {kinds['pipelines']} pipelines, {kinds['cluster_configs']} cluster files and "
        f"{len(examples.data_files())} data sets into {str(target.resolve())!r}\n"
        f"  try: cd {directory} && distforest run pipelines/main.yaml"
    )
