"""Accuracy and time of ``ProximityImputer`` against scikit-learn's imputers on real data.

Run by hand (never in CI), from the repository root::

    .venv/bin/python benchmarks/bench_impute.py [--seeds 2] [--satellite-seeds 1] \\
        [--data ../shared/data] [--out benchmarks/results/imputation.md] [--quick] \\
        [--missforest-python /tmp/mfvenv/bin/python] [--lock /tmp/bench.lock]

For every data set (Vehicle, Satellite, Ionosphere, PimaIndiansDiabetes,
BreastCancer and Soybean from ``../shared/data``), every scenario (10 %, 20 %,
30 % of the observed cells missing completely at random, and 20 % missing at
random: see :func:`mar`) and every seed, the same masked table is imputed by

- ``SimpleImputer`` (mean; most frequent for categorical columns),
- ``KNNImputer`` (k = 5, on standardised columns),
- ``IterativeImputer(BayesianRidge())`` (``max_iter=10``),
- a missForest-like ``IterativeImputer(ExtraTreesRegressor(n_estimators=50))``
  (``max_iter=10``, ``n_jobs=2``: both cores),
- distforest's ``ProximityImputer()`` with its defaults (``proximity="column"``)
  and with ``proximity="rfgap"``, both supervised by the set's class column
  (the scikit-learn imputers do not take a target) and run as a user would:
  no cluster given, so in this process (threads) below 2 million cells.

Scores, over the masked cells only (the true values are known there; real
NAs are imputed but not scored):

- numeric columns: NRMSE, per column ``RMSE / std`` (std of the column's
  observed values in the full data), averaged over the columns;
- categorical columns (Soybean): the proportion of falsely classified
  entries (PFC).  scikit-learn's imputers work on the level codes; their
  output is rounded to the nearest observed level.

Wall time is that of ``fit_transform`` alone.  Two smaller tables follow:
distforest variants at 20 % MCAR (one seed), and the ``missforest`` package
from PyPI (its defaults, run in a separate virtual environment given by
``--missforest-python``; 20 % MCAR, seed 0, all sets but Satellite).  Last, the
command line end to end (process start included) on a 200-row table.

Results go to ``benchmarks/results/imputation.md``, rewritten at the end
(a hand-written ``## Discussion`` section at its end is kept).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DATA as SHARED_DATA
from _measure import RESULTS as RESULTS_DIR
from _measure import (
    commit,
    driver_peak_bytes,
    write_markdown,
)
from _measure import parser as make_parser

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: (mechanism, rate): the 18 MCAR cells of the goals, and one MAR row per set.
SCENARIOS = (("MCAR", 0.1), ("MCAR", 0.2), ("MCAR", 0.3), ("MAR", 0.2))
OURS = "distforest column"
RFIMPUTE = "distforest rfgap"
MISSFOREST = "missForest-like"
#: A section of the results file written by hand; reruns keep it.
DISCUSSION = "## Discussion"
#: The machine's shared benchmark lock (``flock``): taken per set and scenario.
LOCK: Path | None = None


@contextlib.contextmanager
def bench_lock() -> Iterator[None]:
    """Hold the shared benchmark lock (if ``--lock`` was given) for one unit of work.

    Released between units (a small set, one Satellite scenario: at most about
    15 minutes each) so that other benchmarks can run in between.
    """
    if LOCK is None:
        yield
        return
    with open(LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class DataSet:
    name: str
    file: str
    target: str
    drop: tuple[str, ...] = ()
    categorical: bool = False


SETS = (
    DataSet("Vehicle", "Vehicle.csv", "Class"),
    DataSet("Satellite", "Satellite.csv", "classes"),
    DataSet("Ionosphere", "Ionosphere.csv", "Class"),
    DataSet("PimaIndiansDiabetes", "PimaIndiansDiabetes.csv", "diabetes"),
    DataSet("BreastCancer", "BreastCancer.csv", "Class", drop=("Id",)),
    DataSet("Soybean", "Soybean.csv", "Class", categorical=True),
)


def load(ds: DataSet, folder: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features (float, NaN = real NA) without constant columns, target, names."""
    df = pd.read_csv(folder / ds.file).drop(columns=list(ds.drop))
    y = df.pop(ds.target).to_numpy()
    X = df.to_numpy(dtype=np.float64)
    keep = np.nanstd(X, axis=0) > 0
    return X[:, keep], y, [c for c, k in zip(df.columns, keep, strict=True) if k]


def mcar(X: np.ndarray, rate: float, seed: int) -> np.ndarray:
    """Mask of ``rate`` of the observed cells, from a fixed seed."""
    rng = np.random.default_rng([seed, round(rate * 100)])
    return (rng.random(X.shape) < rate) & ~np.isnan(X)


def mar(X: np.ndarray, rate: float, seed: int) -> np.ndarray:
    """Missing at random: the chance depends on an observed column.

    The first column is never removed; in rows where it is above its median
    every other cell is removed with probability ``1.6 * rate``, elsewhere
    ``0.4 * rate`` (``rate`` on average over the other columns).
    """
    rng = np.random.default_rng([seed, round(rate * 100), 1])
    driver = X[:, 0]
    high = np.nan_to_num(driver, nan=np.nanmedian(driver)) > np.nanmedian(driver)
    p = np.where(high, 1.6 * rate, 0.4 * rate)[:, None]
    mask = (rng.random(X.shape) < p) & ~np.isnan(X)
    mask[:, 0] = False
    return mask


def masked(X: np.ndarray, mechanism: str, rate: float, seed: int) -> np.ndarray:
    return (mcar if mechanism == "MCAR" else mar)(X, rate, seed)


def nrmse(X: np.ndarray, F: np.ndarray, mask: np.ndarray) -> float:
    std = np.nanstd(X, axis=0)
    cols = [j for j in range(X.shape[1]) if mask[:, j].any()]
    errors = [np.sqrt(np.mean((F[mask[:, j], j] - X[mask[:, j], j]) ** 2)) / std[j] for j in cols]
    return float(np.mean(errors))


def pfc(X: np.ndarray, F: np.ndarray, mask: np.ndarray) -> float:
    return float(np.mean(F[mask] != X[mask]))


def snap_to_levels(F: np.ndarray, X_obs: np.ndarray) -> np.ndarray:
    """Round each column to its nearest observed level (codes of categorical columns)."""
    out = F.copy()
    for j in range(F.shape[1]):
        levels = np.unique(X_obs[~np.isnan(X_obs[:, j]), j])
        idx = np.abs(F[:, j][:, None] - levels[None, :]).argmin(axis=1)
        out[:, j] = levels[idx]
    return out


# -- the imputers --------------------------------------------------------------------


def sklearn_imputers(categorical: bool) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    from sklearn.ensemble import ExtraTreesRegressor
    from sklearn.experimental import enable_iterative_imputer  # noqa: F401
    from sklearn.impute import IterativeImputer, KNNImputer, SimpleImputer
    from sklearn.linear_model import BayesianRidge

    initial = "most_frequent" if categorical else "mean"

    def knn(X: np.ndarray) -> np.ndarray:
        mean, std = np.nanmean(X, axis=0), np.nanstd(X, axis=0)
        return KNNImputer(n_neighbors=5).fit_transform((X - mean) / std) * std + mean

    return {
        "SimpleImputer": lambda X: SimpleImputer(strategy=initial).fit_transform(X),
        "KNNImputer": knn,
        "IterativeImputer(BayesianRidge)": lambda X: IterativeImputer(
            BayesianRidge(), max_iter=10, initial_strategy=initial, random_state=0
        ).fit_transform(X),
        "missForest-like": lambda X: IterativeImputer(
            ExtraTreesRegressor(n_estimators=50, n_jobs=2, random_state=0),
            max_iter=10,
            initial_strategy=initial,
            random_state=0,
        ).fit_transform(X),
    }


def distforest_imputer(seed: int, categorical: bool, **params: Any) -> Callable:
    """``ProximityImputer(**params)`` as a user runs it (no cluster given)."""
    from distforest.apps.impute import ProximityImputer

    def run(X: np.ndarray, y: np.ndarray) -> np.ndarray:
        cats = list(range(X.shape[1])) if categorical else None
        imp = ProximityImputer(categorical_features=cats, random_state=seed, **params)
        return imp.fit_transform(X, y)

    return run


def missforest_package(python: Path, workdir: Path) -> Callable:
    """The ``missforest`` PyPI package (defaults) in its own virtual environment.

    Returns a function giving ``(imputed, seconds of fit_transform)``.
    """

    def run(X: np.ndarray, categorical: bool) -> tuple[np.ndarray, float]:
        src, dst = workdir / "in.npz", workdir / "out.npy"
        np.savez(src, X=X, categorical=categorical)
        done = subprocess.run([str(python), __file__, "--missforest-worker", str(src), str(dst)],
                              capture_output=True, text=True, check=True)  # fmt: skip
        return np.load(dst), float(done.stdout.strip().splitlines()[-1])

    return run


def _missforest_worker(src: str, dst: str) -> None:
    """Runs inside the missforest venv: impute ``src`` and print the seconds."""
    from missforest import MissForest

    data = np.load(src)
    X, categorical = data["X"], bool(data["categorical"])
    frame = pd.DataFrame(X, columns=[f"c{j}" for j in range(X.shape[1])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        imputer = MissForest(categorical=list(frame.columns) if categorical else None, verbose=0)
        out = imputer.fit_transform(frame)
        seconds = time.perf_counter() - start
    np.save(dst, out[frame.columns].to_numpy(dtype=np.float64))
    print(seconds)


def timed(func: Callable[..., np.ndarray], *args: Any) -> tuple[np.ndarray, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        out = func(*args)
        return out, time.perf_counter() - start


# -- the runs ----------------------------------------------------------------------------


def run_main(
    folder: Path,
    sets: tuple[DataSet, ...],
    seeds: int,
    satellite_seeds: int,
    log: Callable[[str], None],
) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for ds in sets:
        X, y, _ = load(ds, folder)
        score = pfc if ds.categorical else nrmse
        n_seeds = satellite_seeds if ds.name == "Satellite" else seeds
        # the lock for a whole small set (minutes), for each Satellite scenario (~15 min)
        per_set = ds.name != "Satellite"
        with bench_lock() if per_set else contextlib.nullcontext():
            for mechanism, rate in SCENARIOS:
                with contextlib.nullcontext() if per_set else bench_lock():
                    rows += _run_scenario(ds, X, y, score, mechanism, rate, n_seeds, log)
    return pd.DataFrame(rows)


def _run_scenario(
    ds: DataSet,
    X: np.ndarray,
    y: np.ndarray,
    score: Callable[..., float],
    mechanism: str,
    rate: float,
    n_seeds: int,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    rows = []
    for seed in range(n_seeds):
        mask = masked(X, mechanism, rate, seed)
        Xm = np.where(mask, np.nan, X)
        methods: dict[str, Callable] = dict(sklearn_imputers(ds.categorical))
        methods[OURS] = distforest_imputer(seed, ds.categorical)
        methods[RFIMPUTE] = distforest_imputer(seed, ds.categorical, proximity="rfgap")
        for name, func in methods.items():
            ours = name.startswith("distforest")
            F, seconds = timed(func, Xm, y) if ours else timed(func, Xm)
            if ds.categorical and not ours:
                F = snap_to_levels(F, Xm)
            value = score(X, F, mask)
            rows.append({"set": ds.name, "scenario": f"{mechanism} {rate:.0%}",
                         "seed": seed, "method": name, "score": value,
                         "seconds": seconds})  # fmt: skip
            log(f"{ds.name:<20} {mechanism} {rate:.0%} seed {seed} {name:<32} "
                f"{value:.4f} {seconds:7.1f} s")  # fmt: skip
    return rows


def run_missforest(
    folder: Path, sets: tuple[DataSet, ...], python: Path, log: Callable[[str], None]
) -> pd.DataFrame:
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run = missforest_package(python, Path(tmp))
        for ds in sets:
            X, _, _ = load(ds, folder)
            mask = mcar(X, 0.2, 0)
            with bench_lock():
                F, seconds = run(np.where(mask, np.nan, X), ds.categorical)
            value = (pfc if ds.categorical else nrmse)(X, F, mask)
            rows.append({"set": ds.name, "score": value, "seconds": seconds})
            log(f"{ds.name:<20} MCAR 20% seed 0 missforest (PyPI) {value:.4f} {seconds:7.1f} s")
    return pd.DataFrame(rows)


VARIANTS = {
    "column (default)": {},
    "column, no target": {"task": "unsupervised"},
    "column, all features per split": {"max_features": 1.0},
    "column, random forest (bootstrap, best splits)": {"kind": "random-forest"},
    "rfgap (RF-GAP, extra-trees)": {"proximity": "rfgap"},
    "original proximity, extra-trees": {"proximity": "original"},
    "classic rfImpute forest (RF, sqrt, original)": {
        "proximity": "original",
        "kind": "random-forest",
        "max_features": "sqrt",
    },
}


def run_variants(
    folder: Path, sets: tuple[DataSet, ...], seeds: int, log: Callable[[str], None]
) -> pd.DataFrame:
    rows = []
    for ds in sets:
        X, y, _ = load(ds, folder)
        score = pfc if ds.categorical else nrmse
        for seed in range(seeds):
            mask = mcar(X, 0.2, seed)
            Xm = np.where(mask, np.nan, X)
            for name, params in VARIANTS.items():
                F, seconds = timed(distforest_imputer(seed, ds.categorical, **params), Xm, y)
                value = score(X, F, mask)
                rows.append({"set": ds.name, "seed": seed, "variant": name, "score": value,
                             "seconds": seconds})  # fmt: skip
                log(f"{ds.name:<20} 20% seed {seed} {name:<45} {value:.4f} {seconds:6.1f} s")
    return pd.DataFrame(rows)


def run_cli(folder: Path, workdir: Path, repeats: int = 3) -> dict[str, Any]:
    """``python -m distforest impute`` on a 200-row table, process start included."""
    frame = pd.read_csv(folder / "Vehicle.csv").iloc[:200]
    features = [c for c in frame.columns if c != "Class"]
    mask = np.random.default_rng(0).random((200, len(features))) < 0.2
    frame[features] = frame[features].mask(mask)
    src = workdir / "vehicle200.csv"
    frame.to_csv(src, index=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "distforest", "-q", "impute", str(src), "--target",
               "Class", "--out", str(workdir / "out.csv"), "--overwrite"]  # fmt: skip
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)
        seconds.append(time.perf_counter() - start)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import distforest.cli.main"], env=env, check=True)
    imports = time.perf_counter() - start
    shown = " ".join(command[1:]).replace(str(workdir), "$TMP")
    return {"seconds": seconds, "imports": imports, "command": f"python {shown}"}


# -- the report ----------------------------------------------------------------------------


def versions() -> str:
    import dask
    import distributed
    import numba
    import sklearn

    import distforest

    rev = commit()
    return (
        f"distforest {distforest.__version__} (git {rev}), scikit-learn {sklearn.__version__}, "
        f"numpy {np.__version__}, pandas {pd.__version__}, numba {numba.__version__}, "
        f"dask {dask.__version__}, distributed {distributed.__version__}"
    )


def main_table(res: pd.DataFrame) -> tuple[str, dict[str, Any]]:
    """The side-by-side table, and the goals counted over the MCAR cells."""
    methods = list(dict.fromkeys(res["method"]))
    agg = res.groupby(["set", "scenario", "method"], sort=False).agg(
        score=("score", "mean"),
        sd=("score", "std"),
        seconds=("seconds", "mean"),
        seeds=("seed", "nunique"),
    )
    head = "| set | missing | seeds | " + " | ".join(methods)
    head += " | column <= missForest-like? | time column / missForest-like |"
    lines = [head, "|" + "---|" * (len(methods) + 5)]
    stats: dict[str, Any] = {"cells": 0, "beats_mf": 0, "beats_knn": 0, "rf_beats_mf": 0,
                             "time_ratio": [], "knn_gain": [], "mar": []}  # fmt: skip
    for (name, scenario), block in agg.groupby(level=[0, 1], sort=False):
        block = block.droplevel([0, 1])
        cells = []
        for m in methods:
            r = block.loc[m]
            best = r["score"] <= block["score"].min() + 1e-12
            sd = f" ± {r['sd']:.3f}" if r["seeds"] > 1 else ""
            txt = f"{r['score']:.3f}{sd} ({_secs(r['seconds'])})"
            cells.append(f"**{txt}**" if best else txt)
        ours, mf, knn = (block.loc[k] for k in (OURS, MISSFOREST, "KNNImputer"))
        ok = ours["score"] <= mf["score"]
        if scenario.startswith("MCAR"):
            stats["cells"] += 1
            stats["beats_mf"] += int(ok)
            stats["rf_beats_mf"] += int(block.loc[RFIMPUTE]["score"] <= mf["score"])
            stats["beats_knn"] += int(ours["score"] < knn["score"])
            stats["time_ratio"].append(ours["seconds"] / mf["seconds"])
            stats["knn_gain"].append(1 - ours["score"] / knn["score"])
        else:
            stats["mar"].append((name, bool(ok), bool(ours["score"] < knn["score"])))
        verdict = "yes" if ok else f"no (+{(ours['score'] / mf['score'] - 1):.0%})"
        lines.append(
            f"| {name} | {scenario} | {int(block['seeds'].iloc[0])} | "
            + " | ".join(cells)
            + f" | {verdict} | {ours['seconds'] / mf['seconds']:.2f} |"
        )
    return "\n".join(lines), stats


def _secs(s: float) -> str:
    return f"{s:.1f} s" if s >= 0.1 else f"{s * 1000:.0f} ms"


def variant_table(res: pd.DataFrame) -> str:
    variants = list(dict.fromkeys(res["variant"]))
    agg = res.groupby(["set", "variant"], sort=False)["score"].mean().unstack()[variants]
    secs = res.groupby("variant", sort=False)["seconds"].mean()[variants]
    lines = ["| set | " + " | ".join(variants) + " |", "|" + "---|" * (len(variants) + 1)]
    for name, row in agg.iterrows():
        best = row.min()
        cells = [f"**{v:.3f}**" if v <= best + 1e-12 else f"{v:.3f}" for v in row]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    mean_rank = agg.rank(axis=1).mean()
    lines.append("| mean rank | " + " | ".join(f"{mean_rank[v]:.1f}" for v in variants) + " |")
    lines.append("| mean time | " + " | ".join(_secs(secs[v]) for v in variants) + " |")
    return "\n".join(lines)


def report(
    main: pd.DataFrame,
    variants: pd.DataFrame | None,
    missforest: pd.DataFrame | str,
    cli: dict[str, Any] | None,
    wall: float,
    command: str,
    load: tuple[str, str],
) -> str:
    table, stats = main_table(main)
    peak = driver_peak_bytes() / 1024**2
    ratio = np.array(stats["time_ratio"])
    gain = np.array(stats["knn_gain"])
    out = [
        "# Imputation benchmark: distforest ProximityImputer vs scikit-learn",
        "",
        f"- Versions: {versions()}",
        f"- Load average (`uptime`) at the start: {load[0]}; at the end: {load[1]}.  The "
        "benchmark itself keeps about two cores busy: a load well above 2 means other work "
        "ran beside it and its times are drafts (ratios within one run are fairer than "
        "absolute seconds); accuracy figures do not depend on the load.",
        f"- Total wall time of the benchmark: {wall / 60:.1f} min; peak RSS of the process "
        f"(every imputer but PyPI missforest runs in it): {peak:.2f} GB",
        "",
        "Each cell: mean over seeds (± standard deviation) of NRMSE (numeric sets) or PFC "
        "(Soybean, categorical), and mean wall time of `fit_transform`.  **Bold**: best in the "
        f"row.  *{OURS}*: `ProximityImputer()` defaults (column-aware: one forest of 35 "
        "extra-trees per column and pass with half of the inputs per split, the class as one more "
        "input, at most 10 passes stopped by missForest's rule, the result the mean of the kept "
        "passes after the first).  "
        f"*{RFIMPUTE}*: `ProximityImputer(proximity='rfgap')` (rfImpute's loop with "
        "RF-GAP weights and extra-trees of one feature per split, 5 iterations of 100 "
        "trees).  Both get the class column and run in "
        "this process (no cluster given).  MCAR: missing completely at random; MAR 20 %: "
        "missing at random, the chance depending on the first column (never removed), see "
        "`mar()` in `benchmarks/bench_impute.py`.",
        "",
        "## Results",
        "",
        table,
        "",
        "## Against the goals (the 18 MCAR cells)",
        "",
        f"- Column-aware error at most the missForest-like imputer's: **{stats['beats_mf']} of "
        f"{stats['cells']}** cells (goal: at least 15); rfgap: {stats['rf_beats_mf']} of "
        f"{stats['cells']}.",
        f"- Below KNNImputer: **{stats['beats_knn']} of {stats['cells']}** cells (goal: all); "
        f"median error reduction {np.median(gain):.0%} (range {gain.min():.0%} to "
        f"{gain.max():.0%}).",
        f"- Time: the column-aware imputer takes **{np.median(ratio):.2f}x** the "
        f"missForest-like imputer's time (median over cells, goal at most 0.33; range "
        f"{ratio.min():.2f}-{ratio.max():.2f}x).",
        "- MAR 20 %: "
        + "; ".join(
            f"{n}: {'<=' if ok else '>'} missForest-like, {'<' if k else '>='} KNNImputer"
            for n, ok, k in stats["mar"]
        )
        + ".",
    ]
    if cli is not None:
        secs = ", ".join(f"{s:.2f}" for s in cli["seconds"])
        out += [
            "",
            "## The command line on a 200-row table",
            "",
            f"`{cli['command']}` (Vehicle's first 200 rows, 20 % of the feature cells removed): "
            f"**{np.median(cli['seconds']):.2f} s** median of {len(cli['seconds'])} runs "
            f"({secs} s), "
            f"process start included (goal under 3 s); `import distforest.cli.main` alone: "
            f"{cli['imports']:.2f} s.",
        ]
    out += ["", "## The missforest package from PyPI", ""]
    if isinstance(missforest, str):
        out.append(missforest)
    else:
        mine = main[(main["scenario"] == "MCAR 20%") & (main["seed"] == 0)]
        lines = ["| set | missforest (PyPI) | missForest-like | distforest column |",
                 "|---|---|---|---|"]  # fmt: skip
        for _, r in missforest.iterrows():
            pick = mine[mine["set"] == r["set"]].set_index("method")
            lines.append(
                f"| {r['set']} | {r['score']:.3f} ({_secs(r['seconds'])}) | "
                f"{pick.loc[MISSFOREST, 'score']:.3f} ({_secs(pick.loc[MISSFOREST, 'seconds'])}) | "
                f"{pick.loc[OURS, 'score']:.3f} ({_secs(pick.loc[OURS, 'seconds'])}) |"
            )
        out += [
            "`missforest` 4.2.3 with its defaults (LightGBM with linear trees, at most 5 "
            "iterations, early stopping), installed in a separate virtual environment "
            "(`pip install missforest` does not pull in its imports: `lightgbm`, `tqdm`, "
            "`pandas` and `scikit-learn` were added by hand); "
            "20 % MCAR, seed 0, every set but Satellite and Soybean (too slow for this run).",
            "",
            *lines,
        ]
    if variants is not None:
        out += [
            "",
            "## distforest variants (20 % MCAR)",
            "",
            f"Mean NRMSE / PFC over {variants['seed'].nunique()} seed(s); parameters at their "
            "defaults unless the column says otherwise.",
            "",
            variant_table(variants),
        ]
    return "\n".join(out) + "\n"


def write_cli_only(folder: Path, out: Path) -> None:
    """Time the 200-row command line alone and write a short results file."""
    import tempfile

    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cli = run_cli(folder, Path(tmp), repeats=5)
    secs = ", ".join(f"{x:.2f}" for x in cli["seconds"])
    write_markdown(out,
        "\n".join([
            "# Imputation from the command line on a 200-row table",
            "",
            f"- Load average at the start: {_load(load_start)}; at the end: "
            f"{_load(os.getloadavg())}",
            "",
            f"`{cli['command']}` (Vehicle's first 200 rows, 20 % of the feature cells removed, "
            "no cluster option: it runs in this process): "
            f"**{np.median(cli['seconds']):.2f} s** median of {len(cli['seconds'])} runs "
            f"({secs} s), process start included (goal under 3 s); "
            f"`import distforest.cli.main` alone: {cli['imports']:.2f} s.",
            "",
        ])
    )  # fmt: skip
    print(f"wrote {out}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "imputation.md")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per scenario")
    parser.add_argument("--satellite-seeds", type=int, default=1)
    parser.add_argument("--variant-seeds", type=int, default=1)
    parser.add_argument("--sets", default=",".join(s.name for s in SETS))
    parser.add_argument("--no-variants", action="store_true")
    parser.add_argument("--missforest-python", type=Path,
                        default=Path("/tmp/mfvenv/bin/python"))  # fmt: skip
    parser.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="hold this flock file per set and scenario (e.g. /tmp/bench.lock)",
    )
    parser.add_argument("--quick", action="store_true", help="one seed, small sets only")
    parser.add_argument(
        "--no-cli", action="store_true", help="skip the 200-row command line (see --cli-only)"
    )
    parser.add_argument(
        "--satellite-first",
        action="store_true",
        help="Satellite (the slowest set) before the small sets",
    )
    parser.add_argument(
        "--cli-only",
        type=Path,
        metavar="FILE.md",
        help="only time the 200-row command line (5 runs) and write FILE.md",
    )
    parser.add_argument("--missforest-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global LOCK
    LOCK = args.lock
    if args.missforest_worker:
        _missforest_worker(*args.missforest_worker)
        return
    if args.cli_only:
        write_cli_only(args.data, args.cli_only)
        return
    command = "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    wanted = args.sets.split(",")
    if args.quick:
        wanted = [w for w in wanted if w != "Satellite"]
        args.seeds = args.variant_seeds = 1
    sets = tuple(s for s in SETS if s.name in wanted)
    load_start = os.getloadavg()
    start = time.perf_counter()

    def log(line: str) -> None:
        print(line, flush=True)

    warm = np.random.default_rng(0).normal(size=(60, 4))
    warm[::7, 1] = np.nan
    for proximity in ("column", "rfgap"):  # compile the numba kernels before timing
        distforest_imputer(0, False, n_estimators=4, iterations=1, proximity=proximity)(warm, None)
    import tempfile

    cli = None
    if not args.no_cli:
        with tempfile.TemporaryDirectory() as tmp, bench_lock():
            cli = run_cli(args.data, Path(tmp))
        log(f"command line, 200 rows: {cli['seconds']} s")
    previous = args.out.read_text() if args.out.exists() else ""
    done: list[pd.DataFrame] = []
    missforest: pd.DataFrame | str = "Not run yet (the benchmark was still running)."
    variants: pd.DataFrame | None = None

    def write() -> None:
        """Rewrite the results file with what is done (a long run leaves a partial table)."""
        if not done:  # e.g. --sets Satellite: nothing finished yet
            return
        wall = time.perf_counter() - start
        loads = (_load(load_start), _load(os.getloadavg()))
        main_res = pd.concat(done, ignore_index=True)
        text = report(main_res, variants, missforest, cli, wall, command, loads)
        if DISCUSSION in previous:  # keep the hand-written discussion of an earlier run
            text += "\n" + previous[previous.index(DISCUSSION) :]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_markdown(args.out, text)
        print(f"wrote {args.out}", flush=True)

    # the small sets first, Satellite (by far the slowest) last: a run cut short by the
    # clock still leaves every finished set in the file
    small = tuple(s for s in sets if s.name != "Satellite")
    satellite = tuple(s for s in sets if s.name == "Satellite")
    # Satellite before the side tables: the goals are counted on the main table
    for ds in (*satellite, *small) if args.satellite_first else (*small, *satellite):
        done.append(run_main(args.data, (ds,), args.seeds, args.satellite_seeds, log))
        write()
    if args.missforest_python.exists():
        quick = tuple(s for s in small if s.name != "Soybean")  # PyPI missforest: 6 min there
        missforest = run_missforest(args.data, quick, args.missforest_python, log)
    else:
        missforest = (f"Not run: no Python at {args.missforest_python} (install the "
                      "`missforest` package in a separate virtual environment there).")  # fmt: skip
    write()
    if not args.no_variants:
        variants = run_variants(args.data, small, args.variant_seeds, log)
        write()


def _load(avg: tuple[float, float, float]) -> str:
    return ", ".join(f"{v:.2f}" for v in avg) + " (1, 5, 15 min)"


if __name__ == "__main__":
    main()
