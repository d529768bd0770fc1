"""``distforest impute``: fill the missing values of a table with proximity imputation.

A shell: the options become an :class:`~distforest.jobs.impute.ImputeJob`
(:func:`~distforest.jobs.specs.impute`), run or planned (``--dry-run``).
"""

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    id_option,
    input_options,
    job_command,
    model_option,
    out_option,
    overwrite_option,
    parse_max_features,
    parse_max_samples,
    seed_option,
)
from distforest.jobs import specs
from distforest.jobs.impute import IMPUTE_KINDS, IMPUTE_PROXIMITIES, TASKS, VOTES

#: ``ProximityImputer``'s own defaults, written out so that ``--help`` needs no estimator
#: (tests/test_startup.py checks them against its signature).
DEFAULTS: dict[str, Any] = {"iterations": None, "proximity": "column", "categorical_vote": "auto",
                            "categorical_features": None, "n_estimators": None, "task": "auto",
                            "kind": "auto", "max_features": "auto", "min_samples_leaf": 1,
                            "max_depth": None, "max_samples": "auto", "batch_size": None,
                            "random_state": None}  # fmt: skip


@click.command("impute")
@click.argument("input", metavar="INPUT")
@out_option("FILE", "Output table: .csv, .parquet or .zarr (a Zarr group, one array per column), "
                    "or a folder (ends in /): a Parquet dataset, one part per input partition. A "
                    "glob, a folder or a file over 32 MB is imputed by partitions (column "
                    "proximity; not .zarr).")  # fmt: skip
@click.option("--target", metavar="COLUMN",
              help="Target column: a supervised forest (the column is kept unchanged). "
                   "Omit for an unsupervised forest.")  # fmt: skip
@input_options
@id_option("copied to the output unchanged")
@click.option("--categorical", multiple=True, metavar="COLUMN",
              help="Impute this numeric column by vote, as categories (repeatable). Text "
                   "columns always are.")  # fmt: skip
@click.option("--iterations", type=click.IntRange(min=1), default=DEFAULTS["iterations"],
              help="column: the most iterations (default 10; missForest's rule stops earlier). "
                   "rfimpute, rfgap, original, oob: forest refits (default 5).")  # fmt: skip
@click.option("--trees", "n_estimators", type=click.IntRange(min=1),
              default=DEFAULTS["n_estimators"],
              help="Trees per forest (default 35 per column and pass for column, 300 for "
                   "rfimpute, 100 for rfgap, original, oob).")  # fmt: skip
@click.option("--proximity", type=click.Choice(IMPUTE_PROXIMITIES), default=DEFAULTS["proximity"],
              show_default=True,
              help="column: one forest per column predicting it from the others (and --target), "
                   "its RF-GAP weights. rfimpute: R's rfImpute (random-forest trees, sqrt(p) or "
                   "p/3 features per split, Breiman's proximity; before, this name meant rfgap). "
                   "rfgap, original, oob: one forest of extra-trees for all columns, weighted by "
                   "RF-GAP, shared leaves, or shared leaves out of bag.")  # fmt: skip
@click.option("--categorical-vote", type=click.Choice(VOTES),
              default=DEFAULTS["categorical_vote"], show_default=True,
              help="sum: level with the largest weight; mean: that weight over the level's "
                   "count (R's rfImpute); auto: mean for --proximity rfimpute, else "
                   "sum.")  # fmt: skip
@click.option("--task", type=click.Choice(TASKS), default=DEFAULTS["task"], show_default=True,
              help="auto: unsupervised without --target.")  # fmt: skip
@click.option("--kind", type=click.Choice(IMPUTE_KINDS), default=DEFAULTS["kind"],
              show_default=True,
              help="Tree learner; auto: random-forest for rfimpute, extra-trees for the "
                   "others.")  # fmt: skip
@click.option("--max-features", default=str(DEFAULTS["max_features"]), show_default=True,
              callback=parse_max_features,
              help="Features tried per split: auto (0.5 for column, R's mtry for rfimpute, 1 for "
                   "rfgap, original, oob), sqrt, log2, an integer or a fraction.")  # fmt: skip
@click.option("--min-samples-leaf", type=click.IntRange(min=1),
              default=DEFAULTS["min_samples_leaf"], show_default=True)  # fmt: skip
@click.option("--max-samples", default=str(DEFAULTS["max_samples"]), show_default=True,
              callback=parse_max_samples,
              help="column: rows each tree grows on, drawn from the column's observed rows: an "
                   "integer, a fraction of them, or all; auto: all up to 50,000 rows, 20,000 "
                   "above.")  # fmt: skip
@model_option
@seed_option("random_state: same seed, same imputation.")
@overwrite_option("Replace an existing output.")
@job_command(specs.impute)
def impute() -> None:
    """Fill the missing values of INPUT from random-forest proximities.

    INPUT is a CSV/TSV, Parquet or .npy file or a Zarr store.  Each missing
    numeric value becomes the proximity-weighted mean of the column's
    observed values, each missing category the level with the largest
    proximity-weighted vote.  The weights come, by default, from one forest
    per column that predicts it from the others (--proximity column,
    iterated until missForest's stopping rule, the result the mean of the
    kept passes after the first); --proximity rfimpute is
    R's rfImpute (one random forest for all columns, refitted --iterations
    times, Breiman's proximity).  Column names, order and types are kept; the target and --drop
    columns are copied unchanged.  Nothing is written if anything fails.

    \b
    Example:
      distforest impute data.csv --target Class --drop Id --out imputed.csv
    """
