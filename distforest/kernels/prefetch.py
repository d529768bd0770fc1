"""A cache prefetch hint for numba kernels that read scattered runs of an array.

A kernel that walks many short runs at places known in advance (the co-leaf
kernel reads one leaf's member list per tree, each at a random place in an
array far larger than the caches) waits for memory at the start of every run,
before the hardware prefetcher has seen a pattern.  :func:`prefetch` asks the
processor to start loading a run's first cache lines while the kernel still
works on an earlier one.  It is a hint only: it changes no value, and a
processor may ignore it.

It is LLVM's ``llvm.prefetch`` intrinsic, emitted through numba's documented
:func:`numba.extending.intrinsic` extension point.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: Elements of a 4-byte array in one 64-byte cache line.
LINE_INT32 = 16


@intrinsic
def prefetch(typingctx, array, index):  # pragma: no cover - numba
    """Hint that ``array[index]`` will soon be read (``index`` not checked: a hint never faults)."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]],
                                           wraparound=False, boundscheck=False)  # fmt: skip
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # read (0), keep in all cache levels (locality 3), data cache (1)
        builder.call(fn, [builder.bitcast(pointer, byte_pointer), ir.Constant(i32, 0),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])  # fmt: skip
        return context.get_dummy_value()

    return sig, codegen
