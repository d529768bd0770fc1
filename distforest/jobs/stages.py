"""A job is a list of stages: what ``--dry-run`` prints is what the run executes.

A :class:`Stage` names what it reads, what it writes, how many tasks it
submits, its cost estimate and the function that does it; a
:class:`Pipeline` is a job's stages in order, with the input size that
decides where they run.  The dry run prints a pipeline (:meth:`Pipeline.show`);
the run protocol (:func:`distforest.jobs.runs.execute`) runs the same
pipeline's stages, records each one's measured time and memory beside its
estimate, and resumes from the stages a killed run finished.  There is no
second description of a run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distforest import location

#: The input cells of a job whose rows are read by partitions: always on a cluster.
ON_A_CLUSTER = 2**62

#: The note of a plan whose stages run products not counted in its tasks.
PRODUCTS_NOTE = ("  note:         plus one product task per batch of trees and iteration "
                 "(matrix-free; iterations depend on the data)")  # fmt: skip

#: ``run(ctx)`` of a stage: does the work, may set ``ctx.done.outputs`` / ``ctx.done.info``.
StageFunction = Callable[[Any], None]


@dataclass
class Cost:
    """A stage's cost estimate.

    Attributes
    ----------
    cpu_seconds : float
        Computing, in core-seconds.
    worker_bytes : int
        Memory of one worker (or of this process) at the stage's peak.
    disk : dict
        Bytes each output of the stage takes on disk (upper bounds).
    """

    cpu_seconds: float = 0.0
    worker_bytes: int = 0
    disk: dict[str, int] = field(default_factory=dict)


@dataclass
class Stage:
    """One step of a job (rechunker's ``Stage``): its work and what it costs.

    Attributes
    ----------
    name : str
        The name recorded in the store's ``stages`` and in the report.
    what : str
        What it computes, in a few words (one line of the dry run).
    reads, writes : tuple of str
        What it reads and writes (paths or array names).
    tasks : int
        Dask tasks it submits that the plan counts (fit batches, tiles, searches).
    tiles : int
        Of those, tiles.
    cost : Cost
        Its estimate.
    run : callable
        ``run(ctx)`` does the stage (:class:`~distforest.jobs.runs.Context`).
    resume : callable or None
        ``resume(ctx)`` when resuming a run that finished the stage (a fit
        stage loads its saved model); None: a finished stage is skipped.
    again : bool
        Run the stage even when a killed run recorded it (it skips its own
        finished parts: tiles).
    """

    name: str
    what: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    tasks: int = 0
    tiles: int = 0
    cost: Cost = field(default_factory=Cost)
    run: StageFunction | None = None
    resume: StageFunction | None = None
    again: bool = False


@dataclass
class Pipeline:
    """A job's stages in order (rechunker's ``Pipeline``) and what places them.

    Attributes
    ----------
    title : str
        The job and its input's size.
    steps : list of (label, text)
        Lines the dry run prints before the stages (input, store, ...).
    stages : list of Stage
    cells : int
        Input cells: with the job's cluster options, where the stages run
        (:func:`~distforest.parallel.placement.place`).
    connect : dict
        The job's cluster options.
    out : str
        The main output (its folder's free space is checked).
    notes : list of str
        Lines printed after the plan.
    """

    title: str
    steps: list[tuple[str, str]]
    stages: list[Stage]
    cells: int
    connect: dict[str, Any]
    out: str
    notes: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        """Counted tasks of every stage."""
        return sum(s.tasks for s in self.stages)

    @property
    def tiles(self) -> int:
        """Tiles among them."""
        return sum(s.tiles for s in self.stages)

    @property
    def disk(self) -> dict[str, int]:
        """Bytes each output takes on disk, over every stage."""
        out: dict[str, int] = {}
        for s in self.stages:
            for label, size in s.cost.disk.items():
                out[label] = out.get(label, 0) + int(size)
        return out

    @property
    def disk_bytes(self) -> int:
        """Bytes of every output together."""
        return int(sum(self.disk.values()))

    @property
    def worker_bytes(self) -> int:
        """The largest stage's memory."""
        return max((s.cost.worker_bytes for s in self.stages), default=0)

    @property
    def cpu_seconds(self) -> float:
        """Computing of every stage, core-seconds."""
        return float(sum(s.cost.cpu_seconds for s in self.stages))

    def check_room(self) -> None:
        """Refuse a run whose outputs would not fit where they go (exit 6, after the dry
        run printed the plan)."""
        from distforest.jobs.estimates import check_disk

        check_disk(location.parent(self.out), self.disk_bytes, replaces=self.out)

    def where(self) -> tuple[str, int]:
        """Where the stages would run, and on how many threads (the run's rule)."""
        return placement_of(self.cells, self.connect)

    def show(self) -> str:
        """The lines ``--dry-run`` prints: the steps, each stage, then the totals."""
        from distforest.jobs.estimates import size_text

        where, threads = self.where()
        lines = [self.title, *(f"  {label + ':':<14}{text}" for label, text in self.steps)]
        lines.append("  stages:")
        for i, s in enumerate(self.stages, 1):
            wall = s.cost.cpu_seconds / max(1, threads)
            lines.append(f"    {i}. {s.name + ':':<13}{s.what}")
            lines.append(f"       {'':<13}{s.tasks:,} tasks, about {seconds_text(wall)}, "
                         f"{size_text(s.cost.worker_bytes)} per worker")  # fmt: skip
        from distforest.jobs.estimates import free_space

        free = free_space(location.parent(self.out))
        return "\n".join([*lines, *totals(self.tasks, self.tiles, self.disk, free,
                                           self.worker_bytes, self.cpu_seconds, threads, where,
                                           self.notes)])  # fmt: skip


def totals(tasks: int, tiles: int, disk: dict[str, int], free: int, worker_bytes: int,
           cpu_seconds: float, threads: int, where: str,
           notes: list[str]) -> list[str]:  # fmt: skip
    """The lines every dry run ends with: tasks, disk (checked against the ``free`` bytes
    where the outputs go), memory, time and where it runs."""
    from distforest.jobs.estimates import UNBOUNDED, size_text

    lines = [f"  {'tasks:':<14}{tasks:,} ({tiles:,} of them tiles)"]
    for label, size in disk.items():
        lines.append(f"    {label:<34} {size_text(size):>10}")
    room = ("object storage: no free-space limit" if free >= UNBOUNDED
            else f"{size_text(free)} free")  # fmt: skip
    need = int(sum(disk.values()))
    wall = cpu_seconds / max(1, threads)
    return [
        *lines,
        f"  disk:         up to {size_text(need)}; {room} "
        + ("(ok)" if need <= free else "(NOT ENOUGH: the run would be refused)"),
        f"  memory:       about {size_text(worker_bytes)} at peak per worker (estimate)",
        f"  time:         about {seconds_text(wall)} on {threads} threads "
        f"({seconds_text(cpu_seconds)} of computing; rough, start-up not counted)",
        f"  runs:         {where}",
        *notes,
    ]


def placement_of(cells: int, options: dict[str, Any]) -> tuple[str, int]:
    """Where a job on ``cells`` input cells would run, and on how many threads: the rule
    of :func:`~distforest.parallel.placement.place`, which the run follows."""
    from distforest.parallel import placement

    limit = placement.in_process_cells()
    if cells >= ON_A_CLUSTER and not placement.cluster_named(options=options):
        threads = os.cpu_count() or 1
        return (f"on a LocalCluster started for the run (rows read by partitions; assuming "
                f"{threads} threads)", threads)  # fmt: skip
    if placement.runs_in_process(cells, options=options):
        threads = placement.in_process_threads()
        return (f"in this process on {threads} threads ({cells:,} input cells, at most "
                f"{limit:,})", threads)  # fmt: skip
    threads = os.cpu_count() or 1
    if placement.cluster_named(options=options):
        return f"on the cluster of the cluster options (assuming {threads} threads)", threads
    return (f"on a LocalCluster started for the run ({cells:,} input cells, more than "
            f"{limit:,}; assuming {threads} threads)", threads)  # fmt: skip


def seconds_text(seconds: float) -> str:
    """A duration as the dry run and the progress lines print it."""
    if seconds < 1:  # three decimals: a small job's estimate is still a number to compare
        return f"{seconds:.3f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"
