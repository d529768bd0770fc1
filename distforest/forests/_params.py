"""The one place where forest parameters are checked.

Each check names the parameter, shows the bad value and says what is
accepted, so the same message serves the Python API and the CLI.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection
from typing import Any, Literal, overload

import numpy as np

from distforest.errors import InputError, ParameterError

TASKS = ("auto", "classification", "regression", "unsupervised")
KINDS = ("random-forest", "extra-trees")
PROXIMITY_METHODS = ("original", "oob", "rfgap")

#: An integer target with at most this many distinct values is taken as classes.
MAX_AUTO_CLASSES = 50


@overload
def check_int(
    name: str, value: Any, *, low: int = 1, allow_none: Literal[False] = False
) -> int: ...


@overload
def check_int(name: str, value: Any, *, low: int = 1, allow_none: Literal[True]) -> int | None: ...


def check_int(name: str, value: Any, *, low: int = 1, allow_none: bool = False) -> int | None:
    """Return ``value`` as int after checking it is an integer >= ``low``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        more = " or None" if allow_none else ""
        raise ParameterError(f"{name} must be an integer >= {low}{more}, got {value!r}")
    return int(value)


def check_choice(name: str, value: Any, choices: Collection[str]) -> str:
    """Return ``value`` after checking it is one of ``choices``."""
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ParameterError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_fraction(name: str, value: Any, *, allow_none: bool = True) -> float | None:
    """Return ``value`` after checking it is a float in (0, 1]."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0.0 < float(value) <= 1.0
    ):
        raise ParameterError(f"{name} must be a number in (0, 1] or None, got {value!r}")
    return float(value)


def check_max_features(value: Any) -> int | float | str | None:
    """Accept scikit-learn's forms: "sqrt", "log2", None, an int >= 1 or a fraction."""
    if value is None or value in ("sqrt", "log2", "auto"):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1:
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < float(value) <= 1:
        return float(value)
    raise ParameterError(
        "max_features must be 'sqrt', 'log2', 'auto', None, an integer >= 1 or a fraction "
        f"in (0, 1], got {value!r}"
    )


def check_random_state(value: Any) -> int | None:
    """Accept None or a non-negative integer (a seed we can record)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ParameterError(
            f"random_state must be None or a non-negative integer, got {value!r}; "
            "pass an integer to make runs repeatable"
        )
    return int(value)


def resolve_task(task: str, y: np.ndarray | None, target_name: str | None) -> str:
    """Decide classification / regression / unsupervised from the target.

    ``auto``: no target -> unsupervised; a non-numeric, boolean or
    integer-valued target with at most :data:`MAX_AUTO_CLASSES` distinct
    values -> classification; any other numeric target -> regression.
    """
    check_choice("task", task, TASKS)
    if task == "unsupervised":
        return task
    if y is None:
        if task == "auto":
            return "unsupervised"
        raise ParameterError(
            f"task={task!r} needs a target: pass y (or --target COLUMN), or use task='unsupervised'"
        )
    if task != "auto":
        if task == "regression" and not np.issubdtype(y.dtype, np.number):
            raise InputError(
                f"target {target_name!r} is not numeric (dtype {y.dtype}), so it cannot be "
                "used for regression; use task='classification'"
            )
        return task
    if not np.issubdtype(y.dtype, np.number) or y.dtype == bool:
        return "classification"
    values = np.unique(y)
    integral = bool(np.all(np.mod(values, 1) == 0))
    return "classification" if integral and values.size <= MAX_AUTO_CLASSES else "regression"


def encode_target(task: str, y: np.ndarray | None) -> tuple[np.ndarray | None, list[Any]]:
    """Target as the trees need it: class codes 0..k-1, or floats.

    Returns
    -------
    y_fit : ndarray or None
    classes : list
        Class labels in code order (empty for regression / unsupervised).
    """
    if task == "unsupervised" or y is None:
        return None, []
    if task == "regression":
        return np.asarray(y, dtype=np.float64), []
    classes, codes = np.unique(y, return_inverse=True)
    return codes.astype(np.int64), [c.item() if hasattr(c, "item") else c for c in classes]
