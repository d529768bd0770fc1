"""ProximityImputer against a dense oracle; edge cases; writers; the CLI end to end."""

from __future__ import annotations

import dataclasses

import click
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner
from oracles import dense_oob_rownorm, dense_original_proximity, dense_rfgap

from distforest.apps.impute import ProximityImputer
from distforest.cli.impute_cmd import impute
from distforest.cli.main import _Group
from distforest.errors import InputError, NotFittedError, ParameterError, StoreError
from distforest.io import Table, load_table
from distforest.io.attrs import decode_attrs
from distforest.io.writers import check_can_write, read_zarr_table, write_table

DENSE = {
    "original": lambda leaves, inbag: dense_original_proximity(leaves, leaves),
    "oob": dense_oob_rownorm,
    "rfgap": dense_rfgap,
}


def structured(n: int, seed: int = 0, missing: float = 0.2):
    """Five numeric columns driven by two latent factors, a categorical one, a class."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 2))
    X = np.column_stack(
        [
            z[:, 0],
            z[:, 0] + 0.1 * rng.normal(size=n),
            z[:, 1],
            z[:, 0] - z[:, 1] + 0.1 * rng.normal(size=n),
            2 * z[:, 1] + 0.2 * rng.normal(size=n),
            10 * ((z[:, 0] > 0).astype(float) + (z[:, 1] > 0.5)) + 5,  # levels 5, 15, 25
        ]
    )
    y = (z[:, 0] + z[:, 1] > 0).astype(int)
    mask = rng.random(X.shape) < missing
    Xm = X.copy()
    Xm[mask] = np.nan
    return X, Xm, y, mask


def expected_first_iteration(Xm, categorical, Pm, vote, start):
    """rfImpute's update, by hand, from a dense proximity matrix.

    Returns the imputed matrix and, for votes tied to rounding, the tied levels.
    """
    out = np.where(np.isnan(Xm), start, Xm)
    ties = {}
    for j in range(Xm.shape[1]):
        obs = ~np.isnan(Xm[:, j])
        for i in np.flatnonzero(~obs):
            w = Pm[i, obs]
            if categorical[j]:
                levels, counts = np.unique(Xm[obs, j], return_counts=True)
                score = np.array([w[Xm[obs, j] == lv].sum() for lv in levels])
                if vote == "mean":
                    score = score / counts
                if score.max() > 0:
                    out[i, j] = levels[np.argmax(score)]
                    top = np.isclose(score, score.max(), rtol=1e-12, atol=0)
                    if top.sum() > 1:
                        ties[(i, j)] = set(levels[top])
            elif w.sum() > 0:
                out[i, j] = (w * Xm[obs, j]).sum() / w.sum()
    return out, ties


@pytest.mark.parametrize(
    ("method", "vote", "supervised"),
    [
        ("original", "sum", True),
        ("oob", "mean", True),
        ("rfgap", "sum", False),
        ("rfgap", "mean", True),
    ],
)
def test_first_iteration_equals_dense_oracle(client, method, vote, supervised):
    _, Xm, y, _ = structured(90, seed=1, missing=0.15)
    imp = ProximityImputer(
        1,
        proximity=method,
        categorical_vote=vote,
        categorical_features=[5],
        n_estimators=12,
        random_state=3,
    ).set_execution(client)
    got = imp.fit_transform(Xm, y if supervised else None)
    forest = imp.forest_
    assert forest.task_ == ("classification" if supervised else "unsupervised")
    Pm = DENSE[method](forest.leaves_, forest.inbag_)
    start = np.nanmedian(Xm, axis=0)
    levels, counts = np.unique(Xm[~np.isnan(Xm[:, 5]), 5], return_counts=True)
    start[5] = levels[np.argmax(counts)]
    expected, ties = expected_first_iteration(Xm, [False] * 5 + [True], Pm, vote, start)
    for (i, j), tied in ties.items():  # an exact tie may go either way
        assert got[i, j] in tied
        expected[i, j] = got[i, j]
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    assert np.isnan(Xm).sum() > 50 and not np.isnan(got).any()
    assert set(np.unique(got[:, 5])) == {5.0, 15.0, 25.0}


def test_imputation_beats_the_median_and_is_repeatable(client):
    X, Xm, y, mask = structured(300, seed=2)
    num = mask[:, :5]

    def nrmse(F):
        return np.sqrt(np.mean((F[:, :5][num] - X[:, :5][num]) ** 2)) / X[:, :5].std()

    imp = ProximityImputer(3, proximity="rfgap", n_estimators=40, random_state=0)
    F = imp.set_execution(client).fit_transform(Xm, y)
    median = np.where(np.isnan(Xm), np.nanmedian(Xm, axis=0), Xm)
    assert nrmse(F) < 0.6 * nrmse(median)
    assert imp.n_iter_ == 3 and len(imp.history_) == 3
    np.testing.assert_array_equal(F[~mask], X[~mask])
    again = (
        ProximityImputer(3, proximity="rfgap", n_estimators=40, random_state=0)
        .set_execution(client)
        .fit_transform(Xm, y)
    )
    # the same seed gives the same bits (product batches are summed in a fixed order)
    assert F.tobytes() == again.tobytes()


def test_transform_new_rows(client):
    X, Xm, y, mask = structured(260, seed=4)
    train, new = slice(0, 200), slice(200, 260)
    imp = ProximityImputer(2, proximity="original", n_estimators=30, random_state=1).set_execution(
        client
    )
    fitted = imp.fit_transform(Xm[train], y[train])
    # the training data itself: the fit result (recognised by its fingerprint) ...
    np.testing.assert_array_equal(imp.transform(Xm[train]), fitted)
    # ... while the same rows with one observed cell moved are new rows: imputed by the
    # forest (out of bag everywhere), so their missing cells differ from the fit's
    moved = Xm[train].copy()
    r, c = np.argwhere(~mask[train])[0]
    moved[r, c] += 1e-6
    redone = imp.transform(moved)
    mt = mask[train]
    np.testing.assert_array_equal(redone[~mt], moved[~mt])
    assert not np.isnan(redone).any() and not np.array_equal(redone[mt], fitted[mt])
    close = np.abs(redone[:, :5] - X[train][:, :5])[mt[:, :5]].mean()
    assert close < 0.7 * np.abs(imp.statistics_[:5] - X[train][:, :5])[mt[:, :5]].mean()
    out = imp.transform(Xm[new])
    m = mask[new]
    np.testing.assert_array_equal(out[~m], X[new][~m])
    assert not np.isnan(out).any()
    median = np.where(m, imp.statistics_, Xm[new])
    num = m[:, :5]
    err = np.abs(out[:, :5] - X[new][:, :5])[num].mean()
    assert err < 0.7 * np.abs(median[:, :5] - X[new][:, :5])[num].mean()
    # one iteration by hand: new rows routed through the last forest, weights from
    # the training rows' observed values (new rows share leaves with training rows)
    got = imp.set_params(iterations=1).transform(Xm[new])  # the fitted forest is kept
    leaves_new = imp.forest_.apply(median)
    Pnew = dense_original_proximity(leaves_new, imp.forest_.leaves_)
    Xt = Xm[train]
    expected = median.copy()
    for j in range(6):
        obs = ~np.isnan(Xt[:, j])
        w = Pnew[:, obs]
        rows = m[:, j]
        expected[rows, j] = (w[rows] @ Xt[obs, j]) / w[rows].sum(axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-9)


@pytest.mark.parametrize("large", [False, True])
def test_rfimpute_keeps_only_the_nodes_transform_needs_with_the_same_results(client, monkeypatch,
                                                                             large):  # fmt: skip
    """Intermediate forests are fitted without nodes (fit_leaves); the last keeps them, or
    on a large input is grown again by the first transform of new rows: the imputation
    and transform are the same bits as with every forest fully kept."""
    import distforest.apps.impute as impute_module
    from distforest.forests.proximity_forest import ProximityForest

    _, Xm, y, mask = structured(220, seed=6)
    train, new = slice(0, 180), slice(180, 220)
    calls: list[str] = []

    def run(regrown: bool) -> tuple[np.ndarray, np.ndarray]:
        imp = ProximityImputer(3, proximity="rfgap", n_estimators=20, random_state=2)
        imp.set_execution(client)
        filled = imp.fit_transform(Xm[train], y[train])
        calls.append("transform")
        assert (imp.forest_.nodes_ is None) == regrown
        return filled, imp.transform(Xm[new])

    if large:
        monkeypatch.setattr(impute_module, "KEEP_NODES_CELLS", 0)
    fit, leaves = ProximityForest.fit, ProximityForest.fit_leaves
    monkeypatch.setattr(ProximityForest, "fit",
                        lambda self, *a: calls.append("fit") or fit(self, *a))  # fmt: skip
    monkeypatch.setattr(ProximityForest, "fit_leaves",
                        lambda self, *a: calls.append("leaves") or leaves(self, *a))  # fmt: skip
    light = run(large)
    expected = ["leaves", "leaves", "leaves", "transform", "fit"] if large else [
        "leaves", "leaves", "fit", "transform"]  # fmt: skip
    assert calls == expected
    monkeypatch.setattr(impute_module, "KEEP_NODES_CELLS", 10**12)
    monkeypatch.setattr(ProximityForest, "fit_leaves", fit)  # every forest with its nodes
    full = run(False)
    for a, b in zip(light, full, strict=True):
        assert a.tobytes() == b.tobytes()
    assert not np.isnan(light[1]).any() and mask[new].any()


@pytest.mark.parametrize("missing", [0.2, 0.0])
def test_rfimpute_without_nodes_here_fills_new_rows_with_the_same_bits(client, missing):
    """``fit_transform(keep_nodes=False)`` (a driver whose new rows are filled by tasks):
    no tree node reaches this process, even for a small forest; ``for_new_rows`` grows
    the last forest again into a temporary store (nodes and leaves there, not in what
    is sent to the tasks) and fills new rows with the bits of the forest kept whole."""
    import pickle

    from distforest.store.sink import StoredNodes

    _, Xm, y, _ = structured(200, seed=3, missing=missing)
    new = structured(40, seed=4)[1]
    results, sent = [], []
    for keep in (True, False):
        imp = ProximityImputer(2, proximity="rfimpute", n_estimators=12, random_state=5)
        imp.set_execution(client)
        filled = imp.fit_transform(Xm, y, keep_nodes=keep)
        assert (imp.forest_.nodes_ is None) != keep
        light = imp.for_new_rows()
        assert isinstance(light.forest_.nodes_, StoredNodes) != keep
        sent.append(len(pickle.dumps(light)))
        results.append((filled, light.transform(new)))
    for a, b in zip(*results, strict=True):
        assert a.tobytes() == b.tobytes()
    assert not np.isnan(results[1][1]).any()
    assert sent[1] < sent[0]  # the nodes and leaves stay in the store


def test_dataframe_round_trip_keeps_names_order_dtypes_and_labels(client):
    X, Xm, y, mask = structured(160, seed=5, missing=0.15)
    colour = np.array(["red", "green", "blue"], dtype=object)[(X[:, 5] // 10).astype(int)]
    df = pd.DataFrame(
        {
            "b": Xm[:, 0],
            "colour": pd.Series(colour).where(~mask[:, 5], None).astype("str"),
            "kind": pd.Categorical(np.where(mask[:, 2], None, np.where(X[:, 2] > 0, "hi", "lo"))),
            "count": pd.array(np.where(mask[:, 3], None, np.rint(X[:, 3] * 3)), dtype="Int64"),
            "a": Xm[:, 4],
            "flag": X[:, 0] > 0,
            "label": np.where(y == 1, "yes", "no"),
        }
    )
    imp = ProximityImputer(2, n_estimators=20, random_state=0).set_execution(client)
    out = imp.fit_transform(df, y="label")
    assert list(out.columns) == list(df.columns)
    assert out.dtypes.to_dict() == df.dtypes.to_dict()
    assert out.notna().all().all()
    pd.testing.assert_series_equal(out["label"], df["label"])
    for col in df.columns:
        observed = df[col].notna()
        pd.testing.assert_series_equal(out[col][observed], df[col][observed])
    assert set(out["colour"]) <= {"red", "green", "blue"}
    assert set(out["kind"]) <= {"hi", "lo"}
    assert imp.categorical_.tolist() == [False, True, True, False, False, False]
    assert imp.n_missing_["colour"] == mask[:, 5].sum()
    # new rows as a DataFrame, with the target column present: kept, not used
    new = df.iloc[:10].copy()
    new.loc[new.index[0], "colour"] = None
    got = imp.transform(new.assign(b=new["b"] + 0))
    assert list(got.columns) == list(df.columns) and got["colour"].notna().all()


def test_path_and_table_inputs(client, tmp_path, breast_cancer_csv):
    imp = ProximityImputer(1, n_estimators=10, random_state=0).set_execution(client)
    out = imp.fit_transform(breast_cancer_csv, y="Class")
    assert isinstance(out, pd.DataFrame) and out.shape == (699, 11)
    assert out["Bare.nuclei"].notna().all() and imp.n_missing_["Bare.nuclei"] == 16
    table = load_table(breast_cancer_csv, target="Class", drop=["Id"])
    filled = (
        ProximityImputer(1, n_estimators=10, random_state=0)
        .set_execution(client)
        .fit_transform(table)
    )
    assert isinstance(filled, Table) and not np.isnan(filled.X).any()
    assert filled.feature_names == table.feature_names
    np.testing.assert_array_equal(filled.y, table.y)
    bare = dataclasses.replace(table, y=None)
    imp = ProximityImputer(1, n_estimators=10, random_state=0).set_execution(client)
    assert imp.fit(bare, y=table.y).task_ == "classification"


def test_missing_target_is_an_error_naming_the_fix(client):
    _, Xm, y, _ = structured(50)
    y = y.astype(float)
    y[[3, 7]] = np.nan
    with pytest.raises(
        InputError,
        match=r"missing in 2 row.*\[4, 8\] counted from 1, positions \[3, 7\].*dropna.*y=None",
    ):
        ProximityImputer().set_execution(client).fit(Xm, y)


def test_all_missing_column_is_an_error_naming_it(client):
    df = pd.DataFrame({"a": np.arange(20.0), "empty": np.nan, "b": np.arange(20.0) % 3})
    df.loc[[1, 2], "a"] = np.nan
    with pytest.raises(InputError, match=r"\['empty'\] have no observed value.*drop"):
        ProximityImputer().set_execution(client).fit(df)


def test_column_missing_in_a_whole_class_falls_back_cleanly(client):
    _, Xm, y, _ = structured(200, seed=6, missing=0.1)
    Xm[y == 1, 2] = np.nan
    for method in ("original", "rfgap"):
        imp = ProximityImputer(2, proximity=method, n_estimators=20, random_state=0).set_execution(
            client
        )
        F = imp.fit_transform(Xm, y)
        assert not np.isnan(F).any()
        cells = F[y == 1, 2]
        observed = Xm[y == 0, 2]
        assert observed[~np.isnan(observed)].min() - 1e-9 <= cells.min()
        assert cells.max() <= np.nanmax(observed) + 1e-9
        fallbacks = imp.history_[-1]["fallbacks"]
        assert 0 <= fallbacks <= int(np.isnan(Xm).sum())
        if fallbacks:
            assert np.isclose(F[y == 1, 2], imp.statistics_[2]).any()


@pytest.mark.parametrize("proximity", ["rfgap", "rfimpute", "column"])
def test_no_missing_values_returns_the_data_and_still_imputes_new_rows(client, proximity):
    X, _, y, _ = structured(120, seed=7)
    imp = ProximityImputer(proximity=proximity, n_estimators=15, random_state=0)
    imp.set_execution(client)
    out = imp.fit_transform(X, y)
    np.testing.assert_array_equal(out, X)
    assert imp.n_iter_ == 0 and imp.history_ == []
    new = X[:5].copy()
    new[0, 1] = np.nan
    got = imp.transform(new)
    assert not np.isnan(got).any() and np.array_equal(got[1:], X[1:5])


def test_parameters_checked_in_fit_and_new_levels_rejected(client):
    imp = ProximityImputer(proximity="bad")  # __init__ only stores
    assert imp.get_params()["proximity"] == "bad"
    with pytest.raises(ParameterError, match=r"proximity must be one of.*'bad'"):
        imp.fit(np.ones((5, 2)))
    with pytest.raises(ParameterError, match="iterations must be an integer >= 1 or None, got 0"):
        ProximityImputer(0).fit(np.ones((5, 2)))
    with pytest.raises(NotFittedError, match="fit"):
        ProximityImputer().transform(np.ones((5, 2)))
    df = pd.DataFrame({"c": ["x", "y", None, "x", "y", "x"], "v": [1.0, 2, 3, 4, np.nan, 6]})
    imp = ProximityImputer(1, n_estimators=5, random_state=0).set_execution(client).fit(df)
    with pytest.raises(InputError, match=r"'c' has level\(s\) \['z'\] not seen in fit"):
        imp.transform(pd.DataFrame({"c": ["z", None], "v": [1.0, 2.0]}))
    with pytest.raises(InputError, match="lacks the training feature column"):
        imp.transform(pd.DataFrame({"v": [1.0]}))


# -- writers ------------------------------------------------------------------


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "z": [1.5, 2.0, np.nan],
            "text": ["a", None, "c"],
            "cat": pd.Categorical(["u", "v", "u"]),
            "n": pd.array([1, None, 3], dtype="Int64"),
            "flag": [True, False, True],
        }
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".zarr"])
def test_writers_round_trip_and_refuse_to_overwrite(frame, tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    write_table(frame, path)
    if suffix == ".zarr":
        pd.testing.assert_frame_equal(read_zarr_table(path), frame)
        ds = xr.open_zarr(path)
        attrs = decode_attrs(ds.attrs)  # JSON text on disk, so that netCDF can hold it
        assert ds["z"].dims == ("sample",) and attrs["columns"] == list(frame.columns)
        assert attrs["categories"] == {"cat": ["u", "v"]}
        assert list(load_table(path).feature_names) == list(frame.columns)
    elif suffix == ".parquet":
        pd.testing.assert_frame_equal(pd.read_parquet(path), frame)
    else:
        assert list(pd.read_csv(path).columns) == list(frame.columns)
    with pytest.raises(StoreError, match=r"already exists.*overwrite"):
        write_table(frame, path)
    write_table(frame.iloc[:2], path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_writers_leave_nothing_half_written(frame, tmp_path):
    bad = frame.rename(columns={"z": "a/b"})
    with pytest.raises(InputError, match="cannot be a Zarr array name"):
        write_table(bad, tmp_path / "t.zarr")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "folder.zarr").mkdir()
    with pytest.raises(StoreError, match="not a Zarr store"):
        check_can_write(tmp_path / "folder.zarr", overwrite=True)
    with pytest.raises(ParameterError, match=r"unsupported output type '\.xlsx'"):
        check_can_write(tmp_path / "t.xlsx")


# -- the command line -------------------------------------------------------------


@click.group(cls=_Group)
@click.option("-q", "--quiet", is_flag=True)
@click.pass_context
def cli(ctx: click.Context, quiet: bool) -> None:
    ctx.obj = {"quiet": quiet}


cli.add_command(impute)


def test_cli_end_to_end_on_bundled_data(client, breast_cancer_csv, tmp_path):
    addr = client.scheduler.address
    out = tmp_path / "imputed.csv"
    args = [
        "-q",
        "impute",
        str(breast_cancer_csv),
        "--target",
        "Class",
        "--drop",
        "Id",
        "--trees",
        "20",
        "--iterations",
        "2",
        "--seed",
        "1",
        "--scheduler",
        addr,
    ]
    result = CliRunner().invoke(cli, [*args, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "imputed 16 cell(s) in 1 column(s)" in result.output
    assert "Bare.nuclei" in result.output and str(out.resolve()) in result.output
    original = pd.read_csv(breast_cancer_csv)
    written = pd.read_csv(out)
    assert list(written.columns) == list(original.columns)
    assert written["Bare.nuclei"].notna().all()
    for col in ("Id", "Class", "Cl.thickness"):
        pd.testing.assert_series_equal(written[col], original[col])
    filled = written.loc[original["Bare.nuclei"].isna(), "Bare.nuclei"]
    assert filled.between(1, 10).all()
    # the same job again: nothing to do; another job refused before any work (as every
    # command); a Zarr output readable by xarray
    written_bytes = out.read_bytes()
    again = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert again.exit_code == 0 and "already complete" in again.output, again.output
    other = CliRunner().invoke(cli, [*args, "--trees", "21", "--out", str(out)])
    assert other.exit_code == 6 and "different job" in other.output, other.output
    assert "--overwrite" in other.output and out.read_bytes() == written_bytes
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("kept\n")
    refused = CliRunner().invoke(cli, [*args, "--out", str(foreign)])
    assert refused.exit_code == 6 and "already exists" in refused.output, refused.output
    assert foreign.read_text() == "kept\n"
    store = tmp_path / "table.zarr"  # (its job's store: table.run.zarr)
    result = CliRunner().invoke(cli, [*args, "--out", str(store)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    ds = xr.open_zarr(store)
    assert decode_attrs(ds.attrs)["columns"] == list(original.columns)
    np.testing.assert_allclose(ds["Bare.nuclei"].values, written["Bare.nuclei"].values)


def test_cli_bad_inputs_exit_with_clear_messages(client, breast_cancer_csv, tmp_path):
    addr = client.scheduler.address
    out = tmp_path / "o.csv"
    base = ["impute", str(breast_cancer_csv), "--scheduler", addr, "--out", str(out)]
    result = CliRunner().invoke(cli, [*base, "--target", "class"])
    assert result.exit_code == 3 and "did you mean 'Class'" in result.output
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,y\n1,,p\n2,3,\n3,4,q\n4,5,p\n")
    result = CliRunner().invoke(
        cli, ["impute", str(bad), "--target", "y", "--scheduler", addr, "--out", str(out)]
    )
    assert result.exit_code == 3 and "leave out --target" in result.output
    assert not out.exists()


def test_float32_columns_stay_float32(client):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 3)).astype(np.float32)
    X[rng.random(X.shape) < 0.15] = np.nan
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    imputer = ProximityImputer(n_estimators=10, iterations=1, random_state=0).set_execution(client)
    out = imputer.fit_transform(frame)
    assert (out.dtypes == np.float32).all() and not out.isna().any().any()
