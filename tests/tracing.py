"""The driver's traced allocations of one call (for the by-chunks memory tests)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any


def traced_peak(call: Callable[[], Any]) -> int:
    """Peak bytes Python allocated in this process while ``call()`` ran."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
