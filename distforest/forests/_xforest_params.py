"""Parameter checks of X-Forest, built on the shared checks of :mod:`._params`."""

from __future__ import annotations

import numbers
from typing import Any

from distforest.errors import ParameterError
from distforest.forests import _params as P

MODES = ("x", "standard")
SIMILARITY_KINDS = ("beta", "basic")

#: Name of each similarity in a store.
SIMILARITY_NAMES = {"beta": "beta_similarity", "basic": "basic_similarity"}


def check_beta(value: Any) -> float:
    """Return ``value`` after checking it is a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) <= 1:
        raise ParameterError(
            f"beta must be a number in [0, 1] (the similarity decay per tree edge), got "
            f"{value!r}; the paper uses 0.9"
        )
    return float(value)


def check_xforest(params: dict[str, Any]) -> dict[str, Any]:
    """Validate the parameters of :class:`~distforest.forests.xforest.XForest`."""
    return {
        "n_estimators": P.check_int("n_estimators", params["n_estimators"]),
        "n_directions": P.check_int("n_directions", params["n_directions"]),
        "leaf_size": P.check_int("leaf_size", params["leaf_size"]),
        "beta": check_beta(params["beta"]),
        "mode": P.check_choice("mode", params["mode"], MODES),
        "normalize": _check_bool("normalize", params["normalize"]),
        "batch_size": P.check_int("batch_size", params["batch_size"], allow_none=True),
        "tile_size": P.check_int("tile_size", params["tile_size"], low=16),
        "random_state": P.check_random_state(params["random_state"]),
    }


def check_kind(kind: Any) -> str:
    """``beta`` or ``basic``."""
    return P.check_choice("kind", kind, SIMILARITY_KINDS)


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{name} must be True or False, got {value!r}")
    return value
