"""Kept only for ``jobs/command_plans.py``'s import of :func:`scratch_bytes`.

The mislabel ranking has one method, in :mod:`distforest.apps.mislabels` (by
row chunks, in a store or in memory); this module re-exports nothing else and
goes when that import is moved.
"""

from distforest.apps.mislabels import scratch_bytes

__all__ = ["scratch_bytes"]
