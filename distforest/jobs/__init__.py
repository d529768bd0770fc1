"""Jobs: what every command and pipeline kind runs, between the command line and the apps.

``cli/`` parses options and prints; a job checks its inputs and outputs,
plans (``--dry-run``), runs its stages under the run protocol
(:mod:`distforest.jobs.runs`) and says what it wrote.  See
``docs/design.md`` section 2.

The command line imports nothing of the package but ``distforest.jobs``, the
errors and the settings (an import-linter contract in ``pyproject.toml``).
What it needs from further down is re-exported here (:data:`SHELL`), each
name imported when it is first used, so that ``distforest --help`` loads none
of the heavy modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distforest import examples as examples
    from distforest.forests import constraints as constraints
    from distforest.io.model_files import check_model_file as check_model_file
    from distforest.io.tables import decimal_mark as decimal_mark
    from distforest.location import ScrubbedStream as ScrubbedStream
    from distforest.location import parent as parent
    from distforest.location import remember_secrets as remember_secrets
    from distforest.location import scrub as scrub
    from distforest.parallel.cluster_config import check_worker_size as check_worker_size

#: Name -> ``module`` (the name is that module) or ``module:attribute``: what the command
#: line takes from outside ``jobs/``.
SHELL = {
    "constraints": "distforest.forests.constraints",
    "examples": "distforest.examples",
    "check_model_file": "distforest.io.model_files:check_model_file",
    "decimal_mark": "distforest.io.tables:decimal_mark",
    "ScrubbedStream": "distforest.location:ScrubbedStream",
    "parent": "distforest.location:parent",
    "remember_secrets": "distforest.location:remember_secrets",
    "scrub": "distforest.location:scrub",
    "check_worker_size": "distforest.parallel.cluster_config:check_worker_size",
}

__all__ = sorted(SHELL)


def __getattr__(name: str) -> Any:
    """A name of :data:`SHELL`, imported on first use."""
    if name not in SHELL:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = SHELL[name].partition(":")
    value = importlib.import_module(module)
    value = getattr(value, attribute) if attribute else value
    globals()[name] = value
    return value
