"""Numba and NumPy kernels: arrays and seeds in, arrays out.

Importing the package sets where numba caches the compiled kernels
(:mod:`distforest.kernels.jit_cache`) before any of them is defined.
"""

from distforest.kernels.jit_cache import configure_cache

configure_cache()
