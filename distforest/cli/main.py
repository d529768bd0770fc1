"""The ``distforest`` command line: the group and its table of commands.

Commands are imported when they are used: ``distforest --help`` lists every command
from :data:`COMMANDS` and imports none of them; ``distforest CMD ...`` imports only
``CMD``'s module, which imports the heavy libraries when the command runs.
"""

from __future__ import annotations

import functools
import gc
import importlib
import logging
import signal
import sys
from collections.abc import Mapping
from typing import Any

import click

from distforest._version import __version__
from distforest.errors import (
    OVERWRITE_FIX,
    DistforestError,
    Terminated,
    did_you_mean,
)
from distforest.jobs import ScrubbedStream, remember_secrets
from distforest.jobs.progress import setup_logging

#: Parameters naming files or stores a command writes: checked writable while the command
#: line is read, before any work.
OUTPUT_PARAMS = frozenset({"out", "plot", "directory"})
#: Options naming what a command reads (besides its arguments): never one of its outputs.
INPUT_PARAMS = frozenset({"distances", "cluster", "training", "labels", "model"})

#: The group's options a user may also give after the subcommand (``distforest CMD ... -q``).
GROUP_FLAGS = {"quiet": ("-q", "--quiet"), "verbose": ("-v", "--verbose")}

#: Command name -> ("module:attribute" of the click command in ``distforest.cli``, its
#: one-line help).
#: The help is the first paragraph of the command's docstring (a test checks that
#: they agree); ``distforest --help`` shows it without importing the module.
COMMANDS: dict[str, tuple[str, str]] = {
    "cluster": ("xforest_cmd:cluster_cmd", "Cluster the rows of an X-Forest STORE (kernel k-means, "
                                           "spectral or DBSCAN)."),
    "examples": ("run_cmd:examples_cmd", "Copy the example pipelines, cluster files and bundled "
                                         "data into DIR."),
    "impute": ("impute_cmd:impute", "Fill the missing values of INPUT from random-forest "
                                    "proximities."),
    "importances": ("apps_cmd:importances", "Feature importances of a forest on INPUT: "
                                            "impurity-based and by permutation."),
    "info": ("run_cmd:info", "Describe a STORE: status, provenance, arrays with shapes and "
                             "chunks."),
    "knn": ("similarity_cmd:knn", "k-nearest-neighbour classification and regression (fit a model, "
                           "predict with it)."),
    "mds": ("apps_cmd:mds", "Classical MDS of the proximities of INPUT's rows (matrix-free "
                            "Lanczos)."),
    "mislabels": ("apps_cmd:mislabels", "Rank INPUT's rows by how likely their --target label is "
                                        "wrong."),
    "neighbors": ("similarity_cmd:neighbors", "Find the k nearest rows of every row of INPUT; "
                                              "never forms the n x n matrix."),
    "outliers": ("apps_cmd:outliers", "Outlier scores of INPUT's rows (R randomForest's outlier(), "
                                      "matrix-free)."),
    "proximity": ("apps_cmd:proximity", "Fit a forest on INPUT and write its proximity matrix "
                                             "to a Zarr store."),
    "run": ("run_cmd:run", "Run the job described in a PIPELINE YAML file (see pipelines/)."),
    "score": ("apps_cmd:score", "Score INPUT's rows against a saved forest (MODEL.zarr) without "
                                "refitting it."),
    "simforest": ("simforest_cmd:simforest", "SimForest: classify objects known only through "
                                             "pairwise similarities (or distances)."),
    "similarity": ("similarity_cmd:similarity", "Write the similarity or distance matrix of the "
                                                "rows of INPUT to a Zarr store."),
    "smerf": ("smerf_cmd:smerf", "SMERF: learn a distance from features plus an observed distance "
                                 "matrix."),
    "status": ("run_cmd:status", "Say whether a run STORE is complete, running, or was "
                                 "interrupted."),
    "validate": ("run_cmd:validate", "Check PIPELINES (YAML files) without running anything."),
    "xforest": ("xforest_cmd:xforest", "Fit X-Forest on INPUT and write its beta-similarity matrix "
                                       "to a Zarr store."),
}  # fmt: skip


class _Group(click.Group):
    """Turns distforest's errors into one clear line and an exit code; ``lazy``: the
    commands imported on first use (:data:`COMMANDS`)."""

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
        module, _, attr = f"distforest.cli.{self.lazy[cmd_name][0]}".partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}:{attr} is {command!r}, not a click command")
        _prepare(command)
        self.add_command(command, cmd_name)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, with a did-you-mean for a mistyped command name."""
        name = click.utils.make_str(args[0]) if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            hint = did_you_mean(name, self.list_commands(ctx))
            ctx.fail(f"No such command {name!r}{hint or '; see distforest --help'}")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands, from the lazy table's help (nothing is imported)."""
        names = self.list_commands(ctx)  # (every one in the table; a test checks its help)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, click.Command(name, help=self.lazy[name][1]).get_short_help_str(limit))
                for name in names]  # fmt: skip
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        fix = OVERWRITE_FIX.set("pass --overwrite")  # every command but run has it
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:  # the one did-you-mean, as for commands and keys
            command = exc.ctx.command if exc.ctx is not None else self
            names = [o for p in command.params if not getattr(p, "hidden", False)
                     for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]  # fmt: skip
            hint = did_you_mean(exc.option_name, names)
            raise click.NoSuchOption(exc.option_name, f"No such option {exc.option_name!r}"
                                     f"{hint or '.'}", ctx=exc.ctx) from None  # fmt: skip
        except (KeyboardInterrupt, DistforestError, OSError) as exc:  # one line, exit status
            from distforest.jobs.result import ending

            said = ending(exc)
            if said is None:
                raise
            click.echo(said[0], err=True)
            sys.exit(said[1])
        finally:
            OVERWRITE_FIX.reset(fix)


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
    scrub_output(sys.argv)
    ctx.obj = {"quiet": quiet, "verbose": verbose, "run_id": setup_logging(quiet, verbose)}


def scrub_output(argv: list[str]) -> None:
    """Every line this process prints (messages, log lines, warnings, tracebacks) passes
    through :func:`~distforest.location.scrub`, which also learns the secrets in ``argv``."""
    remember_secrets(list(argv))
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, ScrubbedStream):
            setattr(sys, name, ScrubbedStream(stream))


def _set_flag(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """A group flag given after the subcommand: the same effect as before it."""
    if not value or ctx.resilient_parsing or param.name is None:
        return
    obj = ctx.find_object(dict)
    if obj is None:
        return
    obj[param.name] = True
    logger = logging.getLogger("distforest")
    quiet, verbose = obj.get("quiet", False), obj.get("verbose", False)
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)


def _accept_group_flags(command: click.Command) -> None:
    """Let ``command`` take ``-q``/``-v`` as the group does (``distforest proximity ...
    --quiet`` means ``distforest --quiet proximity ...``), unless it has its own."""
    taken = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    names = {p.name for p in command.params}
    for name, opts in GROUP_FLAGS.items():
        if name not in names and not taken.intersection(opts):
            command.params.append(
                click.Option(list(opts), is_flag=True, expose_value=False, hidden=True,
                             callback=_set_flag, help=f"Same as distforest {opts[1]}.")
            )  # fmt: skip


def _writable_output(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value and not ctx.resilient_parsing:
        from distforest.jobs.outputs import check_writable

        for path in value if isinstance(value, list | tuple) else [value]:
            check_writable(str(path))
    return value


def _prepare(command: click.Command) -> None:
    """Make ``command`` and its subcommands take the group's flags, check their output
    parameters (:data:`OUTPUT_PARAMS`) as they are read and keep their inputs read-only."""
    for sub in command.commands.values() if isinstance(command, click.Group) else ():
        _prepare(sub)
    _accept_group_flags(command)
    for param in command.params:
        if param.name in OUTPUT_PARAMS and param.callback is None:
            param.callback = _writable_output
    _inputs_read_only(command)


def _inputs_read_only(command: click.Command) -> None:
    """Make ``command`` refuse, before any work, an output that is, holds or lies inside one
    of its inputs (:func:`~distforest.jobs.outputs.refuse_writing_inputs`)."""
    callback = command.callback
    outs = [p.name for p in command.params if p.name in OUTPUT_PARAMS]
    ins = [p.name for p in command.params if p.name not in OUTPUT_PARAMS
           and (isinstance(p, click.Argument) or p.name in INPUT_PARAMS)]  # fmt: skip
    if callback is None or not outs or not ins or getattr(callback, "read_only_inputs", False):
        return

    @functools.wraps(callback)
    def checked(*args: Any, **kwargs: Any) -> Any:
        from distforest.jobs.outputs import refuse_writing_inputs

        refuse_writing_inputs({f"--{n}": kwargs.get(n) for n in outs if n},
                              {str(n): kwargs.get(n) for n in ins if n},
                              folders={"--out", "--directory"})  # fmt: skip
        return callback(*args, **kwargs)

    checked.read_only_inputs = True  # type: ignore[attr-defined]
    command.callback = checked


def main() -> None:
    """Entry point of the ``distforest`` console script (``python -m distforest`` too);
    the process is spared Python's last collections (:func:`spare_exit_collection`)."""
    import warnings

    from distforest.jobs.progress import show_warning

    warnings.showwarning = show_warning
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)  # handled as Ctrl-C is: exit 143
    try:
        cli(prog_name="distforest")
    finally:
        spare_exit_collection()


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM handler of the command line: :class:`Terminated` in the main thread, which
    unwinds the run as Ctrl-C does (locks released, the store left resumable)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated()


def spare_exit_collection() -> None:
    """Before a process exits: collect the young objects (the garbage of the command's
    last steps), then freeze the rest (:func:`gc.freeze`), which the interpreter's shutdown
    collections skip (measured: the exit of ``proximity`` took 0.6-0.8 s, now 0.1 s); exit
    handlers still run.  Only for a process that ends next: frozen objects stay."""
    gc.collect(1)
    gc.freeze()
