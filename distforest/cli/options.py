"""Options shared by several commands, and fitting a forest from them.

Light on purpose: every command module imports it, and ``distforest CMD --help``
must not load Dask, scikit-learn or Zarr (they are imported when a forest is fitted).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from distforest.errors import ParameterError
from distforest.forests import constraints as C

if TYPE_CHECKING:
    pass

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

FOREST_KEYS = (
    "task",
    "n_estimators",
    "kind",
    "max_features",
    "criterion",
    "min_samples_split",
    "min_samples_leaf",
    "max_depth",
    "max_leaf_nodes",
    "min_impurity_decrease",
    "bootstrap",
    "max_samples",
    "class_weight",
    "random_state",
    "batch_size",
)
CLUSTER_KEYS = ("scheduler", "cluster", "workers", "threads", "memory_limit")


def _stack(options: list[Decorator]) -> Decorator:
    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return apply


cluster_options = _stack([
    click.option("--scheduler", metavar="ADDRESS",
                 help="Use an existing Dask scheduler, e.g. tcp://host:8786."),
    click.option("--cluster", "cluster", metavar="FILE.yaml", type=click.Path(dir_okay=False),
                 help="Start or reach a cluster described in a YAML file, or a shipped one "
                      "by name: local, address, ssh, slurm, pbs, kubernetes (cluster_configs/)."),
    click.option("--workers", type=click.IntRange(min=1),
                 help="Workers of the default LocalCluster [default: CPU count]."),
    click.option("--threads", type=click.IntRange(min=1),
                 help="Threads per worker of the default LocalCluster [default: 1]."),
    click.option("--memory-limit", metavar="SIZE",
                 help="Memory per worker of the default LocalCluster, e.g. 4GiB."),
])  # fmt: skip

_table_options = _stack([
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
        from distforest.io.tables import decimal_mark

        with decimal_mark(decimal):
            return func(*args, **kwargs)

    return _table_options(run)


#: ``ProximityForest().get_params()``, written out so that ``--help`` needs no estimator
#: (tests/test_startup.py checks that they are the estimator's own defaults).
FOREST_DEFAULTS: dict[str, Any] = {
    "batch_size": None,
    "bootstrap": True,
    "class_weight": None,
    "criterion": "auto",
    "kind": "random-forest",
    "leaf_bound": None,
    "max_depth": None,
    "max_features": "auto",
    "max_leaf_nodes": None,
    "max_samples": None,
    "min_impurity_decrease": 0.0,
    "min_samples_leaf": 1,
    "min_samples_split": 2,
    "n_estimators": 100,
    "random_state": None,
    "task": "auto",
    "tile_size": 2048,
}
#: The command line's one difference: a fixed seed, so that a rerun gives the same result
#: (Python's default, None, draws a fresh one).
CLI_SEED = 0


def parse_max_features(
    ctx: click.Context | None, param: click.Parameter | None, value: Any
) -> str | int | float | None:
    """``--max-features``: auto, sqrt, log2, an integer >= 1 or a fraction (one parser for all)."""
    return _parse_number(value, "max_features", C.MaxFeatures())


def parse_max_samples(
    ctx: click.Context | None, param: click.Parameter | None, value: Any
) -> str | int | float | None:
    """``--max-samples``: auto, all (None), an integer >= 1 or a fraction."""
    if isinstance(value, str) and value.lower() in ("all", "none"):
        return None
    return _parse_number(value, "max_samples", C.RowsPerTree())


def parse_forest_max_samples(
    ctx: click.Context | None, param: click.Parameter | None, value: Any
) -> int | float | dict[str, int] | None:
    """The forest's ``--max-samples``: a count, a fraction, or ``CLASS:ROWS,...`` per class."""
    if value is None or (isinstance(value, str) and value.lower() in ("all", "none")):
        return None
    return _parse_number(_per_class_word(value), "max_samples", C.MaxSamples())


def parse_class_weight(
    ctx: click.Context | None, param: click.Parameter | None, value: Any
) -> str | dict[str, float] | None:
    """``--class-weight``: balanced, balanced_subsample, or ``CLASS:WEIGHT,...``."""
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return None
    return _parse_number(_per_class_word(value), "class_weight", C.ClassWeight())


def _per_class_word(value: Any) -> Any:
    """``a:50,b:50`` as a mapping of numbers; any other word as it is."""
    if not isinstance(value, str) or ":" not in value:
        return value
    pairs = [item.rpartition(":") for item in value.split(",")]
    try:
        return {label.strip(): _number(v.strip()) for label, _, v in pairs}
    except ValueError:
        raise click.BadParameter(
            f"expected CLASS:NUMBER[,CLASS:NUMBER...], e.g. yes:100,no:100, got {value!r}"
        ) from None


def parse_split_size(
    ctx: click.Context | None, param: click.Parameter | None, value: Any
) -> int | float:
    """``--min-samples-split``: an integer >= 2 or a fraction in (0, 1]."""
    return _parse_number(value, "min_samples_split", C.SplitSize())


def _number(word: str) -> int | float:
    try:
        return int(word)
    except ValueError:
        return float(word)


def _parse_number(value: Any, name: str, constraint: C.Constraint) -> Any:
    """A command-line word read as an int, else a float, else kept; then checked."""
    if isinstance(value, str):
        try:
            value = _number(value)
        except ValueError:
            pass
    try:
        return constraint.check(name, value)
    except ParameterError as exc:
        raise click.BadParameter(str(exc)) from None


def tile_size_option(default: int) -> Decorator:
    """``--tile-size`` with the one bound every matrix uses."""
    return click.option("--tile-size", type=click.IntRange(min=C.MIN_TILE), default=default,
                        show_default=True,
                        help="Rows/columns of one tile (one task, one Zarr chunk).")  # fmt: skip


def parse_leaf_bound(
    ctx: click.Context | None, param: click.Parameter | None, value: Any
) -> str | int | None:
    """``--leaf-bound``: auto, none, or the most rows a refined leaf keeps."""
    if value is None or value == "auto":
        return value
    if str(value).lower() == "none":
        return None
    try:
        return C.LeafBound().check("--leaf-bound", int(value))
    except (ValueError, ParameterError):
        raise click.BadParameter(
            f"{value!r}: give auto, none or a number of rows >= 1 (e.g. --leaf-bound 8)"
        ) from None


leaf_bound_option = click.option(
    "--leaf-bound", "leaf_bound", default=None, metavar="auto|none|ROWS",
    callback=parse_leaf_bound,
    help="Split leaves holding more than ROWS routed rows further on those rows, so that the "
         "neighbours' work stays linear in the rows; auto: refined when the trees grow on a "
         "sample of at most a fifth of the rows; none (the default): leaves as grown.",
)  # fmt: skip


def trees_option(default: int, help: str = "Number of trees.") -> Decorator:
    """``--trees`` (the estimator's ``n_estimators``): a positive count of trees."""
    return click.option("--trees", "n_estimators", type=click.IntRange(min=1), default=default,
                        show_default=True, help=help)  # fmt: skip


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
    return click.option("--seed", "random_state", type=click.IntRange(min=0), default=CLI_SEED,
                        show_default=True, help=help)  # fmt: skip


def forest_options(default_trees: int = FOREST_DEFAULTS["n_estimators"]) -> Decorator:
    """--task, --trees, --kind, --max-features, ... for commands that fit a forest."""
    d = FOREST_DEFAULTS
    return _stack([
        click.option("--task", type=click.Choice(C.TASKS), default=d["task"], show_default=True,
                     help="auto: unsupervised without --target, classification for labels, "
                          "regression for real values."),
        trees_option(default_trees),
        click.option("--kind", type=click.Choice(C.KINDS), default=d["kind"], show_default=True,
                     help="Tree learner."),
        click.option("--max-features", default=str(d["max_features"]), show_default=True,
                     callback=parse_max_features,
                     help="Features tried per split: auto, sqrt, log2, an integer or a fraction."),
        click.option("--criterion", type=click.Choice(C.CRITERIA), default=d["criterion"],
                     show_default=True,
                     help="Split criterion (scikit-learn's); auto: gini for classes, "
                          "squared_error for values."),
        click.option("--min-samples-split", default=str(d["min_samples_split"]),
                     show_default=True, callback=parse_split_size,
                     help="Rows a node needs to be split: an integer >= 2 or a fraction."),
        click.option("--min-samples-leaf", type=click.IntRange(min=1),
                     default=d["min_samples_leaf"], show_default=True),
        click.option("--max-depth", type=click.IntRange(min=1), default=d["max_depth"]),
        click.option("--max-leaf-nodes", type=click.IntRange(min=2), default=d["max_leaf_nodes"],
                     help="Grow each tree best-first up to this many leaves."),
        click.option("--min-impurity-decrease", type=click.FloatRange(min=0.0),
                     default=d["min_impurity_decrease"], show_default=True,
                     help="Split only if the weighted impurity decreases this much."),
        click.option("--bootstrap/--no-bootstrap", default=d["bootstrap"], show_default=True,
                     help="Draw each tree's rows with replacement (else every row, once)."),
        click.option("--max-samples", default=None, callback=parse_forest_max_samples,
                     help="Rows drawn per tree: a count, a fraction, or per class "
                          "(R's sampsize) CLASS:ROWS,... [default: n, 200,000 above "
                          "500,000 rows]."),
        click.option("--class-weight", default=None, callback=parse_class_weight,
                     help="balanced, balanced_subsample, or CLASS:WEIGHT,... "
                          "(scikit-learn's class_weight)."),
        seed_option(),
        click.option("--batch-size", type=click.IntRange(min=1), default=d["batch_size"],
                     help="Trees per task [default: about 4 tasks per worker thread]."),
    ])  # fmt: skip


def pop_keys(kwargs: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Remove ``keys`` from ``kwargs`` and return them."""
    return {k: kwargs.pop(k) for k in keys if k in kwargs}


def connect_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`connect` from the cluster options."""
    sizes = {
        "n_workers": options.get("workers"),
        "threads_per_worker": options.get("threads"),
        "memory_limit": options.get("memory_limit"),
    }
    return {
        "scheduler": options.get("scheduler"),
        "cluster": options.get("cluster"),
        **{k: v for k, v in sizes.items() if v is not None},
    }


def dry_run_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--dry-run``: print the job's plan (the same fields for every command), run nothing."""
    return click.option("--dry-run", is_flag=True,
                        help="Print the plan (tasks, tiles, disk, memory, time) and exit "
                             "without running anything.")(func)  # fmt: skip


def run_job(obj: dict[str, Any], job: Any, dry_run: bool, restart: bool = False) -> None:
    """Print the plan of ``job`` (``--dry-run``; exit 6 if its outputs would not fit on
    the disk), or run it under the run protocol and print its summary."""
    from distforest.cli.progress import ProgressBars

    if dry_run:
        show(job.plan(), job.out)
        return
    bars = ProgressBars(enabled=not obj["quiet"])
    click.echo(job.summary(job.run(bars, restart=restart, run_id=obj.get("run_id"))))


def show(plan: Any, out: str) -> None:
    """Print a ``--dry-run`` plan (a job's stages); exit 6 if its outputs would not fit
    on the disk."""
    from distforest import location
    from distforest.jobs.estimates import check_disk

    if hasattr(plan, "show"):
        click.echo(plan.show())
    else:
        from distforest.jobs.plan import show_plan

        click.echo(show_plan(plan))
    check_disk(location.parent(out), plan.disk_bytes, replaces=out)
