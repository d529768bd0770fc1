"""Forests fitted elsewhere: distforest beside forestgeom on the same fitted models.

One run, one machine, one table (``--rows`` x 20 features, 2 classes): a
scikit-learn ``RandomForestClassifier`` (``--trees`` trees, saved with skops and
loaded by both sides) and a LightGBM classifier (``--trees`` rounds, fitted
deterministically on both sides; the hash of its model text shows it is the same
model). forestgeom computes the full sparse proximity matrix in memory
(``Proximity(model).fit(X, y).transform(X)``); distforest routes the rows
through the same model (``ProximityForest.from_model``), then the top-50
proximity neighbours of every row and R's outlier scores, without the matrix.
Each side runs in its own process, measured by ``_measure.run_measured``; the
model fits are not counted on either side.

    python -m benchmarks outside --rows 100000 --trees 100 --peer-python PEER/bin/python

``--peer-python`` names a virtualenv with forestgeom, skops and lightgbm (made
in ``--workdir``/peer-env on first use when not given).

forestgeom's matrix is held in memory: before building it, its child measures
the matrix's non-zeros on a sample of query rows (``transform`` of 1,000 rows
against all) and skips the full matrix when the extrapolated CSR size (12 bytes a
non-zero) exceeds ``--peer-memory-gb``, recording the estimate instead of
exhausting the machine. A LightGBM model with 31-leaf trees shares a leaf between
most pairs of rows, so its matrix is near-dense (n² non-zeros).

``--folder`` is the out-of-core run: the table written as the 40-part Parquet
folder of ``bench_out_of_core.py`` (20 features, 3 classes, 20 % of three
columns missing; ``--parts`` an existing one), a LightGBM model fitted on its
first ``--fit-rows`` rows, and distforest alone (``from_model`` on the folder,
read by partitions; the top-50 neighbours in the forest's store, the outlier
scores written as ``distforest outliers`` writes them, by chunks); the driver's
peak RSS is reported.  ``--target`` names the model's target: ``label`` (a
classifier) or a numeric column (a regressor of it on the other numeric columns).
``--cli`` runs the two commands a user runs instead, each measured in its own
process (driver, workers, whole tree, wall time):
``distforest proximity PARTS --model M --top-k 50`` and
``distforest outliers PARTS --model M``, with ``--target`` (and, for a regressor,
``--drop label``) so that the rows' features are the model's.

The exact neighbours and the outlier scores cost in proportion to the co-leaf
events, ``sum_t sum_leaves size^2 = n * occupancy * T`` (occupancy: the mean
number of rows in a row's leaf).  LightGBM's default 31 leaves put about
``0.2 n^2`` co-leaf events in each tree (2e13 at 10,000,000 rows), so a
10,000,000-row model needs many leaves and few trees (``--num-leaves``,
``--min-data-in-leaf``, ``--trees``).  Before any run the co-leaf events are
estimated from the last part (250,000 rows, routed by the model, leaf sizes
scaled to ``--rows``; ``--prepare-only`` stops there): the table's
``coleaf_events`` column.  Leaf sizes are not ``n / L``: a boosted classifier
stops splitting where no split gains (a region of one class, its gradients all
alike), so a few large leaves hold most co-leaf events.  ``--max-bin 63``, a
512 MB histogram pool and one thread keep the model's fit (not measured) within a
shared machine.

    python -m benchmarks outside --folder --prepare-only --rows 10000000 --trees 1 \\
        --num-leaves 32768 --min-data-in-leaf 5 --max-bin 63 --fit-rows 250000 --parts PARTS
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import emit, parser, run_measured, write_result

K = 50


#: LightGBM's own defaults, as a user leaves them (31-leaf trees).
NUM_LEAVES = 31
#: A 1-minute load above this marks the result a draft (a shared machine).
DRAFT_LOAD = 2.0
#: Query rows forestgeom's child measures the matrix's density on.
SAMPLE_ROWS = 1000
#: The class column of ``bench_out_of_core.py``'s folder.
LABEL = "label"


def _lightgbm(X: Any, y: Any, trees: int, seed: int, num_leaves: int = NUM_LEAVES,
              regression: bool = False, **more: Any) -> Any:  # fmt: skip
    """LightGBM's classifier (or regressor), deterministic; ``more``: other parameters
    (leaf sizes, bins)."""
    import lightgbm

    params = {"n_jobs": 2, "deterministic": True, "force_row_wise": True, "verbose": -1}
    kind = lightgbm.LGBMRegressor if regression else lightgbm.LGBMClassifier
    model = kind(n_estimators=trees, num_leaves=num_leaves, random_state=seed,
                 **{**params, **more})  # fmt: skip
    return model.fit(X, y)


def _model_columns(table: Any, target: str) -> list[str]:
    """The folder's columns a model of ``target`` reads: every column but the target and,
    for a regression of a numeric column, the class column ``label``."""
    return [c for c in table.columns if c not in (target, LABEL)]


def coleaf_estimate(model_path: Path, part: Path, rows: int, target: str = LABEL
                    ) -> dict[str, Any]:  # fmt: skip
    """The co-leaf events of ``rows`` rows, estimated from one part routed by the model.

    A row's co-leaf events in tree t are the rows of its leaf: over all rows,
    ``sum_t sum_leaves size^2``, what the exact top-k neighbours and the outlier
    scores cost.  The part's leaf sizes, scaled by ``rows / len(part)`` (the
    other parts are drawn from the same distribution), give
    ``rows * sum_t occupancy_t``.
    """
    import lightgbm
    import numpy as np
    import pandas as pd

    booster = lightgbm.Booster(model_file=str(model_path))
    table = pd.read_parquet(part)
    sample = table[_model_columns(table, target)].to_numpy()
    leaves = booster.predict(sample, pred_leaf=True).reshape(len(sample), -1)
    scale = rows / len(sample)
    occupancy = [float((np.unique(col, return_counts=True)[1].astype(np.float64) ** 2).sum())
                 / len(sample) * scale for col in leaves.T]  # fmt: skip
    used = [len(np.unique(col)) for col in leaves.T]
    sizes = [np.unique(col, return_counts=True)[1] for col in leaves.T]
    return {
        "trees": leaves.shape[1],
        "largest_leaf_in_sample": [int(c.max()) for c in sizes],
        "median_leaf_in_sample": [float(np.median(c)) for c in sizes],
        "leaves_used_in_sample": used,
        "mean_occupancy": round(float(np.mean(occupancy)), 1),
        "coleaf_events": float(rows * np.sum(occupancy)),
        "sample_rows": len(sample),
    }


def _model_hash(model: Any) -> str:
    text = model.booster_.model_to_string()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("version"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _load(work: Path) -> tuple[Any, Any]:
    import numpy as np

    data = np.load(work / "data.npz")
    return data["X"], data["y"]


def child_distforest(work: str, family: str, args: Any) -> None:
    """distforest: route the rows through the model, then neighbours and outlier scores."""
    from distforest import ProximityForest
    from distforest.apps.outliers import outlier_scores, stored_path
    from distforest.io.model_files import load_model

    folder = family == "lightgbm-folder"
    if folder:  # rows read by partitions; the model from its file
        X, y = str(args.parts or Path(work) / "parts"), "label"
        model, digest = load_model(Path(work) / "lightgbm.txt"), ""
    else:
        X, y = _load(Path(work))
        if family == "random-forest":
            model, digest = load_model(Path(work) / "rf.skops"), ""
        else:
            model = _lightgbm(X, y, args.trees, args.seed, args.num_leaves)
            digest = _model_hash(model)
    t0 = time.perf_counter()
    forest = ProximityForest.from_model(model, X, y)
    t1 = time.perf_counter()
    _phase("routed", t1 - t0)
    neighbours = forest.proximity_neighbors(K, store=stored_path(forest))
    t2 = time.perf_counter()
    _phase("neighbours", t2 - t1)
    if folder:  # as `distforest outliers` writes them: by tasks, chunk by chunk, into a CSV
        from distforest.jobs.outputs import write_outliers

        csv = Path(work) / "outliers.csv"
        write_outliers(forest, str(csv), None, "outlier scores")
        with csv.open() as lines:
            n_scores = sum(1 for _ in lines) - 1
    else:
        n_scores = int(outlier_scores(forest).shape[0])
    t3 = time.perf_counter()
    emit({"route_s": t1 - t0, "neighbours_s": t2 - t1, "outliers_s": t3 - t2,
          "answer_s": t3 - t0, "model_hash": digest, "trees": int(forest.leaves_.shape[1]),
          "neighbours_shape": list(neighbours["index"].shape),
          "scores": n_scores})  # fmt: skip


def _phase(name: str, seconds: float) -> None:
    """A phase's end on stderr, as it happens (a long run shows how far it got)."""
    stamp = time.strftime("%H:%M:%S", time.gmtime())
    print(f"{stamp} UTC {name} in {seconds:.1f} s", file=sys.stderr, flush=True)


def child_forestgeom(work: str, family: str, args: Any) -> None:
    """forestgeom: the full sparse proximity matrix of the same model, in memory (skipped,
    with its measured density and extrapolated size, when it would not fit the budget)."""
    import numpy as np
    from forestgeom import Proximity
    from forestgeom import __version__ as version

    X, y = _load(Path(work))
    if family == "random-forest":
        import skops.io as sio

        path = Path(work) / "rf.skops"
        model = sio.load(path, trusted=sio.get_untrusted_types(file=path))
        digest = ""
    else:
        model = _lightgbm(X, y, args.trees, args.seed, args.num_leaves)
        digest = _model_hash(model)
    n = len(X)
    t0 = time.perf_counter()
    fitted = Proximity(model).fit(X, y)
    sample = np.random.default_rng(0).choice(n, min(SAMPLE_ROWS, n), replace=False)
    nnz_sample = int(fitted.transform(X[np.sort(sample)]).nnz)
    t_sample = time.perf_counter() - t0
    nnz_full = nnz_sample * n / len(sample)
    need_gb = 12 * nnz_full / 1e9
    out = {"model_hash": digest, "forestgeom_version": version,
           "density": nnz_sample / (len(sample) * n), "estimated_nnz": nnz_full,
           "estimated_csr_gb": need_gb, "sample_s": t_sample}  # fmt: skip
    if need_gb > args.peer_memory_gb:
        emit({**out, "skipped": f"the full matrix would hold ~{nnz_full:.3g} non-zeros "
              f"(~{need_gb:.0f} GB as CSR) > --peer-memory-gb {args.peer_memory_gb:g}",
              "answer_s": float("nan")})  # fmt: skip
        return
    t0 = time.perf_counter()
    matrix = fitted.transform(X)
    emit({**out, "answer_s": time.perf_counter() - t0 + t_sample, "nnz": int(matrix.nnz)})


def prepare_folder(work: Path, rows: int, trees: int, seed: int, num_leaves: int,
                   fit_rows: int, parts: Path | None = None, target: str = LABEL,
                   **more: Any) -> Path:  # fmt: skip
    """The 40-part folder of ``bench_out_of_core.py`` (``parts``, or made in ``work``) and a
    LightGBM model of ``target`` (the classes of ``label``: a classifier; a numeric
    column: a regressor of it on the other numeric columns) fitted on its first
    ``fit_rows`` rows, saved as LightGBM's text model (kept for a second run with the
    same parameters); returns the folder."""
    import pandas as pd
    from bench_out_of_core import make_data

    work.mkdir(parents=True, exist_ok=True)
    if parts is None:
        parts = work / "parts"
        if not parts.exists():
            make_data(rows, work, seed)
    stamp = json.dumps({"parts": str(parts), "trees": trees, "seed": seed,
                        "num_leaves": num_leaves, "fit_rows": fit_rows, "target": target,
                        **more})  # fmt: skip
    kept = work / "lightgbm.json"
    if (work / "lightgbm.txt").exists() and kept.exists() and kept.read_text() == stamp:
        return parts
    frames, have = [], 0
    for part in sorted(parts.glob("*.parquet")):
        frames.append(pd.read_parquet(part))
        have += len(frames[-1])
        if have >= fit_rows:
            break
    table = pd.concat(frames).iloc[:fit_rows]
    model = _lightgbm(table[_model_columns(table, target)],
                      table[target].to_numpy(), trees, seed, num_leaves,
                      regression=target != LABEL, **more)  # fmt: skip
    model.booster_.save_model(str(work / "lightgbm.txt"))
    kept.write_text(stamp)
    return parts


def prepare(work: Path, rows: int, trees: int, seed: int, forest: bool = True) -> None:
    import numpy as np
    import skops.io as sio
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    work.mkdir(parents=True, exist_ok=True)
    X, y = make_classification(rows, 20, n_informative=10, random_state=seed)
    np.savez(work / "data.npz", X=X, y=y)
    if forest:  # the scikit-learn forest both sides load (LightGBM is fitted by each side)
        model = RandomForestClassifier(n_estimators=trees, n_jobs=2, random_state=seed)
        sio.dump(model.fit(X, y), work / "rf.skops")


def peer_python(args: Any) -> str:
    if args.peer_python:
        return str(args.peer_python)
    env = Path(args.workdir) / "peer-env"
    python = env / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "forestgeom", "skops",
                        "lightgbm"], check=True)  # fmt: skip
    return str(python)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default="/tmp/bench_outside")
    p.add_argument("--peer-python", default=None)
    p.add_argument(
        "--families",
        default="random-forest,lightgbm",
        help="models to compare, comma-separated: random-forest, lightgbm",
    )
    p.add_argument("--num-leaves", type=int, default=NUM_LEAVES,
                   help="LightGBM's num_leaves (its default: 31)")  # fmt: skip
    p.add_argument(
        "--peer-memory-gb",
        type=float,
        default=8.0,
        help="build forestgeom's full matrix only if its CSR fits this many GB",
    )
    p.add_argument(
        "--folder",
        action="store_true",
        help="the 40-part Parquet folder, a LightGBM model, distforest alone",
    )
    p.add_argument(
        "--fit-rows",
        type=int,
        default=1_000_000,
        help="with --folder: rows the LightGBM model is fitted on (the first)",
    )
    p.add_argument(
        "--parts",
        type=Path,
        default=None,
        help="with --folder: an existing 40-part folder (bench_out_of_core.py's)",
    )
    p.add_argument(
        "--min-data-in-leaf",
        type=int,
        default=None,
        help="with --folder: LightGBM's min_data_in_leaf (its default: 20)",
    )
    p.add_argument(
        "--max-bin",
        type=int,
        default=None,
        help="with --folder: LightGBM's max_bin (its default: 255)",
    )
    p.add_argument("--target", default=LABEL,
                   help="with --folder: the model's target: label (a classifier) or a numeric "
                   "column (a regressor of it on the other numeric columns)")  # fmt: skip
    p.add_argument("--cli", action="store_true",
                   help="with --folder: run `distforest proximity --model M --top-k 50` and "
                   "`distforest outliers --model M`, each measured in its own process")  # fmt: skip
    p.add_argument("--drop-target", action="store_true",
                   help="with --cli: pass the target as --drop (its values never read) "
                   "instead of --target")  # fmt: skip
    p.add_argument("--commands", default="proximity,outliers",
                   help="with --cli: which commands to run, comma-separated")  # fmt: skip
    p.add_argument(
        "--prepare-only",
        action="store_true",
        help="with --folder: fit and keep the model, estimate, run nothing",
    )
    p.add_argument("--name", default=None, help="result file name (default outside, "
                   "outside-folder with --folder)")  # fmt: skip
    p.add_argument(
        "--sides",
        default="forestgeom,distforest",
        help="which sides to run, comma-separated (e.g. forestgeom alone for its "
        "matrix's measured density at a size distforest's run is not wanted)",
    )
    p.add_argument("--child", nargs=2, metavar=("SIDE", "FAMILY"), help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        side, family = args.child
        run = child_distforest if side == "distforest" else child_forestgeom
        run(args.workdir, family, args)
        return
    work = Path(args.workdir)
    estimate: dict[str, Any] = {}
    if args.folder:
        more = {"min_child_samples": args.min_data_in_leaf, "max_bin": args.max_bin}
        more = {k: v for k, v in more.items() if v is not None}
        if more:  # a large-leaf model: LightGBM's histograms capped (recomputed when evicted)
            # and one thread: each of its splits takes the best of all leaves (num_leaves^2
            # comparisons a tree), an OpenMP region each, which a loaded machine stalls
            more.update(histogram_pool_size=512, n_jobs=1)
        args.parts = prepare_folder(work, args.rows, args.trees, args.seed, args.num_leaves,
                                    min(args.fit_rows, args.rows), args.parts, args.target,
                                    **more)  # fmt: skip
        last = sorted(args.parts.glob("*.parquet"))[-1]  # not among the rows fitted on
        estimate = coleaf_estimate(work / "lightgbm.txt", last, args.rows, args.target)
        print("co-leaf events, estimated:", estimate, flush=True)
        if args.prepare_only:
            return
        if args.cli:
            rows = [_cli_row(label, args, run_measured(cmd, work, label.split()[0],
                                                       stderr_path=work / f"{label.split()[0]}"
                                                       ".stderr.txt")) | estimate
                    for label, cmd in cli_commands(work, args.parts, args.target,
                                                   args.drop_target)
                    if label.split()[0] in args.commands.split(",")]  # fmt: skip
            _write(args.name or "outside-folder-cli", rows, "Forests fitted elsewhere: "
                   "the command line on a folder of parts")  # fmt: skip
            return
        runs = [("lightgbm-folder", (("distforest", sys.executable),))]
    else:
        prepare(work, args.rows, args.trees, args.seed, "random-forest" in args.families)
        peer = peer_python(args)
        sides = tuple((side, python)
                      for side, python in (("forestgeom", peer), ("distforest", sys.executable))
                      if side in args.sides.split(","))  # fmt: skip
        runs = [(family, sides) for family in args.families.split(",")]
    me = str(Path(__file__).resolve())
    options = ["--rows", str(args.rows), "--trees", str(args.trees), "--seed", str(args.seed),
               "--workdir", str(work), "--num-leaves", str(args.num_leaves),
               "--peer-memory-gb", str(args.peer_memory_gb),
               *(["--parts", str(args.parts)] if args.parts else [])]  # fmt: skip
    rows = [_row(family, args, {side: run_measured(
                [python, me, *options, "--child", side, family], work, f"{side}-{family}",
                stderr_path=work / f"{side}-{family}.stderr.txt")
                                for side, python in sides}) | estimate
            for family, sides in runs]  # fmt: skip
    name = args.name or ("outside-folder" if args.folder else "outside")
    _write(name, rows, "Forests fitted elsewhere: distforest vs forestgeom")


def _write(name: str, rows: list[dict[str, Any]], title: str) -> None:
    """The result files, marked a draft when the machine was loaded."""
    loads = [r["load (1 min) before, after"] for r in rows]
    loads = [pair for pair in loads if "nan" not in pair] or ["nan / nan"]
    busiest = max(float(v) for pair in loads for v in pair.split(" / "))
    if busiest > DRAFT_LOAD:  # the machine was shared: the seconds are not comparable
        title += f" (DRAFT: load up to {busiest:.1f} on {os.cpu_count()} CPUs)"
    write_result(name, rows, title=title,
                 notes=__doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0])  # fmt: skip


def cli_commands(work: Path, parts: Path, target: str,
                 drop_target: bool = False) -> list[tuple[str, list[str]]]:  # fmt: skip
    """The two commands a user of the model runs on the folder: the top-50 neighbours and
    the outlier scores (``--target`` and the class column kept out of the features the
    model reads; ``drop_target``: the target dropped instead, no classes read)."""
    given = ["--drop", target] if drop_target else ["--target", target]
    common = [str(parts), "--model", str(work / "lightgbm.txt"), *given,
              *(["--drop", LABEL] if target != LABEL else []), "--overwrite"]  # fmt: skip
    cli = [sys.executable, "-m", "distforest"]
    return [
        (f"proximity --top-k {K}",
         [*cli, "proximity", *common, "--top-k", str(K), "--out", str(work / "neighbours.zarr")]),
        ("outliers", [*cli, "outliers", *common, "--out", str(work / "outliers.csv")]),
    ]  # fmt: skip


def _cli_row(label: str, args: Any, run: dict[str, Any]) -> dict[str, Any]:
    """One line of the command-line table: one command's wall time and memory peaks."""
    nan = float("nan")
    procs = run.get("processes", [])
    driver = next((p for p in procs if p.get("role") == "driver"), {})
    workers = [p["peak_bytes"] for p in procs if p.get("role") == "worker"
               and "resource_tracker" not in p.get("command", "")]  # fmt: skip
    row = {
        "command": f"distforest {label}", "rows": args.rows, "exit": run.get("returncode"),
        "wall (s)": round(run.get("wall_s", nan), 1),
        "driver peak RSS (GB)": round(driver.get("peak_bytes", nan) / 1e9, 3),
        # the kernel's high-water mark of the driver and the processes it reaped (time -v):
        # not sampled, so an upper bound of the driver's peak that no spike escapes
        "max RSS of any process, time -v (GB)": round(
            run.get("max_rss_single_bytes", nan) / 1e9, 3),
        "largest worker peak RSS (GB)": round(max(workers, default=nan) / 1e9, 3),
        "workers": len(workers),
        "tree peak RSS (GB)": round(run.get("peak_rss_tree_bytes", nan) / 1e9, 3),
        "load (1 min) before, after": " / ".join(
            f"{(run.get(k) or {}).get('load_1m', nan):.1f}" for k in ("load_start", "load_end")),
    }  # fmt: skip
    print(row, flush=True)
    return row


def _row(family: str, args: Any, measured: dict[str, Any]) -> dict[str, Any]:
    """One line of the result table: both sides of one model (or distforest alone)."""
    nan = float("nan")
    df = measured.get("distforest") or {}
    df_child = df.get("child") or {}
    fg = measured.get("forestgeom")
    fg_child = (fg or {}).get("child") or {}
    driver = next((p for p in df.get("processes", []) if p.get("role") == "driver"), {})
    row = {
        "model": family, "rows": args.rows, "trees": df_child.get("trees", args.trees),
        "num_leaves": args.num_leaves if "lightgbm" in family else None,
        "forestgeom full matrix (s)": round(fg_child.get("answer_s", nan), 1),
        "forestgeom": fg_child.get("skipped") or (f"nnz {fg_child['nnz']:,}" if "nnz" in
                                                  fg_child else "not run"),
        "forestgeom density": round(fg_child.get("density", nan), 4),
        "distforest route + top-50 + outliers (s)": round(df_child.get("answer_s", nan), 1),
        "ratio": round(df_child.get("answer_s", nan) / fg_child.get("answer_s", nan), 3),
        "forestgeom peak RSS (GB)": round((fg or {}).get("peak_rss_tree_bytes", nan) / 1e9, 2),
        "distforest peak RSS tree (GB)": round(df.get("peak_rss_tree_bytes", nan) / 1e9, 2),
        "distforest driver peak RSS (GB)": round(
            driver.get("peak_bytes", df.get("max_rss_single_bytes", nan)) / 1e9, 2),
        "same model": (fg_child.get("model_hash") == df_child.get("model_hash")
                       if fg and df else None),
        "distforest phases (s)": json.dumps({k: round(v, 1) for k, v in df_child.items()
                                             if k.endswith("_s")}),
        "load (1 min) before, after": " / ".join(
            f"{((df or fg or {}).get(k) or {}).get('load_1m', nan):.1f}"
            for k in ("load_start", "load_end")),
    }  # fmt: skip
    print(row, flush=True)
    return row


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
