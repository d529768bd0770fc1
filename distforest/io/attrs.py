"""Attributes every xarray engine can write, and the one way to read them back.

Zarr keeps any JSON as an attribute; netCDF keeps only strings, numbers and
flat arrays of them, so ``xarray.open_zarr(store).to_netcdf(...)`` refused
every store holding provenance such as ``params = {...}``.  Every attribute
distforest writes passes :func:`encode_attrs`: strings and numbers stay as
they are, anything else (dicts, lists, booleans, None, integers beyond 64
bits) becomes the text ``"json:" + json.dumps(value)``.  Every reader in
distforest passes :func:`decode_attrs`, which gives the values back (and
leaves attributes of older stores, written as plain JSON, untouched).  A
user reading a netCDF or Zarr copy with another tool decodes with
:func:`decode_attrs` too, or by hand: strip ``json:``, parse the rest.

Used by the run stores (:mod:`distforest.store.run_store`) and the table
writer (:mod:`distforest.io.writers`): one codec for both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from distforest import location

#: Marks an attribute value held as JSON text.
JSON_PREFIX = "json:"

_INT64 = np.iinfo(np.int64)


def encode_value(value: Any) -> Any:
    """One attribute value as netCDF can hold it (a string or a number).

    Parameters
    ----------
    value : JSON-serialisable value (NumPy scalars and arrays included)

    Returns
    -------
    str, int or float
    """
    if isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, str):
        # a text that happens to start with the marker is encoded too, so it reads back as text
        return JSON_PREFIX + json.dumps(value) if value.startswith(JSON_PREFIX) else value
    if isinstance(value, float) or (
        isinstance(value, int) and not isinstance(value, bool) and _INT64.min <= value <= _INT64.max
    ):
        return value
    return JSON_PREFIX + json.dumps(value, default=_jsonable)


def _jsonable(value: Any) -> Any:
    """What ``json.dumps`` cannot write by itself: NumPy values, tuples inside sets..."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"attribute value {value!r} ({type(value).__name__}) is not JSON")


def decode_value(value: Any) -> Any:
    """An attribute value as it was before :func:`encode_value`."""
    if isinstance(value, str) and value.startswith(JSON_PREFIX):
        return json.loads(value[len(JSON_PREFIX) :])
    return value


def encode_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as every xarray engine (Zarr, netCDF3 and netCDF4) can write them, text
    without secrets (:func:`distforest.location.scrub`: a URL's credentials, ...)."""
    out = {}
    for key, value in attrs.items():
        encoded = encode_value(value)
        out[str(key)] = location.scrub(encoded) if isinstance(encoded, str) else encoded
    return out


def decode_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes written by :func:`encode_attrs` (or by an older distforest) as values."""
    return {k: decode_value(v) for k, v in attrs.items()}
