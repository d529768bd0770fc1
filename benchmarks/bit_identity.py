"""Run the same CLI jobs with an older commit and with this tree; compare outputs byte for byte.

Usage (from the repository root, on a committed tree)::

    python -m benchmarks bit_identity 0f849da

Checks out the older commit in a temporary git worktree, runs each job with
both trees (same venv, ``PYTHONPATH`` selecting the tree), compares every
stored array (``done/`` records aside) or output file, and writes
``benchmarks/results/bit_identity.{json,md}``.  Arrays are compared as readers see
them: integer counts with a CF ``scale_factor`` (the proximity since
schema_version 2) are decoded first, so a store of either layout compares by
its values.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import zarr

from distforest.io.matrices import decode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _measure import commit, write_result  # noqa: E402
from _measure import parser as make_parser  # noqa: E402

PY = sys.executable
BC = str(ROOT / "distforest" / "data" / "breast_cancer.csv")
ION = str(ROOT / "distforest" / "data" / "ionosphere.csv")


def run(tree, out, args):
    env = {**os.environ, "PYTHONPATH": tree}
    r = subprocess.run(
        [PY, "-m", "distforest", "-q", *args], env=env, capture_output=True, text=True, cwd=tree
    )
    assert r.returncode == 0, (tree, args, r.stderr[-2000:])


def arrays(store):
    g = zarr.open_group(str(store), mode="r", use_consolidated=False)
    out = {}

    def walk(g, p):
        for n, a in g.arrays():
            out[p + n] = decode(np.asarray(a[...]), dict(a.attrs))
        for n, s in g.groups():
            if n != "done":
                walk(s, f"{p}{n}/")

    walk(g, "")
    return out


BC_ARGS = f"{BC} --target Class --drop Id"
#: The breast-cancer features without the column with missing values (complete rows).
BC_X = f"{BC} --drop Id --drop Class --drop Bare.nuclei"
#: Each job's command lines, run in order; {o} is its output directory.  Every Zarr store
#: and CSV file a job writes is compared (run reports hold times: not compared).
JOBS = {
    "proximity": [f"proximity {BC_ARGS} --trees 50 --tile-size 128 --out {{o}}/p.zarr"],
    "proximity_rfgap": [
        f"proximity {BC_ARGS} --trees 50 --method rfgap --tile-size 128 --out {{o}}/p.zarr"
    ],
    "xforest": [f"xforest {ION} --drop Class --trees 100 --tile-size 128 --out {{o}}/p.zarr"],
    "similarity": [
        f"similarity {ION} --drop Class --metric cosine --tile-size 128 --out {{o}}/p.zarr"
    ],
    "impute": [f"impute {BC_ARGS} --trees 30 --iterations 2 --out {{o}}/imp.csv"],
    "outliers": [f"outliers {BC_ARGS} --trees 30 --out {{o}}/out.csv"],
    "mislabels": [f"mislabels {BC_ARGS} --trees 30 --out {{o}}/mis.csv"],
    "mds": [f"mds {BC_ARGS} --trees 30 --out {{o}}/mds.csv"],
    "cluster": [
        f"xforest {BC_X} --trees 50 --out {{o}}/x.zarr",
        "cluster {o}/x.zarr --method spectral --k 2 --out {o}/spectral.csv",
        "cluster {o}/x.zarr --method kernel-kmeans --k 2 --matrix-free --out {o}/kk.csv",
    ],
    "neighbors": [f"neighbors {BC_X} --k 5 --out {{o}}/nn.zarr"],
    "knn": [
        f"knn fit {BC_ARGS} --drop Bare.nuclei --metric rf-proximity --trees 20 "
        "--out {o}/knn.zarr",
        f"knn predict {{o}}/knn.zarr {BC} --out {{o}}/knn.csv",
    ],
    "simforest": [
        f"simforest fit {BC_ARGS} --drop Bare.nuclei --trees 20 --out {{o}}/sf.zarr",
        f"simforest predict {{o}}/sf.zarr {BC} --drop Id --out {{o}}/sf.csv",
        "simforest proximity {o}/sf.zarr --out {o}/sfp.zarr",
    ],
    "smerf": [
        f"smerf fit {BC_X} --trees 20 --distances {{o}}/D.npy --out {{o}}/m.zarr",
        f"smerf predict {{o}}/m.zarr {BC_X} --out {{o}}/md.zarr",
    ],
}


def distances(into):
    """SMERF's observed distances: Euclidean, of the breast-cancer features of ``BC_X``."""
    import pandas as pd

    X = pd.read_csv(BC).drop(columns=["Id", "Class", "Bare.nuclei"]).to_numpy(float)
    np.save(into / "D.npy", np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)))


def largest_difference(a, b):
    """Of two CSV files of the same shape: the largest absolute and relative difference of
    their numeric cells (None when the shapes or columns differ)."""
    import pandas as pd

    A, B = pd.read_csv(a), pd.read_csv(b)
    if A.shape != B.shape or list(A.columns) != list(B.columns):
        return None
    x = A.select_dtypes("number").to_numpy(float)
    y = B.select_dtypes("number").to_numpy(float)
    if x.shape != y.shape or not x.size:
        return None
    gap = np.abs(x - y)
    scale = np.maximum(np.abs(x), np.abs(y))
    relative = np.where(scale > 0, gap / np.where(scale > 0, scale, 1), 0.0)
    return float(np.nanmax(gap)), float(np.nanmax(relative))


def compare(a, b):
    """Every store's arrays and every CSV's bytes of two output directories."""
    same, old, new, gaps = {}, [], [], {}
    for path in sorted(a.iterdir()):
        if path.suffix == ".csv":
            same[path.name] = (b / path.name).exists() and (
                path.read_bytes() == (b / path.name).read_bytes()
            )
            if (b / path.name).exists() and not same[path.name]:
                gaps[path.name] = largest_difference(path, b / path.name)
        elif path.suffix == ".zarr":
            A, B = arrays(path), arrays(b / path.name)
            same.update({f"{path.name}/{k}": A[k].tobytes() == B[k].tobytes()
                         for k in A if k in B})  # fmt: skip
            old += [f"{path.name}/{k}" for k in sorted(set(A) - set(B))]
            new += [f"{path.name}/{k}" for k in sorted(set(B) - set(A))]
    return {
        "identical": all(same.values()) and not old and not new,
        "compared": len(same),
        "differ": [k for k, v in same.items() if not v],
        "only_old": old,
        "only_new": new,
        "largest_difference": gaps,
    }


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("old", nargs="?", default="0f849da", help="the older commit")
    old_rev = parser.parse_args(argv).old
    base = Path(tempfile.mkdtemp(prefix="bitid-"))
    old = str(base / "old")
    subprocess.run(["git", "worktree", "add", "-q", "--detach", old, old_rev], cwd=ROOT,
                   check=True)  # fmt: skip
    result = {}
    try:
        for name, commands in JOBS.items():
            outs = {}
            for tree in (old, str(ROOT)):
                o = base / name / ("old" if tree == old else "new")
                o.mkdir(parents=True)
                distances(o)
                for cmd in commands:
                    run(tree, o, cmd.format(o=o).split())
                outs[tree] = o
            result[name] = compare(outs[old], outs[str(ROOT)])
            print(name, result[name]["identical"], flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", old], cwd=ROOT, check=True)
    rows = [
        {
            "job": name,
            "identical": r["identical"],
            "arrays and files compared": r["compared"],
            "differ": r.get("differ", ""),
            "only in old": r.get("only_old", ""),
            "only in new": r.get("only_new", ""),
            "largest difference (absolute, relative)": "; ".join(
                f"{k}: {v[0]:.3g}, {v[1]:.3g}" if v else f"{k}: shapes differ"
                for k, v in r["largest_difference"].items()
            ),
        }
        for name, r in result.items()
    ]
    write_result("bit_identity", rows, title=f"Bit identity: {old_rev} vs {commit()}", data=result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
