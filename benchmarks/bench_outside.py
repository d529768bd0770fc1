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
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import emit, parser, run_measured, write_result

K = 50


def _lightgbm(X: Any, y: Any, trees: int, seed: int) -> Any:
    import lightgbm

    model = lightgbm.LGBMClassifier(
        n_estimators=trees, random_state=seed, n_jobs=2, deterministic=True,
        force_row_wise=True, verbose=-1,
    )  # fmt: skip
    return model.fit(X, y)


def _model_hash(model: Any) -> str:
    text = model.booster_.model_to_string()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("version"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _load(work: Path) -> tuple[Any, Any]:
    import numpy as np

    data = np.load(work / "data.npz")
    return data["X"], data["y"]


def child_distforest(work: str, family: str, trees: int, seed: int) -> None:
    """distforest: route the rows through the model, then neighbours and outlier scores."""
    from distforest import ProximityForest
    from distforest.apps.outliers import outlier_scores
    from distforest.io.model_files import load_model

    X, y = _load(Path(work))
    if family == "random-forest":
        model = load_model(Path(work) / "rf.skops")
        digest = ""
    else:
        model = _lightgbm(X, y, trees, seed)
        digest = _model_hash(model)
    t0 = time.perf_counter()
    forest = ProximityForest.from_model(model, X, y)
    t1 = time.perf_counter()
    neighbours = forest.proximity_neighbors(K)
    t2 = time.perf_counter()
    scores = outlier_scores(forest)
    t3 = time.perf_counter()
    emit({"route_s": t1 - t0, "neighbours_s": t2 - t1, "outliers_s": t3 - t2,
          "answer_s": t3 - t0, "model_hash": digest,
          "neighbours_shape": list(neighbours["index"].shape),
          "scores": int(scores.shape[0])})  # fmt: skip


def child_forestgeom(work: str, family: str, trees: int, seed: int) -> None:
    """forestgeom: the full sparse proximity matrix of the same model, in memory."""
    from forestgeom import Proximity
    from forestgeom import __version__ as version

    X, y = _load(Path(work))
    if family == "random-forest":
        import skops.io as sio

        path = Path(work) / "rf.skops"
        model = sio.load(path, trusted=sio.get_untrusted_types(file=path))
        digest = ""
    else:
        model = _lightgbm(X, y, trees, seed)
        digest = _model_hash(model)
    t0 = time.perf_counter()
    matrix = Proximity(model).fit(X, y).transform(X)
    t1 = time.perf_counter()
    emit({"answer_s": t1 - t0, "model_hash": digest, "nnz": int(matrix.nnz),
          "forestgeom_version": version})  # fmt: skip


def prepare(work: Path, rows: int, trees: int, seed: int) -> None:
    import numpy as np
    import skops.io as sio
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    work.mkdir(parents=True, exist_ok=True)
    X, y = make_classification(rows, 20, n_informative=10, random_state=seed)
    np.savez(work / "data.npz", X=X, y=y)
    model = RandomForestClassifier(n_estimators=trees, n_jobs=2, random_state=seed).fit(X, y)
    sio.dump(model, work / "rf.skops")


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
    p.add_argument("--child", nargs=2, metavar=("SIDE", "FAMILY"), help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        side, family = args.child
        run = child_distforest if side == "distforest" else child_forestgeom
        run(args.workdir, family, args.trees, args.seed)
        return
    work = Path(args.workdir)
    prepare(work, args.rows, args.trees, args.seed)
    peer = peer_python(args)
    me = str(Path(__file__).resolve())
    rows = []
    for family in args.families.split(","):
        measured = {}
        for side, python in (("forestgeom", peer), ("distforest", sys.executable)):
            cmd = [python, me, "--rows", str(args.rows), "--trees", str(args.trees),
                   "--seed", str(args.seed), "--workdir", str(work),
                   "--child", side, family]  # fmt: skip
            measured[side] = run_measured(cmd, work, f"{side}-{family}")
        fg, df = measured["forestgeom"], measured["distforest"]
        fg_child, df_child = fg.get("child") or {}, df.get("child") or {}
        rows.append({
            "model": family, "rows": args.rows, "trees": args.trees,
            "forestgeom full matrix (s)": round(fg_child.get("answer_s", float("nan")), 1),
            "distforest route + top-50 + outliers (s)": round(df_child.get("answer_s",
                                                                            float("nan")), 1),
            "ratio": round(df_child.get("answer_s", float("nan"))
                           / fg_child.get("answer_s", float("nan")), 3),
            "forestgeom peak RSS (GB)": round(fg["peak_rss_tree_bytes"] / 1e9, 2),
            "distforest peak RSS tree (GB)": round(df["peak_rss_tree_bytes"] / 1e9, 2),
            "same model": fg_child.get("model_hash") == df_child.get("model_hash"),
            "distforest phases (s)": json.dumps({k: round(v, 1) for k, v in df_child.items()
                                                 if k.endswith("_s")}),
        })  # fmt: skip
        print(rows[-1], flush=True)
    write_result("outside", rows, title="Forests fitted elsewhere: distforest vs forestgeom",
                 notes=__doc__.split("\n\n")[1])  # fmt: skip


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
