"""The fields and methods every job class shares, written once.

A job class (:class:`~distforest.jobs.proximity.ProximityJob`, ...) is a
keyword-only dataclass deriving from :class:`JobBase` (options of the run),
:class:`TableJob` (a table read with a target and dropped columns) or
:class:`ForestJob` (that, a forest's parameters and an output store).  It
names the functions that plan and run it with the :meth:`JobBase.plans` and
:meth:`JobBase.runs` decorators, so ``plan()``, ``run()`` and ``summary()``
(the :class:`~distforest.jobs.registry.Job` protocol) are written here only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from distforest._version import __version__

if TYPE_CHECKING:
    from distforest.jobs.result import JobResult
    from distforest.jobs.stages import Pipeline

F = TypeVar("F", bound=Callable[..., Any])


def new_run_id() -> str:
    """A short random ID naming one run in its store, report and lock."""
    return uuid.uuid4().hex[:8]


@dataclass(kw_only=True)
class JobBase:
    """What every job holds besides its own sections."""

    #: The ``kind:`` of its pipeline files (:mod:`distforest.jobs.registry`).
    job_kind: ClassVar[str]
    #: ``planner(job) -> Plan`` and ``runner(job, progress, restart=, run_id=) -> JobResult``
    #: of the class (set by :meth:`plans` and :meth:`runs`).
    planner: ClassVar[Callable[[Any], Pipeline]]
    runner: ClassVar[Callable[..., JobResult]]

    input: str
    na_values: tuple[str, ...] = ()
    #: Decimal mark of numbers in text inputs (``input.decimal``); None: decided per column.
    decimal: str | None = None
    overwrite: bool = False
    #: Keyword arguments of :func:`distforest.parallel.cluster.connect`.
    connect: dict[str, Any] = field(default_factory=dict)
    name: str = "job"
    #: The pipeline file the job came from, if any.
    source: str | None = None

    @classmethod
    def plans(cls, func: F) -> F:
        """Decorator: ``func(job)`` returns the plan of this class's jobs (``--dry-run``)."""
        setattr(cls, "planner", staticmethod(func))  # noqa: B010 (a ClassVar of the class)
        return func

    @classmethod
    def runs(cls, func: F) -> F:
        """Decorator: ``func(job, progress, restart=, run_id=)`` runs this class's jobs."""
        setattr(cls, "runner", staticmethod(func))  # noqa: B010 (a ClassVar of the class)
        return func

    def plan(self) -> Pipeline:
        """What the job would do (``--dry-run``): reads the input, runs nothing."""
        return type(self).planner(self)

    def run(self, progress: Any = None, *, restart: bool = False,
            run_id: str | None = None) -> JobResult:  # fmt: skip
        """Run the job under its run protocol (:mod:`distforest.jobs.runs`): locked,
        resumable, reported, marked complete last."""
        return type(self).runner(self, progress, restart=restart, run_id=run_id or new_run_id())

    def summary(self, result: JobResult) -> str:
        """The lines that tell the user what the run wrote."""
        from distforest.jobs.result import summary

        return summary(result)

    def spec_of(self, keep: tuple[str, ...], **more: Any) -> dict[str, Any]:
        """What determines the results, hashed to recognise the same job: the fields
        ``keep``, then ``more`` (the input's fingerprint, ...), and distforest's version."""
        spec = {k: v for k, v in asdict(self).items() if k in keep}
        spec.update(more)
        spec["distforest_version"] = __version__
        return json.loads(json.dumps(spec, default=str))


@dataclass(kw_only=True)
class TableJob(JobBase):
    """A job that reads a table: its target column and the columns it drops."""

    target: str | None = None
    drop: tuple[str, ...] = ()

    def table_kw(self) -> dict[str, Any]:
        """Keyword arguments of :func:`distforest.io.load_table` for the job's input."""
        return {"target": self.target, "drop": self.drop, "na_values": self.na_values}


@dataclass(kw_only=True)
class ForestJob(TableJob):
    """A job that fits a forest on its table and writes a store."""

    out: str
    #: Keyword arguments of the job's estimator.
    forest: dict[str, Any] = field(default_factory=dict)


def input_fields(section: dict[str, Any], *, table: bool = True) -> dict[str, Any]:
    """The fields a pipeline's ``input`` section gives every job: ``na_values`` and
    ``decimal``, and with ``table`` (a :class:`TableJob`) the ``drop``-ped columns."""
    fields: dict[str, Any] = {"na_values": tuple(str(v) for v in section.get("na_values") or ()),
              "decimal": section.get("decimal")}  # fmt: skip
    if table:
        fields["drop"] = tuple(section.get("drop") or ())
    return fields
