"""Commands ``distforest smerf fit / predict / importances``.

::

    distforest smerf fit X.csv --distances D.npy [--trees 100] [--max-features sqrt] [--seed 0] --out model.zarr
    distforest smerf predict model.zarr A.csv [--against B.csv] --out predicted.zarr
    distforest smerf importances model.zarr [--plot importances.png]

Every input is read and checked before anything is written: a bad D (not
square, not as long as X, all NaN, infinite, not symmetric) or bad rows stop
the command with exit code 3 and no output; an output that would not fit on
the disk (the model holds D; the predicted matrix is counted uncompressed)
stops it with exit code 6.  ``fit`` and ``predict`` build their jobs
(:mod:`distforest.jobs.specs`) and run them.

``fit`` on an X that is a glob, a folder of parts or a file over 32 MB reads
it by partitions on the workers (a named cluster, else a LocalCluster): the
checks run on the partitions (a bad value names its part file, column and
row), the rows go into a temporary store that the tree tasks read, and the
model is the one the same rows in one file give.
"""  # noqa: E501

from __future__ import annotations

from typing import Any

import click

from distforest.cli.options import (
    id_dropped_option,
    input_options,
    job_command,
    out_option,
    overwrite_option,
    parse_max_features,
    seed_option,
    tile_size_option,
    trees_option,
)
from distforest.jobs import constraints as C
from distforest.jobs import specs

#: ``SMERF().get_params()``, written out so that ``--help`` needs no estimator
#: (tests/test_startup.py checks that they are the estimator's own defaults).
SMERF_DEFAULTS: dict[str, Any] = {"bootstrap": True, "max_depth": None, "max_features": "sqrt",
                                  "min_samples_leaf": 1, "n_estimators": 100, "oblique": False,
                                  "random_state": 0}  # fmt: skip


@click.group()
def smerf() -> None:
    """SMERF: learn a distance from features plus an observed distance matrix."""


@smerf.command("fit")
@click.argument("input", metavar="X")
@click.option("--distances", required=True, metavar="D.npy|D.zarr",
              help="Observed n x n distances of the rows of X (NaN = pair not "
                   "observed).")  # fmt: skip
@out_option("MODEL.zarr", "Model store to write.")
@id_dropped_option
@input_options
@trees_option(SMERF_DEFAULTS["n_estimators"])
@click.option("--max-features", default=str(SMERF_DEFAULTS["max_features"]), show_default=True,
              callback=parse_max_features,
              help="Candidates per split: sqrt, log2, an integer or a fraction.")  # fmt: skip
@click.option("--oblique", is_flag=True,
              help="Sparse random +-1 projections as candidates (as SPORF).")  # fmt: skip
@click.option("--max-depth", type=click.IntRange(min=1), default=None)
@click.option("--min-samples-leaf", type=click.IntRange(min=1),
              default=SMERF_DEFAULTS["min_samples_leaf"], show_default=True)  # fmt: skip
@click.option("--no-bootstrap", "bootstrap", flag_value=False, default=True,
              help="Every tree sees every row once.")  # fmt: skip
@seed_option("random_state: same seed, same model.")
@tile_size_option(C.SMERF_TILE)
@overwrite_option()
@job_command(specs.smerf_fit)
def fit_cmd() -> None:
    """Fit SMERF on the features X (CSV with a header, no target) and distances D."""


@smerf.command("predict")
@click.argument("model_path", metavar="MODEL.zarr")
@click.argument("input", metavar="A")
@click.option("--against", metavar="B",
              help="Columns of the matrix [default: the model's training rows].")  # fmt: skip
@out_option("STORE.zarr", "Zarr store to write (2-D array 'distance').")
@id_dropped_option
@input_options
@tile_size_option(C.SMERF_TILE)
@overwrite_option()
@job_command(specs.smerf_predict)
def predict_cmd() -> None:
    """Learned distances between the rows of A and those of B (or the training rows)."""


@smerf.command("importances")
@click.argument("model_path", metavar="MODEL.zarr")
@click.option("--plot", metavar="FILE.png", help="Also save a bar chart.")
@overwrite_option("Replace an existing --plot file.")
def importances_cmd(model_path: str, plot: str | None, overwrite: bool) -> None:
    """Print the feature importances stored in a SMERF model (and plot them)."""
    from distforest.jobs.smerf import model_importances

    click.echo(model_importances(model_path, plot, overwrite))
