"""Commands that turn a forest into answers: outliers, mislabels, MDS.

The applications are imported when a command runs (``--help`` stays quick).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from distforest.cli.options import (
    CLUSTER_KEYS,
    FOREST_KEYS,
    cluster_options,
    dry_run_option,
    forest_options,
    id_option,
    input_options,
    model_option,
    parameter_option,
    pop_keys,
    show,
)
from distforest.jobs import constraints as C
from distforest.jobs.outputs import check_new_file, write_csv


def _common(func: Any) -> Any:
    func = dry_run_option(func)
    func = cluster_options(func)
    func = forest_options()(func)
    func = input_options(func)
    func = id_option("the first column of the output, named as it")(func)  # fmt: skip
    func = click.option("--overwrite", is_flag=True, help="Replace existing output files.")(func)
    func = click.option("--target", metavar="COLUMN",
                        help="Class column; omit for an unsupervised forest.")(func)  # fmt: skip
    return click.argument("input", metavar="INPUT")(func)


def _report(what: str, seconds: float, written: dict[str, str]) -> None:
    click.echo(f"{what} in {seconds:.1f} s")
    width = max(len(k) for k in written)
    for label, path in written.items():
        click.echo(f"  {label + ':':<{width + 1}} {path}")


def _answer(obj: dict, answer: str, input: str, target: str | None,
            files: dict[str, str | None], overwrite: bool, options: dict,
            **more: Any) -> None:  # fmt: skip
    """Build the command's job (:mod:`distforest.jobs.forest_answers`) and run it or,
    with ``--dry-run``, print its stages."""
    from distforest.cli.options import connect_kwargs, run_job
    from distforest.jobs import check_model_file
    from distforest.jobs.forest_answers import ForestAnswerJob
    from distforest.jobs.outputs import record_path

    dry_run = options.pop("dry_run", False)
    if options.get("model_file") is not None:  # a pickle, an untrusted type: refused first
        check_model_file(options["model_file"])
    job = ForestAnswerJob(input=input, target=target, out=record_path(str(files["out"])),
                          answer=answer, files=files, options=more,
                          id=options.pop("id_column", None), drop=options.pop("drop", ()),
                          na_values=options.pop("na_values", ()),
                          model=options.pop("model_file", None),
                          forest=pop_keys(options, FOREST_KEYS), overwrite=overwrite,
                          connect=connect_kwargs(pop_keys(options, CLUSTER_KEYS)))  # fmt: skip
    run_job(obj, job, dry_run)


@click.command()
@_common
@model_option
@click.option("--out", required=True, metavar="FILE.csv", help="CSV of scores, one row per row.")
@click.option("--plot", metavar="FILE.png", help="Also save a picture of the scores.")
@click.pass_obj
def outliers(obj: dict, input: str, target: str | None, out: str, plot: str | None,
             overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Outlier scores of INPUT's rows (R randomForest's outlier(), matrix-free).

    Per class: raw = n / sum of squared proximities to the class, then
    (raw - median) / MAD.  Column outlier_flag marks the rows above their
    class's far-out fence (Tukey's, on log1p(score - the class's lowest)): at
    most 0.1 % of a clean table's rows.
    """
    _answer(obj, "outliers", input, target, {"out": out, "plot": plot}, overwrite, options)


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
    task = options["task"]  # checked against the labels; the forest classifies them
    options["task"] = "classification"
    _answer(obj, "mislabels", input, target, {"out": out}, overwrite, options, top=top,
            task=task)  # fmt: skip


@click.command()
@_common
@model_option
@click.option("--out", required=True, metavar="FILE.csv", help="CSV of coordinates.")
@parameter_option("components", C.SECTION_PARAMETERS["mds.components"])
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
    _answer(obj, "mds", input, target, {"out": out, "plot": plot}, overwrite, options,
            components=components, dissimilarity=dissimilarity)  # fmt: skip


@click.command()
@_common
@click.option("--out", required=True, metavar="FILE.csv",
              help="CSV of importances, one row per feature.")  # fmt: skip
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True,
              help="Shuffles of each feature for the permutation importance.")  # fmt: skip
@click.option("--test-size", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.25, show_default=True,
              help="Fraction of the rows held out to measure permutations on.")  # fmt: skip
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True,
              help="Print this many features.")  # fmt: skip
@click.pass_obj
def importances(obj: dict, input: str, target: str | None, out: str, repeats: int,
                test_size: float, top: int, overwrite: bool, **options: Any) -> None:  # fmt: skip
    """Feature importances of a forest on INPUT: impurity-based and by permutation.

    The forest is fitted on the rows not held out (--test-size); impurity
    importances come from its trees, permutation importances are the drop of
    accuracy (R² for regression) on the held-out rows when a column is shuffled.
    """
    if target is None:
        raise click.UsageError("importances needs --target COLUMN (what the features predict)")
    _answer(obj, "importances", input, target, {"out": out}, overwrite, options,
            repeats=repeats, test_size=test_size, top=top)  # fmt: skip


@click.command()
@click.argument("model", metavar="MODEL")
@click.argument("input", metavar="INPUT")
@click.option("--out", required=True, metavar="FILE.csv", help="CSV of scores, one row per row.")
@click.option("--training", metavar="TABLE",
              help="With a model file fitted elsewhere: the table it was fitted on (its rows "
              "are the training rows the new rows are compared with).")  # fmt: skip
@click.option("--target", metavar="COLUMN", help="With --training: its target column.")
@id_option("the first column of the output")
@click.option("--method", type=click.Choice(["rfgap", "original", "oob"]), default="rfgap",
              show_default=True, help="Proximity weighing the training targets.")  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@input_options
@dry_run_option
@cluster_options
@click.pass_obj
def score(obj: dict, model: str, input: str, out: str, training: str | None,
          target: str | None, id_column: str | None, method: str, overwrite: bool,
          dry_run: bool, **options: Any) -> None:  # fmt: skip
    """Score INPUT's rows against a saved forest (MODEL.zarr) without refitting it.

    MODEL may also be a model fitted elsewhere (a skops file of a scikit-learn
    forest, a LightGBM text model, an XGBoost JSON/UBJSON model; never a pickle)
    with --training TABLE, the rows it was fitted on, and --target COLUMN.

    Per row: the forest's prediction, the proximity-weighted prediction from
    the training targets, and the outlier score on the training rows' scale.
    The model's proximities are not recomputed: only the new rows' leaves.
    A glob, a folder of parts or a file over 32 MB is read by partitions on the
    cluster: each task scores its partition and writes a piece of the CSV.
    """
    from distforest.cli.options import connect_kwargs
    from distforest.jobs import check_model_file
    from distforest.jobs.fitting import score_rows
    from distforest.jobs.inputs import partitioned_input
    from distforest.jobs.score import score_partitioned, score_plan

    check_new_file(out, overwrite)
    start = time.perf_counter()
    how = (model, input, id_column, method, options.pop("na_values", ()),
           connect_kwargs(pop_keys(options, CLUSTER_KEYS)))  # fmt: skip
    if training is not None or Path(model).is_file():  # a model file fitted elsewhere
        check_model_file(model)  # a pickle refused before any work
        if training is None or partitioned_input(input) or dry_run:
            raise click.UsageError(
                "a model file fitted elsewhere needs --training TABLE (the rows it was fitted "
                "on) and is scored on a table loaded whole, without --dry-run"
            )
    if dry_run:  # the scoring job's stages (new rows read whole or by partitions)
        return show(score_plan(*how, out=out), out)
    if partitioned_input(input):  # a glob, a folder of parts, a large file: on a cluster
        n, path = score_partitioned(model, input, out, *how[2:])
        return _report(f"scored {n} rows by partitions", time.perf_counter() - start,
                       {"scores": path})  # fmt: skip
    result, forest, table = score_rows(*how, training=training, target=target)
    written = {"scores": write_csv(result, out)}
    _report(f"scored {table.n_samples} rows against {forest.n_samples_} training rows",
            time.perf_counter() - start, written)  # fmt: skip
