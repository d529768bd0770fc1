"""k-NN models as jobs' steps: check the size, fit and save a model, predict to a CSV.

Shared by ``distforest knn fit|predict`` and k-NN pipelines
(:mod:`distforest.jobs.knn`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.forests.constraints import ALGORITHMS, FOREST_METRICS
from distforest.jobs.base import JobBase
from distforest.jobs.model_columns import feature_matrix
from distforest.jobs.result import JobResult, mode_text, output_lines
from distforest.jobs.stages import Cost, Pipeline, Stage

if TYPE_CHECKING:
    from distforest.apps.knn import KNNClassifier, KNNRegressor
    from distforest.jobs.runs import Context

__all__ = [
    "ALGORITHMS",
    "FOREST_METRICS",
    "KNNPredictJob",
    "check_distances",
    "fit_and_save_model",
    "knn_predict_job",
    "normalize_choice",
    "predict_to_csv",
]


#: A model whose training rows take more bytes is read by the workers only (as a file of
#: that size would be): ``knn predict`` then runs by partitions whatever DATA's size
#: (None: the size of a file read by partitions, ``PARTITIONED_BYTES``).
MODEL_BYTES: int | None = None


def normalize_choice(value: str) -> str | None:
    return None if value == "none" else value


def check_distances(distances: str | None, metric: str) -> None:
    """``--distances`` goes with ``--metric smerf`` (the observed distances it learns from)."""
    if (distances is None) == (metric == "smerf"):
        raise ParameterError(
            "--metric smerf needs --distances D.npy (the observed distances of TRAIN's rows)"
            if distances is None
            else f"--distances is for --metric smerf, not --metric {metric}; remove it"
        )


def check_knn_size(source: str, n: int, d: int, select: str | None, n_features: Any,
                   metric: str, trees: int) -> None:  # fmt: skip
    """Before any work: features to select at most the table's ``d``; a forest metric's
    trees on ``n`` rows within the computing and memory limits
    (:func:`distforest.jobs.estimates.check_size`)."""
    from distforest.jobs.estimates import check_size, estimate_forest_metric

    if select and isinstance(n_features, int) and not isinstance(n_features, bool):
        if n_features > d:
            raise ParameterError(
                f"--n-features {n_features} is more than the {d} feature(s) of "
                f"{source}; give at most {d}, a fraction, or auto"
            )
    if metric.split(":")[0] in FOREST_METRICS:
        plan = estimate_forest_metric(n, d, trees)
        check_size(f"the k-NN forest metric on {source} ({n:,} rows)", plan,
                   f"--trees ({trees:,})")  # fmt: skip


def fit_and_save_model(
    table: Any,
    task: str,
    params: dict[str, Any],
    out: str,
    overwrite: bool,
    attrs: dict[str, Any] | None = None,
) -> tuple[KNNClassifier | KNNRegressor, str]:
    """Fit a k-NN model on a table's rows and save it with what predicting needs.

    Parameters
    ----------
    table : distforest.io.Table or RowSource
        With its target.  Rows in a store (a table read by partitions) are
        fitted by chunks on dask's current scheduler, their model rows copied
        into ``out`` by tasks.
    task : {"auto", "classification", "regression"}
    params : dict
        :class:`KNNClassifier` / :class:`KNNRegressor` parameters.  A forest
        metric fits its trees on the current default client (the model keeps
        ``client=None``, so that it can be cloned by the feature selection).
    out : str
        Model store to create (nothing is left under it if the fit or the
        writing fails), not yet complete: the job's run protocol completes it
        (:func:`~distforest.jobs.runs.complete`).
    overwrite : bool

    Returns
    -------
    model, task
        The fitted model and the resolved task.
    """
    from distforest import location
    from distforest.apps.knn import KNNClassifier, KNNRegressor, save_model
    from distforest.forests.targets import resolve_task
    from distforest.store.source import open_source

    source = open_source(table)
    labels = source.target_classes()
    values = np.asarray(labels, dtype=object) if labels is not None else source.read_y()
    task = resolve_task(task, values, source.target_name)
    if task not in ("classification", "regression"):
        raise InputError(f"k-NN needs a target column to predict; got task {task!r}")
    cls = KNNClassifier if task == "classification" else KNNRegressor
    model = cls(**params).fit(source)
    categories = {k: [str(v) for v in c] for k, c in source.categories.items()}
    extra = {"target": source.target_name, "source": str(source.source),
             "categories": categories, **(attrs or {})}  # fmt: skip
    kept = location.exists(out) and not overwrite  # refused by save_model: not ours
    try:
        save_model(model, out, overwrite=overwrite, attrs=extra, complete=False)
    except BaseException:
        if not kept and location.exists(out):
            location.remove_tree(out)  # no half-written model left under OUT
        raise
    return model, task


def predict_to_csv(
    model_path: str,
    data: str,
    out: str,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    *,
    by_parts: bool | None = None,
    connect: dict[str, Any] | None = None,
    require_complete: bool = True,
) -> tuple[int, str]:
    """Predict every row of ``data`` with a saved model; write ``row, <target>`` to a CSV.

    One path for every DATA (:mod:`distforest.jobs.row_pieces`): its chunks (the
    whole table in this process, or one task per partition on dask's current
    scheduler, the model read once per worker) are predicted and written as
    pieces of one CSV.

    Parameters
    ----------
    by_parts : bool, optional
        Read DATA by partitions (None: :func:`predicts_by_partitions`).
    connect : dict, optional
        Where a search in this process runs (:func:`~distforest.parallel.placement.place`
        by the cells); None: the current execution.
    require_complete : bool, default True
        Refuse a model store not marked complete (False: the model a k-NN job's fit
        stage has just written, completed by its run protocol at the end).

    Returns
    -------
    n_rows, path
    """
    import contextlib

    from distforest.jobs.row_pieces import row_frames, write_pieces
    from distforest.parallel.placement import place
    from distforest.store.run_store import RunStore

    if by_parts is None:
        by_parts = predicts_by_partitions(model_path, data, require_complete)
    rs = RunStore.open(model_path, require_complete=require_complete)
    names = tuple(str(c) for c in rs.attrs["feature_names"])
    rows = row_frames(data, names, drop, na_values, by_parts=by_parts)
    where: Any = contextlib.nullcontext()
    if rows.in_process and connect is not None:  # the search of the one chunk, by its size
        cells = len(rows.blocks[0]) * len(names) + int(np.prod(rs.array("X_fit").shape))
        where = place(cells, connect)
    with where:
        n, path, _ = write_pieces(rows, partial(_knn_rows, model_path, rs.attrs, names,
                                                rows.in_process, require_complete),
                                  out)  # fmt: skip
    return n, path


def _knn_rows(model_path: str, attrs: dict[str, Any], names: tuple[str, ...], in_process: bool,
              require_complete: bool, frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """``row, <target>`` of one chunk of new rows, predicted by a saved k-NN model (in a
    task: the model read once per worker, the search in that worker)."""
    import pandas as pd

    from distforest.apps.knn import load_model as load
    from distforest.jobs.row_pieces import model_once
    from distforest.parallel.execution import execution

    load_model = partial(load, require_complete=require_complete)

    X = feature_matrix(frame, part, attrs, names, start)
    if X.shape[0] == 0:  # an empty part still has its place
        prediction: Any = np.empty(0)
    elif in_process:  # the search placed by the caller
        prediction = load_model(model_path).predict(X)
    else:
        with execution(client="synchronous"):  # in this worker: it is one task of many
            prediction = model_once(model_path, load_model).predict(X)
    rows = np.arange(start, start + X.shape[0])
    return pd.DataFrame({"row": rows, attrs.get("target") or "prediction": prediction})


def predicts_by_partitions(model_path: str, data: str, require_complete: bool = True) -> bool:
    """Whether ``knn predict`` runs by partitions on the workers: for a DATA read by
    partitions, or a model whose training rows are larger than such a file (a model
    fitted from a large table is read by the workers, not here)."""
    from distforest.jobs.inputs import PARTITIONED_BYTES
    from distforest.store.run_store import RunStore
    from distforest.store.source import read_as

    def large_model(_: str) -> bool:
        rows = RunStore.open(model_path, require_complete=require_complete).array("X_fit")
        limit = PARTITIONED_BYTES if MODEL_BYTES is None else MODEL_BYTES
        return int(np.prod(rows.shape)) * rows.dtype.itemsize > limit

    return read_as(data, whole=large_model, parts=lambda _: True)


@dataclass(kw_only=True)
class KNNPredictJob(JobBase):
    """``distforest knn predict``: the target of every row of ``input`` by a saved model,
    written to ``files["out"]`` (a CSV); ``out`` is the job's store beside it
    (:func:`~distforest.jobs.outputs.record_path`: its spec and stages)."""

    job_kind: ClassVar[str] = "knn-predict"

    model: str
    out: str
    files: dict[str, Any]
    drop: tuple[str, ...] = ()
    name: str = "knn predict"

    def describe(self) -> str:
        """What the job computes."""
        return "k-NN predictions"

    def summary(self, result: JobResult) -> str:
        """The predictions written (as the command printed them), and the reports."""
        how = " by partitions" if result.task.endswith(" by partitions") else ""
        return "\n".join([
            f"predicted {result.shape[0]} rows{how} in {result.seconds:.1f} s"
            f"{mode_text(result.mode, self.out)}",
            *output_lines(result.outputs, 18),
        ])  # fmt: skip


def knn_predict_job(model: str, data: str, out: str, connect: dict[str, Any], *,
                    drop: tuple[str, ...] = (), na_values: tuple[str, ...] = (),
                    overwrite: bool = False) -> KNNPredictJob:  # fmt: skip
    """The job of ``distforest knn predict`` (its store beside the CSV)."""
    from distforest.jobs.outputs import record_path

    return KNNPredictJob(input=data, model=model, out=record_path(out), files={"out": out},
                         drop=tuple(drop), na_values=tuple(na_values), overwrite=overwrite,
                         connect=dict(connect))  # fmt: skip


@KNNPredictJob.plans
def plan_knn_predict(job: KNNPredictJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the model and the new rows (their
    partitions' names only when read by partitions), runs nothing."""
    return knn_predict_pipeline(job)


def knn_predict_pipeline(job: KNNPredictJob) -> Pipeline:
    """The one stage of ``knn predict``: one task per partition of the new rows, or the
    model's search of the rows read here in batches of queries."""
    from distforest.forests.measures import parse_metric
    from distforest.forests.neighbors import query_batch_size, resolve_algorithm
    from distforest.jobs.estimates import SECONDS_PER
    from distforest.jobs.row_pieces import row_frames
    from distforest.jobs.stages import ON_A_CLUSTER, placement_of
    from distforest.parallel.tasks import plan_batches
    from distforest.store.run_store import RunStore

    out = str(job.files["out"])
    rs = RunStore.open(job.model, require_complete=True)
    names = tuple(str(c) for c in rs.attrs["feature_names"])
    m, d = (int(s) for s in rs.array("X_fit").shape)
    by_parts = predicts_by_partitions(job.model, job.input)  # (the one decision)
    if by_parts:
        from distforest.io.partitions import open_partitions

        parts = open_partitions(job.input, na_values=job.na_values)
        n, tasks, cells, source = 0, int(parts.npartitions), ON_A_CLUSTER, parts.source
        what = (f"{tasks} tasks that each read a partition, predict its rows with the model "
                f"(read once per worker) and write a piece of {out}, joined in order")  # fmt: skip
    else:
        frames = row_frames(job.input, names, job.drop, job.na_values, by_parts=False)
        n, cells, source = len(frames.blocks[0]), 0, frames.source
        cells = n * len(names) + m * d
        params = rs.attrs["params"]
        forest = bool(rs.attrs.get("metric_forest"))
        algorithm = "brute" if forest else resolve_algorithm(
            params.get("algorithm", "auto"), parse_metric(params["metric"]), d)  # fmt: skip
        threads = placement_of(cells, job.connect)[1]
        batch = params.get("batch_size") or query_batch_size(n, m, algorithm, forest, threads)
        tasks = len(plan_batches(n, batch))
        what = (f"{n:,} rows among {m:,}, k={params['n_neighbors']}, {params['metric']}, "
                f"{algorithm} in {tasks} tasks -> {out}")  # fmt: skip
    stage = Stage("predict", what, reads=(job.model, job.input), writes=(out,), tasks=tasks,
                  cost=Cost(SECONDS_PER["measure"] * n * m * d, 3 * 8 * (n + m) * d,
                            {"predictions (CSV)": n * 32}),
                  run=lambda ctx: _predict(job, by_parts, ctx))  # fmt: skip
    title = (f"knn predict: {source} read by partitions" if by_parts else
             f"knn predict: {n:,} queries among {m:,} rows, {d} features")  # fmt: skip
    return Pipeline(title=title, steps=[("input", source), ("model", job.model),
                                        ("writes", out),
                                        ("store", f"{job.out} (this run's stages)")],
                    stages=[stage], cells=cells, connect=job.connect,
                    out=str(job.out))  # fmt: skip


def _predict(job: KNNPredictJob, by_parts: bool, ctx: Context) -> None:
    """The predict stage, where the run placed it (by partitions: on its cluster)."""
    import contextlib

    client = ctx.where.client
    with client.as_current() if client is not None else contextlib.nullcontext():
        n, written = predict_to_csv(job.model, job.input, job.files["out"], job.drop,
                                    job.na_values, by_parts=by_parts)  # fmt: skip
    ctx.done.outputs = {"predictions": written}
    ctx.done.info["rows"] = int(n)


@KNNPredictJob.runs
def run_knn_predict(job: KNNPredictJob, progress: Any = None, *, restart: bool = False,
                    run_id: str | None = None) -> JobResult:  # fmt: skip
    """Predict under the run protocol; the model, the rows and the output checked first."""
    from distforest.jobs.base import new_run_id
    from distforest.jobs.inputs import listing_stamp
    from distforest.jobs.row_pieces import run_rows_job
    from distforest.jobs.stages import ON_A_CLUSTER

    pipeline = knn_predict_pipeline(job)
    spec = job.spec_of(
        ("drop", "na_values", "files"),
        model={"path": job.model, "stamp": listing_stamp(job.model)},
        input={"source": job.input, "stamp": listing_stamp(job.input)},
    )
    parts = " by partitions" if pipeline.cells == ON_A_CLUSTER else ""  # (its stage's tasks)
    return run_rows_job(job, pipeline, spec, f"k-NN prediction{parts}", progress=progress,
                        restart=restart, run_id=run_id or new_run_id(),
                        store_first=False)  # fmt: skip
