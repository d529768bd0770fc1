"""``distforest impute --model`` on a folder of parts (formerly refused): the bytes of the
one-CSV run, each hole the proximity-weighted mean of its column under the model's leaves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import make_classification

from distforest.cli.main import cli

pd = pytest.importorskip("pandas")
lgb = pytest.importorskip("lightgbm")


@pytest.fixture(scope="module")
def holes(tmp_path_factory) -> tuple[Path, Path, Path, np.ndarray]:
    """A table with holes as one CSV and as a folder of 3 Parquet parts (the CSV's values),
    and a LightGBM model file fitted on the complete rows."""
    root = tmp_path_factory.mktemp("impute_model")
    X, y = make_classification(240, 4, n_informative=3, n_redundant=0, random_state=7)
    model = lgb.LGBMClassifier(n_estimators=5, num_leaves=8, verbose=-1).fit(X, y)
    model.booster_.save_model(str(root / "model.txt"))
    Xh = X.copy()
    rng = np.random.default_rng(3)
    Xh[rng.random(Xh.shape) < 0.12] = np.nan
    frame = pd.DataFrame(Xh, columns=[f"f{i}" for i in range(4)]).assign(label=y)
    frame.to_csv(root / "holes.csv", index=False)
    back = pd.read_csv(root / "holes.csv")  # the parts hold the values the CSV reads as
    parts = root / "parts"
    parts.mkdir()
    for p, rows in enumerate(np.array_split(np.arange(len(back)), 3)):
        back.iloc[rows].to_parquet(parts / f"part-{p}.parquet", index=False)
    return root / "holes.csv", parts, root / "model.txt", back.drop(columns="label").to_numpy()


def _impute(source: Path, model: Path, out: Path | str, *more: str) -> None:
    result = CliRunner().invoke(cli, ["-q", "impute", str(source), "--target", "label",
                                      "--model", str(model), "--out", str(out), *more])  # fmt: skip
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("out", ["imputed.csv", "imputed.parquet"])
def test_impute_with_a_model_on_a_folder_of_parts(holes, tmp_path: Path, out: str) -> None:
    """The folder's table (written by the parts' tasks) has the one-CSV run's values; a
    CSV is the same bytes; the holes are the oracle's weighted means."""
    csv, parts, model, Xh = holes
    one, many = tmp_path / f"one-{out}", tmp_path / f"parts-{out}"
    _impute(csv, model, one)
    _impute(parts, model, many)
    read = pd.read_csv if out.endswith(".csv") else pd.read_parquet
    expected, got = read(one), read(many)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    if out.endswith(".csv"):
        assert many.read_bytes() == one.read_bytes()
    # the oracle: P = share of trees in which two rows share a leaf (the model's leaves)
    leaves = lgb.Booster(model_file=str(model)).predict(Xh, pred_leaf=True)
    P = (leaves[:, None, :] == leaves[None, :, :]).mean(axis=2)
    filled = got[[f"f{i}" for i in range(4)]].to_numpy()
    assert not np.isnan(filled).any()
    for j in range(4):
        rows, observed = np.flatnonzero(np.isnan(Xh[:, j])), ~np.isnan(Xh[:, j])
        W = P[np.ix_(rows, observed)]
        np.testing.assert_allclose(filled[rows, j], W @ Xh[observed, j] / W.sum(axis=1),
                                   rtol=1e-9)  # fmt: skip
    kept = ~np.isnan(Xh)
    np.testing.assert_array_equal(filled[kept], Xh[kept])


def test_impute_with_a_model_on_a_folder_into_a_folder(holes, tmp_path: Path) -> None:
    """A folder output: one Parquet part per input part, together the one-CSV run's table."""
    csv, parts, model, _ = holes
    _impute(csv, model, tmp_path / "one.csv")
    _impute(parts, model, f"{tmp_path / 'folder'}/")  # a folder: the trailing slash
    written = sorted((tmp_path / "folder").glob("part-*.parquet"))
    assert len(written) == 3
    got = pd.concat([pd.read_parquet(p) for p in written], ignore_index=True)
    pd.testing.assert_frame_equal(got, pd.read_csv(tmp_path / "one.csv"), check_exact=True)


def test_impute_with_a_model_by_partitions_holds_no_table(tmp_path: Path, cluster_address) -> None:
    """On a cluster, the folder's run fills each partition in its task (no row gathered):
    the driver's traced allocations peak well under the one-file run's (which weighs the
    whole table here), and the CSV is the same bytes."""
    from tracing import traced_peak

    n = 60_000
    X, y = make_classification(n, 4, n_informative=3, n_redundant=0, random_state=2)
    model = lgb.LGBMClassifier(n_estimators=4, num_leaves=8, verbose=-1).fit(X, y)
    model.booster_.save_model(str(tmp_path / "model.txt"))
    X[np.random.default_rng(5).random(X.shape) < 0.1] = np.nan
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(4)]).assign(label=y)
    frame.to_csv(tmp_path / "one.csv", index=False)
    parts, warm = tmp_path / "parts", tmp_path / "warm"
    parts.mkdir()
    warm.mkdir()
    back = pd.read_csv(tmp_path / "one.csv")
    for p, rows in enumerate(np.array_split(np.arange(n), 4)):
        back.iloc[rows].to_parquet(parts / f"part-{p}.parquet", index=False)
        back.iloc[rows[:300]].to_parquet(warm / f"part-{p}.parquet", index=False)
    on = ("--scheduler", cluster_address)
    _impute(warm, tmp_path / "model.txt", tmp_path / "warm.csv", *on)  # imports, numba
    whole = traced_peak(lambda: _impute(tmp_path / "one.csv", tmp_path / "model.txt",
                                        tmp_path / "w.csv", *on))  # fmt: skip
    by_parts = traced_peak(lambda: _impute(parts, tmp_path / "model.txt", tmp_path / "p.csv", *on))
    assert (tmp_path / "p.csv").read_bytes() == (tmp_path / "w.csv").read_bytes()
    assert by_parts < whole / 3, (by_parts, whole)
