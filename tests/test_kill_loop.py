"""A real kill loop: the worker processes of a ``distforest run`` are SIGKILLed again and
again until the nannies stop replacing them.  The run must stop with exit 75 (not wait
forever), release its lock, and leave a store that the next run resumes.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from kill_loop import kill_loop, stages, start, wait_until, write_pipeline

from distforest.cli.main import cli
from distforest.store.lock import StoreLock, lock_path
from distforest.store.run_store import RunStore

#: Seconds without any worker before the run gives up (the default is 120).
PATIENCE = {"DISTFOREST_NO_WORKER_TIMEOUT": "3"}


def _killed_during_tiles(tmp_path, tile: int):
    path = write_pipeline(tmp_path, trees=100, tile=tile)
    store = tmp_path / "out" / "run.zarr"
    proc = start(["-q", "run", str(path), "--workers", "1"], tmp_path / "first", PATIENCE)
    assert wait_until(lambda: "fit" in stages(store), proc, timeout=180), "the fit never ended"
    loop = kill_loop(proc, tmp_path / "first", every=0.3, timeout=180)
    return path, store, loop


def _stopped_resumably(last: str, store) -> None:
    """The ending of a run stopped in its tiles: its one line, the lock released (removed,
    and another run can take it at once), a resumable store (not complete, the fit kept)."""
    assert last.startswith("distforest: error: proximity-tiles: "), last
    assert "can be resumed by running it again" in last
    assert not lock_path(store).exists()
    with StoreLock(store, "next"):
        pass
    rs = RunStore.open(store)
    assert not rs.is_complete and "fit" in rs.attrs["stages"] and "tiles" not in rs.attrs["stages"]
    assert CliRunner().invoke(cli, ["status", str(store)]).exit_code == 1


@pytest.mark.slow
def test_workers_killed_until_none_remain_exit_75_and_the_rerun_resumes_bit_identical(tmp_path):
    """One kill loop serves both checks (each used to pay for its own, about 25 s): the run
    stops with 75, and its resumed store equals an uninterrupted run's, bit for bit.

    ``make test`` skips it (``make test-cluster`` runs it): the faster test below checks the
    same command-line ending, and tests/test_stall.py the real workers dying until dask
    gives up (``test_a_task_whose_workers_keep_dying_stops_with_exit_75``)."""
    path, store, loop = _killed_during_tiles(tmp_path / "killed", tile=32)
    assert loop.returncode == 75, loop.stderr[-3000:]
    assert loop.kills >= 1
    _stopped_resumably(loop.last_line, store)

    again = CliRunner().invoke(cli, ["-q", "run", str(path), "--workers", "1"])
    assert again.exit_code == 0, again.output
    assert "resumed" in again.output
    done = RunStore.open(store)
    assert done.is_complete
    matrix = done.read("proximity")
    assert np.isfinite(matrix).all() and np.allclose(np.diag(matrix), 1.0)
    np.testing.assert_array_equal(matrix, matrix.T)

    clean_path = write_pipeline(tmp_path / "clean", trees=100, tile=32)
    clean = CliRunner().invoke(cli, ["-q", "run", str(clean_path), "--workers", "1"])
    assert clean.exit_code == 0, clean.output
    theirs = RunStore.open(tmp_path / "clean" / "out" / "run.zarr")
    for name in ("proximity", "leaves", "inbag"):
        np.testing.assert_array_equal(done.read(name), theirs.read(name))


class _DeadWorkers:
    """A finished task whose workers all died: what dask hands back after a kill loop."""

    def result(self) -> None:
        from types import SimpleNamespace

        from distributed import KilledWorker

        raise KilledWorker("tile", SimpleNamespace(address="tcp://127.0.0.1:1"), 3)


def test_a_tiles_stage_whose_workers_keep_dying_exits_75_and_the_rerun_resumes(
    tmp_path, monkeypatch
):
    """The kill loop's command-line checks in one process: the tiles stage's tasks end as a
    kill loop's do (dask's KilledWorker, turned into the run's StalledError by the task
    runner), after some tiles are written.  The run stops with exit 75 and its one line,
    releases its lock, keeps its fit, and the next run resumes to an uninterrupted run's
    bytes."""
    from distforest.parallel import tasks
    from distforest.parallel.execution import Runner

    real_run = Runner.run

    def dying(self, func, items, *, name, progress=None):
        for done, (k, value) in enumerate(real_run(self, func, items, name=name,
                                                   progress=progress)):  # fmt: skip
            if name == "proximity-tiles" and done == 3:
                tasks._result(_DeadWorkers(), name)  # raises the run's StalledError
            yield k, value

    path = write_pipeline(tmp_path / "killed", trees=20, tile=32)
    store = tmp_path / "killed" / "out" / "run.zarr"
    with monkeypatch.context() as patched:
        patched.setattr(Runner, "run", dying)
        stopped = CliRunner().invoke(cli, ["-q", "run", str(path)])
    assert stopped.exit_code == 75, stopped.output
    _stopped_resumably(stopped.output.strip().splitlines()[-1], store)

    again = CliRunner().invoke(cli, ["-q", "run", str(path)])
    assert again.exit_code == 0, again.output
    assert "resumed" in again.output
    done = RunStore.open(store)
    assert done.is_complete
    assert done.attrs["stages"]["tiles"]["skipped"] >= 3

    clean_path = write_pipeline(tmp_path / "clean", trees=20, tile=32)
    clean = CliRunner().invoke(cli, ["-q", "run", str(clean_path)])
    assert clean.exit_code == 0, clean.output
    theirs = RunStore.open(tmp_path / "clean" / "out" / "run.zarr")
    for name in ("proximity", "leaves", "inbag"):
        np.testing.assert_array_equal(done.read(name), theirs.read(name))
