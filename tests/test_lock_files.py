"""The run lock beside a store: never follows a link, never truncates a file that is not
distforest's, exists only while held; on object storage a renewed lease (memory://)."""

from __future__ import annotations

import json
import os
import time

import dask.config
import pytest

from distforest import location
from distforest.errors import BusyError, StoreError
from distforest.store.lock import StoreLock, is_locked, lock_path, read_lock


def test_the_lock_file_exists_only_while_held(tmp_path):
    store = tmp_path / "out.zarr"
    with StoreLock(store, "first"):
        assert read_lock(store)["run_id"] == "first" and is_locked(store)
        with pytest.raises(BusyError, match="being written by run first"):
            StoreLock(store, "second").__enter__()
        assert lock_path(store).exists()  # the refused run removed nothing
    assert not lock_path(store).exists() and not is_locked(store)
    with StoreLock(store, "third"):  # free again at once
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_symlink_planted_at_the_lock_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "out.zarr.lock")
    with pytest.raises(StoreError, match="symbolic link"):
        StoreLock(tmp_path / "out.zarr", "r").__enter__()
    assert victim.read_text() == "precious"
    assert os.path.islink(tmp_path / "out.zarr.lock")


def test_a_dangling_symlink_is_not_followed_either(tmp_path):
    target = tmp_path / "created-through-the-link"
    os.symlink(target, tmp_path / "out.zarr.lock")
    with pytest.raises(StoreError, match="symbolic link"):
        StoreLock(tmp_path / "out.zarr", "r").__enter__()
    assert not target.exists()


def test_a_users_file_at_the_lock_name_is_left_as_it_is(tmp_path):
    mine = tmp_path / "out.zarr.lock"
    mine.write_text("my notes about out.zarr\n")
    with pytest.raises(StoreError, match="not a lock distforest wrote"):
        StoreLock(tmp_path / "out.zarr", "r").__enter__()
    assert mine.read_text() == "my notes about out.zarr\n"


def test_a_dead_runs_lock_and_an_old_empty_one_are_taken_over(tmp_path):
    store = tmp_path / "out.zarr"
    lock_path(store).write_text(json.dumps({"run_id": "dead", "pid": 999999, "host": "h"}))
    with StoreLock(store, "new") as lock:
        assert lock.took_over["run_id"] == "dead"
        assert read_lock(store)["run_id"] == "new"
    assert not lock_path(store).exists()
    lock_path(store).write_text("")  # what older versions left when they released
    with StoreLock(store, "new") as lock:
        assert lock.took_over is None
    assert not lock_path(store).exists()


def test_a_lease_on_object_storage_is_renewed_then_removed():
    url = "memory://leases/renewed.zarr"
    with dask.config.set({"distforest.lock.lease": 0.6}):
        with StoreLock(url, "holder"):
            first = read_lock(url)["renewed"]
            time.sleep(1.2)  # two lease thirds and more: renewed, never expired
            assert read_lock(url)["renewed"] > first and is_locked(url)
            with pytest.raises(BusyError, match="being written by run holder"):
                StoreLock(url, "second").__enter__()
        assert not location.exists(lock_path(url))


def test_an_expired_lease_is_taken_over_once_no_renewal_comes():
    url = "memory://leases/dead.zarr"
    dead = {"run_id": "dead", "pid": 1, "host": "h", "token": "t", "lease_seconds": 0.3,
            "distforest_lock": 1, "expires": time.time() - 1}  # fmt: skip
    location.write_bytes(lock_path(url), json.dumps(dead).encode())
    assert not is_locked(url)
    with StoreLock(url, "next") as lock:
        assert lock.took_over["run_id"] == "dead"
        assert read_lock(url)["run_id"] == "next"
    assert not location.exists(lock_path(url))
    assert not location.exists(f"{lock_path(url)}.takeover-t")


def test_storage_without_a_trusted_conditional_write_is_refused_with_the_way_out(tmp_path):
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    class Plain(MemoryFileSystem):
        protocol = ("plainmem",)

    fsspec.register_implementation("plainmem", Plain, clobber=True)
    with pytest.raises(StoreError, match="UNSAFE_SKIP=true"):
        StoreLock("plainmem://b/p.zarr", "r").__enter__()
    with dask.config.set({"distforest.lock.unsafe-skip": True}), StoreLock("plainmem://b/p.zarr",
                                                                            "r"):  # fmt: skip
        assert not location.exists(lock_path("plainmem://b/p.zarr"))
