"""The dry-run :class:`Plan` of the commands that are not yet a job kind.

A job kind's dry run prints its stages (:class:`~distforest.jobs.stages.Pipeline`);
the commands not yet made a job (``impute``, ``similarity``, ``knn``, ...)
print a :class:`Plan` with the same totals (:func:`~distforest.jobs.stages.totals`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distforest.jobs.stages import placement_of, totals

__all__ = ["Plan", "placement_of"]


@dataclass
class Plan:
    """What a job will do, in the fields every ``--dry-run`` prints (:meth:`Plan.show`).

    Attributes
    ----------
    title : str
        The job and its input's size.
    steps : list of (label, text)
        What the job computes, in order (kind-specific).
    tasks : int
        Dask tasks of the job's main stages (fit batches and tiles).
    tiles : int
        Tiles among them.
    disk : dict
        Bytes each output takes on disk (upper bounds, uncompressed).
    free_bytes : int
        Free space where the outputs go.
    worker_bytes : int
        Memory of one worker at its peak (estimate).
    cpu_seconds : float
        Computing, in core-seconds (rough: :data:`SECONDS_PER`).
    threads : int
        Threads the job would run on (assumed for a cluster not yet reached).
    where : str
        Where it would run (:func:`~distforest.parallel.placement.runs_in_process`).
    """

    title: str
    steps: list[tuple[str, str]]
    tasks: int
    tiles: int
    disk: dict[str, int]
    free_bytes: int
    worker_bytes: int
    cpu_seconds: float
    threads: int
    where: str
    notes: list[str] = field(default_factory=list)

    @property
    def disk_bytes(self) -> int:
        """Bytes of every output together."""
        return int(sum(self.disk.values()))

    def show(self) -> str:
        """The lines every ``--dry-run`` of a command that is not yet a job kind prints."""
        lines = [self.title, *(f"  {label + ':':<14}{text}" for label, text in self.steps)]
        return "\n".join([*lines, *totals(self.tasks, self.tiles, self.disk, self.free_bytes,
                                           self.worker_bytes, self.cpu_seconds, self.threads,
                                           self.where, self.notes)])  # fmt: skip
