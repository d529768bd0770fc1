"""The README's SimForest picture: MDS of the SimForest proximity of DNA sequences.

The forest sees only edit (Levenshtein) distances between the DNA set's
60-letter sequences, computed as its trees ask for them; its proximity of the
training sequences gives an MDS picture coloured by class.  Writes
``docs/simforest_dna_mds.png`` and ``benchmarks/results/simforest_picture.{json,md}``
(held-out accuracy, evaluations asked, date, machine, commit).  Run by hand on
a committed tree::

    python -m benchmarks simforest_picture [--train 1000 --test 400 --trees 100 --picture PNG]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import distforest
from distforest import SimilarityForestClassifier
from distforest.apps.mds import mds
from distforest.apps.plots import plot_embedding

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _measure import parser as make_parser  # noqa: E402
from _measure import write_result  # noqa: E402
from bench_simforest import dna_sequences, edit_block  # noqa: E402

N_TRAIN, N_TEST = 1000, 400
PARAMS = {"n_estimators": 100, "kind": "distance", "random_state": 0}


def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--train", type=int, default=N_TRAIN)
    parser.add_argument("--test", type=int, default=N_TEST)
    parser.add_argument("--trees", type=int, default=PARAMS["n_estimators"])
    parser.add_argument("--picture", type=Path, default=ROOT / "docs" / "simforest_dna_mds.png")
    args = parser.parse_args(argv)
    n_train, n_test, params = args.train, args.test, {**PARAMS, "n_estimators": args.trees}
    codes, y = dna_sequences()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))[: n_train + n_test]
    train, test = idx[:n_train], idx[n_train:]
    asked = [0]

    def edit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        asked[0] += len(a) * len(b)
        return edit_block(a, b)

    with distforest.execution("synchronous"):
        forest = SimilarityForestClassifier(**params)
        forest.fit(codes[train], y[train], similarity=edit)
        fit_asked = asked[0]
        accuracy = float((forest.predict(codes[test], similarity=edit) == y[test]).mean())
        coords, _ = mds(forest, 2)
    names = ["EI", "IE", "N"]
    picture = args.picture
    plot_embedding(coords, picture, labels=forest.y_, class_names=names,
                   title="DNA sequences: SimForest proximity MDS (edit distance only)")  # fmt: skip
    rows = [{"held-out accuracy": round(accuracy, 3),
             "distances asked while fitting": f"{fit_asked:,}",
             "per tree": f"{fit_asked // params['n_estimators']:,}",
             "dense training matrix": f"{n_train * n_train:,}"}]  # fmt: skip
    notes = "\n".join([
        f"- Data: {n_train} training and {n_test} test sequences of the DNA set (60 letters "
        "decoded from its 180 binary columns), chosen at random with seed 0; classes EI, IE, N",
        f"- SimForest: {params}, edit distance computed on the fly (no features, no matrix)",
        "- Accuracy and counts do not depend on load; no times are reported.",
        "",
        f"Picture: `docs/{picture.name}`.",
    ])  # fmt: skip
    title = "README picture: MDS of the SimForest proximity of DNA sequences"
    _, md = write_result("simforest_picture", rows, title=title, notes=notes)
    print(md.read_text())


if __name__ == "__main__":
    main()
