"""``distforest impute``: fill the missing values of a table with proximity imputation.

Only click and light modules are imported here; the imputer, the table
readers and writers are imported when the command runs (``--help`` stays quick).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from distforest._version import __version__
from distforest.cli.options import (
    cluster_options,
    connect_kwargs,
    input_options,
    parse_max_features,
    parse_max_samples,
    seed_option,
)
from distforest.cli.progress import ProgressBars
from distforest.errors import InputError
from distforest.forests.constraints import IMPUTE_KINDS, IMPUTE_PROXIMITIES, TASKS, VOTES

if TYPE_CHECKING:
    from distforest.apps.impute import ProximityImputer

#: ``ProximityImputer``'s own defaults, written out so that ``--help`` needs no estimator
#: (tests/test_startup.py checks them against its signature).
DEFAULTS: dict[str, Any] = {
    "iterations": None,
    "proximity": "column",
    "categorical_vote": "auto",
    "categorical_features": None,
    "n_estimators": None,
    "task": "auto",
    "kind": "auto",
    "max_features": "auto",
    "min_samples_leaf": 1,
    "max_depth": None,
    "max_samples": "auto",
    "batch_size": None,
    "random_state": None,
}


def _check_columns(columns: list[str], wanted: list[str], source: str) -> None:
    from distforest.io.tables import check_column

    for col in wanted:
        check_column(col, columns, source)


@click.command("impute")
@click.argument("input", metavar="INPUT")
@click.option(
    "--out",
    required=True,
    metavar="FILE",
    help="Output table: .csv, .parquet or .zarr (a Zarr group, one array per column), or a "
    "folder (ends in /): a Parquet dataset, one part per input partition. A glob, a folder "
    "or a file over 32 MB is imputed by partitions (column proximity; not .zarr).",
)
@click.option(
    "--target",
    metavar="COLUMN",
    help="Target column: a supervised forest (the column is kept unchanged). "
    "Omit for an unsupervised forest.",
)
@input_options
@click.option(
    "--categorical",
    multiple=True,
    metavar="COLUMN",
    help="Impute this numeric column by vote, as categories (repeatable). Text columns always are.",
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=DEFAULTS["iterations"],
    help="column: the most iterations (default 10; missForest's rule stops earlier). "
    "rfimpute, rfgap, original, oob: forest refits (default 5).",
)
@click.option(
    "--trees",
    "n_estimators",
    type=click.IntRange(min=1),
    default=DEFAULTS["n_estimators"],
    help="Trees per forest (default 35 per column and pass for column, 300 for rfimpute, "
    "100 for rfgap, original, oob).",
)
@click.option(
    "--proximity",
    type=click.Choice(IMPUTE_PROXIMITIES),
    default=DEFAULTS["proximity"],
    show_default=True,
    help="column: one forest per column predicting it from the others (and --target), "
    "its RF-GAP weights. rfimpute: R's rfImpute (random-forest trees, sqrt(p) or p/3 "
    "features per split, Breiman's proximity; before, this name meant rfgap). rfgap, "
    "original, oob: one forest of extra-trees for all columns, weighted by RF-GAP, shared "
    "leaves, or shared leaves out of bag.",
)
@click.option(
    "--categorical-vote",
    type=click.Choice(VOTES),
    default=DEFAULTS["categorical_vote"],
    show_default=True,
    help="sum: level with the largest weight; mean: that weight over the level's "
    "count (R's rfImpute); auto: mean for --proximity rfimpute, else sum.",
)
@click.option(
    "--task",
    type=click.Choice(TASKS),
    default=DEFAULTS["task"],
    show_default=True,
    help="auto: unsupervised without --target.",
)
@click.option(
    "--kind",
    type=click.Choice(IMPUTE_KINDS),
    default=DEFAULTS["kind"],
    show_default=True,
    help="Tree learner; auto: random-forest for rfimpute, extra-trees for the others.",
)
@click.option(
    "--max-features",
    default=str(DEFAULTS["max_features"]),
    show_default=True,
    callback=parse_max_features,
    help="Features tried per split: auto (0.5 for column, R's mtry for rfimpute, 1 for "
    "rfgap, original, oob), sqrt, log2, an integer or a fraction.",
)
@click.option(
    "--min-samples-leaf",
    type=click.IntRange(min=1),
    default=DEFAULTS["min_samples_leaf"],
    show_default=True,
)
@click.option(
    "--max-samples",
    default=str(DEFAULTS["max_samples"]),
    show_default=True,
    callback=parse_max_samples,
    help="column: rows each tree grows on, drawn from the column's observed rows: an "
    "integer, a fraction of them, or all; auto: all up to 50,000 rows, 20,000 above.",
)
@seed_option("random_state: same seed, same imputation.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output.")
@cluster_options
@click.pass_context
def impute(
    ctx: click.Context,
    input: str,
    out: str,
    target: str | None,
    drop: tuple[str, ...],
    na_values: tuple[str, ...],
    categorical: tuple[str, ...],
    overwrite: bool,
    scheduler: str | None,
    cluster: str | None,
    workers: int | None,
    threads: int | None,
    memory_limit: str | None,
    **params: Any,
) -> None:
    """Fill the missing values of INPUT from random-forest proximities.

    INPUT is a CSV/TSV, Parquet or .npy file or a Zarr store.  Each missing
    numeric value becomes the proximity-weighted mean of the column's
    observed values, each missing category the level with the largest
    proximity-weighted vote.  The weights come, by default, from one forest
    per column that predicts it from the others (--proximity column,
    iterated until missForest's stopping rule, the result the mean of the
    kept passes after the first); --proximity rfimpute is
    R's rfImpute (one random forest for all columns, refitted --iterations
    times, Breiman's proximity).  Column names, order and types are kept; the target and --drop
    columns are copied unchanged.  Nothing is written if anything fails.

    \b
    Example:
      distforest impute data.csv --target Class --drop Id --out imputed.csv
    """
    from distforest.apps.impute import ProximityImputer
    from distforest.cli.plan import check_size, estimate_impute
    from distforest.parallel.placement import place

    quiet = bool((ctx.obj or {}).get("quiet", False))
    start = time.perf_counter()
    bars = ProgressBars(enabled=not quiet)
    cluster_kw = {
        "scheduler": scheduler,
        "cluster": cluster,
        "workers": workers,
        "threads": threads,
        "memory_limit": memory_limit,
    }
    from distforest.apps.partitioned_impute import is_folder
    from distforest.cli.big_input import partitioned_input

    if partitioned_input(input) or is_folder(out):  # by partitions: never whole here
        ProximityImputer(**params)._settings()  # bad values refused before any cluster
        result = impute_by_partitions(input, out, params, cluster_kw, target=target, drop=drop,
                                      na_values=na_values, categorical=categorical,
                                      overwrite=overwrite)  # fmt: skip
        click.echo(_partitioned_summary(result, input, time.perf_counter() - start))
        return
    plan = plan_imputation(input, out, target=target, drop=drop, na_values=na_values,
                           categorical=categorical, overwrite=overwrite)  # fmt: skip
    checked = ProximityImputer(**params)._settings()  # bad values refused before any cluster
    n, d = plan.features.shape
    check_size(f"imputing {input} ({n:,} rows)", estimate_impute(n, d, checked),
               f"--iterations ({checked['iterations']}) and --trees "
               f"({checked['n_estimators']:,})")  # fmt: skip
    with place(plan.features.size, connect_kwargs(cluster_kw)) as where:
        imputer, shape, written = run_imputation(plan, params, where.client, bars)
    click.echo(_summary(imputer, input, shape, written, time.perf_counter() - start))


def impute_by_partitions(
    input: str,
    out: str,
    params: dict[str, Any],
    cluster_kw: dict[str, Any],
    *,
    target: str | None = None,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    categorical: tuple[str, ...] = (),
    overwrite: bool = False,
) -> Any:
    """Impute INPUT by partitions on a cluster (:mod:`distforest.apps.partitioned_impute`)."""
    from distforest.apps.impute import ProximityImputer
    from distforest.apps.partitioned_impute import check_output, impute_partitioned
    from distforest.errors import ParameterError
    from distforest.parallel.cluster import connect

    imputer = ProximityImputer(**params, categorical_features=list(categorical) or None)
    if imputer._settings()["proximity"] != "column":
        raise ParameterError(
            f"--proximity {imputer.proximity} needs the whole table in this process; {input} is "
            "read by partitions (a glob, a folder or a large file) or --out is a folder: use "
            "--proximity column (the default), or give one file small enough to load"
        )
    check_output(out, overwrite)
    with connect(**connect_kwargs(cluster_kw)) as client, client.as_current():
        imputer.set_execution(client)
        return impute_partitioned(input, out, imputer, target=target, drop=tuple(drop),
                                  na_values=tuple(na_values), overwrite=overwrite)  # fmt: skip


def _partitioned_summary(result: Any, source: str, seconds: float) -> str:
    counts = {name: n for name, n in result.missing.items() if n}
    lines = [
        f"imputed {sum(counts.values())} cell(s) in {len(counts)} column(s) of {source} "
        f"({result.shape[0]} rows x {result.shape[1]} columns) in {seconds:.1f} s, by partitions",
        f"  forests: column proximity, fitted on {result.sample_rows} row(s), "
        f"{result.imputer.n_iter_} iteration(s)",
        f"  output:  {result.written}",
    ]
    return "\n".join(lines)


@dataclass
class ImputationPlan:
    """A checked imputation: the table read, the columns split, the output allowed."""

    source: str
    frame: Any
    features: Any
    y: Any
    target: str | None
    categorical: tuple[str, ...]
    dest: Path
    overwrite: bool


def plan_imputation(
    input: str,
    out: str,
    *,
    target: str | None = None,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    categorical: tuple[str, ...] = (),
    overwrite: bool = False,
) -> ImputationPlan:
    """Read INPUT and check columns and the output path, before any cluster starts."""
    from distforest.io import read_frame
    from distforest.io.writers import check_can_write

    frame = read_frame(input, na_values=na_values)
    columns = [str(c) for c in frame.columns]
    frame.columns = columns
    _check_columns(columns, [*drop, *([target] if target else []), *categorical], input)
    dest = check_can_write(out, overwrite)
    skip = {*drop, *([target] if target else [])}
    features = frame[[c for c in columns if c not in skip]]
    if features.shape[1] == 0:
        raise InputError(f"{input}: no feature columns left after removing --target/--drop")
    y = frame[target] if target else None
    return ImputationPlan(str(input), frame, features, y, target, tuple(categorical), dest,
                          overwrite)  # fmt: skip


def run_imputation(
    plan: ImputationPlan, params: dict[str, Any], client: Any, bars: Any = None
) -> tuple[ProximityImputer, tuple[int, int], Path]:
    """Impute on ``client`` and write the whole table (target and dropped columns kept)."""
    from distforest.apps.impute import ProximityImputer
    from distforest.io.writers import write_table

    imputer = ProximityImputer(**params, categorical_features=list(plan.categorical) or None)
    imputer.set_execution(
        client,  # None: this process for small tables (see ProximityImputer)
        progress=None
        if bars is None
        else lambda stage, done, total: bars(stage, done, total) if stage == "impute" else None,
    )
    filled = imputer.fit_transform(plan.features, plan.y)
    output = plan.frame.copy()
    for position, col in enumerate(output.columns):
        if col in filled.columns:
            output.isetitem(position, filled[col])
    provenance = {
        "distforest_version": __version__,
        "source": plan.source,
        "params": json.loads(json.dumps(imputer.get_params(), default=str)),
        "target": plan.target,
        "task": imputer.task_,
        "n_imputed": imputer.n_missing_,
    }
    for key in ("client", "progress"):
        provenance["params"].pop(key, None)
    written = write_table(
        output, plan.dest, overwrite=plan.overwrite, attrs={"imputation": provenance}
    )
    return imputer, output.shape, written


def _summary(
    imp: ProximityImputer, source: str, shape: tuple[int, int], out: Path, seconds: float
) -> str:
    counts = {name: n for name, n in imp.n_missing_.items() if n}
    total = sum(counts.values())
    lines = [
        f"imputed {total} cell(s) in {len(counts)} column(s) of {source} "
        f"({shape[0]} rows x {shape[1]} columns) in {seconds:.1f} s",
        f"  forest:  {imp.task_}, {imp._settings()['n_estimators']} trees"
        f"{' per column' if imp.proximity == 'column' else ''}, {imp.n_iter_} iteration(s), "
        f"{imp.proximity} proximity",
    ]
    if counts:
        width = max(len(n) for n in counts)
        lines.append("  cells imputed per column:")
        lines += [f"    {name:<{width}}  {n}" for name, n in counts.items()]
    else:
        lines.append("  no missing values: the output is a copy of the input")
    fallbacks = sum(h.get("fallbacks", 0) for h in imp.history_[-1:])
    if fallbacks:
        lines.append(
            f"  {fallbacks} cell(s) had no weighted neighbour and kept the median / most "
            "frequent level"
        )
    lines.append(f"  output:  {out}")
    return "\n".join(lines)
