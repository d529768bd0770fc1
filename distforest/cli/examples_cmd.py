"""``distforest examples DIR``: copy the shipped pipelines, cluster files and data.

After ``distforest examples DIR``, ``cd DIR`` and every example of the README
that names ``pipelines/...`` or ``cluster_configs/...`` works as it does in the
repository (:func:`distforest.examples.copy_to`).
"""

from __future__ import annotations

import click


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
    from distforest.jobs import examples

    click.echo(examples.copy_to(directory, overwrite))
