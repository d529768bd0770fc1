"""What a finished job wrote (:class:`JobResult`) and the lines that tell the user."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class JobResult:
    """What a finished job wrote, for the summary."""

    store: str
    name: str
    shape: tuple[int, int]
    n_trees: int
    task: str
    seconds: float
    outputs: dict[str, str]
    #: "new", "resumed" or "already complete".
    mode: str = "new"


def summary(result: JobResult) -> str:
    """A few lines telling the user what was written and how to open it."""
    width = max(len(k) for k in result.outputs) + 1
    how = {"new": "", "resumed": ", resumed", "already complete": ", already complete: nothing "
           "to do (use --restart to compute it again)"}[result.mode]  # fmt: skip
    lines = [
        f"{result.name} {result.shape[0]} x {result.shape[1]} "
        f"({result.task} forest, {result.n_trees} trees) in {result.seconds:.1f} s{how}",
        *output_lines(result.outputs, width),
        f"  {'inspect:':<{width}} distforest status {result.store}",
        f'  {"open:":<{width}} python -c "import xarray as xr; '
        f"print(xr.open_zarr('{result.store}')['{result.name}'])\"",
    ]
    return "\n".join(lines)


def mode_text(mode: str, store: str) -> str:
    """What a command's summary adds to its first line for a resumed run, or for one
    that found its store complete (the fix: remove the store)."""
    return {"resumed": ", resumed", "already complete": ", already complete: nothing to do "
            f"(remove {store} to compute it again)"}.get(mode, "")  # fmt: skip


def output_lines(outputs: Mapping[str, str], width: int | None = None) -> list[str]:
    """One indented ``label: path`` line per file written, the paths aligned at
    ``width`` (default: one past the longest label)."""
    if width is None:
        width = max((len(k) for k in outputs), default=0) + 1
    return [f"  {label + ':':<{width}} {path}" for label, path in outputs.items()]


#: Exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def ending(exc: BaseException) -> tuple[str, int] | None:
    """The one line a command prints when ``exc`` ends it, and its exit status: Ctrl-C or
    SIGTERM (whether finished work was kept; locks are released as the run unwinds), a
    distforest error (its message, secrets scrubbed), a disk that filled up (exit 6).
    None: another error, whose traceback is shown."""
    import sys

    from distforest.errors import DISK_FULL_ERRNOS, DiskFullError, DistforestError, Terminated
    from distforest.location import scrub

    if isinstance(exc, KeyboardInterrupt):
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        stores = sys.modules.get("distforest.store.run_store")  # (imported if one was made)
        if stores is not None and stores.WRITTEN_HERE:
            then = "finished work is kept: run the same command again to resume"
        else:
            then = "no result was written yet: run the same command again to start over"
        return (f"distforest: {how}; {then}",
                Terminated.exit_code if isinstance(exc, Terminated) else INTERRUPTED)  # fmt: skip
    if isinstance(exc, DistforestError):
        return scrub(f"distforest: error: {exc}"), exc.exit_code
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return f"distforest: error: {DiskFullError.from_os_error(exc)}", DiskFullError.exit_code
    return None
