"""The application stages of a proximity job: impute, outliers, mislabels, mds.

Each runs after the forest and its matrix, is a stage
(:func:`app_stage`) and is skipped when resuming a run that
finished it.  Their output files are checked before any work starts
(:func:`check_outputs`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from distforest import location
from distforest.jobs.outputs import (
    check_new_file,
    write_mds,
    write_mislabels,
    write_outliers,
)
from distforest.jobs.runs import Done, Stages
from distforest.jobs.stages import Cost
from distforest.jobs.stages import Stage as StageSpec

#: Application stages, in the order they run.
APP_STAGES = ("impute", "outliers", "mislabels", "mds")


def check_outputs(job: Any, stages: Stages | None, replace: bool) -> Any:
    """Refuse to replace files a new run would write (unless ``replace``)."""
    plan = None
    todo = [name for name in APP_STAGES if getattr(job, name)]
    pending = [n for n in todo if stages is None or not stages.done(n)]
    if "impute" in pending and job.impute is not None:  # read whole, or by partitions
        from distforest.jobs.impute import not_features, plan_imputation

        plan = plan_imputation(job.input, job.impute["out"], target=job.target,
                               drop=not_features(job),
                               na_values=job.na_values, overwrite=replace)  # fmt: skip
    for name in pending:
        for key in ("out", "plot"):
            path = (getattr(job, name) or {}).get(key)
            if name != "impute" and path:
                check_new_file(path, replace)
    if job.plot and (stages is None or not stages.done("plot")):
        check_new_file(job.plot, replace)
    return plan


#: The files each application writes (label of the report and of the plan's disk).
FILES = {"impute": "imputed table", "outliers": "outlier scores", "mislabels": "suspects",
         "mds": "MDS coordinates"}  # fmt: skip


def app_stage(name: str, job: Any, plan: dict[str, Any], table: Any) -> StageSpec:
    """The stage of application ``name`` of a proximity job (``plan``: the job's
    :func:`~distforest.jobs.estimates.estimate`; ``table``: its input, for the run)."""
    options = getattr(job, name)
    cpu = {"impute": plan["stage_cpu"]["impute"],
           "outliers": plan["stage_cpu"]["sums"], "mislabels": 0.0, "mds": 0.0}[name]  # fmt: skip
    if name == "mislabels" and not job.outliers:
        cpu = plan["stage_cpu"]["sums"]
    disk = {FILES[name]: plan["files"].get(FILES[name], 0)}
    if options.get("plot"):
        disk["pictures"] = 300_000
    reads = "the matrix" if options.get("from") == "proximity" else "the forest"
    writes = tuple(str(options[k]) for k in ("out", "plot") if options.get(k))

    def run(ctx: Any) -> None:
        _app_stage(name, options, job, table, ctx.model, ctx.values.get("plan"),
                   ctx.where.client, ctx.done, ctx.rs)  # fmt: skip

    return StageSpec(name, f"{name} -> {', '.join(writes)} (matrix-free products, not counted)",
                     reads=(reads,), writes=writes,
                     cost=Cost(cpu, plan["stage_bytes"]["products"], disk), run=run)  # fmt: skip


def _app_stage(name: str, options: dict[str, Any], job: Any, table: Any, forest: Any,
               plan: Any, client: Any, done: Done, rs: Any) -> None:  # fmt: skip
    """One application stage (impute, outliers, mislabels, mds); records into ``done``."""
    if name == "impute":
        from distforest.jobs.impute import impute_from_matrix_rows, run_imputation

        assert plan is not None  # checked by check_outputs
        params = {k: v for k, v in options.items() if k != "out"}
        params.setdefault("random_state", job.forest.get("random_state"))
        scope = client.as_current() if client is not None else None
        with scope or contextlib.nullcontext():  # the chunks' tasks run on the run's client
            if options.get("from") == "proximity":
                from distforest.forests.tiles import ARRAY_NAMES

                matrix = rs.dataset()[ARRAY_NAMES[job.method]]
                vote = options.get("categorical_vote", "sum")
                result = impute_from_matrix_rows(plan, matrix, vote)
            else:
                result = run_imputation(plan, params, client)
        outputs = {"imputed table": location.resolved(result.written)}
        done.info["cells_imputed"] = int(sum(result.missing.values()))
    elif name == "outliers":
        outputs = write_outliers(forest, options["out"], options.get("plot"),
                                 title=f"outlier scores, {table.source}")  # fmt: skip
    elif name == "mislabels":
        outputs, summary = write_mislabels(forest, options["out"])
        done.info["disagreeing_labels"] = summary.disagrees
    else:
        extra = {k: v for k, v in options.items() if k not in ("out", "plot")}
        outputs = write_mds(forest, options["out"], options.get("plot"),
                            title=f"MDS, {table.source}", **extra)  # fmt: skip
    done.outputs = outputs
