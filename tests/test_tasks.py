"""Planning work into tasks (pure functions of sizes), and following them on a cluster."""

from __future__ import annotations

import heapq
import itertools
import math
import time

import psutil
import pytest

from distforest.parallel.tasks import (
    default_batch_size,
    plan_batches,
    plan_shrinking_batches,
    plan_tree_batches,
    run_tasks,
)


def _finish_time(batches: list[slice], threads: int) -> int:
    """When the last thread is done, each taking the next batch as it frees (one unit an item)."""
    free = [0] * threads
    for b in batches:
        heapq.heappush(free, heapq.heappop(free) + (b.stop - b.start))
    return max(free)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n", [1, 2, 7, 100, 101, 500, 5000])
def test_shrinking_batches_cover_the_range_in_order(n, threads):
    largest = default_batch_size(n, threads)
    batches = plan_shrinking_batches(n, threads, largest)
    assert batches[0].start == 0 and batches[-1].stop == n
    assert all(a.stop == b.start for a, b in itertools.pairwise(batches))
    sizes = [b.stop - b.start for b in batches]
    assert all(1 <= s <= largest for s in sizes)
    assert sizes == sorted(sizes, reverse=True)
    # few tasks: a geometric series, about 2 log(n) per thread, not one per item
    assert len(batches) <= 2 * threads * (1 + math.log(n))


@pytest.mark.parametrize("threads", [2, 3, 4, 8])
@pytest.mark.parametrize("n", [50, 100, 250, 500])
def test_shrinking_batches_let_the_threads_finish_together(n, threads):
    # equal items: the last thread ends at most one item after a perfect split,
    # which fixed batches of default_batch_size miss (100 trees on 2 threads: 52 vs 48)
    shrinking = plan_shrinking_batches(n, threads, default_batch_size(n, threads))
    assert _finish_time(shrinking, threads) <= -(-n // threads) + 1
    fixed = plan_batches(n, default_batch_size(n, threads))
    assert _finish_time(shrinking, threads) <= _finish_time(fixed, threads)


def test_fixed_batches_leave_a_thread_idle_where_shrinking_ones_do_not():
    fixed = plan_batches(100, default_batch_size(100, 2))
    assert _finish_time(fixed, 2) == 52
    assert _finish_time(plan_shrinking_batches(100, 2, default_batch_size(100, 2)), 2) == 50


def test_tree_batches_are_fixed_when_a_size_is_given():
    assert plan_tree_batches(10, 2, 4) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert plan_tree_batches(10, 2, None) == plan_shrinking_batches(10, 2, 2)


def _pause(i: int) -> int:
    time.sleep(0.003)  # tasks finish one by one, so the driver follows many small batches
    return i


def test_following_a_thousand_tasks_costs_the_driver_no_memory_per_pair_of_tasks():
    """The driver's loop over finished tasks stays linear in the number of tasks.

    Waiting with ``distributed.wait(pending, FIRST_COMPLETED)`` once per finished
    task kept a waiter per pending future per call: 886 MB of driver memory for
    2,000 such tasks, gigabytes for a 200,000-row proximity's tiles.
    """
    from distributed import Client, LocalCluster

    n = 1000
    cluster = LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    )
    with cluster, Client(cluster) as client:
        me = psutil.Process()
        before = me.memory_info().rss
        results = dict(run_tasks(client, _pause, [(i,) for i in range(n)], name="pause"))
        grown = me.memory_info().rss - before
    assert results == {i: i for i in range(n)}
    assert grown < 80e6, f"the driver grew by {grown / 1e6:.0f} MB following {n} tasks"


def test_in_process_runs_share_one_pool_of_threads_closed_with_the_block():
    """Threads start once per block, not once per run (a small imputation makes 72 runs);
    results come back in any order with their index; leaving the block stops the pool."""
    import threading

    from distforest.parallel.execution import Execution, in_process

    def which(k: int) -> tuple[int, int]:
        return k * k, threading.get_ident()

    seen: set[int] = set()
    with in_process(Execution(), 2) as runner:
        for _ in range(5):
            got = dict(runner.run(which, [(k,) for k in range(6)], name="which"))
            assert sorted(got) == list(range(6))
            assert [got[k][0] for k in range(6)] == [k * k for k in range(6)]
            seen |= {ident for _, ident in got.values()}
        pool = runner._pool
        assert pool is not None
    assert len(seen) <= 2 and threading.get_ident() not in seen
    assert runner._pool is None
    with pytest.raises(RuntimeError, match="shutdown"):
        pool.submit(which, 0)
