"""Commands that turn a forest into answers: outliers, mislabels, MDS."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd

from distforest.apps.mds import mds as mds_coordinates
from distforest.apps.mislabels import mislabel_scores
from distforest.apps.outliers import outlier_scores
from distforest.apps.plots import plot_embedding, plot_scores
from distforest.cli.options import (
    CLUSTER_KEYS,
    FOREST_KEYS,
    cluster_options,
    fitted_forest,
    forest_options,
    input_options,
    pop_keys,
)
from distforest.cli.progress import ProgressBars
from distforest.errors import StoreError

#: Outlier scores above this are flagged (Breiman & Cutler's rule of thumb).
OUTLIER_THRESHOLD = 10.0


def _check_new_file(path: str, overwrite: bool) -> None:
    if Path(path).exists() and not overwrite:
        raise StoreError(f"output {path!r} already exists; pass --overwrite or choose another path")


def _write_csv(frame: pd.DataFrame, path: str) -> str:
    """Write via a temporary file and rename, so no half-written CSV is left."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    frame.to_csv(tmp, index=False)
    tmp.replace(out)
    return str(out.resolve())


def _labels(forest: Any) -> tuple[np.ndarray | None, list[str]]:
    if forest.task_ == "classification":
        return forest.y_, [str(c) for c in forest.classes_]
    return None, []


def _common(func: Any) -> Any:
    func = cluster_options(func)
    func = forest_options()(func)
    func = input_options(func)
    func = click.option("--overwrite", is_flag=True, help="Replace existing output files.")(func)
    func = click.option("--target", metavar="COLUMN",
                        help="Class column; omit for an unsupervised forest.")(func)  # fmt: skip
    return click.argument("input", metavar="INPUT")(func)


def _fit(obj: dict, input: str, target: str | None, options: dict):
    return fitted_forest(
        input,
        target,
        pop_keys(options, ("drop", "na_values")),
        pop_keys(options, FOREST_KEYS),
        pop_keys(options, CLUSTER_KEYS),
        progress=ProgressBars(enabled=not obj["quiet"]),
    )


@click.command()
@_common
@click.option("--out", required=True, metavar="FILE.csv", help="CSV of scores, one row per row.")
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the scores.")
@click.pass_obj
def outliers(obj: dict, input: str, target: str | None, out: str, plot: str | None,
             overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Outlier scores of INPUT's rows (R randomForest's outlier(), matrix-free).

    Per class: raw = n / sum of squared proximities to the class, then
    (raw - median) / MAD.  Scores above 10 are usually worth a look.
    """
    for path in (out, plot):
        if path:
            _check_new_file(path, overwrite)
    start = time.perf_counter()
    with _fit(obj, input, target, options) as (table, forest):
        scores = outlier_scores(forest)
    labels, names = _labels(forest)
    frame = pd.DataFrame({"row": np.arange(scores.size)})
    if labels is not None:
        frame["label"] = np.asarray(names, dtype=object)[labels]
    frame["outlier"] = scores
    where = _write_csv(frame, out)
    click.echo(f"outlier scores of {scores.size} rows in {time.perf_counter() - start:.1f} s")
    click.echo(
        f"  {int((scores > OUTLIER_THRESHOLD).sum())} rows score above {OUTLIER_THRESHOLD:g}"
    )
    click.echo(f"  scores:  {where}")
    if plot:
        title = f"outlier scores, {table.source}"
        picture = plot_scores(scores, plot, labels=labels, class_names=names,
                              threshold=OUTLIER_THRESHOLD, title=title)  # fmt: skip
        click.echo(f"  picture: {picture.resolve()}")


@click.command()
@_common
@click.option("--out", required=True, metavar="FILE.csv", help="Ranked CSV of suspects.")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True,
              help="Print this many top suspects.")  # fmt: skip
@click.pass_obj
def mislabels(obj: dict, input: str, target: str | None, out: str, top: int, overwrite: bool,
              **options: Any) -> None:  # fmt: skip
    """Rank INPUT's rows by how likely their --target label is wrong.

    The out-of-bag (RF-GAP) vote of each row's neighbours against its label,
    combined with its outlier score.
    """
    if target is None:
        raise click.UsageError("mislabels needs --target COLUMN (the labels to check)")
    _check_new_file(out, overwrite)
    options["task"] = "classification"
    start = time.perf_counter()
    with _fit(obj, input, target, options) as (_, forest):
        ranking = mislabel_scores(forest)
    where = _write_csv(ranking, out)
    n_dis = int(ranking["disagrees"].sum())
    click.echo(f"ranked {len(ranking)} rows in {time.perf_counter() - start:.1f} s; "
               f"{n_dis} rows' out-of-bag vote disagrees with their label")  # fmt: skip
    if top:
        click.echo(ranking.head(top).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    click.echo(f"  suspects: {where}")


@click.command()
@_common
@click.option("--out", required=True, metavar="FILE.csv", help="CSV of coordinates.")
@click.option("--components", type=click.IntRange(min=1), default=2, show_default=True)
@click.option(
    "--dissimilarity",
    type=click.Choice(["sqrt", "linear"]),
    default="sqrt",
    show_default=True,
    help="sqrt: scale sqrt(1 - P) (Breiman); linear: 1 - P.",
)
@click.option(
    "--plot",
    metavar="FILE.png",
    help="Also save a scatter of the first two dimensions, outliers circled.",
)
@click.pass_obj
def mds(obj: dict, input: str, target: str | None, out: str, components: int,
        dissimilarity: str, plot: str | None, overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Classical MDS of the proximities of INPUT's rows (matrix-free Lanczos)."""
    for path in (out, plot):
        if path:
            _check_new_file(path, overwrite)
    start = time.perf_counter()
    with _fit(obj, input, target, options) as (table, forest):
        coordinates, eigenvalues = mds_coordinates(forest, components, dissimilarity=dissimilarity)
        scores = outlier_scores(forest) if plot else None
    labels, names = _labels(forest)
    frame = pd.DataFrame({"row": np.arange(coordinates.shape[0])})
    if labels is not None:
        frame["label"] = np.asarray(names, dtype=object)[labels]
    for k in range(components):
        frame[f"dim{k + 1}"] = coordinates[:, k]
    where = _write_csv(frame, out)
    click.echo(f"{components}-D MDS of {coordinates.shape[0]} rows in "
               f"{time.perf_counter() - start:.1f} s; eigenvalues "
               + ", ".join(f"{v:.4g}" for v in eigenvalues))  # fmt: skip
    click.echo(f"  coordinates: {where}")
    if plot and components >= 2:
        title = f"MDS of {dissimilarity} dissimilarity, {table.source}"
        picture = plot_embedding(coordinates, plot, labels=labels, class_names=names,
                                 marked=scores > OUTLIER_THRESHOLD, title=title)  # fmt: skip
        click.echo(f"  picture:     {picture.resolve()}")
