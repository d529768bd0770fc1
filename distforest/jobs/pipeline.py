"""Pipeline YAML files: parsed and checked before any work starts.

A pipeline names its input, the forest, the matrix to build, the
applications and where the outputs go::

    name: nightly
    input:   {path: data/{date}.csv, target: Class, drop: [Id], na_values: ["?"],
              decimal: ","}   # decimal: optional, else decided per column
    forest:  {n_estimators: 300, random_state: 0, tile_size: 2048}
    proximity: {method: original}         # original | oob | rfgap; top_k: 50 (each row's
                                          # 50 nearest rows instead of the n x n matrix;
                                          # dense: true writes both)
    impute:  {out: imputed.csv, proximity: column}  # column | rfimpute (R) | rfgap | original | oob
                                          # from: proximity (one pass over the matrix
                                          # this run stores; no forest of its own)
    outliers: {out: outliers.csv, plot: outliers.png}                 # optional
    mislabels: {out: suspects.csv}                                     # optional
    mds:     {out: mds.csv, plot: mds.png, components: 2}              # optional
    output:  {dir: results/{date}, store: run.zarr, plot: proximity.png,
              report: true, overwrite: false}
    cluster: cluster_configs/local.yaml     # or {scheduler: tcp://host:8786}; optional

Relative input paths are relative to the current directory; output file
names are relative to ``output.dir``.  ``{date}`` (today, YYYY-MM-DD) and
``{yesterday}`` are replaced in the input path and in ``output.dir``.  Unknown
keys, wrong types, bad choices, a missing input file and impossible
combinations are :class:`~distforest.errors.ConfigError` (exit code 4),
naming the file, the key path and the fix.  Nothing in a pipeline can make
distforest import or run code: values are plain data checked against
:data:`SCHEMA`, and the cluster kinds come from a fixed table.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

import yaml

from distforest import location
from distforest._schema import load_yaml, yaml_problem
from distforest.apps.impute import ProximityImputer
from distforest.errors import ConfigError, DistforestError, ParameterError
from distforest.forests import constraints as C
from distforest.forests.proximity_forest import ProximityForest
from distforest.jobs.base import input_fields
from distforest.jobs.forest_answers import ImportancesJob, importances_job
from distforest.jobs.knn import KNNJob, knn_job
from distforest.jobs.pipeline_schema import (
    APPS,
    SCHEMA,
    TOP_LEVEL,
    apply_overrides,
    section_of,
    unknown_key,
)
from distforest.jobs.proximity import ProximityJob
from distforest.jobs.registry import kind_of
from distforest.jobs.score import ScoreJob, score_job
from distforest.jobs.simforest import SimForestJob, simforest_job
from distforest.jobs.simforest_model import SimForestPredictJob, simforest_predict_job
from distforest.jobs.similarity import SimilarityJob, similarity_job
from distforest.jobs.smerf import SmerfJob, smerf_job
from distforest.jobs.xforest import XForestJob, xforest_job
from distforest.parallel.cluster_config import load_cluster_config

#: Keys whose values name an output file or store, relative to ``output.dir``.
OUTPUT_KEYS = ("out", "plot", "store", "model")


def check_output_name(name: str, key: str, out_dir: Path, source: str) -> None:
    """Refuse an output name that would write outside ``out_dir``.

    A name is a plain relative path inside ``output.dir``: not absolute, no
    ``..``, and no component that is a symbolic link (a link planted inside the
    folder could point anywhere).  Checked by ``validate`` and again when
    ``run`` loads the pipeline, right before any work.
    """
    path = PurePath(name)
    if not path.parts or path.is_absolute() or ".." in path.parts or "\x00" in name:
        hint = path.name if path.name not in ("", "..", ".") else "result.csv"
        raise ConfigError(
            f"{source}: {key} is {name!r}, which is not a plain name inside output.dir "
            f"{str(out_dir)!r} (no absolute path, no '..'); output names are relative to "
            f"output.dir: write e.g. {key.rpartition('.')[2]}: {hint}, or move output.dir"
        )
    if not isinstance(out_dir, Path):  # object storage: no links to follow
        return
    here = out_dir
    for part in path.parts:
        here = here / part
        if here.is_symlink():
            raise ConfigError(
                f"{source}: {key} {name!r}: {str(here)!r} is a symbolic link; distforest does "
                "not write through links inside output.dir (they can point anywhere): remove "
                "the link or choose another name"
            )


def _check_output_names(data: Mapping[str, Any], sections: dict[str, dict], out_dir: Path,
                        source: str) -> None:  # fmt: skip
    """Every output name of the pipeline (:func:`check_output_name`)."""
    for name, section in sections.items():
        for key in OUTPUT_KEYS:
            if isinstance(section.get(key), str):
                check_output_name(section[key], f"{name}.{key}", out_dir, source)
    predict = (
        (data.get("knn") or {}).get("predict") if isinstance(data.get("knn"), Mapping) else None
    )
    if isinstance(predict, Mapping) and isinstance(predict.get("out"), str):
        check_output_name(predict["out"], "knn.predict.out", out_dir, source)


def _found(path: str) -> bool:
    """Whether local ``path`` exists, or is a glob (read by partitions) matching a file."""
    import glob

    return Path(path).exists() or (glob.has_magic(path) and bool(glob.glob(path)))


def _from_folder(text: str, key: str, folder: Path | None, source: str, *,
                 exists: Any = None, keep_missing: bool = False) -> str:  # fmt: skip
    """A relative path of a pipeline, read relative to the YAML file's ``folder``.

    ``exists(path)`` says whether a path is there (default: a file, folder or
    matching glob).  A path found relative to the working directory but not to
    the folder keeps its old reading, with a warning naming the path to write.
    When neither is there: the folder's path, or ``text`` as it is with
    ``keep_missing`` (a name looked up elsewhere, as a shipped cluster file).
    Absolute paths and URLs are taken as they are.
    """
    if folder is None or location.is_remote(text) or Path(text).is_absolute():
        return text
    if folder.resolve() == Path.cwd().resolve():
        return text
    found = exists or _found
    mine = str(folder / text)
    if found(mine):
        return mine
    if found(text):
        hint = os.path.relpath(Path(text).resolve(), folder.resolve())
        warnings.warn(
            f"{source}: {key} {text!r} is read relative to the working directory; relative "
            f"paths in a pipeline are relative to its own folder {str(folder)!r}: write "
            f"{key.rpartition('.')[2]}: {hint}",
            UserWarning,
            stacklevel=3,
        )
        return text
    return text if keep_missing else mine


def _input_of(text: str, *, today: _dt.date, folder: Path | None, source: str) -> str:
    """A path a job reads besides ``input.path`` (``knn.predict.input``, ``model.path``):
    dates filled in, read from the pipeline's folder (:func:`_from_folder`)."""
    return _from_folder(_templated(text, today), "path", folder, source)


def _out_dir(text: str, storage_options: dict[str, Any] | None) -> Any:
    """``output.dir`` as a Path, or as a URL carrying ``output.storage_options``
    (``out_dir / name`` works on both)."""
    if location.is_remote(text):
        return location.with_options(text, storage_options)
    return Path(location.local(text))


def _templated(text: str, today: _dt.date) -> str:
    yesterday = today - _dt.timedelta(days=1)
    return text.replace("{date}", today.isoformat()).replace("{yesterday}", yesterday.isoformat())


def _check_combinations(data: Mapping[str, Any], sections: dict[str, dict], source: str) -> None:
    forest, inp = sections["forest"], sections["input"]
    try:
        ProximityForest(**forest)._validated()
    except ParameterError as exc:
        raise ConfigError(f"{source}: forest: {exc}") from exc
    if "impute" in data:  # the imputer's own bounds (iterations, trees), before any work
        try:
            params = {k: v for k, v in sections["impute"].items() if k not in ("out", "from")}
            ProximityImputer(**params)._validated()
        except ParameterError as exc:
            raise ConfigError(f"{source}: impute: {exc}") from exc
    # what weighs rows by being out of bag: the rule is the constraint table's
    uses = {"proximity.method": sections["proximity"].get("method", "original")}
    if "impute" in data:
        uses["impute.proximity"] = sections["impute"].get("proximity", "column")
    if "mislabels" in data:
        uses["mislabels"] = "rfgap"  # its votes are RF-GAP's (distforest.apps.mislabels)
        if not inp.get("target"):
            raise ConfigError(
                f"{source}: mislabels needs the labels to check: set input.target to the class "
                "column"
            )
        if forest.get("task", "auto") not in ("auto", "classification"):
            raise ConfigError(
                f"{source}: mislabels needs a classification forest, but forest.task is "
                f"{forest['task']!r}; remove forest.task or set it to classification"
            )
    try:
        C.check_out_of_bag_uses(uses, forest.get("bootstrap") is not False, "forest.bootstrap")
    except ParameterError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    top_k = sections["proximity"].get("top_k")
    if sections["impute"].get("from") == "proximity" and "model" not in data:
        _check_impute_from_matrix(sections, top_k, source)
    if top_k is not None and top_k < 1:
        raise ConfigError(f"{source}: proximity.top_k must be at least 1, got {top_k}")
    if sections["proximity"].get("dense") and top_k is None:
        raise ConfigError(f"{source}: proximity.dense goes with proximity.top_k")
    if top_k is not None and not sections["proximity"].get("dense") and \
            sections["output"].get("plot"):  # fmt: skip
        raise ConfigError(
            f"{source}: output.plot draws the n x n matrix, which proximity.top_k alone does "
            "not write: set proximity.dense: true as well"
        )
    if sections["mds"].get("components", 2) < 1:
        raise ConfigError(f"{source}: mds.components must be at least 1")


def _check_impute_from_matrix(sections: dict[str, dict], top_k: int | None, source: str) -> None:
    """``impute.from: proximity`` reads the run's n x n matrix and grows no forest."""
    grows = [k for k in ("iterations", "n_estimators", "max_samples", "proximity")
             if k in sections["impute"]]  # fmt: skip
    if grows:
        raise ConfigError(
            f"{source}: impute.{grows[0]} sets the imputer's own forests, but impute.from: "
            "proximity fills the cells from the matrix this run stores (proximity.method); "
            "remove one of them"
        )
    if top_k is not None and not sections["proximity"].get("dense"):
        raise ConfigError(
            f"{source}: impute.from: proximity reads the n x n matrix, which proximity.top_k "
            "alone does not write: set proximity.dense: true, or remove impute.from"
        )


def _pipeline_folder(path: str | Path) -> Path | None:
    """The folder a pipeline's relative paths are read from: the YAML file's own.

    None (the working directory, as before) for the shipped pipelines (run by
    name, ``distforest run main``, or from the repository's ``pipelines/``):
    their outputs go where the command runs.  A copy of them (a ``pipelines/``
    folder next to ``distforest/data/``, as ``distforest examples DIR`` makes)
    names its paths relative to that examples folder, the parent.
    """
    from distforest import examples

    folder = Path(path).parent
    shipped = examples.shipped_dir("pipelines")
    if shipped is not None and folder.resolve() == shipped.resolve():
        return None
    if folder.name == "pipelines" and (folder.parent / "distforest" / "data").is_dir():
        return folder.parent
    return folder


def load_pipeline(
    path: str | Path,
    today: _dt.date | None = None,
    overrides: Sequence[str] = (),
    check_input: bool = True,
) -> (
    ProximityJob
    | XForestJob
    | KNNJob
    | SimForestJob
    | SmerfJob
    | ScoreJob
    | SimilarityJob
    | ImportancesJob
    | SimForestPredictJob
):
    """Read and check a pipeline YAML.

    Parameters
    ----------
    path : str or Path
    today : date, optional
        Date used for ``{date}`` (default: today).
    overrides : sequence of str
        ``SECTION.KEY=VALUE`` items applied on top of the file (``--set``).
    check_input : bool
        Fail when the input file does not exist.

    Returns
    -------
    Job
        Of the file's ``kind:`` (:mod:`distforest.jobs.registry`), or, for a
        file without one, of the kind its sections imply: KNNJob for a
        ``neighbors`` or ``knn`` section, SmerfJob for ``smerf`` or
        ``distance``, SimForestJob for ``simforest``, XForestJob for
        ``xforest`` or ``clustering``, else ProximityJob.
    """
    source = str(path)
    if Path(path).exists() and not Path(path).is_file():  # a FIFO would be waited on for ever
        raise ConfigError(f"cannot read pipeline {source!r}: not a regular file; give a YAML file")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline {source!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{source}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); save the pipeline as UTF-8"
        ) from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {yaml_problem(exc)}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a pipeline must be a mapping with keys {TOP_LEVEL}")
    data = dict(data)
    if isinstance(data.get("model"), str):  # `model: PATH`, short for `model: {path: PATH}`
        data["model"] = {"path": data["model"]}
    apply_overrides(data, overrides, source)
    for key in data:
        if key not in TOP_LEVEL:
            raise unknown_key(source, "", str(key), list(TOP_LEVEL))
    for key in ("name", "description"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{source}: {key} must be a string, got {data[key]!r}")
    for key in ("input", "output"):
        if key not in data:
            raise ConfigError(f"{source}: the section {key!r} is required")
    sections = {name: section_of(data, name, source) for name in SCHEMA}
    _check_combinations(data, sections, source)
    day = today or _dt.date.today()
    inp, out = sections["input"], sections["output"]
    folder = _pipeline_folder(path)
    input_text = _from_folder(_templated(inp["path"], day), "input.path", folder, source)
    input_path = location.with_options(input_text, inp.get("storage_options"))
    if check_input and not location.is_remote(input_path) and not _found(input_path):
        where = "" if folder is None else f" (relative paths are relative to {str(folder)!r})"
        raise ConfigError(
            f"{source}: input.path {input_path!r} does not exist or matches no file{where}"
        )
    out_text = _from_folder(_templated(out["dir"], day), "output.dir", folder, source,
                            exists=lambda p: Path(p).is_dir())  # fmt: skip
    out_dir = _out_dir(out_text, out.get("storage_options"))
    _check_output_names(data, sections, out_dir, source)
    extras: dict[str, dict[str, Any]] = {}
    for name in APPS:
        if name in data:
            section = dict(sections[name])
            for key in ("out", "plot"):
                if section.get(key):
                    section[key] = str(out_dir / section[key])
            extras[name] = section
    scheduler = cluster = None
    cfg = data.get("cluster")
    if isinstance(cfg, str):
        cfg = _from_folder(cfg, "cluster", folder, source, exists=lambda p: Path(p).is_file(),
                           keep_missing=True)  # fmt: skip
        cluster = cfg
        try:  # checked now, as `run` would: a missing or invalid cluster file fails validate
            load_cluster_config(cfg)
        except DistforestError as exc:
            raise ConfigError(f"{source}: cluster: {exc}") from None
    elif isinstance(cfg, Mapping) and set(cfg) == {"scheduler"}:
        scheduler = str(cfg["scheduler"])
    elif cfg is not None:
        raise ConfigError(
            f"{source}: cluster must be a cluster YAML path or {{scheduler: ADDRESS}}, got {cfg!r}"
        )
    kind = kind_of(data, source)
    if inp.get("id") is not None and kind not in ("proximity", "score", "importances"):
        # outputs that follow the input's rows: the ID column is left out of the features
        sections["input"] = inp = {**inp, "drop": [*(inp.get("drop") or ()), inp["id"]]}
    connect = {"scheduler": scheduler, "cluster": cluster}
    if kind == "knn":
        templated = functools.partial(_input_of, today=day, folder=folder, source=source)
        return knn_job(data, sections, input_path, out_dir, connect, source, templated)
    if kind == "smerf":
        return smerf_job(data, sections, input_path, out_dir, connect, source)
    if kind == "similarity":
        return similarity_job(data, sections, input_path, out_dir, connect, source)
    if kind == "importances":
        return importances_job(data, sections, input_path, out_dir, connect, source)
    if kind == "simforest-predict":
        templated = functools.partial(_input_of, today=day, folder=folder, source=source)
        return simforest_predict_job(data, sections, input_path, out_dir, connect, source,
                                     templated)  # fmt: skip
    if kind == "score":  # a saved model applied to new rows
        templated = functools.partial(_input_of, today=day, folder=folder, source=source)
        return score_job(data, sections, input_path, out_dir, connect, source, templated)
    if sections["proximity"].get("top_k") is not None and kind != "proximity":
        raise ConfigError(
            f"{source}: proximity.top_k is for random-forest proximity pipelines only; "
            f"remove it or the {kind} section"
        )
    if kind == "simforest":
        return simforest_job(data, sections, input_path, out_dir, connect, source, extras)
    if kind == "xforest":
        return xforest_job(data, sections, input_path, out_dir, connect, source)
    return _proximity_job(path, data, sections, input_path, out_dir, connect, source, extras)


def _proximity_job(path: str | Path, data: Mapping[str, Any], sections: dict[str, dict],
                   input_path: str, out_dir: Any, connect: dict[str, Any], source: str,
                   extras: dict[str, Any]) -> ProximityJob:  # fmt: skip
    """The job of a proximity pipeline (the kind of a file with no other kind's sections)."""
    inp, out = sections["input"], sections["output"]
    plot = out.get("plot")
    return ProximityJob(
        input=input_path,
        target=inp.get("target"),
        **input_fields(inp),
        id=inp.get("id"),
        forest=dict(sections["forest"]),
        method=sections["proximity"].get("method", "original"),
        top_k=sections["proximity"].get("top_k"),
        dense=bool(sections["proximity"].get("dense", False)),
        out=str(out_dir / out.get("store", "proximity.zarr")),
        plot=str(out_dir / plot) if plot else None,
        overwrite=bool(out.get("overwrite", False)),
        connect=connect,
        report_dir=str(out_dir) if out.get("report", True) else None,
        name=str(data.get("name") or Path(path).stem),
        source=source,
        **extras,
    )
