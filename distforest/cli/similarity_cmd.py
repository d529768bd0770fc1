"""``distforest similarity``, ``neighbors`` and ``knn fit|predict``; k-NN pipeline jobs.

A pipeline with a ``neighbors`` and/or ``knn`` section (see
:mod:`distforest.cli.pipeline` and ``pipelines/knn.yaml``) becomes a
:class:`KNNJob`, run by :func:`run_knn_job` with the same helpers as the
commands.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd
import xarray as xr

from distforest._version import __version__
from distforest.apps.knn import WEIGHTS, KNNClassifier, KNNRegressor, load_model, save_model
from distforest.cli.jobs import JobResult, summary
from distforest.cli.options import cluster_options, connect_kwargs, input_options
from distforest.cli.outputs import check_new_file, write_csv
from distforest.cli.progress import ProgressBars
from distforest.cli.runs import decide, spec_hash
from distforest.errors import ConfigError, InputError, ParameterError
from distforest.forests import _params as P
from distforest.forests.forest_similarity import FOREST_METRICS
from distforest.forests.measures import METRICS, NORMALIZATIONS, parse_metric
from distforest.forests.neighbors import ALGORITHMS, top_k_neighbors
from distforest.forests.pairwise import pairwise
from distforest.io import load_table, read_frame
from distforest.parallel.cluster import connect
from distforest.store.run_store import RunStore, check_can_create

METRIC_HELP = (
    "Measure: " + ", ".join(METRICS) + "; minkowski:P and rbf:GAMMA take a number. "
    "Similarities (cosine, rbf, jaccard, russell-rao, sokal-michener) are stored as "
    "'similarity', distances as 'distance'."
)


def _measure_options(func: Any) -> Any:
    options = [
        click.option("--metric", default="euclidean", show_default=True, help=METRIC_HELP),
        click.option("--normalize", type=click.Choice(["none", *NORMALIZATIONS]), default="none",
                     show_default=True,
                     help="range: rescale each feature to --feature-range from the data's min and "
                          "max; zscore: (x - mean) / std."),
        click.option("--feature-range", nargs=2, type=float, default=(0.0, 1.0),
                     show_default=True, metavar="LOW HIGH", help="Interval of --normalize range."),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


def _k_option(default: int, help: str) -> Any:
    return click.option(
        "--k", "k", type=click.IntRange(min=1), default=default, show_default=True, help=help
    )


def _normalize(value: str) -> str | None:
    return None if value == "none" else value


def _cluster_kw(options: dict[str, Any]) -> dict[str, Any]:
    keys = ("scheduler", "cluster", "workers", "threads", "memory_limit")
    return connect_kwargs({k: options.pop(k, None) for k in keys})


def _maybe_connect(needed: bool, connect_kw: dict[str, Any]) -> Any:
    """``connect(**connect_kw)`` when ``needed`` or a cluster was asked for, else no cluster.

    Inside the block the client (or None) is the default client, where forest
    metrics fit their trees.
    """
    if needed or any(v is not None for v in connect_kw.values()):
        return connect(**connect_kw)
    return contextlib.nullcontext()


def _bars(ctx: click.Context) -> ProgressBars:
    return ProgressBars(enabled=not (ctx.obj or {}).get("quiet", False))


@click.command("similarity")
@click.argument("input", metavar="INPUT")
@click.option("--out", required=True, metavar="STORE.zarr", help="Zarr store to write.")
@click.option("--reference", metavar="FILE",
              help="Columns of the matrix: rows of this table (default: INPUT against itself, "
                   "symmetric, upper triangle computed and mirrored).")  # fmt: skip
@_measure_options
@input_options
@click.option("--tile-size", type=click.IntRange(min=16), default=2048, show_default=True,
              help="Rows/columns of one tile (one task, one Zarr chunk).")  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@cluster_options
@click.pass_context
def similarity(ctx: click.Context, input: str, out: str, reference: str | None, metric: str,
               normalize: str, feature_range: tuple[float, float], drop: tuple[str, ...],
               na_values: tuple[str, ...], tile_size: int, overwrite: bool,
               **options: Any) -> None:  # fmt: skip
    """Write the similarity or distance matrix of the rows of INPUT to a Zarr store.

    Tile by tile, one Dask task per tile; never the whole matrix in memory.
    Normalisation and Mahalanobis' covariance are fitted on the reference
    rows (--reference, else INPUT).  Use --drop for the target and identifiers.

    \b
    Example:
      distforest similarity data.csv --metric cosine --normalize range --out S.zarr --drop Class
    """
    start = time.perf_counter()
    X = load_table(input, drop=drop, na_values=na_values)
    Y = None if reference is None else load_table(reference, drop=drop, na_values=na_values)
    check_can_create(out, overwrite)
    with connect(**_cluster_kw(options)) as client:
        M = pairwise(X, Y, metric=metric, normalize=_normalize(normalize),
                     feature_range=feature_range, store=out, tile_size=tile_size,
                     overwrite=overwrite, client=client, progress=_bars(ctx))  # fmt: skip
    click.echo(
        f"{M.name} ({M.attrs['metric']}) of {M.shape[0]} x {M.shape[1]} rows in "
        f"{time.perf_counter() - start:.1f} s\n  store:  {out}"
        f" (array {M.name!r}, dims sample_i, sample_j, tiles {tile_size} x {tile_size})"
    )


@click.command("neighbors")
@click.argument("input", metavar="INPUT")
@click.option(
    "--out",
    required=True,
    metavar="STORE.zarr",
    help="Zarr store with neighbor_index and neighbor_distance (sample, neighbor).",
)
@_k_option(10, "Neighbours per row (the row itself excluded).")
@click.option(
    "--reference",
    metavar="FILE",
    help="Search among the rows of this table instead of INPUT's own rows.",
)
@_measure_options
@click.option(
    "--algorithm",
    type=click.Choice(ALGORITHMS),
    default="auto",
    show_default=True,
    help="auto: k-d tree for Minkowski distances on <= 15 features, else brute tiles.",
)
@input_options
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Query rows per task.")
@click.option(
    "--tile-size",
    type=click.IntRange(min=16),
    default=8192,
    show_default=True,
    help="Candidate rows per tile of the brute search.",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@cluster_options
@click.pass_context
def neighbors(ctx: click.Context, input: str, out: str, k: int, reference: str | None,
              metric: str, normalize: str, feature_range: tuple[float, float], algorithm: str,
              drop: tuple[str, ...], na_values: tuple[str, ...], batch_size: int | None,
              tile_size: int, overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Find the k nearest rows of every row of INPUT; never forms the n x n matrix.

    Similarities s are ranked as distances 1 - s.

    \b
    Example:
      distforest neighbors data.csv --metric euclidean --k 10 --out knn.zarr
    """
    start = time.perf_counter()
    X = load_table(input, drop=drop, na_values=na_values)
    Y = None if reference is None else load_table(reference, drop=drop, na_values=na_values)
    check_can_create(out, overwrite)
    with connect(**_cluster_kw(options)) as client:
        ds = top_k_neighbors(X, Y, k=k, metric=metric, normalize=_normalize(normalize),
                             feature_range=feature_range, algorithm=algorithm, store=out,
                             overwrite=overwrite, batch_size=batch_size, tile_size=tile_size,
                             client=client, progress=_bars(ctx))  # fmt: skip
    assert isinstance(ds, xr.Dataset)  # a store was given
    params = ds.attrs["params"]
    click.echo(
        f"{k} nearest neighbours of {ds.sizes['sample']} rows by {params['metric']} "
        f"({params['algorithm']}) in {time.perf_counter() - start:.1f} s\n"
        f"  store:  {out} (neighbor_index, neighbor_distance; distance = {params['distance']})"
    )


@click.group("knn")
def knn() -> None:
    """k-nearest-neighbour classification and regression (fit a model, predict with it)."""


@knn.command("fit")
@click.argument("train", metavar="TRAIN")
@click.option("--target", required=True, metavar="COLUMN", help="Column to predict.")
@click.option("--out", required=True, metavar="MODEL.zarr", help="Model store to write.")
@_k_option(5, "Neighbours that vote.")
@click.option(
    "--weights",
    type=click.Choice(["uniform", "distance"]),
    default="uniform",
    show_default=True,
    help="distance: weights 1/d^2 (exact matches take the vote).",
)
@click.option(
    "--task",
    type=click.Choice(["auto", "classification", "regression"]),
    default="auto",
    show_default=True,
    help="auto: classification for labels and integers with few values.",
)
@_measure_options
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="auto", show_default=True)
@click.option(
    "--select",
    type=click.Choice(["forward", "backward"]),
    default=None,
    help="Sequential feature selection (5-fold cross-validated k-NN).",
)
@click.option(
    "--n-features",
    default="auto",
    show_default=True,
    metavar="N",
    help="Features the selection keeps: auto (half), an integer or a fraction.",
)
@click.option("--trees", "n_estimators", type=click.IntRange(min=1), default=100,
              show_default=True, help="Trees of a forest metric (" + ", ".join(FOREST_METRICS)
              + ").")  # fmt: skip
@click.option("--seed", "random_state", type=click.IntRange(min=0), default=0,
              show_default=True, help="random_state of a forest metric.")  # fmt: skip
@input_options
@click.option("--overwrite", is_flag=True, help="Replace an existing model store.")
@cluster_options
def knn_fit(train: str, target: str, out: str, k: int, weights: str, task: str, metric: str,
            normalize: str, feature_range: tuple[float, float], algorithm: str,
            select: str | None, n_features: str, n_estimators: int, random_state: int,
            drop: tuple[str, ...], na_values: tuple[str, ...], overwrite: bool,
            **options: Any) -> None:  # fmt: skip
    """Fit a k-NN model on TRAIN and save it (Zarr, no pickle).

    METRIC may also be a forest similarity (rf-proximity, rfgap, beta): its
    trees are fitted on the cluster (a LocalCluster unless --scheduler or
    --cluster) and saved in the model store.

    \b
    Example:
      distforest knn fit train.csv --target price --k 3 --weights distance \\
          --normalize range --out model.zarr
    """
    start = time.perf_counter()
    table = load_table(train, target=target, drop=drop, na_values=na_values)
    check_can_create(out, overwrite)
    params = {"n_neighbors": k, "weights": weights, "metric": metric,
              "normalize": _normalize(normalize), "feature_range": feature_range,
              "algorithm": algorithm, "select": select,
              "n_features_to_select": _n_features(n_features), "n_estimators": n_estimators,
              "random_state": random_state}  # fmt: skip
    with _maybe_connect(metric in FOREST_METRICS, _cluster_kw(options)):
        model, task = fit_and_save_model(table, task, params, out, overwrite)
    kept = [n for n, s in zip(table.feature_names, model.support_, strict=True) if s]
    click.echo(
        f"k-NN {task} model (k={k}, {weights}, {metric}, normalize {normalize}) on "
        f"{table.n_samples} rows in {time.perf_counter() - start:.1f} s\n"
        f"  features: {', '.join(kept)}\n  model:    {out}"
    )


def fit_and_save_model(
    table: Any,
    task: str,
    params: dict[str, Any],
    out: str,
    overwrite: bool,
    attrs: dict[str, Any] | None = None,
) -> tuple[KNNClassifier | KNNRegressor, str]:
    """Fit a k-NN model on a loaded table and save it with what predicting needs.

    Parameters
    ----------
    table : distforest.io.Table
        With the target in ``table.y``.
    task : {"auto", "classification", "regression"}
    params : dict
        :class:`KNNClassifier` / :class:`KNNRegressor` parameters.  A forest
        metric fits its trees on the current default client (the model keeps
        ``client=None``, so that it can be cloned by the feature selection).
    out : str
        Model store to create.
    overwrite : bool

    Returns
    -------
    model, task
        The fitted model and the resolved task.
    """
    task = P.resolve_task(task, table.y, table.target_name)
    if task not in ("classification", "regression"):
        raise InputError(f"k-NN needs a target column to predict; got task {task!r}")
    cls = KNNClassifier if task == "classification" else KNNRegressor
    model = cls(**params).fit(table, table.y)
    categories = {k: [str(v) for v in c] for k, c in table.categories.items()}
    extra = {"target": table.target_name, "source": str(table.source), "categories": categories,
             **(attrs or {})}  # fmt: skip
    save_model(model, out, overwrite=overwrite, attrs=extra)
    return model, task


def _n_features(value: str) -> str | int | float:
    if value == "auto":
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    raise click.BadParameter(f"expected auto, an integer or a fraction, got {value!r}")


@knn.command("predict")
@click.argument("model_path", metavar="MODEL.zarr")
@click.argument("data", metavar="DATA")
@click.option("--out", required=True, metavar="FILE.csv", help="Predictions, one row per row.")
@input_options
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@cluster_options
def knn_predict(model_path: str, data: str, out: str, drop: tuple[str, ...],
                na_values: tuple[str, ...], overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Predict the target of every row of DATA with a saved k-NN model.

    DATA needs the model's feature columns (in any order); the target column
    and other columns are ignored.  The neighbour search runs in this process,
    or on a cluster when a cluster option is given.
    """
    start = time.perf_counter()
    check_new_file(out, overwrite)
    with _maybe_connect(False, _cluster_kw(options)) as client:
        n, written = predict_to_csv(model_path, data, out, drop, na_values, client)
    click.echo(f"predicted {n} rows in {time.perf_counter() - start:.1f} s\n"
               f"  predictions: {written}")  # fmt: skip


def predict_to_csv(
    model_path: str,
    data: str,
    out: str,
    drop: tuple[str, ...] = (),
    na_values: tuple[str, ...] = (),
    client: Any = None,
) -> tuple[int, str]:
    """Predict every row of ``data`` with a saved model; write ``row, <target>`` to a CSV.

    Returns
    -------
    n_rows, path
    """
    attrs = RunStore.open(model_path).attrs
    model = load_model(model_path, client=client)
    X = _features(data, attrs, model.feature_names_in_, drop, na_values)
    prediction = model.predict(X)
    frame = pd.DataFrame({"row": np.arange(X.shape[0]), attrs.get("target") or "prediction":
                          prediction})  # fmt: skip
    return X.shape[0], write_csv(frame, out)


def _features(
    data: str,
    attrs: dict[str, Any],
    names: tuple[str, ...],
    drop: tuple[str, ...],
    na_values: tuple[str, ...],
) -> np.ndarray:
    """The model's feature columns of DATA as numbers; text labels coded as when fitted."""
    frame = read_frame(data, na_values=na_values)
    frame.columns = [str(c) for c in frame.columns]
    frame = frame.drop(columns=[c for c in drop if c in frame.columns])
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise InputError(
            f"{data}: the model needs column(s) {missing} that are not there; "
            f"available: {', '.join(list(frame.columns)[:20])}"
        )
    fitted = attrs.get("categories", {})
    X = np.empty((len(frame), len(names)))
    for j, name in enumerate(names):
        col = frame[name]
        if name in fitted:
            code = {label: float(i) for i, label in enumerate(fitted[name])}
            labels = col.astype(str).where(col.notna())
            unseen = sorted(set(labels.dropna()) - set(code))
            if unseen:
                raise InputError(f"{data}: column {name!r} has label(s) {unseen[:5]} "
                                 "not seen when the model was fitted")  # fmt: skip
            X[:, j] = labels.map(code).astype(float).to_numpy()
            continue
        try:
            X[:, j] = pd.to_numeric(col).to_numpy(dtype=float)
        except (TypeError, ValueError) as exc:
            raise InputError(
                f"{data}: column {name!r} must be numeric as when fitted: {exc}"
            ) from None
    return X


# -- k-NN pipelines (sections input, neighbors, knn, output) --------------------------------

#: Allowed values of k-NN pipeline keys (merged into the pipeline's CHOICES).
KNN_CHOICES = {
    "neighbors.normalize": ("none", *NORMALIZATIONS),
    "neighbors.algorithm": ALGORITHMS,
    "knn.task": ("auto", "classification", "regression"),
    "knn.weights": WEIGHTS,
    "knn.normalize": ("none", *NORMALIZATIONS),
}
#: Sections of other pipelines that a k-NN pipeline must not have.
NOT_WITH_KNN = ("forest", "proximity", "impute", "outliers", "mislabels", "mds", "xforest",
                "clustering")  # fmt: skip
PREDICT_KEYS = ("input", "out")


@dataclass
class KNNJob:
    """One k-NN run: input, optional top-k neighbours store, optional model (+ predictions)."""

    input: str
    target: str | None = None
    drop: tuple[str, ...] = ()
    na_values: tuple[str, ...] = ()
    #: ``{"metric", "k", "normalize", "algorithm", "out"}`` (``out`` a store path).
    neighbors: dict[str, Any] | None = None
    #: ``{"task", "k", "weights", "metric", "normalize", "n_estimators",
    #: "random_state", "model", "predict": {"input", "out"}}``.
    knn: dict[str, Any] | None = None
    overwrite: bool = False
    connect: dict[str, Any] = field(default_factory=dict)
    name: str = "knn"

    def spec(self, table: Any) -> dict[str, Any]:
        """What determines the results: hashed to recognise the same job."""
        keep = ("target", "drop", "na_values", "neighbors", "knn")
        spec = {k: v for k, v in asdict(self).items() if k in keep}
        spec["input"] = {"source": table.source, "fingerprint": table.fingerprint()}
        spec["distforest_version"] = __version__
        return json.loads(json.dumps(spec, default=str))

    @property
    def out(self) -> str:
        """The main output: the neighbours store, else the model store."""
        return str((self.neighbors or {}).get("out") or (self.knn or {})["model"])

    @property
    def kind(self) -> str:
        """What the job computes, for ``distforest validate``."""
        parts = [f"top-{self.neighbors['k']} {self.neighbors['metric']}"] if self.neighbors else []
        if self.knn:
            parts.append(f"k-NN model ({self.knn['metric']}, k={self.knn['k']})")
        return " and ".join(parts)


def knn_job(
    data: dict[str, Any],
    sections: dict[str, dict[str, Any]],
    input_path: str,
    out_dir: Path,
    connect: dict[str, Any],
    source: str,
    today_path: Any = str,
) -> KNNJob:
    """A :class:`KNNJob` from a pipeline whose sections were type-checked.

    Called by :func:`distforest.cli.pipeline.load_pipeline` for a file with a
    ``neighbors`` or ``knn`` section; checks what is particular to k-NN
    pipelines (metrics, the target, ``knn.predict``).  Output names are
    relative to ``out_dir``; ``knn.predict.input`` is relative to the current
    directory, and ``today_path`` fills in its ``{date}``.
    """
    clash = [name for name in NOT_WITH_KNN if name in data]
    if clash:
        raise ConfigError(
            f"{source}: a k-NN pipeline has the sections input, neighbors and/or knn, output "
            f"and cluster; remove {', '.join(clash)}"
        )
    extra = sorted(set(sections["output"]) - {"dir", "overwrite"})
    if extra:
        raise ConfigError(
            f"{source}: output.{extra[0]} does not apply to a k-NN pipeline (outputs are named "
            "in neighbors.out, knn.model and knn.predict.out); remove it"
        )
    inp = sections["input"]
    neighbors = None
    if "neighbors" in data:
        neighbors = {"metric": "euclidean", "k": 10, "normalize": "none", "algorithm": "auto",
                     "out": "neighbors.zarr", **sections["neighbors"]}  # fmt: skip
        _check_metric(neighbors["metric"], "neighbors.metric", source, forest=False)
        _check_k(neighbors["k"], "neighbors.k", source)
        neighbors["out"] = str(out_dir / neighbors["out"])
    model = None
    target = inp.get("target")
    if "knn" in data:
        model = {"task": "auto", "k": 5, "weights": "uniform", "metric": "euclidean",
                 "normalize": "none", "n_estimators": 100, "random_state": 0,
                 "model": "knn_model.zarr", **sections["knn"]}  # fmt: skip
        own = model.pop("target", None)
        if own and target and own != target:
            raise ConfigError(
                f"{source}: knn.target {own!r} differs from input.target {target!r}; give one"
            )
        target = own or target
        if not target:
            raise ConfigError(f"{source}: knn needs the column to predict: set knn.target")
        _check_metric(model["metric"], "knn.metric", source, forest=True)
        _check_k(model["k"], "knn.k", source)
        model["model"] = str(out_dir / model["model"])
        if model.get("predict") is not None:
            model["predict"] = _predict_section(model["predict"], out_dir, source, today_path)
    return KNNJob(
        input=input_path,
        target=target,
        drop=tuple(inp.get("drop") or ()),
        na_values=tuple(str(v) for v in inp.get("na_values") or ()),
        neighbors=neighbors,
        knn=model,
        overwrite=bool(sections["output"].get("overwrite", False)),
        connect=connect,
        name=str(data.get("name") or "knn"),
    )


def _check_metric(metric: str, where: str, source: str, *, forest: bool) -> None:
    if forest and metric in FOREST_METRICS:
        return
    try:
        parse_metric(metric)
    except ParameterError as exc:
        more = f" or a forest metric ({', '.join(FOREST_METRICS)})" if forest else ""
        raise ConfigError(f"{source}: {where}: {exc}{more}") from exc


def _check_k(k: int, where: str, source: str) -> None:
    if k < 1:
        raise ConfigError(f"{source}: {where} must be at least 1, got {k}")


def _predict_section(section: Any, out_dir: Path, source: str, today_path: Any) -> dict[str, str]:
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: knn.predict must be a mapping {{input: ..., out: ...}}")
    for key, value in section.items():
        if key not in PREDICT_KEYS:
            raise ConfigError(
                f"{source}: unknown key knn.predict.{key!r} (allowed: {', '.join(PREDICT_KEYS)})"
            )
        if not isinstance(value, str):
            raise ConfigError(f"{source}: knn.predict.{key} must be str, got {value!r}")
    missing = [key for key in PREDICT_KEYS if not section.get(key)]
    if missing:
        raise ConfigError(f"{source}: knn.predict.{missing[0]} is required")
    path = today_path(section["input"])
    if not Path(path).exists():
        raise ConfigError(
            f"{source}: knn.predict.input {path!r} does not exist (relative paths are relative "
            f"to the current directory {str(Path.cwd())!r})"
        )
    return {"input": path, "out": str(out_dir / section["out"])}


def knn_plan(job: KNNJob) -> str:
    """What ``distforest run --dry-run`` prints for a k-NN pipeline (nothing is run)."""
    lines = [f"k-NN pipeline {job.name!r} on {job.input} (target {job.target or '-'})"]
    if job.neighbors:
        nb = job.neighbors
        lines.append(f"  neighbours: k={nb['k']}, {nb['metric']}, normalize {nb['normalize']}, "
                     f"{nb['algorithm']} -> {nb['out']}")  # fmt: skip
    if job.knn:
        m = job.knn
        lines.append(f"  model:      k={m['k']}, {m['weights']}, {m['metric']}, normalize "
                     f"{m['normalize']} -> {m['model']}")  # fmt: skip
        if m.get("predict"):
            lines.append(f"  predict:    {m['predict']['input']} -> {m['predict']['out']}")
    return "\n".join(lines)


def run_knn_job(
    job: KNNJob, progress: Any = None, *, restart: bool = False, run_id: str | None = None
) -> JobResult:
    """Write the top-k neighbours, fit and save the model, predict; resumable by stage.

    Each output records the job's spec hash.  Run again, a stage whose
    output is complete and of the same spec is kept; a half-written one (a
    killed run) is written again from the same seeds, so the outputs end
    identical to an uninterrupted run; one of a different spec is refused
    unless ``restart`` or ``overwrite``.  Output problems are found before
    any cluster is started; a cluster is started only for the neighbours
    search or a forest metric.
    """
    start = time.perf_counter()
    table = load_table(job.input, target=job.target, drop=job.drop, na_values=job.na_values)
    spec = job.spec(table)
    digest = spec_hash(spec)
    record = {"spec": spec, "spec_hash": digest, "job": job.name, "run_id": run_id}
    nb, model = job.neighbors, job.knn
    predict = (model or {}).get("predict")
    todo = {
        name: _stage_todo(path, spec, digest, restart=restart, overwrite=job.overwrite)
        for name, path in (("neighbors", (nb or {}).get("out")),
                           ("model", (model or {}).get("model"))) if path
    }  # fmt: skip
    for name, path in (("neighbors", (nb or {}).get("out")), ("model", (model or {}).get("model"))):
        if path and todo[name]:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    if predict and todo.get("model", True):
        check_new_file(predict["out"], job.overwrite or restart or "model" in todo)
    needed = (nb is not None and todo["neighbors"]) or (
        (model or {}).get("metric") in FOREST_METRICS and todo.get("model", False)
    )
    outputs: dict[str, str] = {}
    shape: tuple[int, int] = (table.n_samples, 0)
    n_trees, what = 0, []
    with _maybe_connect(needed, job.connect) as client:
        if nb:
            if todo["neighbors"]:
                top_k_neighbors(table, k=nb["k"], metric=nb["metric"],
                                normalize=_normalize(nb["normalize"]),
                                algorithm=nb["algorithm"], store=nb["out"], overwrite=True,
                                client=client, progress=progress, attrs=record)  # fmt: skip
            ds = RunStore.open(nb["out"])
            outputs["neighbours store"] = ds.path
            shape = (table.n_samples, nb["k"])
            params = ds.attrs["params"]
            what.append(f"top-{nb['k']} {params['metric']} neighbours ({params['algorithm']})")
        if model:
            if todo["model"] or (predict and not Path(predict["out"]).exists()):
                params = {"n_neighbors": model["k"], "weights": model["weights"],
                          "metric": model["metric"], "normalize": _normalize(model["normalize"]),
                          "n_estimators": model["n_estimators"],
                          "random_state": model["random_state"]}  # fmt: skip
                task = fit_and_save_model(table, model["task"], params, model["model"], True,
                                          attrs={**record, "predictions": None})[1]  # fmt: skip
                if predict:
                    _, written = predict_to_csv(model["model"], predict["input"], predict["out"],
                                                job.drop, job.na_values)  # fmt: skip
                    # the model store is complete: only the driver adds this record
                    RunStore.open(model["model"], mode="r+").update_attrs(predictions=written)
            saved = RunStore.open(model["model"])
            task = {"KNNClassifier": "classification"}.get(saved.attrs["model"], "regression")
            outputs["model"] = saved.path
            if predict:
                outputs["predictions"] = str(Path(predict["out"]).resolve())
            if model["metric"] in FOREST_METRICS:
                n_trees = model["n_estimators"]
            what.append(f"k-NN {task} model (k={model['k']}, {model['weights']}, "
                        f"{model['metric']})")  # fmt: skip
            if not nb:
                rows, features = saved.array("X_fit").shape
                shape = (rows, features)
    store = outputs.get("neighbours store") or outputs["model"]
    mode = "already complete" if not any(todo.values()) and (
        not predict or Path(predict["out"]).exists()) else "new"  # fmt: skip
    return JobResult(
        store=store,
        name="neighbor_index" if nb else "X_fit",
        shape=(int(shape[0]), int(shape[1])),
        n_trees=n_trees,
        task=" and ".join(what),
        seconds=time.perf_counter() - start,
        outputs=outputs,
        mode=mode,
    )


def _stage_todo(path: str, spec: dict[str, Any], digest: str, *, restart: bool,
                overwrite: bool) -> bool:  # fmt: skip
    """Whether the stage writing ``path`` must run (False: its output is complete, same spec)."""
    mode = decide(path, spec, digest, restart=restart, overwrite=overwrite)
    if mode == "complete":
        return False
    if Path(path).exists():
        check_can_create(path, overwrite=True)  # ours, half-written or replaced on request
    return True


def knn_summary(result: JobResult) -> str:
    """:func:`distforest.cli.jobs.summary` with a k-NN headline (trees only for a forest)."""
    lines = summary(result).splitlines()
    trees = f", {result.n_trees} trees" if result.n_trees else ""
    how = {"already complete": ", already complete: nothing to do (use --restart to compute "
           "it again)"}.get(result.mode, "")  # fmt: skip
    lines[0] = f"{result.task} of {result.shape[0]} rows{trees} in {result.seconds:.1f} s{how}"
    return "\n".join(lines)
