"""Mislabels by row chunks, in a store or in memory: exact ranks, the order by ranges, the
same CSV."""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner
from tracing import traced_peak

from distforest import ProximityForest
from distforest.apps import mislabels, ranking
from distforest.apps.mislabels import mislabel_scores
from distforest.apps.outliers import outlier_scores, stored_path
from distforest.cli.main import cli
from distforest.forests import square_sums
from distforest.jobs.outputs import write_csv, write_mislabels
from distforest.kernels import order_stats
from distforest.parallel.execution import Runner
from distforest.store import scratch
from distforest.store.inputs import ingest
from distforest.store.scratch import ScratchSpace


def _store(tmp_path, **columns: np.ndarray) -> str:
    path = str(tmp_path / "s.zarr")
    root = zarr.open_group(path, mode="w")
    for name, values in columns.items():
        root.create_array(name, data=values, chunks=(97,))
    return path


def test_average_ranks_equal_pandas() -> None:
    """Counts of less and equal values give pandas' average ranks, bit for bit (large ties)."""
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.integers(0, 5, 3000) / 7.0, rng.standard_normal(500), [-0.0]])
    ordered = np.sort(values)
    less, equal = order_stats.tie_counts(ordered, values)
    expected = pd.Series(values).rank(method="average").to_numpy()
    assert np.array_equal(order_stats.average_ranks(less, equal), expected)


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("chunk", [97, 1000, 5000])
def test_ranks_by_chunks_equal_pandas(tmp_path, chunk: int, held: bool) -> None:
    """Ranks of values kept by chunks (sorted copies, counts over every chunk; in a store or
    held in memory) equal pandas' ``rank(method="average")`` scaled as the former in-memory
    ranking scaled it."""
    rng = np.random.default_rng(1)
    n = 2001
    values = np.where(rng.random(n) < 0.5, rng.integers(0, 9, n) / 3.0, rng.random(n))
    values[:40] = 0.0  # a tie across chunks
    space = ScratchSpace(None, {"v": values}) if held else ScratchSpace(_store(tmp_path, v=values))
    column = ranking.SortedChunks(space, "v", "v_sorted", n, chunk)
    ranking.sort_chunks(Runner(None), [column])
    got = np.concatenate([column.ranks01(rows) for rows in scratch.row_chunks(n, chunk)])
    expected = (pd.Series(values).rank(method="average").to_numpy() - 1) / (n - 1)
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("chunk", [97, 640])
def test_descending_order_by_ranges(tmp_path, monkeypatch, chunk: int, held: bool) -> None:
    """Ranges cut at sampled keys, each gathered and sorted, joined in range order: the
    whole (key descending, row ascending) order; each key in one range only."""
    monkeypatch.setattr(ranking, "SAMPLES_PER_CHUNK", 7)  # few samples: uneven ranges
    rng = np.random.default_rng(2)
    n = 3000
    key = rng.integers(0, 50, n) / 4.0
    key[100:900] = 3.0  # a tie of more rows than a chunk
    extra = rng.standard_normal(n)
    space = ScratchSpace(None) if held else ScratchSpace(_store(tmp_path))
    order = ranking.DescendingOrder(space, "order", n, chunk)
    order.create({"extra": "float64"})
    samples = [order.write(rows, key[rows], {"extra": extra[rows]})
               for rows in scratch.row_chunks(n, chunk)]  # fmt: skip
    points = ranking.split_points(samples, len(samples))
    assert points.size > 3 and np.all(np.diff(points) < 0)
    bounds = ranking.range_bounds(Runner(None), order, points)
    ranges = [order.gather(["extra"], bounds, r) for r in range(points.size + 1)]
    expected = np.lexsort((np.arange(n), -key))
    assert np.array_equal(np.concatenate([r["row"] for r in ranges]), expected)
    assert np.array_equal(np.concatenate([r["extra"] for r in ranges]), extra[expected])
    keys = [set(r["key"].tolist()) for r in ranges]
    assert [ranking.order_chunk(c) for c in (97, 1 << 16, 1 << 20, 10**6, 65537)] == [
        97, 1 << 16, 1 << 16, 62500, 1]  # fmt: skip
    assert all(not (a & b) for i, a in enumerate(keys) for b in keys[i + 1 :])
    assert max(len(r["row"]) for r in ranges) >= 800  # the tie stayed in one range


def _old_ranking(forest, weight: float) -> pd.DataFrame:
    """The ranking as distforest wrote it before the chunked path (pandas ranks and sort)."""
    codes = np.asarray(forest.y_)
    onehot = np.zeros((codes.size, len(forest.classes_)))
    onehot[np.arange(codes.size), codes] = 1.0
    proba = forest.product(onehot, "rfgap")
    outlier = outlier_scores(forest)
    p_label = proba[np.arange(codes.size), codes]
    suggested = proba.argmax(axis=1)

    def rank01(v: np.ndarray) -> np.ndarray:
        return (pd.Series(v).rank(method="average").to_numpy() - 1) / max(1, len(v) - 1)

    score = (rank01(1.0 - p_label) + weight * rank01(outlier)) / (1 + weight)
    classes = np.asarray(forest.classes_, dtype=object)
    frame = pd.DataFrame({"row": np.arange(codes.size), "label": classes[codes],
                          "suggested": classes[suggested], "p_label": p_label,
                          "p_suggested": proba[np.arange(codes.size), suggested],
                          "outlier": outlier, "score": score,
                          "disagrees": suggested != codes})  # fmt: skip
    frame = frame.sort_values(["score", "row"], ascending=[False, True]).reset_index(drop=True)
    ids = getattr(forest, "sample_ids_", None)
    if ids is not None:
        frame.insert(0, forest.id_name_, np.asarray(ids)[frame["row"].to_numpy()])
        frame = frame.drop(columns="row")
    return frame


def _table(n: int = 1200, ids: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 4))
    label = (X[:, 0] + rng.standard_normal(n) > 0).astype(int) + (X[:, 1] > 1)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(4)])
    frame["label"] = np.array(["a", "b", "c"])[label]
    if ids:
        frame.insert(0, "key", [f"r{i:05d}" for i in range(n)][::-1])
    return frame


@pytest.fixture(scope="module")
def fits(tmp_path_factory) -> dict[bool, tuple[ProximityForest, ProximityForest]]:
    """A stored and an in-memory fit of one table, without and with an ID column."""
    found = {}
    for ids in (False, True):
        where = tmp_path_factory.mktemp(f"ids{ids}")
        frame = _table(ids=ids)
        frame.to_csv(where / "t.csv", index=False)
        stored = ProximityForest(n_estimators=10, random_state=0).fit(
            ingest(str(where / "t.csv"), where / "run.zarr", target="label",
                   id="key" if ids else None)
        )  # fmt: skip
        X = frame.drop(columns="label")
        if ids:  # the index: the rows' IDs
            X = X.set_index("key")
        memory = ProximityForest(n_estimators=10, random_state=0).fit(X, frame["label"].values)
        found[ids] = (stored, memory)
    return found


@pytest.mark.parametrize("ids", [False, True])
@pytest.mark.parametrize("chunk", [128, 500, 1 << 20])
def test_chunked_csv_equals_in_memory(fits, tmp_path, monkeypatch, ids: bool, chunk: int) -> None:
    """The CSV written by tasks by ranges is byte for byte the in-memory ranking's (and the
    one distforest wrote before), with many chunks and ranges or one; scratch removed."""
    monkeypatch.setattr(scratch, "ROWS_PER_CHUNK", chunk)
    stored, memory = fits[ids]
    path = stored_path(stored)
    assert path is not None and stored_path(memory) is None
    expected = _old_ranking(memory, 0.02).to_csv(index=False)
    whole = mislabel_scores(stored)
    write_csv(whole, str(tmp_path / "memory.csv"))
    assert (tmp_path / "memory.csv").read_text() == expected
    written, summary = write_mislabels(stored, str(tmp_path / "chunks.csv"), top=7)
    assert written == {"suspects": str(tmp_path / "chunks.csv")}
    assert (tmp_path / "chunks.csv").read_text() == expected
    assert summary.rows == len(whole) and summary.disagrees == int(whole["disagrees"].sum())
    pd.testing.assert_frame_equal(summary.head, whole.head(7))
    assert "scratch" not in zarr.open_group(path, mode="r")
    assert not list(tmp_path.glob(".chunks.csv*"))  # no pieces or partial file left


@pytest.mark.parametrize("chunk", [100, 300])
def test_tied_scores_stay_in_row_order(fits, tmp_path, monkeypatch, chunk: int) -> None:
    """Without the outlier term most scores tie (every row whose label gets all the votes):
    ties larger than a chunk, ranked in row order, the same bytes as pandas' sort."""
    monkeypatch.setattr(scratch, "ROWS_PER_CHUNK", chunk)
    stored, memory = fits[False]
    folder = tmp_path / "pieces"
    folder.mkdir()
    classes = np.asarray(stored.classes_, dtype=object)
    tables = mislabels.Tables(classes, None, str(folder), 3)
    heads, _ = mislabels.rank_by_chunks(stored, ScratchSpace(stored_path(stored)), tables, 0.0)
    got = "".join(p.read_text() for p in sorted(folder.glob("part-*.csv")))
    expected = _old_ranking(memory, 0.0)
    assert expected["score"].value_counts().max() > chunk  # the test has its ties
    assert got == expected.to_csv(index=False)
    assert len(heads) > 1  # several ranges
    head = pd.concat([h for h in heads if len(h)], ignore_index=True).head(3)
    pd.testing.assert_frame_equal(head, expected.head(3))
    # the same chunks held in memory (the forest fitted on the array): the same table
    held = mislabels.Tables(classes, None)
    frames, _ = mislabels.rank_by_chunks(memory, ScratchSpace(None), held, 0.0)
    assert len(frames) == len(heads)
    assert pd.concat(frames, ignore_index=True).to_csv(index=False) == got


def test_command_and_stage_by_partitions_equal_whole_file(tmp_path, monkeypatch, client) -> None:
    """``distforest mislabels`` and a pipeline's mislabels stage on a Parquet folder keep
    their scratch in the store and write (and the command prints) what the whole file's run
    (its scratch in memory) does."""
    rng = np.random.default_rng(4)
    n = 400
    frame = pd.DataFrame(rng.standard_normal((n, 3)), columns=["a", "b", "c"])
    frame["label"] = np.where(frame["a"] + rng.standard_normal(n) > 0, "pos", "neg")
    folder = tmp_path / "parts"
    folder.mkdir()
    for k in range(4):
        frame.iloc[k * 100 : (k + 1) * 100].to_parquet(folder / f"p{k}.parquet", index=False)
    frame.to_parquet(tmp_path / "whole.parquet", index=False)
    calls = []
    original = mislabels.rank_by_chunks

    def counted(*args, **kwargs):
        calls.append(args[1].path is not None)
        return original(*args, **kwargs)

    monkeypatch.setattr(mislabels, "rank_by_chunks", counted)
    common = ["--target", "label", "--trees", "8", "--seed", "3", "--top", "4"]
    runs = {}
    for name, source in (("parts", folder), ("whole", tmp_path / "whole.parquet")):
        where = ["--scheduler", client.scheduler.address] if name == "parts" else []
        with dask.config.set({"temporary-directory": str(tmp_path)}):
            runs[name] = CliRunner().invoke(
                cli, ["-q", "mislabels", str(source), *common, *where,
                      "--out", str(tmp_path / f"{name}.csv")],
                catch_exceptions=False,
            )  # fmt: skip
        assert runs[name].exit_code == 0, runs[name].output
    assert calls == [True, False]  # the folder's scratch in its store, the whole file's held
    assert (tmp_path / "parts.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    job = tmp_path / "job.yaml"  # the pipeline's stage: the same path, the same file
    job.write_text(
        f"input: {{path: {folder}, target: label}}\n"
        "forest: {n_estimators: 8, random_state: 3}\n"
        "mislabels: {out: suspects.csv}\n"
        f"output: {{dir: {tmp_path / 'out'}, store: run.zarr}}\n"
        f"cluster: {{scheduler: {client.scheduler.address}}}\n"
    )
    with dask.config.set({"temporary-directory": str(tmp_path)}):
        ran = CliRunner().invoke(cli, ["-q", "run", str(job)], catch_exceptions=False)
    assert ran.exit_code == 0, ran.output
    assert calls == [True, False, True]
    assert (tmp_path / "out" / "suspects.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    table = [line for line in runs["parts"].output.splitlines() if line.lstrip()[:1].isdigit()]
    assert len(table) == 4 and table[0] in runs["whole"].output


def test_driver_holds_no_table_of_n(tmp_path, client, monkeypatch) -> None:
    """Ranking a stored forest on a cluster (four chunks and ranges) and writing its CSV: the
    driver's traced allocations (the scheduler's included) peak at well under what the
    in-memory ranking takes (one-hot labels, probabilities, ranks, a table of n rows)."""
    from distforest import execution
    from distforest.apps import outliers

    monkeypatch.setattr(scratch, "ROWS_PER_CHUNK", 1 << 15)
    monkeypatch.setattr(square_sums, "choose_method", lambda n, counts: "tree-pairs")
    monkeypatch.setattr(outliers, "GATHER_LIMIT", 1000)  # at scale: 262,144 a class
    n = 100_000
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.standard_normal((n, 3)), columns=["a", "b", "c"])
    frame["label"] = np.where(frame["a"] + rng.standard_normal(n) > 0, "x", "y")
    frame.to_parquet(tmp_path / "t.parquet", index=False)

    with execution(client=client):
        stored = ingest(str(tmp_path / "t.parquet"), tmp_path / "run.zarr", target="label")
        forest = ProximityForest(n_estimators=3, max_depth=6, random_state=0).fit(stored)
        write_mislabels(forest, str(tmp_path / "warm.csv"))  # imports, numba
        in_memory = traced_peak(lambda: write_csv(mislabel_scores(forest), str(tmp_path / "m.csv")))
        by_chunks = traced_peak(lambda: write_mislabels(forest, str(tmp_path / "c.csv")))
    assert by_chunks < in_memory / 3, (by_chunks, in_memory)
    assert (tmp_path / "c.csv").read_bytes() == (tmp_path / "m.csv").read_bytes()


def test_a_regression_forest_is_refused_before_any_work(tmp_path) -> None:
    from distforest.errors import ParameterError

    frame = _table(200).assign(label=lambda f: f["x0"] * 2.0)
    frame.to_csv(tmp_path / "t.csv", index=False)
    forest = ProximityForest(n_estimators=3, random_state=0).fit(
        ingest(str(tmp_path / "t.csv"), tmp_path / "run.zarr", target="label")
    )
    assert forest.task_ == "regression" and stored_path(forest) is not None
    with pytest.raises(ParameterError, match="classification forest"):
        write_mislabels(forest, str(tmp_path / "s.csv"))
    assert not (tmp_path / "s.csv").exists()
