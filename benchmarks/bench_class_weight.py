"""Accuracy of class_weight='balanced' on imbalanced tables: distforest against scikit-learn.

The same setting (100 trees, bootstrap, sqrt features, ``class_weight``) on
three tables: two synthetic imbalanced sets (2 classes, 5 % minority; 3
classes, 80/15/5 %) and the bundled breast-cancer table (35 % malignant).
Each is split 70/30, stratified, with three seeds; the table gives the mean
test accuracy and balanced accuracy of each forest and their difference.

Note: scikit-learn 1.9 draws each tree's bootstrap in proportion to the
weights; distforest multiplies the bootstrap counts by them (scikit-learn's
rule before 1.9), so the two forests are not the same forest, only the same
setting.

    nice -n 10 python -m benchmarks class_weight
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.metrics import accuracy_score, balanced_accuracy_score
from sklearn.model_selection import train_test_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import ROOT, parser, write_result


def tables() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    two = make_classification(4000, 10, n_informative=5, weights=[0.95, 0.05], flip_y=0.01,
                              class_sep=0.8, random_state=0)  # fmt: skip
    three = make_classification(4000, 10, n_informative=6, n_classes=3, weights=[0.8, 0.15, 0.05],
                                flip_y=0.01, class_sep=0.8, random_state=1)  # fmt: skip
    bc = pd.read_csv(ROOT / "distforest" / "data" / "breast_cancer.csv")
    X_bc = bc.drop(columns=["Id", "Class"]).to_numpy(dtype=float)
    y_bc = (bc["Class"] == "malignant").to_numpy(dtype=int)
    return {"synthetic 2 classes (5 %)": two, "synthetic 3 classes (80/15/5 %)": three,
            "breast_cancer.csv (35 %)": (X_bc, y_bc)}  # fmt: skip


def main() -> None:
    from distforest import ProximityForest, execution

    args = parser(__doc__).parse_args()
    del args
    rows = []
    for name, (X, y) in tables().items():
        for cw in (None, "balanced"):
            scores: dict[str, list[float]] = {k: [] for k in ("df", "sk", "df_bal", "sk_bal")}
            for seed in range(3):
                Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.3, stratify=y,
                                                  random_state=seed)  # fmt: skip
                with execution("synchronous"):
                    ours = ProximityForest(100, task="classification", class_weight=cw,
                                           random_state=seed).fit(Xa, ya).predict(Xb)  # fmt: skip
                theirs = RandomForestClassifier(100, class_weight=cw, random_state=seed, n_jobs=1)
                theirs_pred = theirs.fit(np.nan_to_num(Xa), ya).predict(np.nan_to_num(Xb))
                scores["df"].append(accuracy_score(yb, ours))
                scores["sk"].append(accuracy_score(yb, theirs_pred))
                scores["df_bal"].append(balanced_accuracy_score(yb, ours))
                scores["sk_bal"].append(balanced_accuracy_score(yb, theirs_pred))
            m = {k: float(np.mean(v)) for k, v in scores.items()}
            rows.append({"table": name, "class_weight": str(cw), "rows": len(y),
                         "distforest accuracy": round(m["df"], 4),
                         "scikit-learn accuracy": round(m["sk"], 4),
                         "difference (points)": round(100 * (m["df"] - m["sk"]), 2),
                         "distforest balanced acc.": round(m["df_bal"], 4),
                         "scikit-learn balanced acc.": round(m["sk_bal"], 4)})  # fmt: skip
            print(rows[-1], flush=True)
    write_result("class_weight", rows, title="class_weight='balanced': distforest vs scikit-learn",
                 notes=__doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2])  # fmt: skip


if __name__ == "__main__":
    main()
