"""Out-of-core data path: driver, worker and process-tree memory with the phase split (by hand).

Synthetic table: N rows x 20 float features and a 3-class target ``label``,
20 % of three columns missing, written as a Parquet dataset folder of 40
parts and as one CSV (and one Parquet file for the in-memory path).  Each
configuration runs in its own process under
:func:`benchmarks.rss_by_process.sample` (peak RSS per process: the driver,
each Dask worker, and the sum over the process tree), with a LocalCluster of
2 workers x 1 thread:

- ``outliers-parquet-folder`` / ``outliers-csv``: the table read by
  partitions (``distforest.store.inputs.ingest``), the forest grown from the
  store, outlier scores and their CSV as ``distforest outliers`` makes them
  (``write_outliers``: tasks score row chunks and write the CSV in pieces);
- ``outliers-in-memory`` (``--before``): today's path, pandas reads the
  Parquet file in the driver and ``load_table`` encodes it there;
- ``knn fit`` (``--knn``): ``distforest knn fit`` of the Parquet folder by
  partitions, euclidean on the complete columns (``--drop`` the three with
  missing values) and ``rf-proximity`` on all (``--trees``); ``--knn-metrics``
  chooses others (``beta``, ``simforest``: complete columns; ``rfgap``);
- ``neighbors`` (``--neighbors``): ``distforest neighbors`` of the Parquet folder
  by partitions, k=10 Euclidean neighbours on five complete columns (a k-d tree);
- ``mislabels-parquet-folder`` (``--mislabels``) / ``mds-parquet-folder`` (``--mds``):
  the forest grown from the store, then ``distforest mislabels``' ranked CSV or
  ``distforest mds``' coordinates as the commands write them (by row chunks);
- ``impute-parquet-folder`` / ``impute-csv`` (``--impute``, ``--csv``):
  ``distforest impute`` reading by partitions (column forests fitted on a
  sample of at most 200,000 rows, partitions filled and written by tasks);
  ``impute-in-memory`` (``--impute --before``): the Parquet file read whole;
  ``--impute-proximity rfimpute`` (or another) for the one-forest modes.

Phases (seconds): ingest (pass 1 + pass 2 into ``input/X``), fit (trees),
leaves (rows routed by chunks), application (outlier scores) and write, or both as one phase
("scores and CSV") where tasks write the CSV.

    python benchmarks/bench_out_of_core.py --rows 1000000 --before \\
        --out benchmarks/results/out_of_core.md
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _measure import emit, run_measured, the_command, write_markdown  # noqa: E402
from _measure import parser as make_parser  # noqa: E402

ROOT = HERE.parent
GB = 1e9
FEATURES = 20
PARTS = 40
MISSING_COLUMNS = (3, 7, 11)
MISSING_SHARE = 0.2


def make_data(rows: int, where: Path, seed: int = 0, parts_only: bool = False) -> dict[str, Path]:
    """Write the synthetic table as a 40-part Parquet folder, one CSV and one Parquet file
    (``parts_only``: the folder alone, the same parts)."""
    import numpy as np
    import pandas as pd

    folder = where / "parts"
    folder.mkdir(parents=True)
    csv, single = where / "table.csv", where / "table.parquet"
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((FEATURES, 3))
    writer = None
    import pyarrow as pa
    import pyarrow.parquet as pq

    edges = np.linspace(0, rows, PARTS + 1).astype(int)
    for k in range(PARTS):
        m = int(edges[k + 1] - edges[k])
        X = rng.standard_normal((m, FEATURES))
        label = (X @ weights + rng.standard_normal((m, 3))).argmax(axis=1)
        for j in MISSING_COLUMNS:
            X[rng.random(m) < MISSING_SHARE, j] = np.nan
        df = pd.DataFrame(X, columns=[f"x{j:02d}" for j in range(FEATURES)])
        df["label"] = np.array(["a", "b", "c"])[label]
        df.to_parquet(folder / f"part-{k:03d}.parquet", index=False)
        if parts_only:
            continue
        df.to_csv(csv, mode="a", header=k == 0, index=False)
        table = pa.Table.from_pandas(df, preserve_index=False)
        writer = writer or pq.ParquetWriter(single, table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()
    return {"folder": folder, "csv": csv, "single": single}


# -- one configuration, in its own process ---------------------------------------------


def run_one(config: str, source: str, work: str, trees: int) -> None:
    """Run one configuration and print its phase times (:func:`_measure.emit`)."""
    import numpy as np
    from distributed import Client, LocalCluster

    from distforest import ProximityForest, execution
    from distforest.apps.outliers import outlier_scores
    from distforest.jobs.outputs import write_outliers

    phases: dict[str, float] = {}
    stage_times: dict[str, list[float]] = {}

    def progress(stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        span = stage_times.setdefault(stage, [now, now])
        span[1] = now

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
        execution(client=client, progress=progress),
    ):
        tick = time.perf_counter()
        if config == "outliers-in-memory":
            import pandas as pd

            df = pd.read_parquet(source)
            data: Any = None
            X, y = df.drop(columns="label"), df["label"]
        else:
            from distforest.store.inputs import ingest

            data = ingest(source, Path(work) / "run.zarr", target="label")
        phases["ingest"] = time.perf_counter() - tick
        tick = time.perf_counter()
        forest = ProximityForest(n_estimators=trees, random_state=0)
        if data is not None:
            forest.fit(data)
        else:
            forest.fit(X, y)
        fitted = time.perf_counter() - tick
        if "leaves" in stage_times:
            phases["leaves"] = stage_times["leaves"][1] - stage_times["fit"][1]
            phases["fit"] = fitted - phases["leaves"]
        else:
            phases["fit"] = fitted
        tick = time.perf_counter()
        out = Path(work) / "outliers.csv"
        if config.startswith("mislabels"):  # what `distforest mislabels` runs
            from distforest.jobs.outputs import write_mislabels

            write_mislabels(forest, str(Path(work) / "mislabels.csv"))
            phases["mislabels and CSV"] = time.perf_counter() - tick
        elif config.startswith("mds"):  # what `distforest mds` runs
            from distforest.jobs.outputs import write_mds

            write_mds(forest, str(Path(work) / "mds.csv"), None)
            phases["MDS and CSV"] = time.perf_counter() - tick
        elif data is not None:  # what `distforest outliers` runs: scored and written by tasks
            write_outliers(forest, str(out), None, title=source)
            phases["scores and CSV"] = time.perf_counter() - tick
        else:
            scores = outlier_scores(forest)
            phases["application"] = time.perf_counter() - tick
            tick = time.perf_counter()
            import pandas as pd

            frame = pd.DataFrame({"row": np.arange(scores.size)})
            frame["label"] = np.asarray(forest.classes_, dtype=object)[forest.y_]
            frame["outlier"] = scores
            frame.to_csv(out, index=False)
            phases["write"] = time.perf_counter() - tick
    emit({"phases": phases, "n": int(forest.n_samples_)})


# -- the driver of the benchmark -------------------------------------------------------


def measure(cmd: list[str]) -> dict[str, Any]:
    """``cmd`` run and measured in its own process (:func:`_measure.run_measured`)."""
    return run_measured(cmd, Path.cwd(), "out_of_core")


def _row(name: str, rows: int, sampled: dict[str, Any], phases: dict[str, float],
         note: str = "") -> str:  # fmt: skip
    procs = sampled["processes"]
    driver = max((p["peak_bytes"] for p in procs if p["role"] == "driver"), default=0)
    worker = max((p["peak_bytes"] for p in procs if p["role"] == "worker"), default=0)
    split = ", ".join([f"{k} {v:.0f}" for k, v in phases.items()] + ([note] if note else []))
    return (f"| {name} | {rows:,} | {sampled['returncode']} | {sampled['wall_s']:.0f} | "
            f"{driver / GB:.2f} | {worker / GB:.2f} | {sampled['peak_rss_tree_bytes'] / GB:.2f} | "
            f"{split} |")  # fmt: skip


def _knn_runs(rows: int, folder: Path, where: Path, trees: int,
              metrics: tuple[str, ...] = ("euclidean", "rf-proximity")) -> list[str]:  # fmt: skip
    """``distforest knn fit`` of the folder by partitions, one table row per metric:
    euclidean, beta and simforest on the complete columns (they refuse missing values),
    rf-proximity and rfgap on all."""
    drop = [word for j in MISSING_COLUMNS for word in ("--drop", f"x{j:02d}")]
    runs = []
    for metric in metrics:
        if metric == "euclidean":
            runs.append(("knn fit euclidean (CLI, by partitions)", drop))
            continue
        columns = [] if metric in ("rf-proximity", "rfgap") else drop
        runs.append((f"knn fit {metric}, {trees} trees (CLI, by partitions)",
                     ["--metric", metric, "--trees", str(trees), *columns]))  # fmt: skip
    lines = []
    for name, options in runs:
        out = where / "knn.zarr"
        cmd = ["distforest", "-q", "knn", "fit", str(folder), "--target", "label", "--out",
               str(out), "--workers", "2", "--threads", "1", *options]  # fmt: skip
        sampled = measure(cmd)
        shutil.rmtree(out, ignore_errors=True)
        lines.append(_row(name, rows, sampled, {}))
        print(lines[-1], flush=True)
    return lines


def _neighbors_runs(rows: int, folder: Path, where: Path, keep: int = 5) -> list[str]:
    """``distforest neighbors`` of the folder by partitions: k=10 Euclidean neighbours on
    the first ``keep`` complete columns (a k-d tree), written by tasks as they arrive."""
    complete = [j for j in range(20) if j not in MISSING_COLUMNS]
    drop = ["--drop", "label"] + [word for j in range(20) if j not in complete[:keep]
                                  for word in ("--drop", f"x{j:02d}")]  # fmt: skip
    out = where / "neighbors.zarr"
    cmd = ["distforest", "-q", "neighbors", str(folder), "--k", "10", "--out", str(out),
           "--workers", "2", "--threads", "1", *drop]  # fmt: skip
    sampled = measure(cmd)
    shutil.rmtree(out, ignore_errors=True)
    line = _row(f"neighbors k=10, {keep} features (CLI, by partitions)", rows, sampled, {})
    print(line, flush=True)
    return [line]


def _remove(*paths: Path) -> None:
    """Remove files or folders (an earlier run's output and run store)."""
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


#: The commands of ``--commands``: the subcommand and its options beyond input, target, out.
COMMANDS = ("outliers", "mislabels", "mds", "impute", "rfimpute")


def _command_runs(rows: int, folder: Path, where: Path, commands: list[str], trees: int,
                  rfimpute_trees: int | None) -> list[str]:  # fmt: skip
    """Each of ``commands`` through the CLI on the Parquet folder, one table row each:
    ``distforest outliers / mislabels / mds`` (``trees`` trees, CSV out), ``distforest
    impute`` (column mode, its defaults; a folder of parts out) and ``distforest impute
    --proximity rfimpute`` (``rfimpute_trees`` trees, else its default 300)."""
    lines = []
    for command in commands:
        common = ["--target", "label", "--workers", "2", "--threads", "1"]
        if command in ("impute", "rfimpute"):
            out = where / f"{command}-out"
            cmd = ["distforest", "-q", "impute", str(folder), *common, "--out", f"{out}/"]
            name = "impute, column (CLI, by partitions)"
            if command == "rfimpute":
                cmd += ["--proximity", "rfimpute"]
                if rfimpute_trees is not None:
                    cmd += ["--trees", str(rfimpute_trees)]
                name = f"impute rfimpute, {rfimpute_trees or 300} trees (CLI, by partitions)"
        else:
            out = where / f"{command}.csv"
            cmd = ["distforest", "-q", command, str(folder), *common, "--out", str(out),
                   "--trees", str(trees)]  # fmt: skip
            name = f"{command}, {trees} trees (CLI, by partitions)"
        done = (out, out.with_suffix(".run.zarr"), Path(f"{out}.run.zarr"))  # + its run store
        _remove(*done)
        sampled = measure(cmd)
        _remove(*done)
        load = sampled["load_start"], sampled["load_end"]
        lines.append(_row(name, rows, sampled, {}, f"load {load[0]['load_1m']:.1f} at start, "
                          f"{load[1]['load_1m']:.1f} at end"))  # fmt: skip
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--before", action="store_true", help="also today's in-memory path")
    parser.add_argument("--impute", action="store_true", help="also `distforest impute`")
    parser.add_argument("--csv", action="store_true", help="also the one-CSV input")
    parser.add_argument(
        "--impute-proximity",
        default="column",
        help="the --proximity of the impute runs (default column; e.g. rfimpute)",
    )
    parser.add_argument("--tmp", default=None, help="where to write the data")
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="keep the generated data in DATA/ROWS and reuse it when present",
    )
    parser.add_argument(
        "--no-outliers",
        action="store_true",
        help="skip the outlier configurations (with --impute: impute only)",
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add the rows to an existing --out file instead of rewriting it",
    )
    parser.add_argument(
        "--mislabels",
        action="store_true",
        help="only `distforest mislabels` on the Parquet folder (its ranked CSV)",
    )
    parser.add_argument(
        "--mds",
        action="store_true",
        help="only `distforest mds` on the Parquet folder (its coordinates CSV)",
    )
    parser.add_argument(
        "--skip-folder",
        action="store_true",
        help="no outlier run on the Parquet folder (e.g. only --csv)",
    )
    parser.add_argument("--knn", action="store_true", help="only `distforest knn fit`")
    parser.add_argument(
        "--knn-metrics",
        nargs="+",
        default=["euclidean", "rf-proximity"],
        choices=["euclidean", "rf-proximity", "rfgap", "beta", "simforest"],
        help="the metrics of --knn",
    )
    parser.add_argument(
        "--neighbors", action="store_true", help="only `distforest neighbors` (k-d tree)"
    )
    parser.add_argument(
        "--commands",
        nargs="+",
        default=None,
        choices=COMMANDS,
        help="only these commands through the CLI on the Parquet folder, one at a time",
    )
    parser.add_argument(
        "--rfimpute-trees",
        type=int,
        default=None,
        help="the --trees of the rfimpute command (default: its own, 300)",
    )
    parser.add_argument("--out", type=Path, default=None, help="Markdown result file")
    parser.add_argument("--run-one", nargs=4, metavar=("CONFIG", "SRC", "WORK", "TREES"))
    args = parser.parse_args()
    if args.run_one:
        config, source, work, trees = args.run_one
        run_one(config, source, work, int(trees))
        return
    lines = []
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    os.environ["PYTHONPATH"] = str(ROOT)  # the measured processes import this checkout
    for rows in args.rows:
        keep = args.data is not None
        if keep:
            where = args.data / str(rows)
        else:
            where = Path(tempfile.mkdtemp(prefix="ooc-bench-", dir=args.tmp))
        try:
            tick = time.perf_counter()
            files = {"folder": where / "parts", "csv": where / "table.csv",
                     "single": where / "table.parquet"}  # fmt: skip
            if not (keep and (where / "complete").exists()):
                shutil.rmtree(where, ignore_errors=True)
                files = make_data(rows, where, parts_only=bool(args.commands))
                (where / "complete").touch()
                print(f"{rows:,} rows written in {time.perf_counter() - tick:.0f} s", flush=True)
            configs = (
                []
                if args.no_outliers or args.skip_folder
                else [("outliers-parquet-folder", files["folder"])]
            )
            if args.csv and not args.no_outliers:
                configs.append(("outliers-csv", files["csv"]))
            if args.before and not args.no_outliers:
                configs.append(("outliers-in-memory", files["single"]))
            if args.mislabels:
                configs = [("mislabels-parquet-folder", files["folder"])]
            if args.mds:
                configs = [("mds-parquet-folder", files["folder"])]
            if args.knn:
                configs = []
                lines += _knn_runs(rows, files["folder"], where, args.trees,
                                   tuple(args.knn_metrics))  # fmt: skip
            if args.neighbors:
                configs = []
                lines += _neighbors_runs(rows, files["folder"], where)
            if args.commands:
                configs = []
                lines += _command_runs(rows, files["folder"], where, args.commands, args.trees,
                                       args.rfimpute_trees)  # fmt: skip
            for name, source in configs:
                work = where / name
                work.mkdir()
                cmd = [sys.executable, str(Path(__file__).resolve()), "--run-one", name,
                       str(source), str(work), str(args.trees)]  # fmt: skip
                sampled = measure(cmd)
                phases = sampled.get("child", {}).get("phases", {})
                lines.append(_row(name, rows, sampled, phases))
                print(lines[-1], flush=True)
                shutil.rmtree(work, ignore_errors=True)
            if args.impute:
                runs = [("impute-parquet-folder (CLI, by partitions)", files["folder"],
                         f"{where / 'imputed-folder'}/")]  # fmt: skip
                if args.csv:
                    runs.append(("impute-csv (CLI, by partitions)", files["csv"],
                                 str(where / "imputed.csv")))  # fmt: skip
                if args.before:
                    runs.append(("impute-in-memory (CLI)", files["single"],
                                 str(where / "imputed.parquet")))  # fmt: skip
                for name, source, out in runs:
                    cmd = ["distforest", "-q", "impute", str(source), "--target", "label",
                           "--out", out, "--workers", "2", "--threads", "1",
                           "--proximity", args.impute_proximity]  # fmt: skip
                    if args.impute_proximity != "column":
                        name = name.replace("impute-", f"impute {args.impute_proximity}-", 1)
                    sampled = measure(cmd)
                    shutil.rmtree(out, ignore_errors=True)
                    Path(out).unlink(missing_ok=True)
                    lines.append(_row(name, rows, sampled, {}))
                    print(lines[-1], flush=True)
        finally:
            if not keep:
                shutil.rmtree(where, ignore_errors=True)
    if args.out and args.append and args.out.exists():
        previous = args.out.read_text().rstrip("\n")
        write_markdown(
            args.out,
            previous
            + "\n"
            + "\n".join(lines)
            + f"\n\n(rows above appended {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC: "
            f"`{the_command()}`, load before: "
            f"{load_before})\n",
        )
    elif args.out:
        head = [
            "# Out-of-core data path",
            "",
            f"Load average (1, 5, 15 min) before the run: {load_before} (above ~0.5 the "
            "machine was shared: times are drafts).",
            "",
            f"{FEATURES} float features + 3-class target, {MISSING_SHARE:.0%} of columns "
            f"{list(MISSING_COLUMNS)} missing, {PARTS} Parquet parts; {args.trees} trees, "
            "LocalCluster 2 workers x 1 thread.  Peak RSS per process (GB) from psutil every "
            "0.2 s; phases in seconds.",
            "",
            "| configuration | rows | exit | wall (s) | driver | worker (max) | tree | phases |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        write_markdown(args.out, "\n".join(head + lines) + "\n")


if __name__ == "__main__":
    main()
