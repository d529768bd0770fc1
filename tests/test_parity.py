"""Every input kind gives the bytes of the numpy-array run.

One table (float32 values written in full, so the CSV text, the Parquet float64 and the
float32 a forest reads are the same numbers) is handed over as a numpy array, a pandas
DataFrame, a dask DataFrame, one CSV file, one Parquet file, a folder of Parquet parts, a
glob of CSV parts and a ``memory://`` URL; :func:`distforest.store.source.open_source`
decides the kind of each, and the forests, the outlier scores and the commands must not
see a difference.

No kind is refused: every estimator fits every kind (a refusal would fail its case).

Every estimator is fitted on all eight kinds.  The commands run on a folder or a glob of
parts (the kinds read by partitions); the one-CSV run is their reference, and the other
kinds reach a command through the same openers of :mod:`distforest.store.source` as the
estimators' cases.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import dask
import fsspec
import numpy as np
import pandas as pd
import pytest
import zarr
from click.testing import CliRunner

from distforest import ProximityForest, execution
from distforest.apps.outliers import outlier_scores
from distforest.cli.main import cli
from distforest.forests.simforest import SimilarityForestClassifier
from distforest.forests.smerf import SMERF
from distforest.forests.xforest import XForest
from distforest.store.run_store import RunStore

N = 240
FEATURES = ["a", "b", "c", "d"]
TREES = 8
KINDS = ("numpy", "pandas", "dask", "csv", "parquet", "folder", "glob", "memory")


def _frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(11)
    cls = rng.integers(0, 3, N)
    centers = np.array([[0.0, 0.0, 0.0, 0.0], [2.0, 1.5, 0.5, -1.0], [0.0, 3.0, -2.0, 1.0]])
    X = (centers[cls] + rng.standard_normal((N, 4))).astype(np.float32).astype(np.float64)
    labelled = pd.DataFrame(X, columns=FEATURES)
    labelled["label"] = np.array(["p", "q", "r"])[cls]
    labelled.loc[::17, "label"] = "q"  # a few rows of the wrong class for mislabels
    holes = labelled.copy()
    holes.loc[::9, "b"] = np.nan
    holes.loc[::13, "d"] = np.nan
    return {"labelled": labelled, "features": labelled[FEATURES].copy(), "holes": holes}


def _write(frame: pd.DataFrame, root: Path, name: str) -> dict[str, str]:
    """The file kinds of one frame: paths (and a ``memory://`` URL) as strings."""
    root.mkdir()
    frame.to_csv(root / "one.csv", index=False)
    frame.to_parquet(root / "one.parquet", index=False)
    (root / "folder").mkdir()
    (root / "glob").mkdir()
    for k, cut in enumerate(np.array_split(np.arange(len(frame)), 3)):
        frame.iloc[cut].to_parquet(root / "folder" / f"part-{k}.parquet", index=False)
        frame.iloc[cut].to_csv(root / "glob" / f"part-{k}.csv", index=False)
    url = f"memory://parity/{name}.csv"
    with fsspec.open(url, "w") as f:
        frame.to_csv(f, index=False)
    return {"csv": str(root / "one.csv"), "parquet": str(root / "one.parquet"),
            "folder": str(root / "folder"), "glob": str(root / "glob" / "part-*.csv"),
            "memory": url}  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The frames and their files, written once for the module."""
    root = tmp_path_factory.mktemp("parity")
    frames = _frames()
    files = {name: _write(frame, root / name, name) for name, frame in frames.items()}
    return {"root": root, "frames": frames, "files": files}


def _input(data: dict[str, Any], kind: str, which: str, target: str | None) -> tuple[Any, Any]:
    """(X, y) of the ``which`` frame as input kind ``kind``; ``y`` names the column for
    the kinds that hold it."""
    frame = data["frames"][which]
    if kind in ("numpy", "pandas"):
        X = frame.drop(columns=[target]) if target else frame
        y = frame[target].to_numpy() if target else None
        return (X.to_numpy() if kind == "numpy" else X), y
    if kind == "dask":
        import dask.dataframe as dd

        return dd.from_pandas(frame, npartitions=3), target
    return data["files"][which][kind], target


def _proximity_products(forest: ProximityForest, X: np.ndarray) -> dict[str, np.ndarray]:
    out = {"leaves": np.asarray(forest.leaves_[...]), "inbag": np.asarray(forest.inbag_[...])}
    for method in ("original", "oob", "rfgap"):
        out[method] = np.asarray(forest.proximity(method).values)
    out["predict_proba"] = forest.predict_proba(X)
    out["outliers"] = outlier_scores(forest)
    return out


@pytest.fixture(scope="module")
def reference(data: dict[str, Any]) -> dict[str, np.ndarray]:
    """The numpy-array run of ProximityForest: fit products and outlier scores."""
    X, y = _input(data, "numpy", "labelled", "label")
    with execution("synchronous"):
        forest = ProximityForest(n_estimators=TREES, random_state=5).fit(X, y)
        return _proximity_products(forest, X)


@pytest.mark.parametrize("kind", KINDS)
def test_proximity_forest_and_outlier_scores(data, reference, kind: str) -> None:
    """(a) leaves, inbag, proximity original/oob/rfgap, predict_proba; (b) outlier scores."""
    X, y = _input(data, kind, "labelled", "label")
    rows = data["frames"]["labelled"][FEATURES].to_numpy()
    with execution("synchronous"):
        forest = ProximityForest(n_estimators=TREES, random_state=5).fit(X, y)
        got = _proximity_products(forest, rows)
    assert sorted(got) == sorted(reference)
    for name, expected in reference.items():
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(got[name], expected, err_msg=f"{kind}: {name}")


# -- other forests ---------------------------------------------------------------------

XFOREST = ("leaves_", "depth_", "codes_", "nodes_", "thresholds_", "node_offset_",
           "directions_", "direction_offset_", "feature_min_", "feature_scale_",
           "seeds_")  # fmt: skip


def _xforest(X: Any) -> dict[str, np.ndarray]:
    forest = XForest(n_estimators=TREES, random_state=3).fit(X)
    return {name: np.asarray(getattr(forest, name)[...]) for name in XFOREST}


def _simforest(X: Any, y: Any) -> dict[str, np.ndarray]:
    forest = SimilarityForestClassifier(n_estimators=TREES, metric="rbf", random_state=3)
    forest.fit(X, y)
    rows = np.asarray(forest.leaves_[...])
    out = {"leaves": rows, "inbag": np.asarray(forest.inbag_[...])}
    for name in ("classes_", "y_", "pair_ids_", "pair_objects_", "seeds_"):
        out[name] = np.asarray(getattr(forest, name))
    out["original"] = np.asarray(forest.proximity("original").values)
    return out


def _distances(n: int) -> np.ndarray:
    g = np.random.default_rng(2).standard_normal(n)
    return (g[:, None] - g[None, :]) ** 2


def _smerf(X: Any) -> dict[str, np.ndarray]:
    model = SMERF(n_estimators=TREES, random_state=4, min_samples_leaf=2).fit(X, _distances(N))
    f = model.forest_
    return {"leaves": np.asarray(model.leaves_[...]), "inbag": np.asarray(model.inbag_[...]),
            "leaf_members": f.leaf_members, "proj_feature": f.proj_feature,
            "proj_weight": f.proj_weight, "node_offset": f.node_offset,
            "feature_importances": model.feature_importances_, "seeds": model.seeds_}  # fmt: skip


FORESTS = {
    "xforest": (_xforest, "features", None),
    "simforest": (_simforest, "labelled", "label"),
    "smerf": (_smerf, "features", None),
}


@pytest.fixture(scope="module")
def forest_references(data: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    with execution("synchronous"):
        for name, (fit, which, target) in FORESTS.items():
            X, y = _input(data, "numpy", which, target)
            out[name] = fit(X, y) if target else fit(X)
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("forest", FORESTS)
def test_other_forests(data, forest_references, forest: str, kind: str) -> None:
    """(d) X-Forest, a similarity forest of a named measure and SMERF."""
    fit, which, target = FORESTS[forest]
    X, y = _input(data, kind, which, target)
    with execution("synchronous"):
        got = fit(X, y) if target else fit(X)
    expected = forest_references[forest]
    assert sorted(got) == sorted(expected)
    for name, values in expected.items():
        assert got[name].dtype == values.dtype, name
        np.testing.assert_array_equal(got[name], values, err_msg=f"{forest} {kind}: {name}")


# -- commands --------------------------------------------------------------------------

COMMON = ("--trees", str(TREES), "--seed", "5")
COMMANDS = {  # command: (its arguments after INPUT, output suffix, frame)
    "proximity": (("--target", "label", *COMMON), "zarr", "labelled"),
    "outliers": (("--target", "label", *COMMON), "csv", "labelled"),
    "mds": (("--target", "label", *COMMON), "csv", "labelled"),
    "mislabels": (("--target", "label", *COMMON, "--top", "20"), "csv", "labelled"),
    "impute": (
        ("--target", "label", "--trees", str(TREES), "--iterations", "2", "--seed", "5"),
        "csv",
        "holes",
    ),
    # a former refusal: R's rfImpute by partitions (its forest on the workers' sample)
    "impute+rfimpute": (
        ("--target", "label", "--proximity", "rfimpute", *COMMON, "--iterations", "2"),
        "csv",
        "holes",
    ),
}


def _run(data: dict[str, Any], command: str, kind: str, cluster_address: str) -> Path:
    """Run ``command`` once on the file kind ``kind`` (on the session's cluster: no
    LocalCluster started per command) and return its output."""
    root = data["root"]
    args, suffix, which = COMMANDS[command]
    args = (*args, "--scheduler", cluster_address)
    out = root / f"{command}-{kind}.{suffix}"
    if not out.exists():
        source = data["files"][which][kind]
        scratch = root / f"tmp-{command}-{kind}"
        scratch.mkdir()
        with dask.config.set({"temporary-directory": str(scratch)}):
            name = command.partition("+")[0]  # "impute+rfimpute": the impute command
            result = CliRunner().invoke(cli, ["-q", name, source, *args, "--out", str(out)])
        assert result.exit_code == 0, (command, kind, result.output, result.exception)
        assert not list(scratch.iterdir())  # no temporary store left behind
    return out


#: Each command on one of the two kinds read by partitions (a folder of Parquet parts, a
#: glob of CSV parts: three commands each); a Parquet file is read by the one-CSV run's
#: opener (``file``), so it is not run again for every command.
COMMAND_KINDS = [(command, ("folder", "glob")[k % 2]) for k, command in enumerate(COMMANDS)]


@pytest.mark.parametrize(("command", "kind"), COMMAND_KINDS)
def test_commands(data, cluster_address, command: str, kind: str) -> None:
    """(c) each command's output on a folder or a glob of parts: the one-CSV run's bytes
    (CSV files byte for byte, Zarr arrays equal)."""
    expected = _run(data, command, "csv", cluster_address)
    got = _run(data, command, kind, cluster_address)
    if COMMANDS[command][1] == "csv":
        assert got.read_bytes() == expected.read_bytes()
        return
    want = zarr.open_group(str(expected), mode="r")
    have = zarr.open_group(str(got), mode="r")
    assert np.array_equal(have["proximity"][...], want["proximity"][...])


def test_command_csv_is_the_numpy_run(data, cluster_address, reference) -> None:
    """The one-CSV command run itself agrees with the numpy-array fit (its outlier
    scores and its proximity matrix), so every file kind does."""
    scores = pd.read_csv(_run(data, "outliers", "csv", cluster_address))
    assert list(scores["label"]) == list(data["frames"]["labelled"]["label"])
    np.testing.assert_array_equal(scores["outlier"].to_numpy(), reference["outliers"])
    store = RunStore.open(_run(data, "proximity", "csv", cluster_address), require_complete=True)
    np.testing.assert_array_equal(store.dataset()["proximity"].values, reference["original"])


# -- k-NN ------------------------------------------------------------------------------

# fmt: off
KNN = {  # name: KNNClassifier parameters
    "range": {"n_neighbors": 5, "normalize": "range", "weights": "distance"},
    "rf-proximity": {"n_neighbors": 4, "metric": "rf-proximity", "n_estimators": TREES,
                     "random_state": 5},
}
# fmt: on


def _knn(params: dict[str, Any], X: Any, y: Any, queries: np.ndarray) -> dict[str, np.ndarray]:
    from distforest.apps.knn import KNNClassifier

    model = KNNClassifier(**params).fit(X, y)
    distances, indices = model.kneighbors(queries)
    return {"X_fit": np.asarray(model.X_fit_), "y_fit": model.y_fit_,
            "classes": model.classes_.astype(str), "distances": distances, "indices": indices,
            "predict": model.predict(queries).astype(str)}  # fmt: skip


@pytest.fixture(scope="module")
def knn_references(data: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """The numpy-array run of each k-NN model (fitted once for the module)."""
    queries = data["frames"]["features"].to_numpy()[::7]
    with execution("synchronous"):
        return {name: _knn(params, *_input(data, "numpy", "labelled", "label"), queries)
                for name, params in KNN.items()}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", KNN)
def test_knn_classifier(data, knn_references, name: str, kind: str) -> None:
    """(e) a k-NN model fitted on every kind (a folder of parts, a glob and a dask
    DataFrame by chunks from a store): the numpy-array run's rows, neighbours and votes."""
    queries = data["frames"]["features"].to_numpy()[::7]
    expected = knn_references[name]
    with execution("synchronous"):
        got = _knn(KNN[name], *_input(data, kind, "labelled", "label"), queries)
    assert sorted(got) == sorted(expected)
    for key, values in expected.items():
        assert got[key].dtype == values.dtype, key
        np.testing.assert_array_equal(got[key], values, err_msg=f"{name} {kind}: {key}")


# -- imputation by partitions (was tests/test_partitioned_impute.py) -------------------
# A table read by partitions (a folder of parts, a glob) runs the one imputation by row
# chunks that a table read whole runs as one chunk: the same bytes while the sample bound
# holds every row, and each partition filled as ``transform`` fills new rows above it.

IMPUTE_FEATURES = ["a", "b", "c", "k"]
#: Few trees, one task per column forest, two iterations: seconds on the shared cluster.
SMALL = {"n_estimators": 4, "batch_size": 4, "iterations": 2}
#: rfImpute's settings at test size (R's rules otherwise: random-forest trees, its mtry).
RF_SMALL = {"proximity": "rfimpute", "n_estimators": 6, "batch_size": 6, "iterations": 2}


def _holes_table(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n),
                       "c": rng.choice(["x", "y", "z"], n), "k": rng.integers(0, 5, n),
                       "cls": rng.choice(["p", "q"], n)})  # fmt: skip
    df["b"] += df["a"]
    for col in ("a", "b", "c"):
        df.loc[rng.random(n) < 0.15, col] = np.nan
    return df


def _parts(df: pd.DataFrame, where: Path, parts: int = 5) -> Path:
    where.mkdir()
    for k, rows in enumerate(np.array_split(np.arange(len(df)), parts)):
        df.iloc[rows].to_parquet(where / f"day-{k}.parquet", index=False)
    return where


def _impute_parts(folder: Path, out: str, params: dict[str, Any], client: Any,
                  **options: Any) -> Any:  # fmt: skip
    """``distforest impute``'s run on a folder of parts, target ``cls``, on ``client``."""
    from distforest.jobs.impute import plan_imputation, run_imputation

    plan = plan_imputation(str(folder), out, target="cls")
    assert plan.by_partitions
    return run_imputation(plan, params, client, **options)


def _in_memory(folder: Path, seed: int) -> pd.DataFrame:
    """What the in-memory command does with the same table."""
    from distforest.apps.impute import ProximityImputer

    frame = pd.read_parquet(folder)
    with execution(client="synchronous"):
        imp = ProximityImputer(**SMALL, random_state=seed)
        filled = imp.fit_transform(frame[IMPUTE_FEATURES], frame["cls"])
    out = frame.copy()
    for position, col in enumerate(out.columns):
        if col in filled.columns:
            out.isetitem(position, filled[col])
    return out


def test_impute_parquet_folder_equals_in_memory(client, tmp_path: Path) -> None:
    """Sample bound >= n: the same values, dtypes and labels, bit for bit."""
    folder = _parts(_holes_table(), tmp_path / "parts")
    expected = _in_memory(folder, seed=5)
    assert expected[IMPUTE_FEATURES].notna().all().all()
    with client.as_current():
        for out in (tmp_path / "out/", tmp_path / "one.csv", tmp_path / "one.parquet"):
            name = f"{out}/" if out.suffix == "" else str(out)
            result = _impute_parts(folder, name, {**SMALL, "random_state": 5}, client)
            assert result.sample_rows == 400 and result.shape == (400, 5)
            if out.suffix == ".csv":  # the same bytes as the in-memory writer's
                mem_csv = tmp_path / "mem.csv"
                expected.to_csv(mem_csv, index=False)
                assert out.read_bytes() == mem_csv.read_bytes()
                continue
            got = pd.read_parquet(out)
            if out.suffix == "":
                assert sorted(p.name for p in out.iterdir()) == [
                    f"part-{k:05d}.parquet" for k in range(5)
                ]
            pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_impute_driver_never_holds_the_table(client, tmp_path: Path) -> None:
    """Sample bound < n: every compute brings back a sample piece or a row count only."""
    from dask.sizeof import sizeof

    df = _holes_table(n=4000, seed=1)
    folder = _parts(df, tmp_path / "parts")
    sizes: list[int] = []

    def guard(dsk, keys, **kwargs):
        result = client.get(dsk, keys, **kwargs)
        sizes.append(sizeof(result))
        assert sizes[-1] < sizeof(df) / 4, f"a compute brought {sizes[-1]} bytes back"
        return result

    with dask.config.set(scheduler=guard):
        result = _impute_parts(folder, f"{tmp_path / 'out'}/", {**SMALL, "random_state": 2},
                               client, sample_rows=200)  # fmt: skip
    assert result.sample_rows == 200 and len(sizes) >= 2
    got = pd.read_parquet(tmp_path / "out")
    assert got.shape == df.shape and got[IMPUTE_FEATURES].notna().all().all()
    observed = df[IMPUTE_FEATURES].notna().to_numpy()
    np.testing.assert_array_equal(got[IMPUTE_FEATURES].to_numpy()[observed],
                                  df[IMPUTE_FEATURES].to_numpy()[observed])  # fmt: skip
    assert set(got["c"]) == {"x", "y", "z"}  # labels, not codes


def test_impute_bad_value_in_partition_3_exits_3_writes_nothing(client, tmp_path: Path) -> None:
    df = _holes_table(n=250, seed=3)
    for k, rows in enumerate(np.array_split(np.arange(len(df)), 5)):
        part = df.iloc[rows].astype({"a": object})
        if k == 3:
            part.iloc[4, 0] = "abc"
        part.to_csv(tmp_path / f"x-{k}.csv", index=False)
    out = tmp_path / "out.csv"
    res = CliRunner().invoke(
        cli,
        [
            "impute",
            str(tmp_path / "x-*.csv"),
            "--target",
            "cls",
            "--out",
            str(out),
            "--trees",
            "4",
            "--scheduler",
            client.scheduler.address,
        ],
    )
    assert res.exit_code == 3, res.output
    assert "x-3.csv" in res.output and "'a'" in res.output and "abc" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"x-{k}.csv" for k in range(5)]
    assert os.listdir(tmp_path) and not out.exists()


def test_rfimpute_by_partitions_equals_in_memory(client, tmp_path: Path) -> None:
    """Sample bound >= n: rfImpute of a folder of parts is the in-memory result, byte for byte."""
    from distforest.apps.impute import ProximityImputer

    folder = _parts(_holes_table(n=300, seed=4), tmp_path / "parts")
    frame = pd.read_parquet(folder)
    with execution(client="synchronous"):
        filled = ProximityImputer(**RF_SMALL, random_state=3).fit_transform(
            frame[IMPUTE_FEATURES], frame["cls"]
        )
    expected = frame.copy()
    for position, col in enumerate(expected.columns):
        if col in filled.columns:
            expected.isetitem(position, filled[col])
    expected.to_csv(tmp_path / "mem.csv", index=False)
    with client.as_current():
        result = _impute_parts(folder, str(tmp_path / "one.csv"),
                               {**RF_SMALL, "random_state": 3}, client)  # fmt: skip
    assert result.sample_rows == 300
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "mem.csv").read_bytes()


def _oracle(params: dict[str, Any], df: pd.DataFrame, *, sample_rows: int, seed: int,
            parts: int) -> tuple[Any, pd.DataFrame]:  # fmt: skip
    """The in-memory imputer fitted on the sample a run by partitions draws, and each
    partition's features filled by its ``transform``."""
    from distforest.apps.impute import ProximityImputer
    from distforest.jobs.impute import _sample

    sample = df.iloc[_sample(len(df), sample_rows, seed)].reset_index(drop=True)
    with execution(client="synchronous"):
        oracle = ProximityImputer(**params, random_state=seed).fit(
            sample[IMPUTE_FEATURES], sample["cls"]
        )
        expected = pd.concat([oracle.transform(df.iloc[rows][IMPUTE_FEATURES]
                                               .reset_index(drop=True))
                              for rows in np.array_split(np.arange(len(df)), parts)],
                             ignore_index=True)  # fmt: skip
    return oracle, expected


@pytest.mark.parametrize("proximity", ["rfimpute", "rfgap"])
def test_one_forest_modes_above_the_sample_are_new_rows(client, tmp_path: Path,
                                                        proximity: str) -> None:  # fmt: skip
    """Sample bound < n: each partition is filled as ``transform`` fills it in memory, by
    the imputer fitted on the same sample (the oracle), and observed cells never change."""

    df = _holes_table(n=300, seed=6)
    folder = _parts(df, tmp_path / "parts", parts=3)
    params = {**RF_SMALL, "proximity": proximity}
    _, expected = _oracle(params, df, sample_rows=100, seed=8, parts=3)
    with client.as_current():
        result = _impute_parts(folder, f"{tmp_path / 'out'}/", {**params, "random_state": 8},
                               client, sample_rows=100)  # fmt: skip
    assert result.sample_rows == 100
    got = pd.read_parquet(tmp_path / "out")
    assert got[IMPUTE_FEATURES].notna().all().all()
    pd.testing.assert_frame_equal(got[IMPUTE_FEATURES], expected, check_exact=True)
    observed = df[IMPUTE_FEATURES].notna().to_numpy()
    np.testing.assert_array_equal(got[IMPUTE_FEATURES].to_numpy()[observed],
                                  df[IMPUTE_FEATURES].to_numpy()[observed])  # fmt: skip


@pytest.mark.parametrize("out", ["o.zarr"])
def test_zarr_output_by_partitions_is_refused(tmp_path: Path, out: str) -> None:
    folder = _parts(_holes_table(n=50), tmp_path / "parts")
    res = CliRunner().invoke(cli, ["impute", str(folder), "--out", str(tmp_path / out)])
    assert res.exit_code == 2 and "Parquet dataset folder" in res.output


# -- former refusals: each runs on a folder of parts and gives the one-file run's bytes --


@pytest.mark.parametrize("kind", ["folder", "glob"])
def test_impute_from_proximity_by_partitions(data, cluster_address, kind: str) -> None:
    """``impute: {from: proximity}`` of a proximity job on parts: the one-CSV job's table."""
    from distforest.jobs.proximity import ProximityJob, run_proximity_job

    root = data["root"]

    def run(which: str) -> bytes:
        where = root / f"from-matrix-{which}"
        out = where / "imputed.csv"
        if not out.exists():
            where.mkdir()
            job = ProximityJob(input=data["files"]["holes"][which], out=str(where / "p.zarr"),
                               target="label", forest={"n_estimators": TREES, "random_state": 5},
                               impute={"out": str(out), "from": "proximity"},
                               connect={"scheduler": cluster_address})  # fmt: skip
            run_proximity_job(job)
        return out.read_bytes()

    expected = run("csv")
    frame = pd.read_csv(io.BytesIO(expected))
    assert frame[FEATURES].notna().all().all()  # every hole filled (the one-file run)
    holes = data["frames"]["holes"]
    observed = holes[FEATURES].notna().to_numpy()
    np.testing.assert_array_equal(frame[FEATURES].to_numpy()[observed],
                                  holes[FEATURES].to_numpy()[observed])  # fmt: skip
    assert run(kind) == expected


def test_rfimpute_regrown_forest_stays_in_a_store(client, tmp_path: Path, monkeypatch) -> None:
    """Sample bound < n and a forest too large to keep (``KEEP_NODES_CELLS``): the forest
    that routes the partitions' rows is grown again into a temporary store (no nodes nor
    leaves here, none sent to the tasks) and fills them as the in-memory regrown one does."""
    import distforest.apps.impute as impute_module
    from distforest.store.sink import StoredNodes

    monkeypatch.setattr(impute_module, "KEEP_NODES_CELLS", 0)
    df = _holes_table(n=500, seed=9)
    folder = _parts(df, tmp_path / "parts", parts=4)
    oracle, expected = _oracle(RF_SMALL, df, sample_rows=120, seed=4, parts=4)
    assert oracle.forest_.nodes_ is not None and isinstance(oracle.forest_.leaves_, np.ndarray)
    with client.as_current():
        result = _impute_parts(folder, f"{tmp_path / 'out'}/", {**RF_SMALL, "random_state": 4},
                               client, sample_rows=120)  # fmt: skip
    forest = result.imputer.forest_
    assert isinstance(forest.leaves_, zarr.Array) and isinstance(forest.nodes_, StoredNodes)
    got = pd.read_parquet(tmp_path / "out")
    pd.testing.assert_frame_equal(got[IMPUTE_FEATURES], expected, check_exact=True)


def test_smerf_predict_of_a_folder_of_parts(data, cluster_address) -> None:
    """``smerf predict MODEL A`` with A a folder of parts (formerly refused: read whole):
    the one-CSV run's learned distances, routed by chunks."""
    frame = data["frames"]["features"]
    root = data["root"] / "smerf-predict"
    root.mkdir()
    points = frame.to_numpy()
    np.save(root / "D.npy", np.sqrt(((points[:, None] - points[None]) ** 2).sum(axis=2)))
    model = root / "model.zarr"
    run = CliRunner().invoke
    fitted = run(
        cli,
        [
            "-q",
            "smerf",
            "fit",
            data["files"]["features"]["csv"],
            "--distances",
            str(root / "D.npy"),
            "--trees",
            "4",
            "--seed",
            "3",
            "--out",
            str(model),
        ],
    )
    assert fitted.exit_code == 0, fitted.output
    matrices = {}
    for kind in ("csv", "folder"):
        out = root / f"{kind}.zarr"
        done = run(
            cli,
            [
                "-q",
                "smerf",
                "predict",
                str(model),
                data["files"]["features"][kind],
                "--out",
                str(out),
                "--scheduler",
                cluster_address,
            ],
        )
        assert done.exit_code == 0, done.output
        matrices[kind] = np.asarray(zarr.open_group(str(out), mode="r")["distance"][...])
    assert matrices["csv"].shape == (N, N)
    np.testing.assert_array_equal(matrices["folder"], matrices["csv"])


def test_smerf_pipeline_distance_rows_of_folders(data, cluster_address) -> None:
    """A SMERF pipeline's ``distance.rows`` / ``against`` as folders of parts (formerly read
    whole only): the one-CSV run's matrix."""
    frame = data["frames"]["features"]
    root = data["root"] / "smerf-pipeline"
    root.mkdir()
    points = frame.to_numpy()
    np.save(root / "D.npy", np.sqrt(((points[:, None] - points[None]) ** 2).sum(axis=2)))
    files = data["files"]["features"]
    got = {}
    for kind in ("csv", "folder"):
        out = root / kind
        pipeline = root / f"{kind}.yaml"
        pipeline.write_text(
            f"input: {{path: {files['csv']}}}\n"
            f"smerf: {{distances: {root / 'D.npy'}, n_estimators: 4, random_state: 2}}\n"
            f"distance: {{rows: {files[kind]}, against: {files[kind]}, out: d.zarr}}\n"
            f"output: {{dir: {out}, store: m.zarr}}\n"
        )
        done = CliRunner().invoke(cli, ["-q", "run", str(pipeline), "--scheduler",
                                        cluster_address])  # fmt: skip
        assert done.exit_code == 0, done.output
        got[kind] = np.asarray(zarr.open_group(str(out / "d.zarr"), mode="r")["distance"][...])
    assert got["csv"].shape == (N, N)
    np.testing.assert_array_equal(got["folder"], got["csv"])
