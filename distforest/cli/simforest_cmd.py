"""Commands ``distforest simforest fit | predict | proximity``.

A SimForest model is a Zarr store (:meth:`SimilarityForestClassifier.save`):
fitted from a stored similarity matrix plus labels, or from a feature table
with a named measure computed on the fly.  Predictions are a CSV with one row
per test object: ``prediction`` (the label as given in training) and one
``proba_<label>`` column per class.
"""

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    cluster_options,
    dry_run_option,
    id_dropped_option,
    input_options,
    run_job,
    seed_option,
    show,
    trees_option,
)
from distforest.cli.similarity_cmd import bars, cluster_kw
from distforest.jobs import constraints as C

#: ``SimilarityForestClassifier().get_params()``, written out so that ``--help`` needs no
#: estimator (tests/test_startup.py checks that they are the estimator's own defaults).
DEFAULTS: dict[str, Any] = {
    "batch_size": None,
    "bootstrap": True,
    "kind": "similarity",
    "max_depth": None,
    "metric": "precomputed",
    "metric_params": None,
    "min_samples_leaf": 1,
    "missing": "stay",
    "n_estimators": 100,
    "n_pairs": 1,
    "random_state": 0,
    "tile_size": 2048,
}


@click.group("simforest")
def simforest() -> None:
    """SimForest: classify objects known only through pairwise similarities (or distances).

    \b
    Examples:
      distforest simforest fit --similarity S.npy --labels labels.csv --out model.zarr
      distforest simforest fit --distances D.npy --labels labels.csv --out model.zarr
      distforest simforest predict model.zarr --similarity Q.npy --out predictions.csv
      distforest simforest fit data.csv --target Class --metric rbf --out model.zarr
      distforest simforest predict model.zarr new.csv --out predictions.csv
      distforest simforest proximity model.zarr --out prox.zarr
    """


@simforest.command("fit")
@click.argument("data", required=False, metavar="[DATA]")
@click.option("--similarity", "matrix", metavar="S.npy|S.zarr",
              help="n x n similarity (or distance) matrix: .npy, a Zarr array or group; "
                   "NaN = not observed.")  # fmt: skip
@click.option("--distances", metavar="D.npy|D.zarr",
              help="n x n full, symmetric distance matrix instead: turned into similarities "
                   "by double centring, S = -1/2 J D^2 J (the SimForest paper), row block by "
                   "row block.")  # fmt: skip
@click.option(
    "--labels",
    metavar="LABELS.csv",
    help="With --similarity or --distances: CSV with a header and one column, a label per object.",
)
@click.option("--target", metavar="COLUMN", help="With DATA: the label column.")
@click.option(
    "--metric",
    default=None,
    metavar="NAME",
    help="With DATA: rbf (rbf:GAMMA), cosine, dot or euclidean [default: rbf].",
)
@click.option(
    "--normalize",
    type=click.Choice(C.SIMFOREST_SCALINGS),
    default="zscore",
    show_default=True,
    help="With DATA: scale features before the measure (stored with the model).",
)
@click.option(
    "--kind",
    type=click.Choice(C.SIMFOREST_KINDS),
    default=DEFAULTS["kind"],
    show_default=True,
    help="What --similarity holds (a distance orders by D_ki^2 - D_kj^2).",
)
@trees_option(DEFAULTS["n_estimators"])
@click.option(
    "--pairs",
    "n_pairs",
    type=click.IntRange(min=1),
    default=DEFAULTS["n_pairs"],
    show_default=True,
    help="Pairs of objects tried per node (the paper's r).",
)
@click.option("--missing", type=click.Choice(C.SIMFOREST_MISSING), default=DEFAULTS["missing"],
              show_default=True,
              help="An object whose similarity is missing: stay at the node (the paper), "
                   "both children weighted by size, or the larger child.")  # fmt: skip
@click.option("--max-depth", type=click.IntRange(min=1), default=DEFAULTS["max_depth"])
@click.option(
    "--min-samples-leaf",
    type=click.IntRange(min=1),
    default=DEFAULTS["min_samples_leaf"],
    show_default=True,
)
@click.option(
    "--bootstrap/--no-bootstrap",
    default=DEFAULTS["bootstrap"],
    show_default=True,
    help="Grow each tree on a bootstrap sample.",
)
@seed_option("random_state: same seed, same forest.")
@click.option("--out", required=True, metavar="MODEL.zarr", help="Model store to write.")
@click.option("--overwrite", is_flag=True, help="Replace an existing model store.")
@id_dropped_option
@input_options
@dry_run_option
@cluster_options
@click.pass_context
def simforest_fit(ctx: click.Context, data: str | None, matrix: str | None,
                  distances: str | None, labels: str | None, target: str | None,
                  metric: str | None, normalize: str, out: str, overwrite: bool,
                  drop: tuple[str, ...], na_values: tuple[str, ...], dry_run: bool,
                  **options: Any) -> None:  # fmt: skip
    """Grow a SimForest from a similarity matrix and labels, or from a table (DATA).

    With --similarity the forest sees only the matrix (rows read as the trees
    need them); --distances is double-centred into similarities first (kept
    in a temporary Zarr array next to --out while the forest grows; the
    model keeps the column means, so that predict takes --distances too).
    With DATA, similarities between rows are computed on the fly by
    --metric, and the model keeps the features of the objects its splits use,
    all that prediction needs. A glob, a folder of parts or a file over 32 MB
    is read by partitions on the cluster (the same model as from one file).
    """
    from distforest.jobs.inputs import partitioned_input
    from distforest.jobs.simforest_model import fit_in_memory

    params = {k: options.pop(k) for k in ("kind", "n_estimators", "n_pairs", "missing",
                                          "max_depth", "min_samples_leaf", "bootstrap",
                                          "random_state")}  # fmt: skip
    if data is not None and partitioned_input(data):  # a glob, a folder of parts, a large file
        from distforest.jobs.simforest import check_table_request, fit_command

        check_table_request(matrix, distances, labels, target)
        done = fit_command(params, data=data, target=target, metric=metric, normalize=normalize,
                           drop=drop, na_values=na_values, out=out, overwrite=overwrite,
                           connect=cluster_kw(options), progress=bars(ctx),
                           dry_run=dry_run)  # fmt: skip
        return show(done, out) if dry_run else click.echo(done)
    done = fit_in_memory(params, data=data, matrix=matrix, distances=distances, labels=labels,
                         target=target, metric=metric, normalize=normalize, drop=drop,
                         na_values=na_values, out=out, overwrite=overwrite,
                         connect=cluster_kw(options), progress=bars(ctx),
                         dry_run=dry_run)  # fmt: skip
    return show(done, out) if dry_run else click.echo(done)


@simforest.command("predict")
@click.argument("model", metavar="MODEL.zarr")
@click.argument("data", required=False, metavar="[DATA]")
@click.option(
    "--similarity",
    "matrix",
    metavar="Q.npy|Q.zarr",
    help="n_test x n_train similarities (NaN allowed), for a model fitted on a matrix.",
)
@click.option("--distances", metavar="Q.npy|Q.zarr",
              help="n_test x n_train distances (all of them), for a model fitted with "
                   "--distances: centred with the training means (Gower's rule).")  # fmt: skip
@click.option(
    "--out",
    required=True,
    metavar="PREDICTIONS.csv",
    help="CSV: prediction, then proba_<label> per class.",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
@id_dropped_option
@input_options
@dry_run_option
@cluster_options
@click.pass_context
def simforest_predict(ctx: click.Context, model: str, data: str | None, matrix: str | None,
                      distances: str | None, out: str, overwrite: bool,
                      drop: tuple[str, ...], na_values: tuple[str, ...], dry_run: bool,
                      **options: Any) -> None:  # fmt: skip
    """Predict the class of new objects with a SimForest model.

    A model fitted on a matrix takes --similarity Q (test objects in rows,
    training objects in columns, in training order; only the columns of the
    model's pair objects are read); one fitted with --distances takes
    --distances Q, all of each test object's distances to the training
    objects, double-centred with the training means. A model fitted on a table takes DATA with
    the training features (the target column, if present, is ignored); a glob, a folder of
    parts or a file over 32 MB is predicted by partitions on the cluster.
    """
    from distforest.jobs.outputs import record_path
    from distforest.jobs.simforest_model import SimForestPredictJob

    rows = data or matrix or distances
    job = SimForestPredictJob(input=str(rows), model=model, out=record_path(out),
                              files={"out": out}, data=data, matrix=matrix,
                              distances=distances, na_values=na_values, overwrite=overwrite,
                              connect=cluster_kw(options))  # fmt: skip
    run_job(ctx.obj or {"quiet": False}, job, dry_run)


@simforest.command("proximity")
@click.argument("model", metavar="MODEL.zarr")
@click.option("--out", required=True, metavar="PROX.zarr", help="Zarr store to write.")
@click.option("--method", type=click.Choice(C.PROXIMITY_METHODS), default="original",
              show_default=True,
              help="original: fraction of trees where two objects end together; oob: the same "
                   "over trees where both are out of bag; rfgap: RF-GAP.")  # fmt: skip
@click.option(
    "--tile-size",
    type=click.IntRange(min=C.MIN_TILE),
    default=None,
    help="Rows/columns of one tile [default: the model's].",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing distforest store at --out.")
@dry_run_option
@cluster_options
@click.pass_context
def simforest_proximity(
    ctx: click.Context, model: str, out: str, method: str, tile_size: int | None,
    overwrite: bool, dry_run: bool, **options: Any,
) -> None:  # fmt: skip
    """Write the forest's proximity of its training objects as Zarr tiles.

    No features anywhere: the objects' final nodes in the model's trees.
    """
    from distforest.jobs.simforest_model import SimForestProximityJob

    job = SimForestProximityJob(input=model, out=out, method=method, tile_size=tile_size,
                                overwrite=overwrite, connect=cluster_kw(options))  # fmt: skip
    run_job(ctx.obj or {"quiet": False}, job, dry_run)
