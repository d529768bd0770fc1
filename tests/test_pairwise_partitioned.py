"""``similarity`` and ``neighbors`` of tables read by partitions: the one-file stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from bad_parts import write_bad_parts
from click.testing import CliRunner

from distforest.cli.main import cli


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pairparts")
    rng = np.random.default_rng(11)
    n = 600
    frame = pd.DataFrame(rng.standard_normal((n, 3)) * [1.0, 30.0, 0.01], columns=["a", "b", "c"])
    frame["kind"] = rng.choice(["w", "u", "v"], n)  # a categorical feature
    frame["grid"] = rng.integers(0, 3, n).astype(float)  # many exact ties in the distances
    frame["y"] = rng.choice(["p", "q"], n)
    frame.to_csv(root / "all.csv", index=False)
    frame.iloc[:150].to_csv(root / "ref.csv", index=False)
    (root / "parts").mkdir()
    (root / "text").mkdir()
    (root / "refparts").mkdir()
    for k, cut in enumerate(np.array_split(np.arange(n), 4)):
        frame.iloc[cut].to_parquet(root / "parts" / f"chunk-{k}.pq.data")  # of any name
        frame.iloc[cut].to_csv(root / "text" / f"day-{k}.csv", index=False)
    for k, cut in enumerate(np.array_split(np.arange(150), 3)):
        frame.iloc[cut].to_parquet(root / "refparts" / f"r-{k}.parquet")
    return {"root": root, "all": root / "all.csv", "ref": root / "ref.csv",
            "parts": root / "parts", "glob": root / "text" / "day-*.csv",
            "refparts": root / "refparts"}  # fmt: skip


def _arrays(store: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(store), mode="r")
    return {name: np.asarray(arr[...]) for name, arr in group.arrays()}


def _same_arrays(got: Path, want: Path, names: tuple[str, ...]) -> None:
    a, b = _arrays(got), _arrays(want)
    for name in names:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _same_as_one_file(tables, client, command: str, options: list[str], sources, reference,
                      names: tuple[str, ...], *parts_options: object) -> None:  # fmt: skip
    """``command`` on the one file, then on each of ``sources`` read by partitions (with
    ``parts_options``): the arrays ``names`` equal, bit for bit."""
    root = tables["root"]
    tag = f"{command}-{options[1]}-{len(options)}-{reference}"
    whole = root / f"whole-{tag}.zarr"
    ref = [] if reference is None else ["--reference", tables["ref"]]
    result = invoke("-q", command, tables["all"], "--out", whole, "--drop", "y", *options, *ref)
    assert result.exit_code == 0, result.output
    for source in sources:
        out = root / f"{source}-{tag}.zarr"
        ref = [] if reference is None else ["--reference", tables[reference]]
        result = invoke("-q", command, tables[source], "--out", out, "--drop", "y", *options,
                        *ref, *parts_options, "--scheduler", client.scheduler.address)  # fmt: skip
        assert result.exit_code == 0, result.output
        _same_arrays(out, whole, names)
        params = (dict(zarr.open_group(str(s), mode="r").attrs)["params"] for s in (out, whole))
        assert next(params) == next(params)


SIMILARITY = [  # (options, inputs read by partitions, reference)
    (["--metric", "euclidean"], ("parts", "glob"), None),
    (["--metric", "cosine", "--normalize", "range"], ("parts",), None),
    (
        ["--metric", "manhattan", "--normalize", "range", "--feature-range", "-1", "2"],
        ("parts",),
        "refparts",
    ),
    (["--metric", "rbf"], ("glob",), "ref"),  # a whole-file reference beside parts
]


@pytest.mark.parametrize(("options", "sources", "reference"), SIMILARITY)
def test_similarity_by_partitions_is_the_one_file_matrix(tables, client, options, sources,
                                                         reference) -> None:  # fmt: skip
    name = "distance" if options[1] in ("euclidean", "manhattan") else "similarity"
    # other tiles (128 in one file, 256 by parts): the same values
    _same_as_one_file(tables, client, "similarity", [*options, "--tile-size", "128"], sources,
                      reference, (name,), "--tile-size", 256)  # fmt: skip


NEIGHBORS = [
    (["--metric", "euclidean", "--k", "7"], ("parts", "glob"), None),  # k-d tree
    (["--metric", "manhattan", "--algorithm", "brute", "--normalize", "range"], ("parts",), None),
    (["--metric", "cosine", "--k", "4"], ("parts",), "refparts"),
]


@pytest.mark.parametrize(("options", "sources", "reference"), NEIGHBORS)
def test_neighbors_by_partitions_are_the_one_file_neighbours(tables, client, options, sources,
                                                             reference) -> None:  # fmt: skip
    names = ("neighbor_index", "neighbor_distance", "sample")
    # other batches (queries in row order, not Morton order): the same answers
    _same_as_one_file(tables, client, "neighbors", options, sources, reference, names,
                      "--batch-size", 50)  # fmt: skip


def test_zscore_matches_to_rounding(tables, client) -> None:
    root = tables["root"]
    whole, parts = root / "z-whole.zarr", root / "z-parts.zarr"
    options = ["--normalize", "zscore", "--drop", "y", "--tile-size", 128]
    assert invoke("-q", "similarity", tables["all"], "--out", whole, *options).exit_code == 0
    result = invoke("-q", "similarity", tables["parts"], "--out", parts, *options,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(_arrays(parts)["distance"], _arrays(whole)["distance"],
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_bad_value_in_a_part_names_file_column_row(tables, client) -> None:
    root = tables["root"]
    bad = root / "bad"
    frame = pd.read_csv(tables["all"])
    # a measure needs complete rows
    first = write_bad_parts(frame, bad, column="b", row=7, value=np.nan)
    for command in ("similarity", "neighbors"):
        out = root / f"bad-{command}.zarr"
        result = invoke("-q", command, bad, "--out", out, "--drop", "y",
                        "--scheduler", client.scheduler.address)  # fmt: skip
        assert result.exit_code == 3, result.output
        assert "part-3.parquet" in result.output and "'b'" in result.output
        assert f"row {first}" in result.output
        assert not out.exists()  # nothing half-written


def test_different_columns_and_dry_run(tables, client) -> None:
    root = tables["root"]
    out = root / "cols.zarr"
    result = invoke("-q", "similarity", tables["parts"], "--reference", tables["refparts"],
                    "--drop", "y", "--drop", "c", "--out", out,
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0, result.output  # the same columns dropped on both sides
    other = root / "other"
    other.mkdir()
    pd.read_csv(tables["ref"]).drop(columns=["c"]).to_parquet(other / "o.parquet")
    result = invoke(
        "-q",
        "neighbors",
        tables["parts"],
        "--reference",
        other,
        "--drop",
        "y",
        "--out",
        root / "cols-nb.zarr",
        "--scheduler",
        client.scheduler.address,
    )
    assert result.exit_code == 3, result.output
    assert "same columns" in result.output
    dry = invoke("similarity", tables["parts"], "--out", root / "dry.zarr", "--drop", "y",
                 "--dry-run")  # fmt: skip
    assert dry.exit_code == 0, dry.output
    assert "600 x 600" in dry.output
    assert not (root / "dry.zarr").exists()


def test_the_driver_loads_no_table_and_keeps_no_answers(tables, client, monkeypatch) -> None:
    import distforest.forests.neighbors as neighbors
    import distforest.io as io

    def refuse(*args, **kwargs):
        raise AssertionError("the driver loaded a table or kept the answers")

    root = tables["root"]
    whole = root / "kept-whole.zarr"
    assert invoke("-q", "neighbors", tables["all"], "--out", whole, "--drop", "y").exit_code == 0
    monkeypatch.setattr(io, "load_table", refuse)
    monkeypatch.setattr(neighbors, "search", refuse)  # the search that keeps n x k answers
    out = root / "kept-parts.zarr"
    result = invoke("-q", "neighbors", tables["parts"], "--out", out, "--drop", "y",
                    "--scheduler", client.scheduler.address)  # fmt: skip
    assert result.exit_code == 0, result.output
    _same_arrays(out, whole, ("neighbor_index", "neighbor_distance"))
