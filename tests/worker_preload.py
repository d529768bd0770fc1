"""What the tests' fork server runs once, before it forks any worker (``tests/conftest.py``).

Importing the libraries is not all that a worker's first kernel costs: numba sets up its
compiler's target (its registries of types and functions) at the first call of any kernel,
compiled or loaded from the cache: about 0.3 s of CPU in each new worker process against
0.05 s once the fork server has done it, as here.
"""

from numba.core.registry import cpu_target

import distforest  # noqa: F401  (points numba at distforest's kernel cache)

cpu_target.target_context.refresh()
