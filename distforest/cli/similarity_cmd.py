"""``distforest similarity``, ``neighbors`` and ``knn fit|predict``."""

from __future__ import annotations

import time
from typing import Any

import click
import numpy as np
import pandas as pd

from distforest.apps.knn import KNNClassifier, KNNRegressor, load_model, save_model
from distforest.cli.options import cluster_options, connect_kwargs, input_options
from distforest.cli.outputs import check_new_file, write_csv
from distforest.cli.progress import ProgressBars
from distforest.errors import InputError
from distforest.forests import _params as P
from distforest.forests.measures import METRICS, NORMALIZATIONS
from distforest.forests.pairwise import ALGORITHMS, pairwise, top_k_neighbors
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
@input_options
@click.option("--overwrite", is_flag=True, help="Replace an existing model store.")
def knn_fit(train: str, target: str, out: str, k: int, weights: str, task: str, metric: str,
            normalize: str, feature_range: tuple[float, float], algorithm: str,
            select: str | None, n_features: str, drop: tuple[str, ...],
            na_values: tuple[str, ...], overwrite: bool) -> None:  # fmt: skip
    """Fit a k-NN model on TRAIN and save it (Zarr, no pickle).

    \b
    Example:
      distforest knn fit train.csv --target price --k 3 --weights distance \\
          --normalize range --out model.zarr
    """
    start = time.perf_counter()
    table = load_table(train, target=target, drop=drop, na_values=na_values)
    check_can_create(out, overwrite)
    task = P.resolve_task(task, table.y, target)
    cls = KNNClassifier if task == "classification" else KNNRegressor
    model = cls(n_neighbors=k, weights=weights, metric=metric, normalize=_normalize(normalize),
                feature_range=feature_range, algorithm=algorithm, select=select,
                n_features_to_select=_n_features(n_features))  # fmt: skip
    model.fit(table, table.y)
    categories = {k: [str(v) for v in c] for k, c in table.categories.items()}
    extra = {"target": target, "source": str(train), "categories": categories}
    save_model(model, out, overwrite=overwrite, attrs=extra)
    kept = [n for n, s in zip(table.feature_names, model.support_, strict=True) if s]
    click.echo(
        f"k-NN {task} model (k={k}, {weights}, {metric}, normalize {normalize}) on "
        f"{table.n_samples} rows in {time.perf_counter() - start:.1f} s\n"
        f"  features: {', '.join(kept)}\n  model:    {out}"
    )


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
def knn_predict(model_path: str, data: str, out: str, drop: tuple[str, ...],
                na_values: tuple[str, ...], overwrite: bool) -> None:  # fmt: skip
    """Predict the target of every row of DATA with a saved k-NN model.

    DATA needs the model's feature columns (in any order); the target column
    and other columns are ignored.
    """
    start = time.perf_counter()
    check_new_file(out, overwrite)
    model = load_model(model_path)
    attrs = RunStore.open(model_path).attrs
    X = _features(data, attrs, model.feature_names_in_, drop, na_values)
    prediction = model.predict(X)
    frame = pd.DataFrame({"row": np.arange(X.shape[0]), attrs.get("target") or "prediction":
                          prediction})  # fmt: skip
    written = write_csv(frame, out)
    click.echo(f"predicted {X.shape[0]} rows in {time.perf_counter() - start:.1f} s\n"
               f"  predictions: {written}")  # fmt: skip


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
