"""The README's SimForest picture: MDS of the SimForest proximity of DNA sequences.

The forest sees only edit (Levenshtein) distances between the DNA set's
60-letter sequences, computed as its trees ask for them; its proximity of the
training sequences gives an MDS picture coloured by class.  Writes
``docs/simforest_dna_mds.png`` and ``benchmarks/results/simforest_picture.md``
(held-out accuracy, evaluations asked, date, machine, commit).  Run by hand on
a committed tree::

    .venv/bin/python benchmarks/simforest_picture.py
"""

from __future__ import annotations

import datetime as _dt
import subprocess
import sys
from pathlib import Path

import numpy as np

import distforest
from distforest import SimilarityForestClassifier
from distforest.apps.mds import mds
from distforest.apps.plots import plot_embedding

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _measure import machine_info  # noqa: E402
from bench_simforest import dna_sequences, edit_block  # noqa: E402

N_TRAIN, N_TEST = 1000, 400
PARAMS = {"n_estimators": 100, "kind": "distance", "random_state": 0}


def main() -> None:
    codes, y = dna_sequences()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))[: N_TRAIN + N_TEST]
    train, test = idx[:N_TRAIN], idx[N_TRAIN:]
    asked = [0]

    def edit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        asked[0] += len(a) * len(b)
        return edit_block(a, b)

    with distforest.execution("synchronous"):
        forest = SimilarityForestClassifier(**PARAMS)
        forest.fit(codes[train], y[train], similarity=edit)
        fit_asked = asked[0]
        accuracy = float((forest.predict(codes[test], similarity=edit) == y[test]).mean())
        coords, _ = mds(forest, 2)
    names = ["EI", "IE", "N"]
    picture = ROOT / "docs" / "simforest_dna_mds.png"
    plot_embedding(coords, picture, labels=forest.y_, class_names=names,
                   title="DNA sequences: SimForest proximity MDS (edit distance only)")  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "distforest"],
                           capture_output=True, text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    machine = machine_info()
    lines = [
        "# README picture: MDS of the SimForest proximity of DNA sequences",
        "",
        f"- Date: {_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')}",
        f"- Machine: {machine['cores']} cores, {machine['mem_total_bytes'] / 2**30:.1f} GiB "
        "(accuracy and counts do not depend on load; no times are reported)",
        "- Command: `.venv/bin/python benchmarks/simforest_picture.py`",
        f"- Commit: {commit}{' (uncommitted changes in distforest/)' if dirty else ''}",
        f"- Data: {N_TRAIN} training and {N_TEST} test sequences of the DNA set (60 letters "
        "decoded from its 180 binary columns), chosen at random with seed 0; classes EI, IE, N",
        f"- SimForest: {PARAMS}, edit distance computed on the fly (no features, no matrix)",
        "",
        "| held-out accuracy | distances asked while fitting | per tree | dense training matrix |",
        "|---:|---:|---:|---:|",
        f"| {accuracy:.3f} | {fit_asked:,} | {fit_asked // PARAMS['n_estimators']:,} | "
        f"{N_TRAIN * N_TRAIN:,} |",
        "",
        f"Picture: `docs/{picture.name}`.",
    ]
    out = ROOT / "benchmarks" / "results" / "simforest_picture.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
