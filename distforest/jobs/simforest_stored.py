"""SimForest fits of a table read by partitions, for ``distforest simforest fit`` and pipelines.

A glob, a folder of part files or a file over 32 MB
(:func:`~distforest.jobs.inputs.partitioned_input`) is summarised by
partitions on the workers (pass 1: the checks of the in-memory reader, a bad
value named by its file, column and row), written into a temporary run store
as float64 (the values the in-memory reader gives), z-scored as in memory
(:func:`~distforest.forests.simforest_stored.column_moments`) and fitted
from there (:func:`~distforest.forests.simforest_stored.fit_table`).  The
model is then saved where the command or job keeps it, its per-row arrays
copied a chunk at a time; the fitted estimator reads them there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.jobs.inputs import temporary_store
from distforest.parallel import placement
from distforest.store.inputs import PendingInput
from distforest.store.run_store import RunStore

if TYPE_CHECKING:
    from distforest.forests.simforest import SimilarityForestClassifier


def read_pending(
    data: str, target: str, drop: tuple[str, ...] = (), na_values: tuple[str, ...] = ()
) -> PendingInput:
    """Pass 1 of a table read by partitions (summaries only), checked as
    :func:`~distforest.jobs.simforest.read_fit_input` checks a table loaded whole."""
    from distforest.io.ingest import read_partitioned

    pending = PendingInput(read_partitioned(data, target=target, drop=drop,
                                            na_values=na_values, allow_missing=False,
                                            dtype=np.float64))  # fmt: skip
    categories = pending.data.encoding.categories
    if categories:
        raise InputError(
            f"{data!r}: column(s) {sorted(categories)} hold text; a SimForest measure "
            "needs numeric features (drop them with --drop, or encode them as numbers)"
        )
    return pending


def input_attrs(pending: PendingInput, target: str) -> dict[str, Any]:
    """What a model records of its table (the in-memory fit's attributes; the scaling
    is added when the fit computes it)."""
    enc = pending.data.encoding
    return {"source": pending.source, "feature_names": [str(c) for c in enc.features],
            "target_name": target}  # fmt: skip


def fit_and_save(
    forest: SimilarityForestClassifier,
    pending: PendingInput,
    normalize: str,
    attrs: dict[str, Any],
    save: Callable[[SimilarityForestClassifier, dict[str, Any]], RunStore],
) -> RunStore:
    """Write ``pending`` into a temporary store, fit ``forest`` there, ``save(forest, attrs)``.

    ``normalize="zscore"`` scales the features by the columns' mean and
    standard deviation (float64, computed as in memory: the same model).
    ``save`` writes the model store (its ``attrs`` get the scaling); the
    forest's ``leaves_`` and ``inbag_`` are then that store's arrays, and the
    temporary store is removed.  Returns the model store.
    """
    from distforest.forests.simforest_stored import column_moments, fit_table

    with temporary_store() as path:
        table = pending.write(path, {})
        scaling = None
        if normalize == "zscore":
            mean, std = column_moments(forest, table)
            scaling = {"mean": mean.tolist(), "scale": np.where(std > 0, std, 1.0).tolist()}
        given = None if scaling is None else (np.asarray(scaling["mean"]),
                                              np.asarray(scaling["scale"]))  # fmt: skip
        fit_table(forest, table, scaling=given)
        rs = save(forest, {**attrs, "scaling": scaling})
        # the saved arrays, read on use (Zarr arrays where the in-memory fit has ndarrays)
        forest.leaves_, forest.inbag_ = cast(Any, rs.array("leaves")), cast(Any, rs.array("inbag"))
    return rs


def check_table_request(matrix: str | None, distances: str | None, labels: str | None,
                        target: str | None) -> None:  # fmt: skip
    """A table DATA takes --target, not a matrix, distances or labels."""
    if matrix is not None or distances is not None:
        raise ParameterError(
            "give either --similarity S.npy with --labels, or a table DATA with --target "
            "(not both, not neither)"
        )
    if target is None or labels is not None:
        raise ParameterError("a table DATA needs --target COLUMN (and takes no --labels)")


def fit_command(
    params: dict[str, Any],
    *,
    data: str,
    target: str | None,
    metric: str | None,
    normalize: str,
    drop: tuple[str, ...],
    na_values: tuple[str, ...],
    out: str,
    overwrite: bool,
    connect: dict[str, Any],
    progress: Any = None,
    dry_run: bool = False,
) -> Any:
    """``distforest simforest fit DATA`` of a table read by partitions: the summary line,
    or (``dry_run``) the plan, from the input's shape only (nothing read whole)."""
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.jobs.estimates import check_size, estimate_forest_metric
    from distforest.jobs.simforest import metric_params
    from distforest.store.run_store import check_can_create

    start = time.perf_counter()
    assert target is not None
    params["metric"], params["metric_params"] = metric_params(metric or "rbf")
    check_can_create(out, overwrite)
    forest = SimilarityForestClassifier(**params)
    forest._validated()
    trees = params["n_estimators"]
    if dry_run:
        from distforest.jobs.command_plans import model_fit_plan, simforest_fit_cpu
        from distforest.jobs.inputs import input_shape

        source, n, d = input_shape(data, target, drop=drop, na_values=na_values)
        cpu = simforest_fit_cpu(trees, params["n_pairs"], n)
        plan = model_fit_plan("simforest fit (read by partitions)", source, n, d, n * d, trees,
                              forest.batch_size, cpu,
                              {"model (nodes, leaves, inbag)": n * trees * (5 + 2 * 48)},
                              connect, out)  # fmt: skip
        if placement.runs_in_process(n * d, options=connect):  # by partitions: on a cluster
            threads = os.cpu_count() or 1
            return replace(plan, threads=threads, where=f"on a LocalCluster started for the "
                           f"run (read by partitions; assuming {threads} threads)")  # fmt: skip
        return plan
    from distforest.parallel.cluster import connect as connect_to
    from distforest.parallel.execution import execution

    with connect_to(**connect) as client, execution(client), client.as_current():
        pending = read_pending(data, target, drop, na_values)
        n = pending.n_samples
        need = estimate_forest_metric(n, 1, trees * params["n_pairs"])
        knobs = f"--trees ({trees:,}) and --pairs ({params['n_pairs']:,})"
        check_size(f"SimForest on {n:,} objects", need, knobs)
        forest.set_execution(client, progress=progress)

        def save(fitted: Any, attrs: dict[str, Any]) -> RunStore:
            return fitted.save(out, overwrite=overwrite, attrs=attrs, complete=False)

        rs = fit_and_save(forest, pending, normalize, input_attrs(pending, target), save)
    rs.mark_complete()
    evaluations = forest.n_similarity_evaluations_
    return (
        f"SimForest of {trees} trees on {n} objects read by partitions "
        f"({len(forest.classes_)} classes) in {time.perf_counter() - start:.1f} s; "
        f"{evaluations} similarities evaluated ({evaluations / trees / n:.1f} per object per "
        f"tree)\n  model:  {out}"
    )


def _predict_rows(model_path: str, attrs: dict[str, Any], names: tuple[str, ...],
                  frame: Any, start: int, part: str) -> Any:  # fmt: skip
    """``prediction, proba_<label>...`` of one partition by a saved SimForest (read once
    per worker, its per-row arrays left in its store)."""
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.jobs.knn_model import feature_matrix
    from distforest.jobs.partitioned_predict import _model
    from distforest.jobs.simforest import scale
    from distforest.jobs.simforest_model import prediction_frame
    from distforest.parallel.execution import execution

    X = feature_matrix(frame, part, attrs, names, start)
    bad = ~np.isfinite(X)
    if bad.any():
        rows, cols = np.nonzero(bad)
        raise InputError(
            f"{part}: column {names[cols[0]]!r} is missing or infinite at row "
            f"{start + int(rows[0]) + 1} of the table (counted from 1); the model's measure "
            "needs complete rows: impute them first (distforest impute) or drop those rows"
        )
    forest = _model(model_path, lambda path: SimilarityForestClassifier.load(
        path, rows_in_store=True))  # fmt: skip
    if X.shape[0] == 0:  # an empty part still has its place
        return prediction_frame(forest, np.empty((0, len(forest.classes_))))
    with execution(client="synchronous"):  # in this worker: it is one task of many
        return prediction_frame(forest, forest.predict_proba(scale(X, attrs.get("scaling"))))


def predict_partitioned(model: str, data: str, out: str, na_values: tuple[str, ...],
                        connect: dict[str, Any], dry_run: bool = False) -> str:  # fmt: skip
    """``distforest simforest predict MODEL DATA`` of a DATA read by partitions: one task
    per partition predicts its rows and writes its piece of the CSV (joined in order, the
    in-memory command's file); the summary line, or (``dry_run``) what would run."""
    import dask

    from distforest.io.partitions import PATH_COLUMN, open_partitions
    from distforest.jobs.knn_model import check_columns
    from distforest.jobs.partitioned_predict import _write_pieces
    from distforest.parallel.cluster import connect as connect_to

    start = time.perf_counter()
    attrs = RunStore.open(model, require_complete=True).attrs
    if attrs.get("measure") in ("precomputed", "function", None):
        raise ParameterError(
            f"model {model!r} was fitted on a matrix: give --similarity Q.npy or --distances "
            "Q.npy (test objects x training objects), not DATA"
        )
    names = tuple(str(c) for c in attrs.get("feature_names") or ())
    parts = open_partitions(data, na_values=na_values)
    if parts.frame is None:
        raise InputError(f"{parts.source}: a numeric array has no column names; give a table")
    check_columns(parts.source, list(parts.columns), names)
    if dry_run:
        return (f"simforest predict of {parts.source}: read by partitions, "
                f"{parts.npartitions} tasks that each predict a partition's rows with "
                f"{model} and write a piece of {out}")  # fmt: skip
    keep = [*names, PATH_COLUMN] if PATH_COLUMN in parts.frame.columns else list(names)
    with connect_to(**connect) as client, client.as_current():
        blocks = parts.frame[keep].to_delayed()
        lengths = dask.compute(*[dask.delayed(len)(b) for b in blocks])
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        labels = [parts.partition_name(k) for k in range(len(blocks))]
        work = partial(_predict_rows, model, attrs, names)
        n, path, _ = _write_pieces(blocks, starts, labels, work, out)
    return (f"{n} predictions read by partitions in {time.perf_counter() - start:.1f} s\n"
            f"  predictions:  {path}")  # fmt: skip
