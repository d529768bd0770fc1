"""
Outlier scores
==============

R's ``outlier()``: for a row of class c, ``n / sum_j P[i, j]^2`` over the rows
j of its class, standardised per class by the median and MAD.  A row whose
proximities to its own class are all small scores high.  The sums of squares
come from the forest's leaves (exact integer sums), not from a stored matrix.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from distforest import ProximityForest
from distforest.apps.outliers import outlier_scores
from distforest.examples import bundled_path

table = pd.read_csv(bundled_path("distforest/data/breast_cancer.csv"))
X, y = table.drop(columns=["Id", "Class"]), table["Class"]
forest = ProximityForest(n_estimators=100, random_state=0).fit(X, y)

scores = outlier_scores(forest)
top = np.argsort(scores)[::-1][:5]
print(table.assign(outlier=scores).iloc[top][["Id", "Class", "outlier"]])

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.5), layout="constrained")
colours = np.where(y.to_numpy() == "benign", "tab:blue", "tab:red")
ax.vlines(np.arange(len(scores)), 0, scores, colors=colours, linewidth=0.8)
ax.set_xlabel("row (blue: benign, red: malignant)")
ax.set_ylabel("outlier score")
ax.set_yscale("symlog")  # many benign rows are identical: a small MAD, large scores
plt.show()
