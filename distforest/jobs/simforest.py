"""SimForest runs: the fitting input of ``distforest simforest fit`` and SimForest pipelines.

A pipeline with a ``simforest`` section fits a :class:`SimilarityForestClassifier`
(from a table with a target and a named measure, or from a stored similarity
matrix plus ``input.labels``), saves the model, writes the forest's proximity
of the training objects as Zarr tiles, and optionally outlier scores and an
MDS picture from it.  It follows the run protocol of :mod:`distforest.jobs.runs`:
locked, resumable by stage, not repeated once complete.

A table read by partitions (a glob, a folder of part files or a file over
32 MB: :func:`~distforest.store.source.read_as` decides) is summarised by
partitions on the workers (pass 1: the checks of the in-memory reader, a bad
value named by its file, column and row), written into a temporary run store
as float64 (the values the in-memory reader gives), z-scored by the same
chunked moments as a table in memory (:func:`column_moments`) and fitted from
there (:meth:`~distforest.forests.simforest.SimilarityForestClassifier.fit_table`).
The model is then saved where the command or job keeps it, its per-row arrays
copied a chunk at a time; the fitted estimator reads them there.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np

from distforest import location
from distforest.errors import ConfigError, InputError, ParameterError
from distforest.forests import constraints as C
from distforest.forests.measures import parse_metric
from distforest.forests.simforest import METRICS, SimilarityForestClassifier, StoredTrees
from distforest.forests.tiles import ARRAY_NAMES
from distforest.io import load_table, read_frame
from distforest.io.matrices import StoredMatrix, load_matrix
from distforest.jobs.base import ForestJob, input_fields, new_run_id
from distforest.jobs.estimates import SECONDS_PER, check_disk, estimate_matrix
from distforest.jobs.inputs import input_shape, temporary_store
from distforest.jobs.outputs import check_new_file, write_mds, write_outliers
from distforest.jobs.result import JobResult
from distforest.jobs.runs import Context, Run, execute
from distforest.jobs.stages import Cost, Pipeline, Stage, placement_of
from distforest.parallel.placement import cells_of
from distforest.store.inputs import PendingInput, input_chunk
from distforest.store.run_store import RunStore
from distforest.store.source import open_input, read_as

logger = logging.getLogger("distforest")


def read_labels(path: str, n: int) -> np.ndarray:
    """One label per object from a CSV with a header and one column."""
    frame = read_frame(path)
    if frame.shape[1] != 1:
        raise InputError(
            f"--labels {path!r} has {frame.shape[1]} columns "
            f"({', '.join(map(str, frame.columns))}); give a CSV with a header and exactly "
            "one column, one label per object"
        )
    labels = frame.iloc[:, 0]
    if labels.isna().any():
        row = int(np.flatnonzero(labels.isna().to_numpy())[0])
        raise InputError(f"--labels {path!r}: row {row} has no label; label every object")
    if len(labels) != n:
        raise InputError(
            f"--labels {path!r} has {len(labels)} labels but the matrix has {n} objects; "
            "give one label per matrix row, in order"
        )
    return labels.to_numpy()


def scale(X: np.ndarray, scaling: dict[str, list[float]] | None) -> np.ndarray:
    """Features scaled as the model's training rows were (``scaling`` stored with it)."""
    if scaling is None:
        return X
    return (X - np.asarray(scaling["mean"])) / np.asarray(scaling["scale"])


def metric_params(metric: str) -> tuple[str, dict[str, Any] | None]:
    """``rbf:0.5`` -> ("rbf", {"gamma": 0.5}); the name checked against SimForest's measures."""
    measure = parse_metric(metric)
    C.check_choice("metric", measure.name, METRICS[1:])
    return measure.name, None if measure.gamma is None else {"gamma": measure.gamma}


#: ``save(forest, attrs) -> RunStore``: a fitted SimForest saved where a job keeps it.
Save = Callable[[SimilarityForestClassifier, dict[str, Any]], RunStore]


def _fit_held(fit_input: FitInput, forest: SimilarityForestClassifier, save: Save) -> RunStore:
    """The objects held here (a matrix, or a table's scaled rows) fitted, then saved."""
    forest.fit(fit_input.source, fit_input.y)
    return save(forest, fit_input.attrs)


@dataclass
class FitInput:
    """What a SimForest is fitted on, read from the user's files."""

    source: Any
    y: np.ndarray
    n: int
    fingerprint: str
    #: Stored with the model: source, feature names, target name, scaling.
    attrs: dict[str, Any]
    #: Input cells of the fit (rows x features, or the matrix's cells).
    cells: int = 0
    #: ``fitter(self, forest, save)``: fits ``forest`` on these objects and saves it.
    fitter: Callable[[FitInput, SimilarityForestClassifier, Save], RunStore] = _fit_held
    #: Whether the saved model's per-row arrays are read in its store (a fit by partitions).
    rows_in_store: bool = False

    def fit_saved(self, forest: SimilarityForestClassifier, save: Save) -> RunStore:
        """Fit ``forest`` on these objects; ``save(forest, attrs)`` keeps it (returned)."""
        return self.fitter(self, forest, save)


def _file_fingerprint(matrix: StoredMatrix, labels: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in Path(matrix.path).rglob("*") if Path(matrix.path).is_dir() else [Path(matrix.path)]:
        if part.is_file():
            st = part.stat()
            h.update(f"{part.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(repr(labels.tolist()).encode())
    return h.hexdigest()


def read_fit_input(
    *,
    data: str | None,
    matrix: str | None,
    labels: str | None,
    target: str | None,
    normalize: str,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
) -> FitInput:
    """A similarity matrix plus labels, or a table with a target (scaled as asked)."""
    if (matrix is None) == (data is None):
        raise ParameterError(
            "give either --similarity S.npy with --labels, or a table DATA with --target "
            "(not both, not neither)"
        )
    if matrix is not None:
        if labels is None or target is not None:
            raise ParameterError("--similarity needs --labels LABELS.csv (and takes no --target)")
        source = load_matrix(matrix, f"--similarity {matrix!r}")
        y = read_labels(labels, source.shape[0])
        if isinstance(source, StoredMatrix):
            fingerprint = _file_fingerprint(source, y)
        else:  # pragma: no cover - paths always give stored matrices
            fingerprint = hashlib.blake2b(source.tobytes(), digest_size=16).hexdigest()
        return FitInput(source, y, source.shape[0], fingerprint, {"source": matrix},
                        cells_of(source))  # fmt: skip
    if target is None or labels is not None:
        raise ParameterError("a table DATA needs --target COLUMN (and takes no --labels)")
    assert data is not None
    table = load_table(data, target=target, drop=drop, na_values=na_values, allow_missing=False)
    if table.categories:
        raise InputError(
            f"{data!r}: column(s) {sorted(table.categories)} hold text; a SimForest measure "
            "needs numeric features (drop them with --drop, or encode them as numbers)"
        )
    X = table.X.astype(np.float64)
    scaling = None
    if normalize == "zscore":  # the rows in memory: one chunk
        scaling = zscore(column_moments(lambda: [X], X.shape[0]))
        X = scale(X, scaling)
    attrs = {"source": data, "feature_names": list(table.feature_names), "target_name": target,
             "scaling": scaling}  # fmt: skip
    return FitInput(X, np.asarray(table.y), X.shape[0], table.fingerprint(), attrs, cells_of(X))


def column_moments(
    chunks: Callable[[], Iterable[np.ndarray]], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The feature columns' mean and standard deviation in float64, from the rows' chunks
    in order (``chunks()`` gives them, twice): numpy sums a C-ordered array along axis 0
    row after row, so does this, and one chunk gives ``X.mean(axis=0)`` and
    ``X.std(axis=0)`` bit for bit."""

    def total(center: np.ndarray | None) -> np.ndarray:
        acc: np.ndarray | None = None
        for chunk in chunks():
            values = np.array(chunk, dtype=np.float64)
            if center is not None:
                values -= center
                np.multiply(values, values, out=values)
            stacked = values if acc is None else np.concatenate([acc[None], values])
            acc = np.add.reduce(stacked, axis=0)
        assert acc is not None
        return acc

    mean = total(None) / n
    return mean, np.sqrt(total(mean) / n)


def zscore(moments: tuple[np.ndarray, np.ndarray]) -> dict[str, list[float]]:
    """The scaling a model records: the columns' mean, and their standard deviation
    (1 for a constant column)."""
    mean, std = moments
    return {"mean": mean.tolist(), "scale": np.where(std > 0, std, 1.0).tolist()}


def _stored_moments(path: str, chunks: list[slice]) -> tuple[np.ndarray, np.ndarray]:
    """Task: :func:`column_moments` of a store's ``input/X``, read a chunk at a time."""
    return column_moments(lambda: (input_chunk(path, rows) for rows in chunks), chunks[-1].stop)


def read_pending(
    data: str, target: str, drop: tuple[str, ...] = (), na_values: tuple[str, ...] = ()
) -> PendingInput:
    """Pass 1 of a table read by partitions (summaries only), checked as
    :func:`read_fit_input` checks a table loaded whole."""
    pending = cast("PendingInput", open_input(  # partitions=True: its summaries
        data, target=target, drop=drop, na_values=na_values, partitions=True,
        allow_missing=False, dtype=np.float64))  # fmt: skip
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
    with temporary_store() as path:
        table = pending.placed(str(path), {})
        scaling = None
        if normalize == "zscore":  # one task reads the chunks in order
            with forest._runner(table.n_samples * table.n_features) as runner:
                for _, moments in runner.run(_stored_moments, [(table.path, table.chunks())],
                                             name="simforest-moments"):  # fmt: skip
                    scaling = zscore(moments)
        given = None if scaling is None else (np.asarray(scaling["mean"]),
                                              np.asarray(scaling["scale"]))  # fmt: skip
        forest.fit_table(table, scaling=given)
        rs = save(forest, {**attrs, "scaling": scaling})
        # the saved arrays and trees, read on use (where the in-memory fit holds them)
        forest.leaves_, forest.inbag_ = cast(Any, rs.array("leaves")), cast(Any, rs.array("inbag"))
        if isinstance(forest.trees_, StoredTrees):
            forest.trees_ = replace(forest.trees_, path=rs.path)
    return rs


def read_table(data: str, target: str, normalize: str, drop: tuple[str, ...] = (),
               na_values: tuple[str, ...] = (), *, summaries: bool = True) -> FitInput:  # fmt: skip
    """A SimForest's table: read here whole (:func:`read_fit_input`), or by partitions (a
    glob, a folder of parts, a file over 32 MB: :func:`table_parts`)."""
    return read_as(data, whole=lambda _: read_fit_input(
        data=data, matrix=None, labels=None, target=target, normalize=normalize, drop=drop,
        na_values=na_values), parts=lambda _: table_parts(
        data, target, normalize, drop, na_values, summaries=summaries))  # fmt: skip


def table_parts(data: str, target: str, normalize: str, drop: tuple[str, ...] = (),
                na_values: tuple[str, ...] = (), *,
                summaries: bool = True) -> FitInput:  # fmt: skip
    """A SimForest's table read by partitions into a temporary store by the fit
    (:func:`fit_and_save`): ``summaries``, pass 1 now (the fingerprint of the
    partitions' summaries), else only the table's shape now and pass 1 by the fit."""

    def fitted(pending: PendingInput | None, fit_input: FitInput,
               forest: SimilarityForestClassifier, save: Save) -> RunStore:  # fmt: skip
        pending = pending or read_pending(data, target, drop, na_values)
        return fit_and_save(forest, pending, normalize, input_attrs(pending, target), save)

    if summaries:
        pending = read_pending(data, target, drop, na_values)
        n, d, fingerprint = pending.n_samples, pending.n_features, pending.fingerprint()
    else:
        pending, fingerprint = None, ""
        _, n, d = input_shape(data, target, drop=drop, na_values=na_values)
    return FitInput(pending, np.empty(0), n, fingerprint, {}, n * d, partial(fitted, pending),
                    rows_in_store=True)  # fmt: skip


@dataclass(kw_only=True)
class SimForestJob(ForestJob):
    """One SimForest run: the model, its proximity (in the model's store), outliers, MDS.

    Its ``forest`` holds keyword arguments of :class:`SimilarityForestClassifier`.
    """

    job_kind: ClassVar[str] = "simforest"

    labels: str | None = None
    normalize: str = "zscore"
    method: str = "original"
    #: ``{"out": csv, "plot": png}`` sections, paths already under the output dir.
    outliers: dict[str, Any] | None = None
    mds: dict[str, Any] | None = None
    name: str = "simforest"

    @property
    def matrix_input(self) -> bool:
        """Whether the input is a similarity matrix (with labels), not a table."""
        return self.labels is not None

    def spec(self, fingerprint: str) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep = ("labels", "target", "drop", "na_values", "forest", "normalize", "method",
                "outliers", "mds")  # fmt: skip
        return self.spec_of(keep, input={"source": self.input, "fingerprint": fingerprint})

    def describe(self) -> str:
        """What the job computes, for ``distforest validate``."""
        return f"SimForest model and {self.method} proximity"

    def read_input(self, summaries: bool = True) -> FitInput:
        """What the model is fitted on, read from the job's files (:func:`read_table`: a
        table read by partitions gives its summaries, or with ``summaries=False`` its
        shape only)."""
        if self.matrix_input:
            return read_fit_input(data=None, matrix=self.input, labels=self.labels,
                                  target=self.target, normalize=self.normalize)  # fmt: skip
        if self.target is None:  # (the request's own check, as a table read whole gives it)
            raise ParameterError("a table DATA needs --target COLUMN (and takes no --labels)")
        return read_table(self.input, self.target, self.normalize, self.drop, self.na_values,
                          summaries=summaries)  # fmt: skip


@SimForestJob.plans
def plan_simforest_job(job: SimForestJob) -> Pipeline:
    """What the job would do (``--dry-run``): reads the input, runs nothing."""
    fit_input = job.read_input(summaries=False)  # by partitions: the shape only
    return simforest_pipeline(job, fit_input.n, fit_input.cells)


def simforest_pipeline(job: SimForestJob, n: int, cells: int,
                       fit_input: FitInput | None = None) -> Pipeline:  # fmt: skip
    """The stages of a SimForest job on ``n`` objects (``cells``: its input's cells):
    fit, proximity tiles, outliers, MDS."""

    from distforest.forests.tiles import SYMMETRIC
    from distforest.parallel.tasks import default_batch_size, plan_batches
    from distforest.parallel.tiling import TilePlan

    params = {**SimilarityForestClassifier().get_params(), **job.forest}
    threads = placement_of(cells, job.connect)[1]
    trees, pairs = int(params["n_estimators"]), int(params["n_pairs"])
    tiles = TilePlan(n, n, int(params["tile_size"]), symmetric=SYMMETRIC[job.method])
    tile = tiles.chunks[0]
    batch = params["batch_size"] or default_batch_size(trees, threads)
    fit_tasks = len(plan_batches(trees, batch))
    per_tree = n * math.log2(max(n, 2))
    name = ARRAY_NAMES[job.method]
    stages = [
        Stage("fit", f"{trees} trees, {pairs} pair(s) per node, in {fit_tasks} tasks",
              reads=(str(job.input),), writes=(str(job.out),), tasks=fit_tasks,
              cost=Cost(SECONDS_PER["sim_fit"] * trees * pairs * per_tree,
                        8 * cells + batch * n * 2 * 48,
                        {"model (nodes, leaves, inbag)": n * trees * (5 + 2 * 48)}),
              run=lambda ctx: _fit(job, fit_input, ctx),
              # resumed: a model fitted by partitions keeps its leaves in its store
              resume=lambda ctx: setattr(ctx, "model", SimilarityForestClassifier.load(
                  job.out, rows_in_store=fit_input is not None and fit_input.rows_in_store))),
        Stage("proximity", f"{job.method}, {tiles.n_tasks:,} tiles of {tile} x {tile}",
              reads=("leaves",), writes=(name,), tasks=tiles.n_tasks, tiles=tiles.n_tasks,
              cost=Cost(SECONDS_PER["tile"] * trees * tiles.n_tasks * tile * tile,
                        2 * tile * trees * 5 + 3 * 4 * tile * tile,
                        {"proximity matrix (uncompressed)": 4 * n * n}),
              run=lambda ctx: ctx.model.proximity(job.method, store=job.out, complete=False)),
    ]  # fmt: skip
    title = f"{job.name}: SimForest proximity"
    if job.outliers:
        options = job.outliers
        stages.append(Stage(
            "outliers", f"outlier scores -> {options['out']}", reads=(name,),
            writes=(options["out"],), cost=Cost(0.0, 4 * n * n, {"outlier scores": n * 32}),
            run=lambda ctx: setattr(ctx.done, "outputs", write_outliers(
                ctx.model, options["out"], options.get("plot"), title)),
        ))  # fmt: skip
    if job.mds:
        mds = job.mds
        stages.append(Stage(
            "mds", f"MDS -> {mds['out']}", reads=(name,), writes=(mds["out"],),
            cost=Cost(0.0, 4 * n * n, {"MDS coordinates": n * 24 * (1 + mds.get("components", 2))}),
            run=lambda ctx: setattr(ctx.done, "outputs", write_mds(
                ctx.model, mds["out"], mds.get("plot"), components=mds.get("components", 2),
                dissimilarity=mds.get("dissimilarity", "sqrt"), title=title)),
        ))  # fmt: skip
    return Pipeline(title=f"job {job.name}: {n:,} objects ({cells:,} input cells)",
                    steps=[("input", str(job.input)), ("store", str(job.out))], stages=stages,
                    cells=cells, connect=job.connect, out=str(job.out))  # fmt: skip


def _fit(job: SimForestJob, fit_input: FitInput | None, ctx: Context) -> None:
    """The fit stage: fit the forest and save it (not complete: the protocol marks it)."""
    assert fit_input is not None
    record = ctx.run.record
    forest = SimilarityForestClassifier(**job.forest)

    def save(fitted: SimilarityForestClassifier, attrs: dict[str, Any]) -> RunStore:
        return fitted.save(job.out, overwrite=True, complete=False, attrs={**attrs, **record})

    ctx.rs = fit_input.fit_saved(forest, save)
    ctx.done.outputs = {"model": ctx.rs.path}
    ctx.done.info["evaluations"] = forest.n_similarity_evaluations_
    ctx.model = forest


@SimForestJob.runs
def run_simforest_job(
    job: SimForestJob, progress: Any = None, *, restart: bool = False, run_id: str | None = None
) -> JobResult:
    """Fit, save, write the proximity and the applications; resumable by stage."""
    start = time.perf_counter()
    run_id = run_id or new_run_id()
    fit_input = job.read_input()
    pipeline = simforest_pipeline(job, fit_input.n, fit_input.cells, fit_input)

    def check(run: Run) -> None:
        for section in (job.outliers, job.mds):
            for key in ("out", "plot"):
                check_new_file((section or {}).get(key), run.replace)
        tile = job.forest.get("tile_size", SimilarityForestClassifier().tile_size)
        need = estimate_matrix(fit_input.n, fit_input.n, 1, tile, True)["disk_bytes"]
        check_disk(location.parent(job.out), need, replaces=job.out)

    def result(rs: RunStore, outputs: dict[str, str], mode: str) -> JobResult:
        return _result(job, rs, outputs, start, mode)

    return execute(job, pipeline, job.spec(fit_input.fingerprint), result, progress=progress,
                   restart=restart, run_id=run_id, check=check)  # fmt: skip


def _result(job: SimForestJob, rs: RunStore, outputs: dict[str, str], start: float,
            mode: str) -> JobResult:  # fmt: skip
    n = int(rs.attrs.get("n_samples", 0))
    return JobResult(
        store=rs.path,
        name=ARRAY_NAMES[job.method],
        shape=(n, n),
        n_trees=len(rs.attrs.get("n_evaluations", [])),
        task="SimForest classification",
        seconds=time.perf_counter() - start,
        outputs={"model": rs.path, **outputs},
        mode=mode,
    )


def simforest_job(
    data: dict[str, Any],
    sections: dict[str, dict[str, Any]],
    input_path: str,
    out_dir: Path,
    connect_kw: dict[str, Any],
    source: str,
    apps: dict[str, dict[str, Any]],
) -> SimForestJob:
    """A :class:`SimForestJob` from a pipeline whose sections were type-checked.

    Called by :func:`distforest.jobs.pipeline.load_pipeline` for a file with a
    ``simforest`` section; ``apps`` holds the outliers and mds sections with
    their paths under ``out_dir``.
    """
    clash = [name for name in ("forest", "impute", "mislabels", "xforest", "clustering",
                               "neighbors", "knn") if name in data]  # fmt: skip
    if clash:
        raise ConfigError(
            f"{source}: a SimForest pipeline has the sections input, simforest, proximity, "
            f"outliers, mds, output and cluster; remove {', '.join(clash)}"
        )
    forest = dict(sections["simforest"])
    normalize = forest.pop("normalize", "zscore")
    inp, out = sections["input"], sections["output"]
    labels = inp.get("labels")
    if (labels is None) == (inp.get("target") is None):
        raise ConfigError(
            f"{source}: a SimForest pipeline needs input.target (a table, with "
            "simforest.metric) or input.labels (input.path is then a similarity matrix)"
        )
    if labels is None and forest.get("metric", "precomputed") == "precomputed":
        forest["metric"] = "rbf"
    if isinstance(forest.get("metric"), str) and ":" in forest["metric"]:
        try:
            forest["metric"], forest["metric_params"] = metric_params(forest["metric"])
        except ParameterError as exc:
            raise ConfigError(f"{source}: simforest.metric: {exc}") from exc
    try:
        SimilarityForestClassifier(**forest)._validated()
    except ParameterError as exc:
        raise ConfigError(f"{source}: simforest: {exc}") from exc
    return SimForestJob(
        input=input_path,
        out=str(out_dir / out.get("store", "simforest.zarr")),
        labels=labels,
        target=inp.get("target"),
        **input_fields(inp),
        forest=forest,
        normalize=normalize,
        method=sections["proximity"].get("method", "original"),
        outliers=apps.get("outliers"),
        mds=apps.get("mds"),
        overwrite=bool(out.get("overwrite", False)),
        connect=connect_kw,
        name=str(data.get("name") or "simforest"),
        source=source,
    )
