"""The rows of a forest answer (outliers, mislabels, mds): one source, whatever the input."""

from __future__ import annotations

from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pytest

from distforest.errors import InputError
from distforest.jobs import forest_answers
from distforest.jobs.forest_answers import ForestAnswerJob, _read_input
from distforest.store import source as source_module
from distforest.store.temporary import release


def _tables(tmp_path: Path, labels: bool = True) -> tuple[Path, Path]:
    """The same 600 rows as a folder of three Parquet parts and as one CSV."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.standard_normal((600, 4)), columns=["a", "b", "c", "d"])
    frame.loc[::7, "c"] = np.nan
    frame["label"] = np.where(frame["a"] > 0, "x", "y") if labels else rng.standard_normal(600)
    parts = tmp_path / "parts"
    parts.mkdir()
    for k in range(3):
        frame.iloc[200 * k : 200 * (k + 1)].to_parquet(parts / f"p{k}.parquet", index=False)
    frame.to_csv(tmp_path / "whole.csv", index=False)
    return parts, tmp_path / "whole.csv"


def _job(path: Path, answer: str = "outliers") -> ForestAnswerJob:
    return ForestAnswerJob(input=str(path), target="label", out=str(path.parent / "o.run.zarr"),
                           answer=answer, files={"out": str(path.parent / "o.csv")})  # fmt: skip


def test_a_folder_is_read_one_partition_at_a_time_into_a_store_removed_after(
    tmp_path, monkeypatch
) -> None:
    parts, whole = _tables(tmp_path)
    seen: list[object] = []
    opener = source_module.open_source

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(dask.config.get("num_workers", None))
        return opener(*args, **kwargs)

    monkeypatch.setattr(source_module, "open_source", spy)
    (tmp_path / "scratch").mkdir()
    with dask.config.set({"temporary-directory": str(tmp_path / "scratch")}):
        stored, split = _read_input(_job(parts))
        in_memory, _ = _read_input(_job(whole))
    assert split is None and seen == [forest_answers.ROWS_READ_BY, forest_answers.ROWS_READ_BY]
    # the same rows, target and fingerprint-free facts from either source
    assert stored.store_path is not None and in_memory.store_path is None
    assert (stored.n_samples, stored.n_features) == (in_memory.n_samples, in_memory.n_features)
    np.testing.assert_array_equal(stored.read_rows(slice(0, 600)),
                                  in_memory.read_rows(slice(0, 600)))  # fmt: skip
    np.testing.assert_array_equal(np.asarray(stored.read_y()), np.asarray(in_memory.read_y()))
    store = Path(stored.store_path)
    assert store.exists()
    release(stored)  # what run_answer_job does when the run ends
    assert not store.exists()


def test_mislabels_refuses_a_continuous_target_of_a_folder_before_any_work(tmp_path) -> None:
    parts, whole = _tables(tmp_path, labels=False)
    for path in (parts, whole):
        with pytest.raises(InputError, match="continuous value"):
            _read_input(_job(path, "mislabels"))
