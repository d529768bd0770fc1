"""The types each kernel is compiled for: one signature per kernel where callers agree.

numba compiles a kernel once per distinct tuple of argument types, and it
tells apart arrays that hold the same numbers: a read-only array (Zarr and
Dask hand those out, and so do cached arrays marked read-only) from a
writable one, a C-contiguous from a strided one, int32 from int64.  Every
such difference costs a whole compilation (0.1-2 CPU s a kernel) in every
fresh process with a cold cache: the first run after an install, a test
session, each worker that starts before the cache is written.

- :func:`kernel_input` is the one conversion of an array a kernel only reads:
  the kernel's dtype, C-contiguous, and read-only (a read-only view costs no
  copy, whereas making a read-only array writable would), so that whoever
  made the array, the kernel sees one type.
- :func:`dispatchers` and :func:`compiled_signatures` list the kernels and
  the signatures compiled so far in this process, :func:`caller_variants`
  those that differ only in what callers passed (what
  ``tests/test_kernel_signatures.py`` and ``benchmarks/bench_kernel_compile.py``
  check and count).

Scalars passed between kernels are typed too: a constant argument of a call
inside a kernel (``f(x, 0)``) may compile ``f`` for ``Literal[int](0)`` as
well as for ``int64``; the kernels pass ``np.int64(0)`` instead.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection
from typing import Any

import numpy as np
from numba.core import types
from numba.core.registry import CPUDispatcher

import distforest.kernels as _package


def kernel_input(array: Any, dtype: Any) -> np.ndarray:
    """``array`` as the kernels read it: ``dtype``, C-contiguous, read-only.

    Copies only when the dtype or the layout differ; otherwise returns a
    read-only view of the same memory.

    Parameters
    ----------
    array : array_like
    dtype : dtype
        The dtype the kernel is compiled for.

    Returns
    -------
    ndarray
        A read-only, C-contiguous array of ``dtype``.
    """
    out = np.ascontiguousarray(array, dtype=dtype).view()
    out.flags.writeable = False
    return out


def dispatchers() -> dict[str, CPUDispatcher]:
    """Every numba kernel of the package, by ``module.name`` (imports every kernel module)."""
    found: dict[str, CPUDispatcher] = {}
    for info in pkgutil.iter_modules(_package.__path__):
        module = importlib.import_module(f"{_package.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher) and value.__module__ == module.__name__:
                found[f"{info.name}.{name}"] = value
    return found


def compiled_signatures() -> dict[str, list[str]]:
    """The signatures compiled (or loaded from the cache) so far, by kernel; none omitted."""
    return {name: [str(sig) for sig in kernel.signatures]
            for name, kernel in sorted(dispatchers().items()) if kernel.signatures}  # fmt: skip


def _erased(arg: types.Type) -> types.Type:
    """``arg`` without what only its caller decides: literal value, read-only flag, layout."""
    arg = types.unliteral(arg)
    if isinstance(arg, types.Array):
        return types.Array(arg.dtype, arg.ndim, "A")
    return arg


def caller_variants(kernel: CPUDispatcher, among: Collection[str] | None = None) -> list[list[str]]:
    """Groups of ``kernel``'s compiled signatures that differ only in what callers pass.

    Two signatures are one group when they are equal once literal constants
    are typed as their plain type and arrays lose their read-only flag and
    layout: each group of two or more is a compilation :func:`kernel_input`
    (or a non-literal constant) would have saved.

    Parameters
    ----------
    kernel : numba dispatcher
        The kernel.
    among : collection of str, optional
        Only these of its signatures (as numba prints them), e.g. those one
        workload compiled; all of them by default.

    Returns
    -------
    list of list of str
        Each group of two or more signatures, as numba prints them.
    """
    groups: dict[tuple, list[str]] = {}
    for sig in kernel.signatures:
        if among is not None and str(sig) not in among:
            continue
        groups.setdefault(tuple(_erased(a) for a in sig), []).append(str(sig))
    return [group for group in groups.values() if len(group) > 1]
