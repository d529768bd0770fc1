"""
X-Forest clusters
=================

X-Forest grows random-projection trees without labels; the beta-similarity of
two rows is the mean over trees of ``beta ** (edges between their leaves)``.
Kernel k-means on that matrix clusters the bundled ionosphere table (351 radar
returns, "good" or "bad"), scored against the labels it never saw.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from distforest import XForest
from distforest.apps import clustering
from distforest.examples import bundled_path

table = pd.read_csv(bundled_path("distforest/data/ionosphere.csv"))
X, truth = table.drop(columns=["Class"]).to_numpy(), table["Class"].to_numpy()

xf = XForest(n_estimators=200, n_directions=2, leaf_size=10, beta=0.9, random_state=0).fit(X)
S = xf.similarity()  # in memory (small); store="sim.zarr" writes it tile by tile
labels, objective = clustering.kernel_kmeans(S, k=2, n_init=5)
print(clustering.scores(truth, labels))

# %%
# The matrix with the rows ordered by cluster:
order = np.argsort(labels, kind="stable")
fig, ax = plt.subplots(figsize=(5.5, 5), layout="constrained")
image = ax.imshow(S.values[np.ix_(order, order)], cmap="magma")
ax.set_title("X-Forest beta-similarity, rows by cluster")
fig.colorbar(image, ax=ax)
plt.show()
