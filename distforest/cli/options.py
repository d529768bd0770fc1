"""Options shared by several commands, and running the job a command builds (its
progress bars, its summary or, ``--dry-run``, its plan).

Light on purpose: every command module imports it, and ``distforest CMD --help``
must not load Dask, scikit-learn or Zarr (they are imported when a job runs).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from distforest.errors import ParameterError, did_you_mean
from distforest.jobs import constraints as C
from distforest.jobs.specs import CLUSTER_KEYS, FOREST_KEYS, connect_kwargs, pop_keys

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def option_group(options: list[Decorator]) -> Decorator:
    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return apply


def checked(check: Callable[[Any], Any]) -> Callable[..., Any]:
    """A click callback giving ``check(value)`` (None: not given, passed on), whose
    :class:`~distforest.errors.ParameterError` is click's refusal of the option."""

    def parse(ctx: click.Context | None, param: click.Parameter | None, value: Any) -> Any:
        try:
            return None if value is None else check(value)
        except ParameterError as exc:
            raise click.BadParameter(str(exc)) from None

    return parse


def _worker_size(key: str) -> Callable[..., Any]:
    """A cluster option checked as the LocalCluster's ``key`` in a cluster file is."""

    def check(value: Any) -> Any:
        from distforest.jobs import check_worker_size

        check_worker_size(key, value)
        return value

    return checked(check)


cluster_options = option_group([
    click.option("--scheduler", metavar="ADDRESS",
                 help="Use an existing Dask scheduler, e.g. tcp://host:8786."),
    click.option("--cluster", "cluster", metavar="FILE.yaml", type=click.Path(dir_okay=False),
                 help="Start or reach a cluster described in a YAML file, or a shipped one "
                      "by name: local, address, ssh, slurm, pbs, kubernetes (cluster_configs/)."),
    click.option("--workers", type=click.IntRange(min=1), callback=_worker_size("n_workers"),
                 help="Workers of the default LocalCluster [default: CPU count]."),
    click.option("--threads", type=click.IntRange(min=1),
                 callback=_worker_size("threads_per_worker"),
                 help="Threads per worker of the default LocalCluster [default: 1]."),
    click.option("--memory-limit", metavar="SIZE", callback=_worker_size("memory_limit"),
                 help="Memory per worker of the default LocalCluster, e.g. 4GiB."),
])  # fmt: skip

_table_options = option_group([
    click.option("--drop", multiple=True, metavar="COLUMN",
                 help="Column to ignore, e.g. an identifier (repeatable)."),
    click.option("--na-values", multiple=True, metavar="TOKEN",
                 help="Extra token meaning 'missing' in text files, e.g. '?' (repeatable)."),
    click.option("--decimal", type=click.Choice([".", ","]),
                 help="Decimal mark of numbers in text files [default: decided per column; "
                 "a column mixing both is refused]. Thousands separators are never read."),
])  # fmt: skip


def id_option(what: str) -> Decorator:
    """``--id COLUMN``: the rows' IDs, kept out of the features (see :func:`load_table`)."""
    return click.option("--id", "id_column", metavar="COLUMN",
                        help=f"Column of row IDs: not a feature; {what}.")  # fmt: skip


def id_dropped_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--id COLUMN`` of a command whose outputs follow its input's rows: the column is left
    out of the features, as ``--drop`` leaves it (the command takes ``drop``)."""

    @functools.wraps(func)
    def run(*args: Any, id_column: str | None = None, drop: tuple[str, ...] = (),
            **kwargs: Any) -> Any:  # fmt: skip
        return func(*args, drop=(*drop, id_column) if id_column else drop, **kwargs)

    return id_option("left out of the features (the outputs follow the rows' order)")(run)


def input_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--drop``, ``--na-values`` and ``--decimal`` (every table the command reads follows it)."""

    @functools.wraps(func)
    def run(*args: Any, decimal: str | None = None, **kwargs: Any) -> Any:
        if decimal is None:
            return func(*args, **kwargs)
        from distforest.jobs import decimal_mark

        with decimal_mark(decimal):
            return func(*args, **kwargs)

    return _table_options(run)


#: ``ProximityForest().get_params()``: the declared defaults (tests/test_startup.py checks
#: that they are the estimator's own), so that ``--help`` needs no estimator.
FOREST_DEFAULTS: dict[str, Any] = {
    **{name: p.default for name, p in C.FOREST_PARAMETERS.items()},
    "leaf_bound": None,
}
#: The command line's one difference: a fixed seed, so that a rerun gives the same result
#: (Python's default, None, draws a fresh one).
CLI_SEED = 0


class Choice(click.Choice):
    """click's choice, whose refusal suggests the nearest choice as every message of
    distforest does (:func:`~distforest.errors.did_you_mean`)."""

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        message = super().get_invalid_choice_message(value, ctx)
        hint = did_you_mean(value, self.choices)
        return message.rstrip(".") + hint if hint else message


def parameter_option(name: str, parameter: C.Parameter | None = None,
                     **override: Any) -> Decorator:  # fmt: skip
    """The option of parameter ``name``, made from its one declaration ``parameter``
    (default: ``name``'s in :data:`~distforest.forests.constraints.FOREST_PARAMETERS`): its
    flag, default and help; the type and range from its constraint (an integer or real
    range, a choice, a flag or a flag pair), else a parser of the word checked by the
    constraint (:func:`word_parser`).  ``override``: click keywords replaced."""
    p = parameter or C.FOREST_PARAMETERS[name]
    c, flag = p.constraint, p.flag or "--" + name.replace("_", "-")
    kw: dict[str, Any] = {"default": p.default, "help": p.help or None}
    if isinstance(c, C.Bool) and p.flag:  # one flag, setting the value that is not the default
        kw.update(flag_value=not p.default, show_default=False)
    elif isinstance(c, C.Bool):
        flag = f"{flag}/--no-{flag[2:]}"
    elif isinstance(c, C.Int):
        kw["type"] = click.IntRange(min=c.low, max=c.high)
    elif isinstance(c, C.Seed):
        kw["type"] = click.IntRange(min=0)
    elif isinstance(c, C.Number):
        kw["type"] = click.FloatRange(min=c.low, max=None if c.high == float("inf") else c.high)
    elif isinstance(c, C.Choice):
        kw["type"] = Choice(c.options)
    else:
        kw["callback"] = word_parser(name, c)
        kw["default"] = None if p.default is None else str(p.default)
    kw.update(override)
    kw.setdefault("show_default", kw["default"] is not None)
    return click.option(flag, name, **kw)


def word_parser(name: str, constraint: C.Constraint) -> Callable[..., Any]:
    """A click callback reading the word of ``name`` (:func:`C.read_word`)."""
    return checked(functools.partial(C.read_word, name, constraint))


#: ``--max-features`` of the commands that fit other forests (one parser for all).
parse_max_features = word_parser("max_features", C.MaxFeatures())
#: ``--max-samples`` of the imputer's forests: auto, all (None), a count or a fraction.
parse_max_samples = word_parser("max_samples", C.RowsPerTree())


def tile_size_option(default: int) -> Decorator:
    """``--tile-size`` with the one bound every matrix uses."""
    return parameter_option("tile_size", default=default)


def _leaf_bound(value: Any) -> str | int | None:
    """``--leaf-bound``: auto, "none" (given; not given: None, the specs of runs without it
    unchanged), or the most rows a refined leaf keeps."""
    if value == "auto" or str(value).lower() == "none":
        return str(value).lower()
    try:
        return C.LeafBound().check("--leaf-bound", int(value))
    except (ValueError, ParameterError):
        raise ParameterError(f"{value!r}: give auto, none or a number of rows >= 1 (e.g. "
                             "--leaf-bound 8)") from None  # fmt: skip


leaf_bound_option = click.option(
    "--leaf-bound", "leaf_bound", default=None, metavar="auto|none|ROWS",
    callback=checked(_leaf_bound),
    help="Split leaves holding more than ROWS routed rows further on those rows, so that the "
         "neighbours' work stays linear in the rows; auto: refined when the trees grow on a "
         "sample of at most a fifth of the rows (the default with --top-k); none (the default "
         "without): leaves as grown.",
)  # fmt: skip


def trees_option(default: int, help: str = "Number of trees.") -> Decorator:
    """``--trees`` (the estimator's ``n_estimators``): a positive count of trees."""
    return parameter_option("n_estimators", default=default, help=help)


def model_option(func: Any) -> Any:
    """``--model FILE``: a model fitted elsewhere instead of a forest fitted here."""
    return click.option(
        "--model", "model_file", metavar="FILE",
        help="Use the trees of a model fitted elsewhere instead of fitting a forest: a skops "
        "file of a scikit-learn forest or gradient boosting, a LightGBM text model or an "
        "XGBoost JSON/UBJSON model (never a pickle). INPUT is the table it was fitted on "
        "(same rows, same order, its numeric features); the forest options are not used.",
    )(func)  # fmt: skip


def seed_option(help: str = "random_state: same seed, same result.") -> Decorator:
    """``--seed`` (the estimator's ``random_state``): a non-negative integer."""
    return parameter_option("random_state", default=CLI_SEED, help=help)


def forest_options(default_trees: int = FOREST_DEFAULTS["n_estimators"]) -> Decorator:
    """--task, --trees, --kind, --max-features, ... for commands that fit a forest: one
    option per parameter of :data:`~distforest.forests.constraints.FOREST_PARAMETERS`."""
    chosen: dict[str, dict[str, Any]] = {"n_estimators": {"default": default_trees},
                                         "random_state": {"default": CLI_SEED}}  # fmt: skip
    return option_group([parameter_option(name, **chosen.get(name, {})) for name in FOREST_KEYS])


def dry_run_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--dry-run``: print the job's plan (the same fields for every command), run nothing."""
    return click.option("--dry-run", is_flag=True,
                        help="Print the plan (tasks, tiles, disk, memory, time) and exit "
                             "without running anything.")(func)  # fmt: skip


def job_command(build: Callable[..., Any]) -> Decorator:
    """A command that runs a job: ``--dry-run`` and the cluster options are added, the
    other options are the keywords of ``build`` (:mod:`distforest.jobs.specs`; the cluster
    options as ``connect``), and the job it returns is run or, with ``--dry-run``,
    planned (:func:`run_job`).  The decorated function gives the name and the help."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        @click.pass_obj
        def run(obj: dict[str, Any] | None, dry_run: bool, **options: Any) -> None:
            options["connect"] = connect_kwargs(pop_keys(options, CLUSTER_KEYS))
            run_job(obj or {"quiet": False}, build(**options), dry_run)

        return dry_run_option(cluster_options(run))

    return decorate


def out_option(metavar: str, help: str) -> Decorator:
    """``--out``: what the command writes (required)."""
    return click.option("--out", required=True, metavar=metavar, help=help)


def overwrite_option(help: str = "Replace an existing distforest store at --out.") -> Decorator:
    """``--overwrite``: replace an existing output."""
    return click.option("--overwrite", is_flag=True, help=help)


def run_job(obj: dict[str, Any], job: Any, dry_run: bool, restart: bool = False) -> None:
    """Print the plan of ``job`` (``--dry-run``; exit 6 if its outputs would not fit on
    the disk), or run it under the run protocol and print its summary."""
    if dry_run:
        plan = job.plan()
        click.echo(plan.show())
        plan.check_room()
        return
    bars = ProgressBars(enabled=not obj["quiet"])
    click.echo(job.summary(job.run(bars, restart=restart, run_id=obj.get("run_id"))))


LABELS = {"fit": "fitting trees  ", "tiles": "proximity tiles", "neighbors": "neighbours     "}


class ProgressBars:
    """A ``progress(stage, done, total)`` callback drawing one bar per stage (nothing when
    not ``enabled``: ``--quiet``); without a terminal on stderr (a log file) the stages log
    their counts and time left instead (:class:`~distforest.jobs.progress.ProgressLog`)."""

    def __init__(self, enabled: bool = True) -> None:
        from distforest.jobs.progress import ProgressLog

        self.enabled = enabled
        self._bars: dict[str, Any] = {}
        self._done: dict[str, int] = {}
        self._log = None if sys.stderr.isatty() else ProgressLog()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._log is not None:
            self._log(stage, done, total)
            return
        if stage not in self._bars:
            bar = click.progressbar(
                length=total, label=LABELS.get(stage, stage), file=sys.stderr, show_pos=True
            )
            bar.__enter__()
            self._bars[stage] = bar
            self._done[stage] = 0
        bar = self._bars[stage]
        bar.update(done - self._done[stage])
        self._done[stage] = done
        if done >= total:
            bar.__exit__(None, None, None)
            del self._bars[stage]
