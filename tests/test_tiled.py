"""The tile service: plans, done records, resume, and the in-memory path agreeing with it."""

from __future__ import annotations

import numpy as np
import pytest

from distforest.forests import pairwise as pairwise_module
from distforest.forests.pairwise import pairwise
from distforest.forests.tiled import matrix_in_memory, write_matrix
from distforest.parallel.execution import Runner
from distforest.parallel.tiling import TilePlan
from distforest.store.run_store import RunStore

PLANS = [(10, 10, 3, True), (10, 7, 3, False), (5, 5, 8, True), (16, 16, 4, True)]


@pytest.mark.parametrize(("n", "m", "tile", "symmetric"), PLANS)
def test_plan_covers_every_cell_once(n, m, tile, symmetric):
    plan = TilePlan(n, m, tile, symmetric)
    hits = np.zeros((n, m), dtype=int)
    for t in plan.tiles():
        hits[t.rows, t.cols] += 1
        if t.mirror:
            hits[t.cols, t.rows] += 1
    assert (hits == 1).all()
    assert plan.n_tasks == len(plan.tiles())
    assert plan.blocks == (-(-n // tile), -(-m // tile))


def test_symmetric_plan_needs_a_square():
    with pytest.raises(ValueError, match="square"):
        TilePlan(4, 5, 2, symmetric=True)


def _values(X, rows, cols):
    """A non-symmetric tile function: the mirror must come from the plan, not from luck."""
    return (X[rows, None] * 10 + X[None, cols]).astype("float32")


def _symmetric(X, rows, cols):
    return (X[rows, None] + X[None, cols]).astype("float32")


class Stop(RuntimeError):
    pass


def test_write_matrix_resumes_only_the_missing_tiles(tmp_path):
    X = np.arange(11, dtype=np.float64)
    plan = TilePlan(11, 11, 3, symmetric=True)
    calls = []

    def failing(X, rows, cols):
        if len(calls) == 4:
            raise Stop("killed")
        calls.append((rows.start, cols.start))
        return _symmetric(X, rows, cols)

    rs = RunStore.create(tmp_path / "m.zarr", attrs={})
    with pytest.raises(Stop):
        write_matrix(Runner(None), rs, "similarity", plan, failing, (X,), identity={"a": 1})
    done = rs.done_tiles("similarity")
    assert int(done.sum()) == 4

    counted = []

    def counting(X, rows, cols):
        counted.append((rows.start, cols.start))
        return _symmetric(X, rows, cols)

    stats = write_matrix(Runner(None), rs, "similarity", plan, counting, (X,), identity={"a": 1})
    assert stats == {"tiles": plan.n_tasks, "skipped": 4, "bytes": stats["bytes"]}
    assert len(counted) == plan.n_tasks - 4 and not set(counted) & set(calls)
    stored = rs.group["similarity"][...]
    np.testing.assert_array_equal(stored, matrix_in_memory(plan, _symmetric, (X,)))
    np.testing.assert_array_equal(stored, X[:, None] + X[None, :])

    # another identity (another forest, say) is computed again from scratch
    counted.clear()
    write_matrix(Runner(None), rs, "similarity", plan, counting, (X,), identity={"a": 2})
    assert len(counted) == plan.n_tasks


def test_grouped_tile_tasks_write_every_tile_once_and_resume(tmp_path, monkeypatch):
    from distforest.forests import tiled

    monkeypatch.setattr(tiled, "MIN_TASKS", 2)  # 21 tiles -> groups of 8, 8 and 5
    X = np.arange(17, dtype=np.float64)
    plan = TilePlan(17, 17, 3, symmetric=True)
    groups = tiled.tile_groups(plan.tiles())
    assert [len(g) for g in groups] == [8, 8, 5]
    assert [t for g in groups for t in g] == plan.tiles()
    calls = []

    def failing(X, rows, cols):
        if len(calls) == 11:  # inside the second group: its first 3 tiles are done
            raise Stop("killed")
        calls.append((rows.start, cols.start))
        return _symmetric(X, rows, cols)

    rs = RunStore.create(tmp_path / "g.zarr", attrs={})
    with pytest.raises(Stop):
        write_matrix(Runner(None), rs, "similarity", plan, failing, (X,), identity={})
    assert int(rs.done_tiles("similarity").sum()) == 11
    seen = []
    stats = write_matrix(
        Runner(None), rs, "similarity", plan, _symmetric, (X,), identity={},
        progress=lambda done, total: seen.append((done, total)),
    )  # fmt: skip
    assert stats["skipped"] == 11
    assert seen == [(0, 10), (5, 10), (10, 10)]  # 10 left in 2 tasks: progress counts tiles
    np.testing.assert_array_equal(rs.group["similarity"][...], X[:, None] + X[None, :])


def test_full_grid_is_not_mirrored(tmp_path):
    X = np.arange(7, dtype=np.float64)
    plan = TilePlan(7, 7, 2, symmetric=False)
    rs = RunStore.create(tmp_path / "g.zarr", attrs={})
    write_matrix(Runner(None), rs, "distance", plan, _values, (X,), identity={})
    np.testing.assert_array_equal(rs.group["distance"][...], X[:, None] * 10 + X[None, :])


def test_pairwise_store_resumes_and_equals_a_clean_run(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    clean = pairwise(X, store=tmp_path / "clean.zarr", tile_size=16, client="synchronous")
    real = pairwise_module.measure_tile
    seen = []

    def dying(*args):
        if len(seen) == 6:
            raise Stop("killed mid-run")
        seen.append(1)
        return real(*args)

    monkeypatch.setattr(pairwise_module, "measure_tile", dying)
    with pytest.raises(Stop):
        pairwise(X, store=tmp_path / "s.zarr", tile_size=16, client="synchronous")
    monkeypatch.setattr(pairwise_module, "measure_tile", real)
    assert not RunStore.open(tmp_path / "s.zarr").is_complete
    again = pairwise(X, store=tmp_path / "s.zarr", tile_size=16, client="synchronous")
    assert RunStore.open(tmp_path / "s.zarr").is_complete
    stats_done = RunStore.open(tmp_path / "s.zarr").done_tiles("distance")
    assert stats_done[np.triu_indices_from(stats_done)].all()  # the upper triangle is planned
    assert again.values.tobytes() == clean.values.tobytes()
    # a complete store is not silently replaced
    with pytest.raises(Exception, match="already exists"):
        pairwise(X, store=tmp_path / "s.zarr", tile_size=16, client="synchronous")


def test_task_arrays_are_reused_until_the_array_changes(tmp_path):
    from distforest.store import run_store

    rs = RunStore.create(tmp_path / "s.zarr", attrs={})
    path = str(rs.path)
    rs.group.create_array("m", shape=(4, 4), chunks=(2, 2), dtype="uint8", fill_value=7)
    first = run_store.task_array(path, "m", "r+")
    assert run_store.task_array(path, "m", "r+") is first  # kept
    # a chunk equal to the fill value is written, not left out, and reads the same
    run_store.write_block(path, "m", (slice(0, 2), slice(0, 2)), np.full((2, 2), 7, "uint8"))
    assert (tmp_path / "s.zarr" / "m" / "c" / "0" / "0").exists()
    np.testing.assert_array_equal(run_store.read_rows(path, "m", slice(0, 2))[:, :2], 7)
    # replaced by a different array under the same name: opened anew, never the stale handle
    rs.group.create_array("m", shape=(6, 3), chunks=(3, 3), dtype="uint8", overwrite=True)
    again = run_store.task_array(path, "m", "r+")
    assert again is not first and again.shape == (6, 3)
    run_store.write_block(path, "m", (slice(3, 6), slice(0, 3)), np.ones((3, 3), "uint8"))
    np.testing.assert_array_equal(run_store.read_rows(path, "m", slice(3, 6)), 1)
