"""The job kinds: one registry keyed by the ``kind:`` of a pipeline file.

Every kind of job (proximity, xforest, simforest, simforest-predict, knn, smerf,
score, importances, similarity) is a dataclass
that follows :class:`Job`: its pipeline sections (the config schema, checked
by :mod:`distforest.jobs.pipeline_schema`), ``plan()`` for ``--dry-run``,
``run()`` under the run protocol of :mod:`distforest.jobs.runs` and
``summary()``.  A pipeline names its kind with ``kind:``; a file without it
keeps working, its kind inferred from the sections it has (:func:`infer_kind`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from distforest.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from distforest.jobs.result import JobResult
    from distforest.jobs.stages import Pipeline


class Job(Protocol):
    """What every job offers the command line and ``distforest run``."""

    #: The ``kind:`` of its pipeline files.
    job_kind: ClassVar[str]
    name: str
    connect: dict[str, Any]
    decimal: str | None

    @property
    def out(self) -> str:
        """The main output (the store the job's lock guards)."""

    def plan(self) -> Pipeline:
        """What the job would do: tasks, tiles, bytes, memory, time (``--dry-run``)."""

    def run(self, progress: Any = None, *, restart: bool = False,
            run_id: str | None = None) -> JobResult:  # fmt: skip
        """Run the job: locked, resumable, reported, marked complete last."""

    def summary(self, result: JobResult) -> str:
        """The lines that tell the user what the run wrote."""

    def describe(self) -> str:
        """What the job computes, in a few words (``distforest validate``)."""


@dataclass(frozen=True)
class Kind:
    """A kind of job: the sections its pipeline files may have."""

    name: str
    #: Sections particular to this kind; a file with one of them is of this kind.
    marks: tuple[str, ...]
    #: Every section a pipeline of this kind reads (besides name, description, cluster).
    sections: tuple[str, ...]


#: The registry, in the order a file's kind is inferred.
KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("knn", ("neighbors", "knn"), ("input", "neighbors", "knn", "output")),
        Kind("smerf", ("smerf", "distance"), ("input", "smerf", "distance", "output")),
        Kind("simforest", ("simforest",),
             ("input", "simforest", "proximity", "outliers", "mds", "output")),
        Kind("xforest", ("xforest", "clustering"), ("input", "xforest", "clustering", "output")),
        Kind("simforest-predict", ("predict",), ("model", "input", "predict", "output")),
        Kind("score", ("model", "score"), ("model", "input", "score", "impute", "output")),
        Kind("importances", ("importances",), ("input", "forest", "importances", "output")),
        Kind("similarity", ("similarity",), ("input", "similarity", "output")),
        Kind("proximity", (),
             ("input", "forest", "proximity", "impute", "outliers", "mislabels", "mds",
              "output")),
    )
}  # fmt: skip


def infer_kind(data: Mapping[str, Any]) -> str:
    """The kind of a pipeline without ``kind:``: the first whose sections it has."""
    for kind in KINDS.values():
        if any(section in data for section in kind.marks):
            return kind.name
    return "proximity"


def kind_of(data: Mapping[str, Any], source: str) -> str:
    """The pipeline's ``kind:`` (checked against its sections), else the inferred kind."""
    given = data.get("kind")
    if given is None:
        return infer_kind(data)
    if given not in KINDS:
        raise ConfigError(
            f"{source}: kind {given!r} is not a kind of job{did_you_mean(str(given), KINDS)} "
            f"(kinds: {', '.join(KINDS)})"
        )
    for other in KINDS.values():
        found = [s for s in other.marks if s in data and s not in KINDS[given].sections]
        if other.name != given and found:
            raise ConfigError(
                f"{source}: kind is {given!r} but the section {found[0]!r} belongs to {other.name} "
                f"pipelines; remove the section or set kind: {other.name}"
            )
    return str(given)
