"""In memory or in a store: the one rule for every matrix a call returns or reads whole.

A matrix of ``n x m`` cells is kept in memory (a NumPy array, an in-memory
``xarray.DataArray``) only when it has at most :func:`in_memory_cells` cells;
a larger one must be written to a Zarr store tile by tile (``store=...``), or,
for an input, given as a store so that tasks read only the rows they need.

The limit is the ``distforest.in-memory-cells`` setting (:mod:`distforest.settings`,
default 100,000,000 cells: 400 MB of float32, 800 MB of float64).  The
estimators' ``max_in_memory`` argument (rows) overrides it for one call as
``max_in_memory ** 2`` cells.
"""

from __future__ import annotations

from distforest import settings
from distforest.errors import ParameterError


def in_memory_cells(max_in_memory: int | None = None) -> int:
    """The most cells of a matrix held in memory.

    Parameters
    ----------
    max_in_memory : int, optional
        Rows of the largest square matrix a call may keep in memory (its
        ``max_in_memory`` argument); default the ``distforest.in-memory-cells``
        setting.
    """
    if max_in_memory is not None:
        return int(max_in_memory) ** 2
    return int(settings.get("in-memory-cells"))


def fits_in_memory(n: int, m: int, max_in_memory: int | None = None) -> bool:
    """Whether an ``n x m`` matrix may be held in memory (:func:`in_memory_cells`)."""
    return int(n) * int(m) <= in_memory_cells(max_in_memory)


def check_in_memory(
    n: int, m: int, *, what: str, itemsize: int, store: str, max_in_memory: int | None = None
) -> None:
    """Refuse an in-memory ``n x m`` matrix larger than :func:`in_memory_cells`.

    Parameters
    ----------
    n, m : int
        The matrix's shape.
    what : str
        What it is ("proximity", "distance matrix"), for the message.
    itemsize : int
        Bytes per cell, for the message.
    store : str
        An example store path to suggest.
    max_in_memory : int, optional
        The call's ``max_in_memory`` (rows), if given.

    Raises
    ------
    ParameterError
        Saying how much memory it would take and to pass ``store=``.
    """
    if fits_in_memory(n, m, max_in_memory):
        return
    raise ParameterError(
        f"an in-memory {n} x {m} {what} needs {n * m * itemsize / 1e9:.1f} GB, above the "
        f"in-memory limit of {in_memory_cells(max_in_memory):,} cells; pass store={store!r} "
        "to write it tile by tile (or raise max_in_memory, or the distforest.in-memory-cells "
        "setting, if you have the memory)"
    )
