"""Scale benchmark: imputation, outlier scores and MDS at n = 1,000,000 (issue 3).

Run by hand (it takes a while and needs a quiet machine)::

    python benchmarks/bench_scale.py [--n 1000000] [--trees 100] [--kind extra-trees]
        [--iterations 5] [--proximity rfgap] [--max-samples auto] [--compare-n 100000]
        [--workdir /tmp/dfscale] [--skip impute,outliers,mds,knn,missforest,missforest-sub]
        [--fresh]

Synthetic data: ``make_classification(n, 20, n_informative=8, n_redundant=4,
random_state=0)`` (8 informative, 4 linear combinations, 8 noise features),
20 % of the feature cells removed completely at random (seed 1).  Every
stage is a ``distforest`` CLI run in its own process, measured for wall time
and the peak summed RSS of the whole process tree (driver + Dask workers).
The imputation runs with ``distforest impute``'s defaults (column-aware
proximity) unless ``--trees``, ``--kind``, ``--iterations``, ``--proximity``
or ``--max-samples`` are given; the outlier and MDS stages use
``--trees`` (default 100) extra-trees.
At ``--compare-n`` rows the same imputation runs side by side with
scikit-learn's ``KNNImputer``, a missForest-like
``IterativeImputer(ExtraTreesRegressor(n_estimators=50), max_iter=5)`` and
the same sized to fit in memory (``missforest-sub``: each tree on 20,000
rows drawn at random, leaves of at least 5 rows), each stopped after
``--timeout`` seconds and capped at 12 GiB of address space, reporting NRMSE
over the removed cells.

Writes ``benchmarks/results/scale.md`` and ``scale.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import (
    GB,
    machine_info,
    package_versions,
    run_measured,
    write_markdown,
)
from _measure import RESULTS as RESULTS_DIR
from _measure import parser as make_parser

ROOT = Path(__file__).resolve().parents[1]
RESULTS = RESULTS_DIR
#: Hand-written observations appended to the table (kept across reruns).
NOTES = RESULTS / "scale_notes.md"


def make_data(n: int, workdir: Path) -> dict[str, Path]:
    """Complete and 20 %-MCAR versions of the synthetic table, as Parquet."""
    import pandas as pd
    from sklearn.datasets import make_classification

    X, y = make_classification(n, 20, n_informative=8, n_redundant=4, n_repeated=0, random_state=0)
    names = [f"x{k}" for k in range(20)]
    full = pd.DataFrame(X.astype(np.float32), columns=names)
    full["y"] = y
    mask = np.random.default_rng(1).random(X.shape) < 0.2
    missing = full.copy()
    missing[names] = missing[names].mask(mask)
    paths = {"full": workdir / f"full_{n}.parquet", "missing": workdir / f"missing_{n}.parquet"}
    full.to_parquet(paths["full"])
    missing.to_parquet(paths["missing"])
    np.save(workdir / f"mask_{n}.npy", mask)
    return paths


def nrmse(truth: np.ndarray, imputed: np.ndarray, mask: np.ndarray) -> float:
    """Mean over columns of RMSE over the removed cells divided by the column's std."""
    scores = []
    for c in range(truth.shape[1]):
        m = mask[:, c]
        if m.any():
            rmse = np.sqrt(np.mean((imputed[m, c] - truth[m, c]) ** 2))
            scores.append(rmse / truth[:, c].std())
    return float(np.mean(scores))


def score_output(workdir: Path, n: int, path: Path) -> float:
    import pandas as pd

    truth = pd.read_parquet(workdir / f"full_{n}.parquet").iloc[:, :20].to_numpy(np.float64)
    imputed = pd.read_parquet(path).iloc[:, :20].to_numpy(np.float64)
    return nrmse(truth, imputed, np.load(workdir / f"mask_{n}.npy"))


#: Address-space cap of the scikit-learn stages (bytes): the missForest-like imputer keeps
#: every fitted forest and reached 24.6 GB at n = 100,000 (killed by the kernel, on a
#: machine shared with other jobs); it now stops with a MemoryError at this cap instead.
SKLEARN_MEMORY_CAP = 12 * 2**30


def child_sklearn(kind: str, n: int, workdir: str) -> None:
    """Run one scikit-learn imputer on the MCAR table and save its output."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (SKLEARN_MEMORY_CAP, SKLEARN_MEMORY_CAP))
    import pandas as pd
    from sklearn.ensemble import ExtraTreesRegressor
    from sklearn.experimental import enable_iterative_imputer  # noqa: F401
    from sklearn.impute import IterativeImputer, KNNImputer

    wd = Path(workdir)
    frame = pd.read_parquet(wd / f"missing_{n}.parquet")
    X = frame.iloc[:, :20].to_numpy(np.float64)
    if kind == "knn":
        imputer = KNNImputer(n_neighbors=5)
    elif kind == "missforest-sub":
        # sized to fit: each tree on 20,000 rows drawn at random (what distforest's column
        # mode does above 50,000 rows) and leaves of at least 5 rows, so that the 5 x 20
        # forests IterativeImputer keeps stay within the memory cap
        imputer = IterativeImputer(
            ExtraTreesRegressor(
                n_estimators=50,
                bootstrap=True,
                max_samples=20_000,
                min_samples_leaf=5,
                n_jobs=2,
                random_state=0,
            ),
            max_iter=5,
            random_state=0,
        )
    else:
        imputer = IterativeImputer(
            ExtraTreesRegressor(n_estimators=50, n_jobs=2, random_state=0),
            max_iter=5,
            random_state=0,
        )
    out = pd.DataFrame(imputer.fit_transform(X), columns=frame.columns[:20])
    out.to_parquet(wd / f"sk_{kind}_{n}.parquet")


def stage(name: str, cmd: list[str], workdir: Path, timeout: float | None = None) -> dict:
    commit = package_versions().get("distforest git", "?")  # the code the stage runs
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    run = run_measured(cmd, workdir, name, timeout=timeout)
    run.update(stage=name, date=started, commit=commit)
    return run


def merge_previous(runs: list[dict], previous: Path) -> list[dict]:
    """Keep the rows of an earlier results file for the stages not run now.

    Every row carries the date and commit it was measured on, so a table
    merged from several runs still says where each number comes from.
    """
    if not previous.exists():
        return runs
    old = json.loads(previous.read_text())
    done = {r["stage"] for r in runs}
    kept = []
    for r in old["runs"]:
        if r["stage"] not in done:
            r.setdefault("date", old["meta"]["date"])
            r.setdefault("commit", old["meta"]["versions"].get("distforest git", "?"))
            kept.append(r)
    order = [r["stage"] for r in old["runs"]]
    merged = kept + runs
    merged.sort(key=lambda r: order.index(r["stage"]) if r["stage"] in order else len(order))
    return merged


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--trees", type=int, help="default: the imputer's; 100 elsewhere")
    parser.add_argument("--kind", choices=["random-forest", "extra-trees"])
    parser.add_argument("--iterations", type=int)
    parser.add_argument(
        "--proximity",
        choices=["rfgap", "rfimpute", "column"],
        help="the imputation's proximity (default: the imputer's, column)",
    )
    parser.add_argument("--max-samples", help="the column imputer's rows per tree")
    parser.add_argument("--compare-n", type=int, default=100_000)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dfscale"))
    parser.add_argument("--skip", default="", help="comma-separated stages to skip")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start a new table instead of keeping the earlier rows of skipped stages",
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("KIND", "N", "WORKDIR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        child_sklearn(args.child[0], int(args.child[1]), args.child[2])
        return
    wd = args.workdir
    wd.mkdir(parents=True, exist_ok=True)
    distforest = str(Path(sys.executable).with_name("distforest"))
    skip = set(filter(None, args.skip.split(",")))
    forest = ["--trees", str(args.trees or 100), "--kind", args.kind or "extra-trees",
              "--seed", "0"]  # fmt: skip
    given = {"--trees": args.trees, "--kind": args.kind, "--iterations": args.iterations,
             "--proximity": args.proximity, "--max-samples": args.max_samples}  # fmt: skip
    imputer = [w for k, v in given.items() if v is not None for w in (k, str(v))]
    runs: list[dict[str, Any]] = []
    for n in dict.fromkeys(filter(None, (args.n, args.compare_n))):  # --compare-n 0: none
        paths = make_data(n, wd)
        if "impute" not in skip:
            out = wd / f"imputed_{n}.parquet"
            cmd = [distforest, "-q", "impute", str(paths["missing"]), "--target", "y",
                   "--out", str(out), "--overwrite", "--seed", "0", *imputer]  # fmt: skip
            label = " ".join(imputer) or "(defaults)"
            run = stage(f"distforest impute {label} n={n}", cmd, wd)
            if run["returncode"] == 0:
                run["nrmse"] = score_output(wd, n, out)
            runs.append(run)
        if n == args.n:
            for name, extra in (("outliers", []), ("mds", ["--plot", str(wd / "mds.png")])):
                if name in skip:
                    continue
                cmd = [distforest, "-q", name, str(paths["full"]), "--target", "y", "--out",
                       str(wd / f"{name}.csv"), "--overwrite", *forest, *extra]  # fmt: skip
                runs.append(stage(f"distforest {name} n={n}", cmd, wd))
        if n == args.compare_n:
            for kind in ("knn", "missforest", "missforest-sub"):
                if kind in skip:
                    continue
                cmd = [sys.executable, __file__, "--child", kind, str(n), str(wd)]
                run = stage(f"sklearn {kind} n={n}", cmd, wd, timeout=args.timeout)
                if run["returncode"] == 0:
                    run["nrmse"] = score_output(wd, n, wd / f"sk_{kind}_{n}.parquet")
                runs.append(run)
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python "
        + " ".join([Path(__file__).relative_to(ROOT).as_posix(), *sys.argv[1:]]),
        "machine": machine_info(),
        "versions": package_versions(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.fresh:
        runs = merge_previous(runs, RESULTS / "scale.json")
    (RESULTS / "scale.json").write_text(
        json.dumps({"meta": meta, "runs": runs}, indent=2, default=str)
    )
    write_markdown((RESULTS / "scale.md"), render(meta, runs))
    print((RESULTS / "scale.md").read_text())
    shutil.rmtree(wd, ignore_errors=True)


def render(meta: dict, runs: list[dict]) -> str:
    m = meta["machine"]
    lines = [
        "# Scale benchmark: imputation, outliers and MDS without an n x n matrix",
        "",
        f"- Date: {meta['date']}",
        f"- Machine: {m['cpu_model']}, {m['cores']} cores, "
        f"{m['mem_total_bytes'] / 2**30:.1f} GiB RAM, Python {m['python']}",
        f"- Command: `{meta['command']}`",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        "| stage | exit | wall | peak RSS (process tree) | NRMSE | other load | measured |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        wall = "timed out" if r.get("timed_out") else f"{r['wall_s'] / 60:.1f} min"
        score = f"{r['nrmse']:.3f}" if "nrmse" in r else "-"
        lines.append(
            f"| {r['stage']} | {r['returncode']} | {wall} | "
            f"{r['peak_rss_tree_bytes'] / GB:.2f} GB | {score} | {r['foreign_load']:.0%} | "
            f"{r.get('date', meta['date'])[:16]}, {r.get('commit', '?')} |"
        )
    lines += [
        "",
        "*peak RSS (process tree)*: the largest sum of RSS over the CLI process and its Dask "
        "worker processes, sampled every 0.2 s.  *other load*: share of the CPUs used by "
        "processes outside the measured tree (the machine should be quiet).  NRMSE: RMSE over "
        "the removed cells divided by the column's standard deviation, averaged over columns.  "
        "*measured*: date and distforest commit of the row (rows of stages skipped in a later "
        "run are kept from the earlier one).",
    ]
    if NOTES.exists():
        lines += ["", NOTES.read_text().strip()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
