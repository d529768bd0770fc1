"""One schema helper for every YAML file distforest reads (pipelines, cluster files).

A schema maps each allowed key to a :class:`Key`: a checker that returns the
normalised value or raises :class:`BadValue` (saying what is accepted),
whether the key is required, an example for the error message, and a nested
schema for a mapping with fixed keys.  :func:`check_mapping` walks a mapping
against it: unknown keys get the one "did you mean" of
:func:`distforest.errors.did_you_mean`, wrong values say what is accepted,
missing required keys show an example, every message names the file and the
key path.  Nothing in a YAML file is ever imported or run: values are plain
data checked here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from distforest.errors import DistforestError, did_you_mean


class BadValue(Exception):
    """Raised by a checker; ``expected`` describes the accepted values."""

    def __init__(self, expected: str, hint: str = "") -> None:
        super().__init__(expected)
        self.expected = expected
        self.hint = hint


Checker = Callable[[Any], Any]


def int_at_least(minimum: int) -> Checker:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise BadValue(f"an integer >= {minimum}")
        return value

    return check


def string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadValue("a non-empty string")
    return value


def path_string(value: Any) -> str:
    return os.path.expanduser(string(value))


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadValue("true or false")
    return value


def string_list(min_length: int = 0, hint: str = "") -> Checker:
    def check(value: Any) -> tuple[str, ...]:
        expected = "a list of strings" + (
            f" with at least {min_length} entries" if min_length else ""
        )
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise BadValue(expected, hint)
        if any(not isinstance(item, str) for item in value) or len(value) < min_length:
            raise BadValue(expected, hint)
        return tuple(value)

    return check


def any_value(value: Any) -> Any:
    return value


def plain_mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BadValue("a mapping (key: value pairs)")
    return {str(k): v for k, v in value.items()}


def string_mapping(value: Any) -> Mapping[str, str]:
    expected = "a mapping of names to strings or numbers"
    if not isinstance(value, Mapping):
        raise BadValue(expected)
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise BadValue(expected)
        out[str(k)] = str(v)
    return out


NO_DEFAULT = object()


@dataclass(frozen=True)
class Key:
    """One allowed key: its checker, whether it is required, its default."""

    check: Checker
    required: bool = False
    default: Any = NO_DEFAULT
    example: str = ""
    schema: Mapping[str, Key] | None = None  # a nested mapping with fixed keys


def check_mapping(
    data: Mapping[Any, Any],
    schema: Mapping[str, Key],
    *,
    where: str,
    prefix: str,
    source: str,
    error: type[DistforestError],
    extra_allowed: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Validate ``data`` against ``schema``; return normalised values (no defaults)."""
    allowed = sorted([*extra_allowed, *schema])
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key)
        path = prefix + key
        if key in extra_allowed:
            continue
        if key not in schema:
            hint = did_you_mean(key, allowed)
            if key == "options" and not prefix:
                hint += "; put the keys of the kind at the top level, next to 'kind'"
            raise error(
                f"{source}: unknown key {path!r} {where}{hint}. Allowed keys: {', '.join(allowed)}."
            )
        spec = schema[key]
        try:
            checked = spec.check(value)
        except BadValue as bad:
            hint = f" ({bad.hint})" if bad.hint else ""
            raise error(
                f"{source}: key {path!r} must be {bad.expected}, "
                f"got {value!r} ({type(value).__name__}){hint}."
            ) from None
        if spec.schema is not None:
            checked = check_mapping(
                checked,
                spec.schema,
                where=f"in {path!r}",
                prefix=path + ".",
                source=source,
                error=error,
            )
        out[key] = checked
    for key, spec in schema.items():
        if spec.required and key not in out:
            example = f" (for example `{spec.example}`)" if spec.example else ""
            raise error(f"{source}: missing required key {prefix + key!r} {where}{example}.")
    return out


def yaml_problem(exc: Exception) -> str:
    """A YAML parse error on one line: what is wrong and where (line and column from 1).

    PyYAML's own text spans several lines (a copy of the line with a caret);
    every CLI error is one line.
    """
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"
