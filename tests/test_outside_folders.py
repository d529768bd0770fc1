"""Models fitted elsewhere on a folder of parts: the same bytes as on one table, the
driver never holding the rows' (n, T) arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import make_classification
from tracing import traced_peak

pd = pytest.importorskip("pandas")
lgb = pytest.importorskip("lightgbm")


def _folder(tmp_path: Path, X: np.ndarray, y: np.ndarray, parts: int = 3) -> Path:
    """The rows as a folder of Parquet parts (columns f0.., then ``label``)."""
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(label=y)
    folder = tmp_path / "parts"
    folder.mkdir()
    for p, rows in enumerate(np.array_split(np.arange(len(frame)), parts)):
        frame.iloc[rows].to_parquet(folder / f"part-{p}.parquet", index=False)
    return folder


def test_weighted_tiles_from_a_folder_keep_the_driver_flat(tmp_path, client) -> None:
    """KeRF and boosted tiles of a model's forest read from a folder: the driver's traced
    allocations stay under a quarter of the rows' (n, T) weights (float64), which the
    driver built whole before; the matrices are those of the rows in memory, bit for bit."""
    from distforest import ProximityForest, execution
    from distforest.forests.products import stored_location
    from distforest.store.run_store import RunStore

    n, trees = 6_000, 100
    X, y = make_classification(n, 5, n_informative=3, n_redundant=0, random_state=0)
    model = lgb.LGBMClassifier(n_estimators=trees, num_leaves=31, verbose=-1).fit(X, y)
    folder = _folder(tmp_path, X, y)
    with execution(client=client):
        by_parts = ProximityForest.from_model(model, str(folder), "label")
        where = stored_location(by_parts.leaves_)
        assert where is not None  # the rows' arrays are in the store, not the driver
        rs = RunStore.open(where[0], mode="r+")
        by_parts.write_proximity(rs, "boosted")  # imports, kernels, the cluster warmed up
        peak = traced_peak(lambda: by_parts.write_proximity(rs, "kerf"))
    weights_bytes = 8 * n * trees
    assert peak < weights_bytes / 4, (peak, weights_bytes)
    in_memory = ProximityForest.from_model(model, X, y)
    for method in ("kerf", "boosted"):
        stored = np.asarray(rs.read(f"proximity_{method}"))
        np.testing.assert_array_equal(stored, in_memory.proximity(method).values)
    leaves = model.predict(X, pred_leaf=True)  # the oracle: the model's own routing
    same = leaves[:200, None, :] == leaves[None, :, :]  # 200 rows against all
    kerf = (same / same.sum(axis=1)[:, None, :]).mean(axis=2)
    np.testing.assert_allclose(np.asarray(rs.read("proximity_kerf"))[:200], kerf, atol=1e-6)
