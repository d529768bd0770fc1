"""Each kernel compiles one signature for what its callers pass (kernels/signatures.py).

A tiny fit of every forest kind (:func:`distforest.forests.warm.tiny_fits`),
in this process, then two checks on what numba compiled: no kernel holds two
signatures that differ only in what a caller decided (a literal constant, a
read-only flag, a layout: among the signatures the fits compiled; a kernel
called only by kernels shows its signatures when it was compiled here, not
when loaded from the disk cache), and the
kernels the fits compiled compile one signature each, but for the dtypes
chosen on purpose (:data:`DESIGNED`).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from distforest.forests.warm import tiny_fits
from distforest.kernels.signatures import (
    caller_variants,
    compiled_signatures,
    dispatchers,
    kernel_input,
)

#: Kernels compiled for more than one dtype on purpose, and how many the tiny fits ask for:
#: the tree counters are uint8 or uint16 by the number of trees (int32 for a fraction), and
#: SMERF reads D in place (float32 or float64).
DESIGNED = {"proximity.add_shared_leaf_counts": 2, "proximity.add_sorted_leaf_counts": 2}


#: Kernels the tiny fits call from Python, one or more of each forest kind (those called
#: only from other kernels are in ``signatures`` only when compiled here, not loaded).
REACHED = {"proximity.add_sorted_leaf_counts", "coleaf._block_neighbors", "refine.refine_tree",
           "rptrees.grow_tree", "betasim.similarity_tile_words", "simsplit.split_level",
           "smerf.tile_distance", "smerf.apply_forest", "transpose._transpose_words"}  # fmt: skip


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The signatures before and after the tiny fits, by kernel."""
    before = compiled_signatures()
    tiny_fits(tmp_path_factory.mktemp("fits"))
    return before, compiled_signatures()


def test_no_kernel_is_compiled_twice_for_what_callers_pass(compiled):
    """Among the signatures the tiny fits compiled (those another test file of this worker
    compiled earlier are left out, so the check does not depend on the files' order)."""
    before, after = compiled
    kernels = dispatchers()
    assert REACHED <= set(after)  # the fits reached the kernels of every forest kind
    new = {name: set(sigs) - set(before.get(name, ())) for name, sigs in after.items()}
    variants = {name: caller_variants(kernels[name], among=new[name]) for name in after}
    assert {name: groups for name, groups in variants.items() if groups} == {}


def test_the_fits_compile_one_signature_a_kernel(compiled):
    before, after = compiled
    new = {name: len(set(sigs) - set(before.get(name, ()))) for name, sigs in after.items()}
    too_many = {name: n for name, n in new.items() if n > DESIGNED.get(name, 1)}
    assert too_many == {}


def test_the_check_finds_caller_variants():
    """A kernel called with a read-only and a writable array, and with a literal, is caught."""

    @njit
    def inner(a, flag):
        return a[0] + flag

    @njit
    def outer(a):
        return inner(a, 0)

    writable = np.arange(3.0)
    assert caller_variants(inner) == []
    inner(writable, 1)
    inner(writable[::-1], 1)  # another layout
    read_only = writable.view()
    read_only.flags.writeable = False
    inner(read_only, 1)
    outer(writable)  # compiles inner for Literal[int](0) inside outer
    (group,) = caller_variants(inner)
    assert len(group) == 4
    inner_norm = njit(inner.py_func)
    for array in (writable, writable[::-1], read_only):
        inner_norm(kernel_input(array, np.float64), 1)
    assert len(inner_norm.signatures) == 1


def test_kernel_input_is_read_only_and_copies_only_to_convert():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    same = kernel_input(a, np.float64)
    assert not same.flags.writeable and np.shares_memory(same, a) and a.flags.writeable
    converted = kernel_input(a.T, np.float32)
    assert converted.flags.c_contiguous and converted.dtype == np.float32
    assert not np.shares_memory(converted, a)
    np.testing.assert_array_equal(converted, a.T.astype(np.float32))
