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
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from distforest import location
from distforest.errors import DistforestError, did_you_mean


class BadValue(Exception):
    """Raised by a checker; ``expected`` describes the accepted values."""

    def __init__(self, expected: str, hint: str = "", *, type_only: bool = False) -> None:
        super().__init__(expected)
        self.expected = expected
        self.hint = hint
        #: The value is of a wrong type: the message names its type, never the value.
        self.type_only = type_only


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
        raise BadValue("a mapping (key: value pairs)", type_only=True)
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
            secret = bad.type_only or location.is_secret_option(path)
            got = f"a {type(value).__name__}" if secret else f"{value!r} ({type(value).__name__})"
            message = f"{source}: key {path!r} must be {bad.expected}, got {got}{hint}."
            raise error(message) from None
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


# -- reading YAML safely ---------------------------------------------------------

#: Deepest nesting of mappings and lists accepted in a YAML file.
MAX_YAML_DEPTH = 50
#: Most values a YAML file may hold once its aliases are expanded (a real pipeline
#: holds a few dozen): an alias bomb is refused before anything walks it.
MAX_YAML_VALUES = 10_000


class _SafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses duplicate keys and deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_YAML_DEPTH} levels deep",
                    self.peek_event().start_mark,
                )  # fmt: skip
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: PyYAML's own error below
                    continue
                if not duplicate:
                    seen[key] = key_node.start_mark.line
                else:
                    first = seen[key]
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        f"duplicate key {reprlib.repr(key)} (first at line {first + 1}): the "
                        "second value would silently replace the first; keep one",
                        key_node.start_mark,
                    )  # fmt: skip
        return super().construct_mapping(node, deep)


def _expanded_values(node: Any) -> int:
    """Values of the node graph with every alias expanded (stops past the limit)."""
    sizes: dict[int, int] = {}

    def size(n: Any) -> int:
        if id(n) in sizes:
            return sizes[id(n)]
        sizes[id(n)] = 0  # a recursive alias counts once
        if isinstance(n, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        elif isinstance(n, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in n.value)
        else:
            total = 1
        sizes[id(n)] = min(total, MAX_YAML_VALUES + 1)
        return sizes[id(n)]

    return size(node)


def load_yaml(text: str) -> Any:
    """Parse YAML text as plain data, refusing what a hostile file would use.

    Refused with a :class:`yaml.YAMLError` (line and column in ``problem_mark``):
    duplicate keys (PyYAML keeps the last silently), nesting deeper than
    :data:`MAX_YAML_DEPTH`, and more than :data:`MAX_YAML_VALUES` values once
    aliases are expanded (a "billion laughs" file is refused before any code,
    error messages included, walks it).
    """
    loader = _SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            values = _expanded_values(node)
        except RecursionError:  # a chain of aliases longer than Python's stack
            values = MAX_YAML_VALUES + 1
        if values > MAX_YAML_VALUES:
            raise yaml.composer.ComposerError(
                None, None,
                f"more than {MAX_YAML_VALUES:,} values once its aliases (*name) are expanded "
                "(an alias bomb?); write the values out",
                node.start_mark,
            )  # fmt: skip
        return loader.construct_document(node)
    finally:
        loader.dispose()
