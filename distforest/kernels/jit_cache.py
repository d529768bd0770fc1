"""Where numba keeps the compiled kernels between runs.

Every kernel is ``@njit(cache=True)``: compiled once, then loaded from disk
by later runs and by every worker process (compiling them all takes longer
than a small job).  :func:`configure_cache` points numba at one directory
per user, ``$XDG_CACHE_HOME/distforest/numba`` (``~/.cache/distforest/numba``
without it), before any kernel is defined:

- a ``NUMBA_CACHE_DIR`` set by the user is kept as it is;
- the variable is set in ``os.environ``, so worker processes started later
  (spawned by a LocalCluster) use the same directory;
- if the directory cannot be created or written (a read-only home, a full
  disk), a new private temporary directory is used for this run and its
  workers instead (never a fixed name in ``/tmp``: another user could put
  compiled code there), so importing distforest does not fail for want of
  a cache.

Several workers may compile the same kernel at once into the shared
directory: numba writes each cache file to a unique temporary name and
renames it into place, so a reader sees a whole file or none, and two
writers of the same kernel write the same bytes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

#: numba's own variable for its cache directory.
ENV = "NUMBA_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/distforest/numba``, else ``~/.cache/distforest/numba``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "distforest" / "numba"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def configure_cache() -> str:
    """Point numba's cache at :func:`default_cache_dir` unless the user chose one.

    Returns
    -------
    str
        The cache directory in use: the user's ``NUMBA_CACHE_DIR``,
        distforest's, or a temporary one when distforest's cannot be written.
    """
    chosen = os.environ.get(ENV)
    if chosen:
        return chosen
    path = default_cache_dir()
    if not _writable(path):
        path = Path(tempfile.mkdtemp(prefix="distforest-numba-"))
    os.environ[ENV] = str(path)
    if "numba" in sys.modules:  # numba read its config already: tell it too
        from numba.core import config

        config.CACHE_DIR = str(path)  # type: ignore[attr-defined]
    return str(path)
