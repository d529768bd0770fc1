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
    impute:  {out: imputed.csv, proximity: column}  # column | rfimpute | rfgap | original | oob
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
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

import yaml

from distforest import location
from distforest._schema import BadValue, Checker, Key, check_mapping, load_yaml, yaml_problem
from distforest.apps.impute import ProximityImputer
from distforest.apps.mds import DISSIMILARITIES
from distforest.cli.jobs import ProximityJob
from distforest.cli.knn_job import KNN_CHOICES, KNNJob, knn_job
from distforest.cli.simforest_job import SimForestJob, simforest_job
from distforest.cli.smerf_job import SMERF_EXTRA, SmerfJob, smerf_job
from distforest.cli.xforest_job import XFOREST_CHOICES, XForestJob, xforest_job
from distforest.errors import ConfigError, DistforestError, ParameterError, did_you_mean
from distforest.forests import constraints as C
from distforest.forests.constraints import PROXIMITY_METHODS
from distforest.forests.proximity_forest import ProximityForest
from distforest.forests.simforest import SimilarityForestClassifier
from distforest.forests.smerf import SMERF
from distforest.forests.xforest import XForest
from distforest.parallel.cluster_config import load_cluster_config

_STR = (str,)
_LIST = (list,)
_INT = (int,)
_BOOL = (bool,)
_MAP = (dict,)

#: section -> key -> accepted types (None: also null).
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "input": {
        "path": _STR,
        "target": _STR,
        "labels": _STR,
        "drop": _LIST,
        "na_values": _LIST,
        "id": _STR,  # proximity jobs only (checked below)
        "decimal": _STR,
        # fsspec options of an input URL (endpoint, profile, ...): never recorded anywhere
        "storage_options": _MAP,
    },
    # checked against the estimator's own constraint table (see TABLES below)
    "forest": dict.fromkeys(ProximityForest._parameter_constraints, ()),
    "proximity": {"method": _STR, "top_k": _INT, "dense": _BOOL},
    "impute": {
        "out": _STR,
        "iterations": _INT,
        "n_estimators": _INT,
        "proximity": _STR,
        "categorical_vote": _STR,
        "max_samples": (str, int, float),
    },
    "outliers": {"out": _STR, "plot": _STR},
    "mislabels": {"out": _STR},
    "mds": {"out": _STR, "plot": _STR, "components": _INT, "dissimilarity": _STR},
    "output": {
        "dir": _STR,
        "store": _STR,
        "plot": _STR,
        "report": _BOOL,
        "overwrite": _BOOL,
        "storage_options": _MAP,
    },
    # X-Forest pipelines (input, xforest, clustering, output): cli/xforest_job.py
    "xforest": dict.fromkeys([*XForest._parameter_constraints, "kind"], ()),
    "clustering": {
        **dict.fromkeys(("k", "min_samples", "n_init", "random_state"), _INT),
        "method": _STR,
        "eps": (float, int),
        "out": _STR,
        "plot": _STR,
    },
    # SimForest pipelines (input, simforest, proximity, outliers, mds, output):
    # cli/simforest_job.py
    "simforest": dict.fromkeys(
        [*SimilarityForestClassifier._parameter_constraints, "normalize"], ()
    ),
    # k-NN pipelines (input, neighbors and/or knn, output): cli/knn_job.py
    "neighbors": {"metric": _STR, "k": _INT, "normalize": _STR, "algorithm": _STR, "out": _STR},
    "knn": {
        **dict.fromkeys(("target", "task", "weights", "metric", "normalize", "model"), _STR),
        **dict.fromkeys(("k", "n_estimators", "random_state"), _INT),
        "predict": (dict,),
    },
    # SMERF pipelines (input, smerf, distance, output): cli/smerf_job.py
    "smerf": dict.fromkeys([*SMERF._parameter_constraints, *SMERF_EXTRA], ()),
    "distance": {"rows": _STR, "against": _STR, "oob": _BOOL, "out": _STR},
}
#: Sections whose keys are an estimator's parameters: checked by its constraint table,
#: so a pipeline accepts and refuses exactly what Python does.
TABLES: dict[str, Mapping[str, C.Constraint]] = {
    "forest": ProximityForest._parameter_constraints,
    "xforest": {**XForest._parameter_constraints, "kind": C.Choice(C.SIMILARITY_KINDS)},
    "simforest": {
        **SimilarityForestClassifier._parameter_constraints,
        # "rbf:GAMMA" is read by simforest_job, which checks the name
        "metric": C.Checked("by simforest_job"),
        "normalize": C.Choice(C.SIMFOREST_SCALINGS),
    },
    "smerf": {
        **SMERF._parameter_constraints,
        "distances": C.Checked("by smerf_job"),
        "tile_size": C.TILE_SIZE,
    },
}
TOP_LEVEL = ("name", "description", "cluster", *SCHEMA)
REQUIRED = {
    "input": ("path",),
    "output": ("dir",),
    "impute": ("out",),
    "outliers": ("out",),
    "mislabels": ("out",),
    "mds": ("out",),
    "clustering": ("method", "out"),
}
#: key path -> allowed values.
CHOICES = {
    "input.decimal": (".", ","),
    "proximity.method": PROXIMITY_METHODS,
    "impute.proximity": C.IMPUTE_PROXIMITIES,
    "impute.categorical_vote": C.VOTES,
    "mds.dissimilarity": DISSIMILARITIES,
    **XFOREST_CHOICES,
    **KNN_CHOICES,
}
#: Application sections, in the order they run.
APPS = ("impute", "outliers", "mislabels", "mds")


def _unknown(source: str, where: str, key: str, allowed: Sequence[str]) -> ConfigError:
    hint = did_you_mean(key, allowed)
    return ConfigError(
        f"{source}: unknown key {where}{key!r}{hint} (allowed: {', '.join(allowed)})"
    )


def _checker(name: str, key: str) -> Checker:
    """The value check of ``name.key``: its estimator's constraint, else its types and choices."""
    if name in TABLES:
        constraint = TABLES[name][key]
        return lambda value: constraint.check(f"{name}.{key}", value)
    types = SCHEMA[name][key]
    choices = CHOICES.get(f"{name}.{key}")

    def check(value: Any) -> Any:
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise BadValue(" or ".join(t.__name__ for t in types))
        if choices and value not in choices:
            raise BadValue(f"one of {', '.join(choices)}", did_you_mean(value, choices)[2:])
        return value

    return check


@functools.cache
def _keys(name: str) -> dict[str, Key]:
    """The schema of section ``name`` for :func:`distforest._schema.check_mapping`."""
    required = REQUIRED.get(name, ())
    return {key: Key(_checker(name, key), required=key in required,
                     example=f"{name}: {{{key}: ...}}") for key in SCHEMA[name]}  # fmt: skip


def _section(data: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    """Section ``name`` checked key by key (null values mean "not set")."""
    if name not in data:
        return {}
    section = data.get(name) or {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: {name!r} must be a mapping of keys, got {section!r}")
    given = {k: v for k, v in section.items() if v is not None}
    try:
        return check_mapping(given, _keys(name), where=f"in section {name!r}",
                             prefix=f"{name}.", source=source, error=ConfigError)  # fmt: skip
    except ParameterError as exc:  # an estimator's constraint: its own message
        raise ConfigError(f"{source}: {exc}") from None


def apply_overrides(data: dict[str, Any], overrides: Sequence[str], source: str) -> None:
    """Apply ``--set section.key=value`` overrides (values parsed as YAML scalars)."""
    for item in overrides:
        path, sep, text = item.partition("=")
        parts = path.strip().split(".")
        if not sep or len(parts) != 2 or not all(parts):
            raise ConfigError(
                f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. forest.n_estimators=300"
            )
        section, key = parts
        if section not in SCHEMA:
            raise _unknown(f"{source} (--set {item})", "", section, list(SCHEMA))
        try:
            value = load_yaml(text)
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"--set {item!r}: the value is not valid YAML: {yaml_problem(exc)}"
            ) from exc
        if not isinstance(data.get(section) or {}, Mapping):
            raise ConfigError(f"{source}: {section!r} must be a mapping of keys")
        data[section] = {**(data.get(section) or {}), key: value}


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
            params = {k: v for k, v in sections["impute"].items() if k != "out"}
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


def load_pipeline(
    path: str | Path,
    today: _dt.date | None = None,
    overrides: Sequence[str] = (),
    check_input: bool = True,
) -> ProximityJob | XForestJob | KNNJob | SimForestJob | SmerfJob:
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
    ProximityJob, or XForestJob for a file with an ``xforest`` section,
    KNNJob for a file with a ``neighbors`` or ``knn`` section,
    SimForestJob for a file with a ``simforest`` section, or SmerfJob for a
    file with a ``smerf`` or ``distance`` section
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
    apply_overrides(data, overrides, source)
    for key in data:
        if key not in TOP_LEVEL:
            raise _unknown(source, "", str(key), list(TOP_LEVEL))
    for key in ("name", "description"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{source}: {key} must be a string, got {data[key]!r}")
    for key in ("input", "output"):
        if key not in data:
            raise ConfigError(f"{source}: the section {key!r} is required")
    sections = {name: _section(data, name, source) for name in SCHEMA}
    _check_combinations(data, sections, source)
    day = today or _dt.date.today()
    inp, out = sections["input"], sections["output"]
    input_path = location.with_options(_templated(inp["path"], day), inp.get("storage_options"))
    if check_input and not location.is_remote(input_path) and not _found(input_path):
        raise ConfigError(
            f"{source}: input.path {input_path!r} does not exist or matches no file (relative "
            f"paths are relative to the current directory {str(Path.cwd())!r})"
        )
    out_dir = _out_dir(_templated(out["dir"], day), out.get("storage_options"))
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
    kinds = ("neighbors", "knn", "smerf", "distance", "simforest", "xforest", "clustering")
    other = [kind for kind in kinds if kind in data]
    if inp.get("id") is not None and other:
        raise ConfigError(
            f"{source}: input.id is read by proximity jobs only, not by {other[0]!r}; remove "
            "it (or use input.drop to leave the column out)"
        )
    if "neighbors" in data or "knn" in data:
        connect = {"scheduler": scheduler, "cluster": cluster}
        templated = functools.partial(_templated, today=day)
        return knn_job(data, sections, input_path, out_dir, connect, source, templated)
    if "smerf" in data or "distance" in data:
        connect = {"scheduler": scheduler, "cluster": cluster}
        return smerf_job(data, sections, input_path, out_dir, connect, source)
    if sections["proximity"].get("top_k") is not None and any(
        k in data for k in ("simforest", "xforest", "clustering")
    ):
        raise ConfigError(
            f"{source}: proximity.top_k is for random-forest proximity pipelines only; "
            "remove it or the simforest/xforest section"
        )
    if "simforest" in data:
        connect = {"scheduler": scheduler, "cluster": cluster}
        return simforest_job(data, sections, input_path, out_dir, connect, source, extras)
    if "xforest" in data or "clustering" in data:
        connect = {"scheduler": scheduler, "cluster": cluster}
        return xforest_job(data, sections, input_path, out_dir, connect, source)
    plot = out.get("plot")
    return ProximityJob(
        input=input_path,
        target=inp.get("target"),
        drop=tuple(inp.get("drop") or ()),
        na_values=tuple(str(v) for v in inp.get("na_values") or ()),
        id=inp.get("id"),
        decimal=inp.get("decimal"),
        forest=dict(sections["forest"]),
        method=sections["proximity"].get("method", "original"),
        top_k=sections["proximity"].get("top_k"),
        dense=bool(sections["proximity"].get("dense", False)),
        out=str(out_dir / out.get("store", "proximity.zarr")),
        plot=str(out_dir / plot) if plot else None,
        overwrite=bool(out.get("overwrite", False)),
        connect={"scheduler": scheduler, "cluster": cluster},
        report_dir=str(out_dir) if out.get("report", True) else None,
        name=str(data.get("name") or Path(path).stem),
        source=source,
        **extras,
    )
