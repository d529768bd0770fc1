"""The job of every command, from its parsed options: the command line's one step
between its options and a job.

Each function takes the options of one command as click parsed them (their
names are the options' parameter names) and ``connect``, the cluster options
as keywords of :func:`~distforest.parallel.cluster.connect`
(:func:`connect_kwargs`), and returns the job the command runs (or plans,
``--dry-run``).  Light on purpose: the command line imports it for ``--help``;
the jobs are imported when a command runs.
"""

from __future__ import annotations

from typing import Any

from distforest.errors import ParameterError

#: The options of a forest (:data:`~distforest.forests.constraints.FOREST_PARAMETERS`)
#: that the commands fitting a :class:`~distforest.forests.ProximityForest` take.
FOREST_KEYS = ("task", "n_estimators", "kind", "max_features", "criterion", "min_samples_split",
               "min_samples_leaf", "max_depth", "max_leaf_nodes", "min_impurity_decrease",
               "bootstrap", "max_samples", "class_weight", "random_state",
               "batch_size")  # fmt: skip
#: The cluster options of every command.
CLUSTER_KEYS = ("scheduler", "cluster", "workers", "threads", "memory_limit")
#: ``simforest fit``'s options that are the estimator's parameters.
SIMFOREST_KEYS = ("kind", "n_estimators", "n_pairs", "missing", "max_depth", "min_samples_leaf",
                  "bootstrap", "random_state")  # fmt: skip
#: ``smerf fit``'s options that are the estimator's parameters.
SMERF_KEYS = ("n_estimators", "max_features", "oblique", "max_depth", "min_samples_leaf",
              "bootstrap", "random_state")  # fmt: skip
#: ``xforest``'s options that are the estimator's parameters.
XFOREST_KEYS = ("n_estimators", "n_directions", "mode", "leaf_size", "beta", "normalize",
                "random_state", "batch_size", "tile_size")  # fmt: skip
#: ``cluster``'s options that are its pipeline section's keys.
CLUSTERING_KEYS = ("method", "k", "eps", "min_samples", "n_init", "random_state", "out", "plot")


def pop_keys(options: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Remove ``keys`` from ``options`` and return them."""
    return {k: options.pop(k) for k in keys if k in options}


def connect_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`~distforest.parallel.cluster.connect` from the cluster
    options (``workers``, ``threads``, ``memory_limit`` only when given)."""
    sizes = {"n_workers": options.get("workers"), "threads_per_worker": options.get("threads"),
             "memory_limit": options.get("memory_limit")}  # fmt: skip
    return {"scheduler": options.get("scheduler"), "cluster": options.get("cluster"),
            **{k: v for k, v in sizes.items() if v is not None}}  # fmt: skip


def proximity(*, dense: bool, top_k: int | None, plot: str | None, model_file: str | None,
              leaf_bound: Any, id_column: str | None, tile_size: int,
              **options: Any) -> Any:  # fmt: skip
    """``distforest proximity``: a :class:`~distforest.jobs.proximity.ProximityJob`, its
    report beside the store; ``leaf_bound`` None when not given (``"none"``: given as
    none), so that the specs of runs without it are unchanged."""
    from distforest.io.model_files import check_model_file
    from distforest.jobs.proximity import ProximityJob
    from distforest.location import parent

    if dense and top_k is None:
        raise ParameterError("--dense goes with --top-k K (without it the matrix is dense)")
    if plot and top_k is not None and not dense:
        raise ParameterError("--plot draws the n x n matrix: add --dense to write it too")
    if model_file is not None:  # a pickle or an untrusted type refused before any plan
        check_model_file(model_file)
    forest = {**pop_keys(options, FOREST_KEYS), "tile_size": tile_size}
    if leaf_bound is not None:
        forest["leaf_bound"] = None if leaf_bound == "none" else leaf_bound
    return ProximityJob(forest=forest, top_k=top_k, dense=dense, plot=plot, model=model_file,
                        id=id_column, report_dir=parent(options["out"]), **options)  # fmt: skip


def forest_answer(answer: str, *, input: str, target: str | None, out: str,
                  plot: str | None = None, overwrite: bool, connect: dict[str, Any],
                  drop: tuple[str, ...], na_values: tuple[str, ...], id_column: str | None,
                  model_file: str | None = None, **options: Any) -> Any:  # fmt: skip
    """``distforest outliers | mislabels | mds | importances``: a
    :class:`~distforest.jobs.forest_answers.ForestAnswerJob` (its store beside ``out``);
    the options that are not the forest's are the answer's."""
    from distforest.io.model_files import check_model_file
    from distforest.jobs.forest_answers import ForestAnswerJob, ImportancesJob
    from distforest.jobs.outputs import record_path

    if answer in ("mislabels", "importances") and target is None:
        what = "the labels to check" if answer == "mislabels" else "what the features predict"
        raise ParameterError(f"{answer} needs --target COLUMN ({what})")
    if model_file is not None:  # a pickle, an untrusted type: refused first
        check_model_file(model_file)
    forest = pop_keys(options, FOREST_KEYS)
    if answer == "mislabels":  # the task is checked against the labels; the forest classifies
        options["task"], forest["task"] = forest["task"], "classification"
    files = {"out": out, "plot": plot} if answer in ("outliers", "mds") else {"out": out}
    job = ImportancesJob if answer == "importances" else ForestAnswerJob
    return job(input=input, target=target, out=record_path(out), answer=answer,
                           files=files, options=options, id=id_column, drop=drop,
                           na_values=na_values, model=model_file, forest=forest,
                           overwrite=overwrite, connect=connect)  # fmt: skip


def xforest(**options: Any) -> Any:
    """``distforest xforest``: an :class:`~distforest.jobs.xforest.XForestJob`."""
    from distforest.jobs.xforest import XForestJob

    return XForestJob(forest=pop_keys(options, XFOREST_KEYS), **options)


def cluster(*, store: str, **options: Any) -> Any:
    """``distforest cluster``: a :class:`~distforest.jobs.xforest.ClusterJob` (its store
    beside the labels' CSV)."""
    from distforest.jobs.outputs import record_path
    from distforest.jobs.xforest import ClusterJob

    clustering = pop_keys(options, CLUSTERING_KEYS)
    return ClusterJob(input=store, out=record_path(clustering["out"]), clustering=clustering,
                      **options)  # fmt: skip


def similarity(**options: Any) -> Any:
    """``distforest similarity``: a :class:`~distforest.jobs.similarity.SimilarityJob`."""
    from distforest.jobs.similarity import SimilarityJob

    return SimilarityJob(**options)


def neighbors(**options: Any) -> Any:
    """``distforest neighbors``: a :class:`~distforest.jobs.similarity.NeighborsJob`."""
    from distforest.jobs.similarity import NeighborsJob

    return NeighborsJob(**options)


def impute(*, input: str, out: str, connect: dict[str, Any], id_column: str | None,
           model_file: str | None, **options: Any) -> Any:  # fmt: skip
    """``distforest impute``: :func:`~distforest.jobs.impute.impute_job`."""
    from distforest.jobs.impute import impute_job

    fields = pop_keys(options, ("target", "drop", "na_values", "categorical", "overwrite"))
    return impute_job(input, out, options, connect, id=id_column, model=model_file, **fields)


def knn_fit(*, train: str, target: str, out: str, connect: dict[str, Any],
            drop: tuple[str, ...], na_values: tuple[str, ...], overwrite: bool,
            feature_range: tuple[float, float], n_features: str,
            **model: Any) -> Any:  # fmt: skip
    """``distforest knn fit``: :func:`~distforest.jobs.knn.knn_fit_job`."""
    from distforest.jobs.knn import knn_fit_job

    model.update(feature_range=list(feature_range), n_features=_count_or_fraction(n_features))
    return knn_fit_job(train, target, out, model, connect, drop=drop, na_values=na_values,
                       overwrite=overwrite)  # fmt: skip


def _count_or_fraction(value: str) -> str | int | float:
    """``--n-features``: auto, an integer or a fraction."""
    if value == "auto":
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    raise ParameterError(f"--n-features: expected auto, an integer or a fraction, got {value!r}")


def knn_predict(*, model_path: str, data: str, out: str, connect: dict[str, Any],
                **options: Any) -> Any:  # fmt: skip
    """``distforest knn predict``: :func:`~distforest.jobs.knn_model.knn_predict_job`."""
    from distforest.jobs.knn_model import knn_predict_job

    return knn_predict_job(model_path, data, out, connect, **options)


def smerf_fit(*, input: str, distances: str, out: str, tile_size: int, connect: dict[str, Any],
              drop: tuple[str, ...], na_values: tuple[str, ...], overwrite: bool,
              **params: Any) -> Any:  # fmt: skip
    """``distforest smerf fit``: :func:`~distforest.jobs.smerf.fit_job`."""
    from distforest.jobs.smerf import fit_job

    return fit_job(input, distances, out, params, drop=drop, na_values=na_values,
                   tile_size=tile_size, overwrite=overwrite, connect=connect)  # fmt: skip


def smerf_predict(*, model_path: str, **options: Any) -> Any:
    """``distforest smerf predict``: a :class:`~distforest.jobs.smerf.SmerfPredictJob`."""
    from distforest.jobs.smerf import SmerfPredictJob

    return SmerfPredictJob(model=model_path, **options)


def simforest_fit(**options: Any) -> Any:
    """``distforest simforest fit``: :func:`~distforest.jobs.simforest_model.simforest_fit_job`
    (the estimator's parameters apart, ``--similarity`` as ``matrix``)."""
    from distforest.jobs.simforest_model import simforest_fit_job

    return simforest_fit_job(pop_keys(options, SIMFOREST_KEYS), **options)


def simforest_predict(*, model: str, data: str | None, matrix: str | None,
                      distances: str | None, out: str, **options: Any) -> Any:  # fmt: skip
    """``distforest simforest predict``: a
    :class:`~distforest.jobs.simforest_model.SimForestPredictJob` (its store beside ``out``)."""
    from distforest.jobs.outputs import record_path
    from distforest.jobs.simforest_model import SimForestPredictJob

    options.pop("drop")  # (the model's feature columns are read by name)
    return SimForestPredictJob(input=str(data or matrix or distances), model=model,
                               out=record_path(out), files={"out": out}, data=data,
                               matrix=matrix, distances=distances, **options)  # fmt: skip


def simforest_proximity(*, model: str, **options: Any) -> Any:
    """``distforest simforest proximity``: a
    :class:`~distforest.jobs.simforest_model.SimForestProximityJob`."""
    from distforest.jobs.simforest_model import SimForestProximityJob

    return SimForestProximityJob(input=model, **options)


def score(*, model: str, input: str, out: str, id_column: str | None,
          drop: tuple[str, ...], **options: Any) -> Any:  # fmt: skip
    """``distforest score``: :func:`~distforest.jobs.score.score_command` (``--drop`` is
    not read: the model's feature columns are read by name)."""
    from distforest.jobs.score import score_command

    return score_command(model, input, out, id_column=id_column, **options)


def pipeline(path: str, overrides: tuple[str, ...], options: dict[str, Any]) -> Any:
    """``distforest run``: the job of the pipeline file ``path`` (or of a shipped example
    named so), ``overrides`` applied; its cluster options those of the command line
    (``options``) when it names a scheduler or a cluster, else the pipeline's, with the
    command line's worker sizes."""
    from distforest.examples import shipped_pipeline
    from distforest.jobs.pipeline import load_pipeline

    path, overrides = shipped_pipeline(path, overrides)
    job = load_pipeline(path, overrides=overrides)
    given = {k: options.get(k) for k in ("workers", "threads", "memory_limit")}
    if options.get("scheduler") or options.get("cluster"):
        given.update(scheduler=options.get("scheduler"), cluster=options.get("cluster"))
    else:
        given.update(job.connect)
    job.connect = connect_kwargs(given)
    return job


def validation(path: str, overrides: tuple[str, ...]) -> tuple[bool, str]:
    """``distforest validate``: whether the pipeline file ``path`` is valid, and its line
    (what its job computes, of what, into what, with which applications; or the error)."""
    from distforest.errors import DistforestError
    from distforest.jobs.pipeline import load_pipeline

    try:
        job = load_pipeline(path, overrides=overrides)
    except DistforestError as exc:
        return False, f"INVALID {exc}"
    apps = [a for a in ("impute", "outliers", "mislabels", "mds", "clustering")
            if getattr(job, a, None)]  # fmt: skip
    return True, (f"ok      {path}: {job.describe()} of {job.input} -> {job.out}"
                  + (f" (+ {', '.join(apps)})" if apps else ""))  # fmt: skip
