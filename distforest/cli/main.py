"""The ``distforest`` command line: the group and its table of commands.

Commands are imported when they are used, not when the group is built:
``distforest --help`` lists every command from :data:`COMMANDS` (name,
where it lives, its one-line help) and imports none of them, and
``distforest CMD ...`` imports only ``CMD``'s module.  The command modules
import Dask, scikit-learn, Zarr and the rest inside their functions, so
``distforest CMD --help`` stays quick too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

import click

from distforest._version import __version__
from distforest.cli.progress import setup_logging
from distforest.errors import DISK_FULL_ERRNOS, DiskFullError, DistforestError

#: Command name -> ("module:attribute" of the click command, its one-line help).
#: The help is the first paragraph of the command's docstring (a test checks that
#: they agree); ``distforest --help`` shows it without importing the module.
COMMANDS: dict[str, tuple[str, str]] = {
    "cluster": ("distforest.cli.xforest_cmd:cluster_cmd",
                "Cluster the rows of an X-Forest STORE (kernel k-means, spectral or DBSCAN)."),
    "impute": ("distforest.cli.impute_cmd:impute",
               "Fill the missing values of INPUT from random-forest proximities."),
    "importances": ("distforest.cli.apps_cmd:importances",
                    "Feature importances of a forest on INPUT: impurity-based and by permutation."),
    "info": ("distforest.cli.store_cmd:info",
             "Describe a STORE: status, provenance, arrays with shapes and chunks."),
    "knn": ("distforest.cli.knn_cmd:knn",
            "k-nearest-neighbour classification and regression (fit a model, predict with it)."),
    "mds": ("distforest.cli.apps_cmd:mds",
            "Classical MDS of the proximities of INPUT's rows (matrix-free Lanczos)."),
    "mislabels": ("distforest.cli.apps_cmd:mislabels",
                  "Rank INPUT's rows by how likely their --target label is wrong."),
    "neighbors": ("distforest.cli.similarity_cmd:neighbors",
                  "Find the k nearest rows of every row of INPUT; never forms the n x n matrix."),
    "outliers": ("distforest.cli.apps_cmd:outliers",
                 "Outlier scores of INPUT's rows (R randomForest's outlier(), matrix-free)."),
    "proximity": ("distforest.cli.proximity_cmd:proximity",
                  "Fit a forest on INPUT and write its proximity matrix to a Zarr store."),
    "run": ("distforest.cli.run_cmd:run",
            "Run the job described in a PIPELINE YAML file (see pipelines/)."),
    "score": ("distforest.cli.apps_cmd:score",
              "Score INPUT's rows against a saved forest (MODEL.zarr) without refitting it."),
    "simforest": ("distforest.cli.simforest_cmd:simforest",
                  "SimForest: classify objects known only through pairwise similarities "
                  "(or distances)."),
    "similarity": ("distforest.cli.similarity_cmd:similarity",
                   "Write the similarity or distance matrix of the rows of INPUT to a Zarr store."),
    "smerf": ("distforest.cli.smerf_cmd:smerf",
              "SMERF: learn a distance from features plus an observed distance matrix."),
    "status": ("distforest.cli.store_cmd:status",
               "Say whether a run STORE is complete, running, or was interrupted."),
    "validate": ("distforest.cli.run_cmd:validate",
                 "Check PIPELINES (YAML files) without running anything."),
    "xforest": ("distforest.cli.xforest_cmd:xforest",
                "Fit X-Forest on INPUT and write its beta-similarity matrix to a Zarr store."),
}  # fmt: skip


class _Group(click.Group):
    """Turns distforest's errors into one clear line and an exit code.

    Parameters
    ----------
    lazy : mapping, optional
        Command name -> ("module:attribute", one-line help) of commands
        imported on first use (see :data:`COMMANDS`).
    """

    def __init__(
        self, *args: Any, lazy: Mapping[str, tuple[str, str]] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attr = self.lazy[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}:{attr} is {command!r}, not a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands, from the lazy table's help (nothing is imported)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.lazy and name not in self.commands:
                stand_in = click.Command(name, help=self.lazy[name][1])  # shortened as click does
                rows.append((name, stand_in.get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DistforestError as exc:
            click.echo(f"distforest: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:  # a disk that fills up under any command: exit 6, one line
            if exc.errno not in DISK_FULL_ERRNOS:
                raise
            click.echo(f"distforest: error: {DiskFullError.from_os_error(exc)}", err=True)
            sys.exit(DiskFullError.exit_code)


@click.group(cls=_Group, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="distforest")
@click.option("-q", "--quiet", is_flag=True, help="Only print errors and the final summary.")
@click.option("-v", "--verbose", is_flag=True, help="Print debug log lines.")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: bool) -> None:
    """Tree ensembles as Dask tasks; pairwise matrices as chunked Zarr arrays.

    \b
    Examples:
      distforest proximity data.csv --target Class --trees 500 --out prox.zarr
      distforest info prox.zarr
      distforest run pipelines/main.yaml
    """
    ctx.obj = {"quiet": quiet, "run_id": setup_logging(quiet, verbose)}


def main() -> None:
    """Entry point of the ``distforest`` console script."""
    cli(prog_name="distforest")
