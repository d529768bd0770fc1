"""Commands ``distforest simforest fit | predict | proximity``.

A SimForest model is a Zarr store (:meth:`SimilarityForestClassifier.save`):
fitted from a stored similarity matrix plus labels, or from a feature table
with a named measure computed on the fly.  Predictions are a CSV with one row
per test object: ``prediction`` (the label as given in training) and one
``proba_<label>`` column per class.  Each command builds its job
(:mod:`distforest.jobs.specs`) and runs it.
"""

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    id_dropped_option,
    input_options,
    job_command,
    out_option,
    overwrite_option,
    parameter_option,
    seed_option,
)
from distforest.jobs import constraints as C
from distforest.jobs import specs

#: ``SimilarityForestClassifier().get_params()``, from its one declaration, so that
#: ``--help`` needs no estimator (tests/test_startup.py checks them against the estimator).
DEFAULTS: dict[str, Any] = {**{name: p.default for name, p in C.SIMFOREST_PARAMETERS.items()},
                            "metric": "precomputed", "metric_params": None}  # fmt: skip


def _parameter(name: str, **override: Any) -> Any:
    return parameter_option(name, C.SIMFOREST_PARAMETERS[name], **override)


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
@click.option("--labels", metavar="LABELS.csv",
              help="With --similarity or --distances: CSV with a header and one column, a "
                   "label per object.")  # fmt: skip
@click.option("--target", metavar="COLUMN", help="With DATA: the label column.")
@click.option("--metric", default=None, metavar="NAME",
              help="With DATA: rbf (rbf:GAMMA), cosine, dot or euclidean [default: "
                   "rbf].")  # fmt: skip
@click.option("--normalize", type=click.Choice(C.SIMFOREST_SCALINGS), default="zscore",
              show_default=True,
              help="With DATA: scale features before the measure (stored with the "
                   "model).")  # fmt: skip
@_parameter("kind")
@_parameter("n_estimators")
@_parameter("n_pairs")
@_parameter("missing")
@_parameter("max_depth")
@_parameter("min_samples_leaf")
@_parameter("bootstrap")
@seed_option("random_state: same seed, same forest.")
@out_option("MODEL.zarr", "Model store to write.")
@overwrite_option("Replace an existing model store.")
@id_dropped_option
@input_options
@job_command(specs.simforest_fit)
def simforest_fit() -> None:
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


@simforest.command("predict")
@click.argument("model", metavar="MODEL.zarr")
@click.argument("data", required=False, metavar="[DATA]")
@click.option("--similarity", "matrix", metavar="Q.npy|Q.zarr",
              help="n_test x n_train similarities (NaN allowed), for a model fitted on a "
                   "matrix.")  # fmt: skip
@click.option("--distances", metavar="Q.npy|Q.zarr",
              help="n_test x n_train distances (all of them), for a model fitted with "
                   "--distances: centred with the training means (Gower's rule).")  # fmt: skip
@out_option("PREDICTIONS.csv", "CSV: prediction, then proba_<label> per class.")
@overwrite_option("Replace an existing --out file.")
@id_dropped_option
@input_options
@job_command(specs.simforest_predict)
def simforest_predict() -> None:
    """Predict the class of new objects with a SimForest model.

    A model fitted on a matrix takes --similarity Q (test objects in rows,
    training objects in columns, in training order; only the columns of the
    model's pair objects are read); one fitted with --distances takes
    --distances Q, all of each test object's distances to the training
    objects, double-centred with the training means. A model fitted on a table takes DATA with
    the training features (the target column, if present, is ignored); a glob, a folder of
    parts or a file over 32 MB is predicted by partitions on the cluster.
    """


@simforest.command("proximity")
@click.argument("model", metavar="MODEL.zarr")
@out_option("PROX.zarr", "Zarr store to write.")
@click.option("--method", type=click.Choice(C.PROXIMITY_METHODS), default="original",
              show_default=True,
              help="original: fraction of trees where two objects end together; oob: the same "
                   "over trees where both are out of bag; rfgap: RF-GAP.")  # fmt: skip
@click.option("--tile-size", type=click.IntRange(min=C.MIN_TILE), default=None,
              help="Rows/columns of one tile [default: the model's].")  # fmt: skip
@overwrite_option()
@job_command(specs.simforest_proximity)
def simforest_proximity() -> None:
    """Write the forest's proximity of its training objects as Zarr tiles.

    No features anywhere: the objects' final nodes in the model's trees.
    """
