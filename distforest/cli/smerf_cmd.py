"""Commands ``distforest smerf fit / predict / importances``.

``fit`` and ``predict`` build their jobs (:func:`~distforest.jobs.specs.smerf_fit`,
:func:`~distforest.jobs.specs.smerf_predict`), which read and check every input before
anything is written (:mod:`distforest.jobs.smerf`).
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
    tile_size_option,
)
from distforest.jobs import constraints as C
from distforest.jobs import specs

#: ``SMERF().get_params()``, from its one declaration, so that ``--help`` needs no estimator
#: (tests/test_startup.py checks that they are the estimator's own defaults).
SMERF_DEFAULTS: dict[str, Any] = {name: p.default for name, p in C.SMERF_PARAMETERS.items()}


def _parameter(name: str) -> Any:
    return parameter_option(name, C.SMERF_PARAMETERS[name])


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
@_parameter("n_estimators")
@_parameter("max_features")
@_parameter("oblique")
@_parameter("max_depth")
@_parameter("min_samples_leaf")
@_parameter("bootstrap")
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
