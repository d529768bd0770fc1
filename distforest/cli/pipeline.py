"""Pipeline YAML files: parsed and checked before any work starts.

A pipeline names its input, the forest, the matrix to build and where the
outputs go::

    input:   {path: data.csv, target: Class, drop: [Id], na_values: ["?"]}
    forest:  {n_estimators: 300, random_state: 0, tile_size: 256}
    proximity: {method: original}
    impute:  {out: imputed.csv, iterations: 5}                         # optional
    outliers: {out: outliers.csv, plot: outliers.png}                 # optional
    mds:     {out: mds.csv, plot: mds.png, components: 2}              # optional
    output:  {dir: results/{date}, store: proximity.zarr, plot: proximity.png, overwrite: true}
    cluster: cluster_configs/local.yaml     # or {scheduler: tcp://host:8786}; optional

Relative input paths are relative to the current directory; output file
names are relative to ``output.dir``.  ``{date}`` in output
paths becomes today's date (YYYY-MM-DD).  Unknown keys and wrong types are
errors naming the file, the key path and the fix.
"""

from __future__ import annotations

import datetime as _dt
import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from distforest.cli.jobs import ProximityJob
from distforest.errors import ConfigError

_STR = (str,)
_LIST = (list,)
_INT = (int,)

#: section -> key -> accepted types (None: also null).
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "input": {"path": _STR, "target": _STR, "drop": _LIST, "na_values": _LIST},
    "forest": {
        "n_estimators": _INT,
        "task": _STR,
        "kind": _STR,
        "max_features": (str, int, float),
        "min_samples_leaf": _INT,
        "max_depth": _INT,
        "bootstrap": (bool,),
        "max_samples": (float,),
        "batch_size": _INT,
        "tile_size": _INT,
        "random_state": _INT,
    },
    "proximity": {"method": _STR},
    "impute": {
        "out": _STR,
        "iterations": _INT,
        "n_estimators": _INT,
        "proximity": _STR,
        "categorical_vote": _STR,
    },
    "outliers": {"out": _STR, "plot": _STR},
    "mds": {"out": _STR, "plot": _STR, "components": _INT, "dissimilarity": _STR},
    "output": {"dir": _STR, "store": _STR, "plot": _STR, "overwrite": (bool,)},
}
TOP_LEVEL = ("name", "description", "cluster", *SCHEMA)
REQUIRED = {
    "input": ("path",),
    "output": ("dir",),
    "impute": ("out",),
    "outliers": ("out",),
    "mds": ("out",),
}


def _unknown(source: str, where: str, key: str, allowed: list[str]) -> ConfigError:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(
        f"{source}: unknown key {where}{key!r}{hint} (allowed: {', '.join(allowed)})"
    )


def _section(data: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    section = data.get(name) or {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: {name!r} must be a mapping of keys, got {section!r}")
    allowed = SCHEMA[name]
    for key, value in section.items():
        if key not in allowed:
            raise _unknown(source, f"{name}.", str(key), list(allowed))
        types = allowed[key]
        ok = value is None or (
            isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        )
        if not ok:
            expected = " or ".join(t.__name__ for t in types)
            raise ConfigError(
                f"{source}: {name}.{key} must be {expected}, got {value!r} ({type(value).__name__})"
            )
    for key in REQUIRED.get(name, ()) if name in data else ():
        if section.get(key) is None:
            raise ConfigError(f"{source}: {name}.{key} is required (e.g. {name}: {{{key}: ...}})")
    return dict(section)


def load_pipeline(path: str | Path, today: _dt.date | None = None) -> ProximityJob:
    """Read and check a pipeline YAML.

    Parameters
    ----------
    path : str or Path
    today : date, optional
        Date used for ``{date}`` in output paths (default: today).

    Returns
    -------
    ProximityJob
    """
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline {source!r}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a pipeline must be a mapping with keys {TOP_LEVEL}")
    for key in data:
        if key not in TOP_LEVEL:
            raise _unknown(source, "", str(key), list(TOP_LEVEL))
    inp = _section(data, "input", source)
    forest = {k: v for k, v in _section(data, "forest", source).items() if v is not None}
    prox = _section(data, "proximity", source)
    out = _section(data, "output", source)
    date = (today or _dt.date.today()).isoformat()
    out_dir = Path(out["dir"].replace("{date}", date))
    plot = out.get("plot")
    extras = {}
    for name in ("impute", "outliers", "mds"):
        if name in data:
            section = _section(data, name, source)
            for key in ("out", "plot"):
                if section.get(key):
                    section[key] = str(out_dir / section[key])
            extras[name] = {k: v for k, v in section.items() if v is not None}
    scheduler = cluster = None
    cfg = data.get("cluster")
    if isinstance(cfg, str):
        cluster = cfg
    elif isinstance(cfg, Mapping) and set(cfg) == {"scheduler"}:
        scheduler = str(cfg["scheduler"])
    elif cfg is not None:
        raise ConfigError(
            f"{source}: cluster must be a cluster YAML path or {{scheduler: ADDRESS}}, got {cfg!r}"
        )
    return ProximityJob(
        input=inp["path"],
        target=inp.get("target"),
        drop=tuple(inp.get("drop") or ()),
        na_values=tuple(str(v) for v in inp.get("na_values") or ()),
        forest=forest,
        method=prox.get("method") or "original",
        out=str(out_dir / (out.get("store") or "proximity.zarr")),
        plot=str(out_dir / plot) if plot else None,
        overwrite=bool(out.get("overwrite", False)),
        connect={"scheduler": scheduler, "cluster": cluster},
        **extras,
    )
