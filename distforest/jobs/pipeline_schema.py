"""The keys of pipeline files: sections, types, choices, and the per-section checks.

Every section's keys are checked before any work starts; sections whose keys
are an estimator's parameters are checked by its constraint table
(:mod:`distforest.forests.constraints`), so a pipeline accepts and refuses
exactly what Python does.  Loading and job building: :mod:`distforest.jobs.pipeline`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from distforest._schema import BadValue, Checker, Key, check_mapping, load_yaml, yaml_problem
from distforest.apps.mds import DISSIMILARITIES
from distforest.errors import ConfigError, ParameterError, did_you_mean
from distforest.forests import constraints as C
from distforest.forests.constraints import PROXIMITY_METHODS
from distforest.forests.proximity_forest import ProximityForest
from distforest.forests.simforest import SimilarityForestClassifier
from distforest.forests.smerf import SMERF
from distforest.forests.xforest import XForest
from distforest.jobs.knn import KNN_CHOICES
from distforest.jobs.smerf import SMERF_EXTRA
from distforest.jobs.xforest import XFOREST_CHOICES

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
        "id": _STR,  # other kinds than proximity and score: dropped from the features
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
        "from": _STR,
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
    # scoring pipelines (model, input, score, impute, output): jobs/score.py
    "model": {"path": _STR, "training": _STR, "target": _STR},
    "score": {"out": _STR, "method": _STR, "proximity_prediction": _BOOL, "outliers": _BOOL},
    # importances pipelines (input, forest, importances, output): jobs/forest_answers.py
    "importances": {"out": _STR, "repeats": _INT, "test_size": (float,), "top": _INT},
    # SimForest prediction pipelines (model, input, predict, output): jobs/simforest_model.py
    "predict": {"out": _STR, "matrix": _STR},
    # similarity pipelines (input, similarity, output): jobs/similarity.py
    "similarity": {
        "metric": _STR,
        "normalize": _STR,
        "feature_range": _LIST,
        "tile_size": _INT,
        "reference": _STR,
    },
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
TOP_LEVEL = ("kind", "name", "description", "cluster", *SCHEMA)
REQUIRED = {
    "input": ("path",),
    "output": ("dir",),
    "impute": ("out",),
    "outliers": ("out",),
    "mislabels": ("out",),
    "mds": ("out",),
    "clustering": ("method", "out"),
    "model": ("path",),
    "score": ("out",),
    "importances": ("out",),
    "predict": ("out",),
}
#: ``impute.from``: the imputer's own forests (default), or the matrix the run stored.
IMPUTE_FROM = ("forests", "proximity")
#: key path -> allowed values.
CHOICES = {
    "input.decimal": (".", ","),
    "proximity.method": PROXIMITY_METHODS,
    "impute.proximity": C.IMPUTE_PROXIMITIES,
    "impute.categorical_vote": C.VOTES,
    "impute.from": IMPUTE_FROM,
    "score.method": PROXIMITY_METHODS,
    "mds.dissimilarity": DISSIMILARITIES,
    "similarity.normalize": ("none", *C.NORMALIZATIONS),
    "predict.matrix": ("similarity", "distances"),
    **XFOREST_CHOICES,
    **KNN_CHOICES,
}
#: Application sections, in the order they run.
APPS = ("impute", "outliers", "mislabels", "mds")


def unknown_key(source: str, where: str, key: str, allowed: Sequence[str]) -> ConfigError:
    hint = did_you_mean(key, allowed)
    return ConfigError(
        f"{source}: unknown key {where}{key!r}{hint} (allowed: {', '.join(allowed)})"
    )


def _checker(name: str, key: str) -> Checker:
    """The value check of ``name.key``: its estimator's constraint, else its types and choices."""
    if name in TABLES:
        constraint = TABLES[name][key]
        return lambda value: constraint.check(f"{name}.{key}", value)
    declared = C.SECTION_PARAMETERS.get(f"{name}.{key}")
    if declared is not None:  # the command's option is made from the same declaration
        return lambda value: declared.constraint.check(f"{name}.{key}", value)
    types = SCHEMA[name][key]
    choices = CHOICES.get(f"{name}.{key}")

    def check(value: Any) -> Any:
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise BadValue(" or ".join(t.__name__ for t in types), type_only=True)
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


def section_of(data: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
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
            raise unknown_key(f"{source} (--set {item})", "", section, list(SCHEMA))
        try:
            value = load_yaml(text)
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"--set {item!r}: the value is not valid YAML: {yaml_problem(exc)}"
            ) from exc
        if not isinstance(data.get(section) or {}, Mapping):
            raise ConfigError(f"{source}: {section!r} must be a mapping of keys")
        data[section] = {**(data.get(section) or {}), key: value}
