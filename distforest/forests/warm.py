"""Compile every numba kernel once, ahead of the jobs: ``python -m distforest.forests.warm``.

numba keeps compiled kernels on disk (:mod:`distforest.kernels.jit_cache`),
but the first run after an install (or on a new cache directory) compiles
each kernel it reaches, in every process that reaches it before the cache is
written.  :func:`warm_kernels` does it once, in this process: a tiny fit of
every forest kind and its answers (:func:`tiny_fits`: the signatures the jobs
compile), then each kernel module's ``warm_up`` with every dtype chosen on
purpose (tree counters of 8 and 16 bits, distances of 32 and 64 bits).
Processes started afterwards (test workers, a cluster's workers) load the
machine code from the cache.
"""

from __future__ import annotations

import importlib
import tempfile
import time
from pathlib import Path

import numpy as np

#: Kernel modules with a ``warm_up()`` of their own, and its arguments beyond the tiny fits'.
WARM_UPS: dict[str, tuple[tuple, ...]] = {
    "betasim": ((),),
    "coleaf": ((1,), (255,)),
    "leafsums": ((),),
    "metrics": ((),),
    "pairsums": ((),),
    "proximity": ((),),
    "row_blocks": ((),),
    "rptrees": ((),),
    "smerf": ((np.float64,), (np.float32,)),
    "transpose": ((),),
}


def tiny_fits(folder: Path | str) -> None:
    """Fit every forest kind on 120 rows and ask it its answers (stores in ``folder``).

    Proximity forests (Breiman, out-of-bag and RF-GAP matrices, neighbours,
    new rows; a refined top-k forest), X-Forest, both SimForests and SMERF,
    all in this process (a cluster made current elsewhere is not used).
    """
    from distforest.parallel.execution import execution

    with execution(client="synchronous"):  # here, whatever cluster is current
        _fits(Path(folder))


def _fits(folder: Path) -> None:
    from sklearn.datasets import make_classification

    from distforest.forests.proximity_forest import ProximityForest
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.forests.smerf import SMERF
    from distforest.forests.xforest import XForest

    X, y = make_classification(120, 6, random_state=0)
    pf = ProximityForest(8, random_state=0).fit(X, y)
    regression = ProximityForest(8, random_state=0).fit(X, X[:, 0])
    regression.predict(X[:10])
    regression.oob_prediction_  # noqa: B018
    for method in ("original", "oob", "rfgap"):
        pf.proximity(method, store=folder / f"{method}.zarr").values  # noqa: B018
    pf.proximity_neighbors(5, "original", store=folder / "neighbors.zarr")
    pf.proximity(X[:10], store=folder / "new.zarr")
    refined = ProximityForest(6, max_samples=0.3, leaf_bound=4, random_state=2).fit(X, y)
    refined.proximity_neighbors(5, "rfgap", store=folder / "refined.zarr")
    xf = XForest(n_estimators=5, leaf_size=5, random_state=0).fit(X)
    xf.similarity(store=folder / "xforest.zarr")
    xf.cross_similarity(X[:10])
    K = X @ X.T
    SimilarityForestClassifier(n_estimators=5, random_state=0).fit(K, y).predict(K)
    SimilarityForestClassifier(n_estimators=5, metric="rbf", random_state=0).fit(X, y).predict(X)
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    smerf = SMERF(n_estimators=5, random_state=0).fit(X, D)
    smerf.predict_distance(X[:10])
    smerf.apply(X)


def warm_kernels() -> dict[str, float]:
    """Compile (or load from the cache) every kernel the jobs use; what it took.

    Returns
    -------
    dict
        ``kernels`` and ``signatures`` compiled or loaded, ``cpu_s`` the CPU
        seconds of this process it took.
    """
    from distforest.kernels.signatures import compiled_signatures

    start = time.process_time()
    with tempfile.TemporaryDirectory(prefix="distforest-warm-") as folder:
        tiny_fits(folder)
    for name, calls in WARM_UPS.items():
        module = importlib.import_module(f"distforest.kernels.{name}")
        for args in calls:
            module.warm_up(*args)
    signatures = compiled_signatures()
    return {"kernels": len(signatures), "signatures": sum(map(len, signatures.values())),
            "cpu_s": round(time.process_time() - start, 2)}  # fmt: skip


if __name__ == "__main__":  # pragma: no cover - a command
    print(warm_kernels())
