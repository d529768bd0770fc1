"""Run the same CLI jobs with an older commit and with this tree; compare outputs byte for byte.

Usage (from the repository root, on a committed tree)::

    .venv/bin/python benchmarks/bit_identity.py 0f849da

Checks out the older commit in a temporary git worktree, runs each job with
both trees (same venv, ``PYTHONPATH`` selecting the tree), compares every
stored array (``done/`` records aside) or output file, and writes
``benchmarks/results/bit_identity.md``.  Arrays are compared as readers see
them: integer counts with a CF ``scale_factor`` (the proximity since
schema_version 2) are decoded first, so a store of either layout compares by
its values.
"""

import datetime as _dt
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
PY = sys.executable
BC = str(ROOT / "distforest" / "data" / "breast_cancer.csv")
ION = str(ROOT / "distforest" / "data" / "ionosphere.csv")
OLD_REV = sys.argv[1] if len(sys.argv) > 1 else "0f849da"


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


base = Path(tempfile.mkdtemp(prefix="bitid-"))
OLD = str(base / "old")
subprocess.run(["git", "worktree", "add", "-q", "--detach", OLD, OLD_REV], cwd=ROOT, check=True)
BC_ARGS = f"{BC} --target Class --drop Id"
#: Each job's command line; {o} is its output directory.
JOBS = {
    "proximity": f"proximity {BC_ARGS} --trees 50 --tile-size 128 --out {{o}}/p.zarr",
    "proximity_rfgap": f"proximity {BC_ARGS} --trees 50 --method rfgap --tile-size 128 "
    "--out {o}/p.zarr",
    "xforest": f"xforest {ION} --drop Class --trees 100 --tile-size 128 --out {{o}}/p.zarr",
    "similarity": f"similarity {ION} --drop Class --metric cosine --tile-size 128 "
    "--out {o}/p.zarr",
    "impute": f"impute {BC_ARGS} --trees 30 --iterations 2 --out {{o}}/imp.csv",
    "outliers": f"outliers {BC_ARGS} --trees 30 --out {{o}}/out.csv",
}
jobs = {name: (lambda o, cmd=cmd: cmd.format(o=o).split()) for name, cmd in JOBS.items()}
result = {}
for name, args in jobs.items():
    outs = {}
    for tree in (OLD, str(ROOT)):
        o = base / name / ("old" if tree == OLD else "new")
        o.mkdir(parents=True)
        run(tree, o, args(o))
        outs[tree] = o
    a, b = outs[OLD], outs[str(ROOT)]
    if (a / "p.zarr").exists():
        A, B = arrays(a / "p.zarr"), arrays(b / "p.zarr")
        same = {k: A[k].tobytes() == B[k].tobytes() for k in A if k in B}
        result[name] = {
            "identical": all(same.values()),
            "arrays": len(same),
            "differ": [k for k, v in same.items() if not v],
            "only_old": sorted(set(A) - set(B)),
            "only_new": sorted(set(B) - set(A)),
        }
    else:
        f = next(p.name for p in a.iterdir() if p.suffix == ".csv")
        result[name] = {"identical": (a / f).read_bytes() == (b / f).read_bytes()}
subprocess.run(["git", "worktree", "remove", "--force", OLD], cwd=ROOT, check=True)
head = subprocess.run(
    ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
).stdout.strip()
lines = [
    f"# Bit identity: {OLD_REV} vs {head}",
    "",
    f"- Date: {_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')}",
    f"- Command: `.venv/bin/python benchmarks/bit_identity.py {OLD_REV}`",
    "",
    "| job | identical | arrays compared | differ | only in old | only in new |",
    "|---|---|---:|---|---|---|",
]
for name, r in result.items():
    lines.append(
        f"| {name} | {r['identical']} | {r.get('arrays', 'file')} | "
        f"{r.get('differ', '')} | {r.get('only_old', '')} | {r.get('only_new', '')} |"
    )
(ROOT / "benchmarks" / "results" / "bit_identity.md").write_text("\n".join(lines) + "\n")
print(json.dumps(result, indent=1))
