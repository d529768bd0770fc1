"""Imputation as a job: read and check the table, impute where placement says, write it.

Shared by ``distforest impute`` and the impute stage of a proximity pipeline
(:mod:`distforest.jobs.proximity`).  Inputs and outputs are checked by
:func:`plan_imputation` before any cluster starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distforest._version import __version__
from distforest.errors import InputError

if TYPE_CHECKING:
    from distforest.apps.impute import ProximityImputer


def check_columns(columns: list[str], wanted: list[str], source: str) -> None:
    from distforest.io.tables import check_column

    for col in wanted:
        check_column(col, columns, source)


def impute_by_partitions(
    input: str,
    out: str,
    params: dict[str, Any],
    connect: dict[str, Any],
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
    from distforest.parallel.cluster import connect as connect_to

    imputer = ProximityImputer(**params, categorical_features=list(categorical) or None)
    imputer._settings()  # bad values refused before any cluster
    check_output(out, overwrite)
    with connect_to(**connect) as client, client.as_current():
        imputer.set_execution(client)
        return impute_partitioned(input, out, imputer, target=target, drop=tuple(drop),
                                  na_values=tuple(na_values), overwrite=overwrite)  # fmt: skip


def partitioned_summary(result: Any, source: str, seconds: float) -> str:
    counts = {name: n for name, n in result.missing.items() if n}
    lines = [
        f"imputed {sum(counts.values())} cell(s) in {len(counts)} column(s) of {source} "
        f"({result.shape[0]} rows x {result.shape[1]} columns) in {seconds:.1f} s, by partitions",
        f"  forests: {result.imputer.proximity} proximity, fitted on {result.sample_rows} row(s), "
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


def not_features(job: Any) -> tuple[str, ...]:
    """The columns a pipeline's imputation copies unchanged: ``input.drop`` and ``input.id``."""
    return (*job.drop, *([job.id] if getattr(job, "id", None) else []))


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
    check_columns(columns, [*drop, *([target] if target else []), *categorical], input)
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


def summary(
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


def impute_command(
    input: str,
    out: str,
    params: dict[str, Any],
    connect: dict[str, Any],
    *,
    target: str | None = None,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    categorical: tuple[str, ...] = (),
    overwrite: bool = False,
    progress: Any = None,
    dry_run: bool = False,
    id: str | None = None,
    model: str | None = None,
) -> Any:
    """``distforest impute``: check, impute where placement says, write; the summary
    (``dry_run``: the :class:`~distforest.jobs.plan.Plan`, nothing run or written).

    ``id`` names the rows' ID column: not a feature, copied unchanged (as ``drop``).
    ``model``: a model file whose trees weigh the rows (:func:`impute_with_model`).
    """
    drop = (*drop, *([id] if id else []))
    from distforest.apps.impute import ProximityImputer
    from distforest.apps.partitioned_impute import is_folder
    from distforest.jobs.estimates import check_size, estimate_impute
    from distforest.jobs.inputs import partitioned_input
    from distforest.parallel.placement import place

    start = time.perf_counter()
    if model is not None and dry_run:
        from distforest.errors import ParameterError
        from distforest.io.model_files import check_model_file

        check_model_file(model)
        raise ParameterError(
            "impute --model runs no forest to plan (one pass: the rows routed through the "
            "model, each hole filled from its proximities): run it without --dry-run"
        )
    if model is not None:
        return impute_with_model(input, out, model, params, connect, target=target, drop=drop,
                                 na_values=na_values, overwrite=overwrite)  # fmt: skip
    if dry_run:
        return impute_plan(input, out, params, connect, target=target, drop=drop,
                           na_values=na_values, categorical=categorical,
                           overwrite=overwrite)  # fmt: skip
    if partitioned_input(input) or is_folder(out):  # by partitions: never whole here
        ProximityImputer(**params)._settings()  # bad values refused before any cluster
        result = impute_by_partitions(input, out, params, connect, target=target, drop=drop,
                                      na_values=na_values, categorical=categorical,
                                      overwrite=overwrite)  # fmt: skip
        return partitioned_summary(result, input, time.perf_counter() - start)
    plan = plan_imputation(input, out, target=target, drop=drop, na_values=na_values,
                           categorical=categorical, overwrite=overwrite)  # fmt: skip
    checked = ProximityImputer(**params)._settings()  # bad values refused before any cluster
    n, d = plan.features.shape
    holes = int(plan.features.isna().any().sum())
    check_size(f"imputing {input} ({n:,} rows)", estimate_impute(n, d, checked, holes),
               f"--iterations ({checked['iterations']}) and --trees "
               f"({checked['n_estimators']:,})")  # fmt: skip
    with place(plan.features.size, connect) as where:
        imputer, shape, written = run_imputation(plan, params, where.client, progress)
    return summary(imputer, input, shape, written, time.perf_counter() - start)


def impute_plan(input: str, out: str, params: dict[str, Any], connect: dict[str, Any], *,
                target: str | None = None, drop: tuple[str, ...] = (),
                na_values: tuple[str, ...] = (), categorical: tuple[str, ...] = (),
                overwrite: bool = False) -> Any:  # fmt: skip
    """The :class:`~distforest.jobs.plan.Plan` of ``distforest impute --dry-run``.

    Its tasks are the fit batches of every pass: one forest per column with
    missing values for ``proximity: column`` (at most ``iterations`` passes:
    missForest's rule may stop earlier), one forest on all columns for the
    others.  Their products are noted, not counted.  A table read by
    partitions is not loaded: every feature column is counted as missing values.
    """
    from distforest import location
    from distforest.apps.impute import ProximityImputer
    from distforest.apps.partitioned_impute import is_folder
    from distforest.jobs.command_plans import PRODUCTS_NOTE
    from distforest.jobs.estimates import estimate_impute, free_space
    from distforest.jobs.inputs import input_shape, partitioned_input
    from distforest.jobs.plan import Plan, placement_of
    from distforest.parallel import placement
    from distforest.parallel.tasks import plan_tree_batches

    checked = ProximityImputer(**params)._settings()
    by_parts = partitioned_input(input) or is_folder(out)
    if by_parts:
        source, n, d = input_shape(input, target, drop=drop, na_values=na_values)
        holes = d  # which columns miss values is known once the partitions are read
    else:
        table = plan_imputation(input, out, target=target, drop=drop, na_values=na_values,
                                categorical=categorical, overwrite=overwrite)  # fmt: skip
        (n, d), source = table.features.shape, input
        holes = int(table.features.isna().any().sum())
    where, threads = placement_of(n * d, connect)
    if by_parts and not placement.cluster_named(options=connect):  # always on a cluster
        threads = os.cpu_count() or 1
        where = (f"on a LocalCluster started for the run (read by partitions; assuming "
                 f"{threads} threads)")  # fmt: skip
    trees, passes, how = checked["n_estimators"], checked["iterations"], checked["proximity"]
    if how == "column":
        batches = holes * len(ProximityImputer._column_settings(checked, n).batches())
        forests = f"{trees} trees for each of {holes} column(s) with missing values"
    else:
        batches = len(plan_tree_batches(trees, threads, checked["batch_size"]))
        forests, passes = f"{trees} trees on all columns", passes if holes else 1
    need = estimate_impute(n, d, checked, holes)
    return Plan(
        title=f"impute: {n:,} rows x {d} features",
        steps=[("input", source),
               ("forests", f"{how} proximity: {forests}, "
                           + (f"at most {passes} pass(es)" if how == "column"
                              else f"{passes} pass(es)")),
               ("writes", str(out))],
        tasks=passes * batches,
        tiles=0,
        disk={"imputed table": need["disk_bytes"]},
        free_bytes=free_space(location.parent(out)),
        worker_bytes=need["memory_bytes"],
        cpu_seconds=need["cpu_seconds"],
        threads=threads,
        where=where,
        notes=([PRODUCTS_NOTE] if how != "column" else [])
        + ["  note:         read by partitions: every feature column counted as having missing "
           "values (an upper bound)"] * by_parts,
    )  # fmt: skip


def impute_stage_by_partitions(job: Any, params: dict[str, Any], out: str,
                        client: Any) -> tuple[Path, int]:  # fmt: skip
    """The impute stage of a proximity job whose table is read by partitions."""
    from distforest.apps.impute import ProximityImputer
    from distforest.apps.partitioned_impute import impute_partitioned

    imputer = ProximityImputer(**params)
    scope = contextlib.nullcontext() if client is None else client.as_current()
    with scope:
        if client is not None:
            imputer.set_execution(client)
        result = impute_partitioned(job.input, out, imputer, target=job.target,
                                    drop=not_features(job), na_values=tuple(job.na_values),
                                    overwrite=True)  # fmt: skip  # checked before the run
    return result.written, int(sum(result.missing.values()))


def impute_with_model(input: str, out: str, model: str, params: dict[str, Any],
                      connect: dict[str, Any], *, target: str | None, drop: tuple[str, ...],
                      na_values: tuple[str, ...], overwrite: bool) -> str:  # fmt: skip
    """``distforest impute --model FILE``: one pass, no forest fitted.

    The rows of ``input`` (the model's training rows, its numeric features) are
    routed through the model's trees, missing cells following each library's
    missing-value branches; each missing cell becomes the proximity-weighted mean
    of the column's observed values (:func:`distforest.apps.scoring.impute_rows`,
    ``--proximity`` original by default; oob and rfgap where the model's bagging is
    known).  Target, ``--drop`` and ID columns are copied unchanged.
    """
    from distforest.apps.scoring import impute_rows
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.io import load_table
    from distforest.io.model_files import load_model
    from distforest.io.writers import write_table
    from distforest.jobs.inputs import partitioned_input
    from distforest.parallel.placement import place

    method = {"column": "original"}.get(params["proximity"], params["proximity"])
    if method == "rfimpute":
        raise InputError(
            "--proximity rfimpute refits forests; with --model the model's own trees weigh "
            "the rows: use --proximity original (the default), oob or rfgap"
        )
    if partitioned_input(input):
        raise InputError(
            f"{input}: impute --model reads a table loaded whole (a file under 32 MB), not a "
            "glob or a folder of parts; impute without --model, or pass one file"
        )
    fitted = load_model(model)  # a pickle or an untrusted type refused before any work
    start = time.perf_counter()
    plan = plan_imputation(input, out, target=target, drop=drop, na_values=na_values,
                           overwrite=overwrite)  # fmt: skip
    table = load_table(plan.features, min_rows=1)
    with place(table.X.size, connect):
        forest = ProximityForest.from_model(fitted, table)
        vote = params["categorical_vote"].replace("auto", "sum")
        filled, cells = impute_rows(forest, table, table.X, method=method, vote=vote)
    output = plan.frame.copy()
    for col in plan.features.columns:  # only the missing cells change
        output[col] = output[col].where(output[col].notna(), filled[col].to_numpy())
    provenance = {"distforest_version": __version__, "source": plan.source, "model": model,
                  "proximity": method, "n_imputed": cells}  # fmt: skip
    written = write_table(output, plan.dest, overwrite=overwrite, attrs={"imputation": provenance})
    return (f"imputed {cells} cell(s) of {input} ({output.shape[0]} rows x {output.shape[1]} "
            f"columns) in {time.perf_counter() - start:.1f} s\n  model:  {model}, "
            f"{forest.leaves_.shape[1]} trees, {method} proximity, one pass\n"
            f"  output: {written}")  # fmt: skip
