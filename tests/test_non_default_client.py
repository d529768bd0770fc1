"""A client that is not dask's default (``Client(..., set_as_default=False)``) is used for
everything a call computes: distforest's own tasks and dask's (readers, ``da.store``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification

from distforest import ProximityForest, execution
from distforest.store.inputs import ingest


@pytest.fixture(scope="module")
def private_client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,  # fmt: skip
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


def test_forest_fit_runs_on_a_client_that_is_not_the_default(private_client) -> None:
    from distributed import get_task_stream

    X, y = make_classification(300, 6, random_state=0)
    with get_task_stream(client=private_client) as stream, execution(client=private_client):
        forest = ProximityForest(n_estimators=8, random_state=0).fit(X, y)
    assert stream.data, "no task ran on the client given"
    with execution("synchronous"):
        alone = ProximityForest(n_estimators=8, random_state=0).fit(X, y)
    np.testing.assert_array_equal(forest.leaves_, alone.leaves_)


def test_partitioned_ingest_reads_on_a_client_that_is_not_the_default(
    private_client, tmp_path: Path
) -> None:
    from distributed import get_task_stream

    X, y = make_classification(400, 5, random_state=1)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(5)]).assign(label=y)
    folder = tmp_path / "parts"
    folder.mkdir()
    for k, rows in enumerate(np.array_split(np.arange(400), 4)):
        frame.iloc[rows].to_parquet(folder / f"p{k}.parquet", index=False)
    with get_task_stream(client=private_client) as stream, execution(client=private_client):
        table = ingest(folder, tmp_path / "run.zarr", target="label", rows=100)
    keys = " ".join(str(t["key"]) for t in stream.data)
    assert "read" in keys and "store" in keys, keys[:300]
    import zarr

    stored = zarr.open_group(str(tmp_path / "run.zarr"), mode="r")["input/X"][:]
    np.testing.assert_array_equal(stored, X.astype(np.float32))
    assert table.n_samples == 400
