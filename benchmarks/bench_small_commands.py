"""Every CLI command on the bundled breast-cancer table, end to end (run by hand).

Issue 25 asks that each command on a small table finish in under 3 s, process
start included, with no cluster option: small inputs run in this process
(:func:`distforest.parallel.placement.runs_in_process`).  This script runs
each command in a fresh process (default options, no cluster option), in
order (later commands read what earlier ones wrote), and records its wall
time and whether it started a cluster (the ``cluster: ...`` log line of
:func:`distforest.parallel.cluster.connect`).  With ``--base REF`` the
package as it was at ``REF`` is measured too (``git archive``, first on
``PYTHONPATH``; same interpreter and libraries).  Writes
``benchmarks/results/small_commands.md`` and ``small_commands.json``.

The data: ``distforest/data/breast_cancer.csv`` (699 rows; ``Id`` dropped,
``Class`` the target).  X-Forest, cluster, the measures of similarity,
neighbors, k-NN and SimForest, and SMERF take complete rows: ``Bare.nuclei``
(16 missing) is dropped for them.
SMERF's observed distances are the Euclidean distances of those features.

Usage::

    .venv/bin/python benchmarks/bench_small_commands.py --base 11d130c --repeat 3
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _measure import RESULTS as RESULTS_DIR  # noqa: E402
from _measure import (  # noqa: E402
    machine_info,
    run_timed,
    write_markdown,
)
from _measure import parser as make_parser  # noqa: E402
from bench_startup import extract, git  # noqa: E402

BC = str(ROOT / "distforest" / "data" / "breast_cancer.csv")


@dataclass(frozen=True)
class Data:
    """A small table and how each command reads it."""

    #: The CSV file (``{o}``: the scratch directory; a table written there by ``prepare``).
    path: str
    #: Options for the supervised commands (target and columns to drop).
    target: str
    #: Options dropping what is not a complete numeric feature (X-Forest, SMERF, measures).
    features: str
    #: Of those, the columns that are features (SMERF's observed distances use them).
    drop: tuple[str, ...]
    #: Options of ``simforest predict`` on the whole table.
    predict: str
    describe: str


TABLES = {
    "bundled": Data(
        BC,
        "--target Class --drop Id",
        "--drop Id --drop Class --drop Bare.nuclei",
        ("Id", "Class", "Bare.nuclei"),
        "--drop Id",
        "distforest/data/breast_cancer.csv, 699 rows (Id dropped; Bare.nuclei too for "
        "xforest, cluster, similarity, neighbors, knn, simforest, smerf)",
    ),
    "sklearn": Data(
        "{o}/wdbc.csv",
        "--target target",
        "--drop target",
        ("target",),
        "",
        "scikit-learn's `load_breast_cancer()` (the Wisconsin diagnostic table, 569 rows x 30 "
        "features, no missing values) written as CSV with its class as `target`",
    ),
}


def commands(data: Data) -> dict[str, str]:
    """Label -> command line ({o}: the scratch directory of this variant and run)."""
    t = f"{data.path} {data.target}"
    x = f"{data.path} {data.features}"
    c = t if data.features == "--drop target" else f"{t} --drop Bare.nuclei"
    return {
        "proximity": f"proximity {t} --out {{o}}/p.zarr",
        "impute": f"impute {t} --out {{o}}/imp.csv",
        "outliers": f"outliers {t} --out {{o}}/out.csv",
        "mislabels": f"mislabels {t} --out {{o}}/mis.csv",
        "mds": f"mds {t} --out {{o}}/mds.csv",
        "xforest": f"xforest {x} --out {{o}}/x.zarr",
        "cluster --method spectral": "cluster {o}/x.zarr --method spectral --k 2 --out {o}/cl.csv",
        "similarity": f"similarity {x} --out {{o}}/s.zarr",
        "neighbors": f"neighbors {x} --out {{o}}/nn.zarr",
        "knn fit": f"knn fit {c} --out {{o}}/knn.zarr",
        "knn predict": f"knn predict {{o}}/knn.zarr {data.path} --out {{o}}/knn.csv",
        "knn fit --metric rf-proximity": f"knn fit {c} --metric rf-proximity --out {{o}}/knnf.zarr",
        "knn predict (rf-proximity model)":
            f"knn predict {{o}}/knnf.zarr {data.path} --out {{o}}/knnf.csv",
        "simforest fit": f"simforest fit {c} --out {{o}}/sf.zarr",
        "simforest predict":
            f"simforest predict {{o}}/sf.zarr {data.path} {data.predict} --out {{o}}/sf.csv",
        "smerf fit": f"smerf fit {x} --distances {{o}}/D.npy --out {{o}}/sm.zarr",
        "smerf predict": f"smerf predict {{o}}/sm.zarr {x} --out {{o}}/smd.zarr",
    }  # fmt: skip


COMMANDS = commands(TABLES["bundled"])
CLUSTER_LINE = "distforest.parallel.cluster: cluster:"


def prepare(data: Data, into: Path) -> None:
    """Write the table (if it is generated) and SMERF's observed distances: Euclidean, of
    the features the X-Forest / SMERF commands use."""
    import numpy as np
    import pandas as pd

    path = Path(data.path.format(o=into))
    if not path.exists():
        from sklearn.datasets import load_breast_cancer

        frame = load_breast_cancer(as_frame=True).frame
        frame.to_csv(path, index=False)
    X = pd.read_csv(path).drop(columns=list(data.drop)).to_numpy(float)
    D = np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    np.save(into / "D.npy", D)


def run_all(tree: Path, scratch: Path, data: Data) -> dict[str, tuple[float, float, bool]]:
    """Every command once, in order: label -> (wall s, CPU s, cluster started).

    CPU: user + system time of the process and its children (workers included),
    less sensitive than wall time to other processes on a shared machine.
    """
    scratch.mkdir(parents=True)
    prepare(data, scratch)
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    out = {}
    for label, cmd in commands(data).items():
        argv = [sys.executable, "-m", "distforest", *cmd.format(o=scratch).split()]
        r, wall, cpu = run_timed(argv, env=env, cwd=scratch, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{label} failed ({r.returncode}): {r.stderr[-1500:]}")
        out[label] = (wall, cpu, CLUSTER_LINE in r.stderr)
        print(f"{label} [{tree.name}]: {wall:.2f} s wall, {cpu:.2f} s CPU, cluster "
              f"{out[label][2]}", flush=True)  # fmt: skip
    return out


#: Estimators timed under scikit-learn's ``check_estimator``, default construction.
ESTIMATORS = ("ProximityForest", "XForest", "ProximityImputer", "KNNClassifier", "KNNRegressor",
              "SimilarityForestClassifier", "SMERF")  # fmt: skip
CHECK = """
import sys, time, warnings
warnings.simplefilter("ignore")
import distforest.parallel.cluster as cluster
started = []
connect = cluster.connect
def counting(**kw):
    started.append(kw)
    return connect(**kw)
cluster.connect = counting
from sklearn.utils.estimator_checks import check_estimator
import distforest
sys.path.insert(0, {benchmarks!r})
from _measure import cpu_seconds
start, cpu = time.perf_counter(), cpu_seconds()
# SMERF's fit takes (X, D): the checks that fit it with a 1-D y are listed in the suite
sys.path.insert(0, {tests!r})
from test_estimator_contract import SMERF_NOT_APPLICABLE
expected = SMERF_NOT_APPLICABLE if {name!r} == "SMERF" else None
try:
    results = check_estimator(getattr(distforest, {name!r})(), expected_failed_checks=expected,
                              on_fail=None)
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    xfailed = sum(r["status"] == "xfail" for r in results)
    outcome = ("passed" if not failed else "failed: " + ", ".join(failed)[:120]) + (
        f" ({{xfailed}} listed as not applicable)" if xfailed else "")
except Exception as exc:
    outcome = type(exc).__name__ + ": " + str(exc).splitlines()[0][:120]
used = cpu_seconds() - cpu
print("RESULT", time.perf_counter() - start, used, len(started), outcome)
"""


def check_estimators(tree: Path, timeout: float) -> dict[str, tuple[float, float, int, str]]:
    """``check_estimator(Cls())`` in a fresh process each: (wall s, CPU s of this process,
    clusters started, outcome).

    A check still running after ``timeout`` seconds is stopped (CPU and clusters: -1, unknown).
    """
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    out = {}
    for name in ESTIMATORS:
        try:
            # cwd: not the repository, whose distforest/ would come before PYTHONPATH's
            code = CHECK.format(name=name, tests=str(ROOT / "tests"), benchmarks=str(HERE))
            r = subprocess.run([sys.executable, "-c", code], env=env,
                               capture_output=True, text=True, timeout=timeout,
                               cwd=tempfile.gettempdir())  # fmt: skip
        except subprocess.TimeoutExpired:
            out[name] = (timeout, -1.0, -1, f"stopped after {timeout:.0f} s")
            print(f"check_estimator({name}()) [{tree.name}]: {out[name]}", flush=True)
            continue
        line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT")), None)
        if line is None:
            raise SystemExit(f"check_estimator({name}()) crashed: {r.stderr[-1500:]}")
        _, seconds, cpu, clusters, outcome = line.split(" ", 4)
        out[name] = (float(seconds), float(cpu), int(clusters), outcome)
        print(f"check_estimator({name}()) [{tree.name}]: {out[name]}", flush=True)
    return out


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--base", help="commit to compare with (e.g. the branch point)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--table",
        choices=sorted(TABLES),
        default="bundled",
        help="the bundled 699-row table or scikit-learn's 569-row one",
    )
    parser.add_argument("--tree", type=Path, default=ROOT, help="tree measured as 'after'")
    parser.add_argument(
        "--checks",
        action="store_true",
        help="also time check_estimator on every estimator (once per variant)",
    )
    parser.add_argument("--checks-timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "small_commands.md")
    args = parser.parse_args()
    data = TABLES[args.table]
    with tempfile.TemporaryDirectory(prefix="bench-small-") as tmp:
        scratch = Path(tmp)
        variants = {"after": args.tree}
        if args.base:
            (scratch / "base").mkdir()
            variants = {"before": extract(args.base, scratch / "base"), **variants}
        load_start = os.getloadavg()
        runs: dict[str, list[dict[str, tuple[float, float, bool]]]] = {v: [] for v in variants}
        for rep in range(args.repeat):
            for variant, tree in variants.items():
                runs[variant].append(run_all(tree, scratch / f"{variant}-{rep}", data))
        checks = (
            {v: check_estimators(t, args.checks_timeout) for v, t in variants.items()}
            if args.checks
            else {}
        )
        load_end = os.getloadavg()

    machine = machine_info()
    head = git("rev-parse", "--short", "HEAD") + (
        " (+ uncommitted changes)" if git("status", "--porcelain") else ""
    )
    table: dict[str, dict[str, dict[str, object]]] = {}
    for variant, reps in runs.items():
        for label in COMMANDS if reps else ():
            walls = [rep[label][0] for rep in reps]
            cpus = [rep[label][1] for rep in reps]
            table.setdefault(label, {})[variant] = {
                "median_s": statistics.median(walls),
                "median_cpu_s": statistics.median(cpus),
                "runs_s": [round(w, 2) for w in walls],
                "cluster": any(rep[label][2] for rep in reps),
            }
    record = {"commands": table, "check_estimator": checks}
    (args.out.with_suffix(".json")).write_text(json.dumps(record, indent=1) + "\n")
    before = "before" in variants
    lines = [
        "# Small inputs: every command on the breast-cancer table (issue 25)",
        "",
        f"- Date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- Machine: {machine['usable_cores']} cores ({machine['cpu_model']}), "
        f"{machine['mem_total_bytes'] / 2**30:.1f} GiB; shared with other sessions: load "
        f"average (1, 5, 15 min) {' / '.join(f'{x:.1f}' for x in load_start)} at the start, "
        f"{' / '.join(f'{x:.1f}' for x in load_end)} at the end",
        f"- Commit measured (after): {head}"
        + (f"; before: {args.base} (its `distforest/` first on PYTHONPATH)" if before else ""),
        "- Command: `.venv/bin/python benchmarks/bench_small_commands.py"
        f"{' --base ' + args.base if before else ''} --repeat {args.repeat}"
        f"{'' if args.table == 'bundled' else ' --table ' + args.table}`",
        f"- Data: {data.describe}. Default "
        "options, no cluster option. Wall time of the whole process (start included) and "
        "CPU time (user + system, the process and its children), medians of "
        f"{args.repeat} runs; 'cluster': whether a run started or reached a Dask cluster.",
    ]
    if args.repeat:
        lines += [
            "",
            "| command | before wall (s) | before CPU (s) | before cluster | after wall (s) "
            "| after CPU (s) | after cluster |"
            if before
            else "| command | wall (s) | CPU (s) | cluster |",
            "|---|---:|---:|---|---:|---:|---|" if before else "|---|---:|---:|---|",
        ]
    for label in COMMANDS if args.repeat else ():
        cells = []
        for variant in variants:
            row = table[label][variant]
            cells += [f"{row['median_s']:.2f}", f"{row['median_cpu_s']:.2f}",
                      "yes" if row["cluster"] else "no"]  # fmt: skip
        lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
    if checks:
        lines += [
            "",
            "`check_estimator(Cls())` (scikit-learn's checks, default construction, no execution "
            "given), one fresh process each, once per variant; 'clusters': LocalClusters or "
            "connections made.",
            "",
            "| estimator | "
            + " | ".join(f"{v} wall (s) | {v} CPU (s) | {v} clusters | {v} outcome" for v in checks)
            + " |",
            "|---|" + "---:|---:|---:|---|" * len(checks),
        ]
        for name in ESTIMATORS:
            cells = []
            for variant in checks:
                seconds, cpu, clusters, outcome = checks[variant][name]
                cells += [f"{seconds:.1f}", f"{cpu:.1f}" if cpu >= 0 else "-",
                          str(clusters) if clusters >= 0 else "-", outcome]  # fmt: skip
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    write_markdown(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
