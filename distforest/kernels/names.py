"""The names of what the kernels compute: their metrics, methods and rules.

The kernels own these names; the rooms above (``forests.constraints``, the
command line, the pipeline schema) import them from here instead of restating
them.  This module imports nothing, so a light ``--help`` can list the
choices without loading numba or NumPy.
"""

from __future__ import annotations

#: Tree kinds of :class:`distforest.kernels.trees.TreeParams`: best splits (Breiman)
#: or random thresholds (extremely randomized trees).
TREE_KINDS = ("random-forest", "extra-trees")
#: Proximities of :mod:`distforest.kernels.leafsums` and :mod:`distforest.kernels.proximity`.
PROXIMITY_METHODS = ("original", "oob", "rfgap")
#: Methods that weigh rows by whether they are out of bag (they need bootstrap).
OUT_OF_BAG_METHODS = ("oob", "rfgap")
#: What a SimForest's matrix holds (:mod:`distforest.kernels.simtrees`).
SIMFOREST_KINDS = ("similarity", "distance")
#: Where an object whose similarity is missing goes (:mod:`distforest.kernels.simtrees`).
SIMFOREST_MISSING = ("stay", "both", "larger")
#: Measures of 0/1 features (:mod:`distforest.kernels.metrics`).
BINARY_MEASURES = ("russell-rao", "sokal-michener", "jaccard")
