"""
Proximity heat map
==================

Breiman's proximity of two rows is the share of trees in which they fall in
the same leaf.  Fit a forest on the bundled Wisconsin breast-cancer table (699
rows, 16 missing values that the trees route) and draw the 699 x 699 matrix
with the rows ordered by class: two blocks of rows that the forest keeps
together, and the rows that sit between them.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from distforest import ProximityForest
from distforest.examples import bundled_path

table = pd.read_csv(bundled_path("distforest/data/breast_cancer.csv"))
X, y = table.drop(columns=["Id", "Class"]), table["Class"]

forest = ProximityForest(n_estimators=100, random_state=0).fit(X, y)
P = forest.proximity()  # in memory: a small matrix (no store given)
print(P.dims, P.shape, P.dtype)

# %%
# Rows ordered by class (benign, then malignant):
order = np.argsort(y.to_numpy(), kind="stable")
fig, ax = plt.subplots(figsize=(5.5, 5), layout="constrained")
image = ax.imshow(P.values[np.ix_(order, order)], cmap="viridis", vmin=0, vmax=1)
ax.set_title("RF proximity, rows ordered by class")
ax.set_xlabel("row")
ax.set_ylabel("row")
fig.colorbar(image, ax=ax, label="proximity")
plt.show()
