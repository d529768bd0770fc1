"""Shared fixtures: a real LocalCluster with worker processes, small datasets."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

#: How the tests' clusters start their worker processes.  Forked from one server
#: process that has imported the libraries already (distributed's own test suite does
#: the same), not each started anew (spawn, what users' clusters do): each worker then
#: costs a fork instead of the 2 s of CPU of importing numpy, dask, scikit-learn,
#: numba and distforest; a quarter of the CPU of the tests that start clusters.  Set in
#: the environment, so the CLI runs the tests start as subprocesses inherit it; the
#: tests of how a user's own script starts workers remove it (``user_environment``).
START_METHOD = "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"
os.environ.setdefault(START_METHOD, "forkserver")
#: The workers' statistical profiler (a thread sampling every task's stack each 10 ms)
#: serves the dashboard, which the tests do not open: off, in the tests only.
os.environ.setdefault("DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED", "False")
#: Every scheduler, worker and nanny checks its event loop's health every 20 ms (a warning
#: when the loop was blocked for 3 s): every 200 ms in the tests, a dozen servers at once.
os.environ.setdefault("DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL", "200ms")
dask.config.refresh()
#: What the fork server imports once, before it forks any worker (the last: numba's
#: compiler target set up, ``tests/worker_preload.py``).
PRELOAD = ["distributed", "numpy", "pandas", "dask.array", "dask.dataframe", "zarr",
           "numba", "sklearn.tree", "distforest", "worker_preload"]  # fmt: skip


def _preload_the_fork_server() -> None:
    from distributed.utils import get_mp_context

    context = get_mp_context()  # distributed sets its own list once; ours replaces it
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload(PRELOAD)  # type: ignore[attr-defined]


_preload_the_fork_server()


def user_environment() -> dict[str, str]:
    """The environment of a user's process: workers started as distributed's default."""
    return {k: v for k, v in os.environ.items() if k != START_METHOD}


DATA = Path(__file__).resolve().parents[1] / "distforest" / "data"


@pytest.fixture(autouse=True)
def _distforest_logger() -> Iterator[None]:
    """Give every test the ``distforest`` logger as Python starts it.

    An in-process CLI call (in a test or a module-scoped fixture) gives it its own
    stderr handler and no propagation, after which ``caplog`` sees nothing.
    """
    logger = logging.getLogger("distforest")
    logger.handlers[:], logger.propagate, logger.disabled = [], True, False
    logger.setLevel(logging.NOTSET)
    for name, child in list(logging.root.manager.loggerDict.items()):
        if name.startswith("distforest.") and isinstance(child, logging.Logger):
            child.disabled = False  # a logging.config call elsewhere may have disabled it
    yield
    logger.handlers[:], logger.propagate, logger.disabled = [], True, False
    logger.setLevel(logging.NOTSET)


@contextlib.contextmanager
def no_default_client() -> Iterator[None]:
    """Hide the session's default ``distributed`` client (and dask's scheduler setting) in a block.

    distforest counts a default client as a cluster named
    (:func:`distforest.parallel.placement.cluster_named`): with the session's
    cluster as the default, an in-process call would run on it instead.
    """
    import dask
    from distributed import client as dclient

    # what distributed.get_client() looks at: the current client, then the registry
    saved = dict(dclient._global_clients)
    dclient._global_clients.clear()
    token = dclient._current_client.set(None)
    try:
        with dask.config.set(scheduler=None):
            yield
    finally:
        dclient._current_client.reset(token)
        dclient._global_clients.update(saved)


@pytest.fixture(autouse=True)
def _in_process_unless_the_cluster_is_asked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that does not ask for ``client`` runs as it would alone: no default client.

    Once the session's ``client`` started, it was every later test's default
    client, so a test's in-process calls ran on the cluster or not depending on
    the order of the tests (and slower: small tasks on two worker processes).
    """
    if "client" in request.fixturenames:
        yield
        return
    with no_default_client():
        yield


@pytest.fixture(scope="session")
def client() -> Iterator[Client]:
    """Two worker processes on loopback, shared by the whole session."""
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="session")
def cluster_address(client: Client) -> str:
    """The session cluster's scheduler address, for a CLI run that needs a cluster, any cluster.

    ``--scheduler ADDRESS`` instead of ``--workers 2`` spares the run the start of a
    LocalCluster of its own (two worker processes, seconds each on two cores); the
    tests of ``--workers`` itself (the CLI's own LocalCluster) keep it.
    """
    return str(client.scheduler.address)


@pytest.fixture(scope="session")
def small_classification() -> tuple[np.ndarray, np.ndarray]:
    """300 x 8 three-class data with a few missing values."""
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=300, n_features=8, n_informative=5, n_classes=3, random_state=0
    )
    X[::17, 3] = np.nan
    return X, y


@pytest.fixture(scope="session")
def breast_cancer_csv() -> Path:
    """The bundled Wisconsin breast-cancer CSV (699 rows, Id, Class)."""
    return DATA / "breast_cancer.csv"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Exempt what collection built from the garbage collector's full passes (``gc.freeze``).

    The test modules, their rewritten assertions and the collected items (hundreds of
    thousands of objects that live as long as the session) would otherwise be walked by
    every full collection, Python's own and the tests' ``gc.collect()``: 0.2-0.3 s each
    in a pytest worker, 0.06 s once frozen.
    """
    gc.freeze()


#: The longest test files (seconds of one pytest worker in a full run, longest first:
#: benchmarks/results/test_suite.md).  `make test` hands whole files to its workers
#: (``--dist loadfile --no-loadscope-reorder``) in the order of the collection; these go
#: first, the rest follow in name order, so that the run ends on short files rather than
#: on one long file with the other workers idle.  Only the order changes with this list.
LONGEST_FIRST = ("test_object_storage.py", "test_parity.py", "test_stored_mislabels.py",
                 "test_pipeline_runs.py", "test_job_stages.py", "test_stored_mds.py",
                 "test_knn_fit_partitioned.py", "test_impute.py", "test_estimator_contract.py",
                 "test_operator_edges.py", "test_readme.py", "test_driver_memory.py",
                 "test_startup.py", "test_stall.py", "test_impute_model.py", "test_rfimpute.py",
                 "test_cluster_processes.py", "test_placement.py", "test_xforest_stored.py",
                 "test_impute_column_scale.py")  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests of :data:`LONGEST_FIRST` first (a stable sort: file order kept)."""
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
