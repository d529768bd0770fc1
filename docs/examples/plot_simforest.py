"""
SimForest from similarities only
================================

SimForest classifies objects it knows only through their similarities: each
split takes two objects of different classes and orders the others by which of
the two they are more similar to.  Here the objects are ionosphere rows seen
only through an RBF kernel, with 10 % of the similarities missing (NaN): the
forest answers from the class distribution where a needed entry is missing.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.metrics.pairwise import rbf_kernel

from distforest import SimilarityForestClassifier
from distforest.examples import bundled_path

table = pd.read_csv(bundled_path("distforest/data/ionosphere.csv"))
features = table.drop(columns=["Class", "V2"]).to_numpy()  # V2 is constant
Z = (features - features.mean(axis=0)) / features.std(axis=0)
y = table["Class"].to_numpy()
rng = np.random.default_rng(0)
test = rng.random(len(y)) < 0.3

S = rbf_kernel(Z[~test], gamma=0.05)
Q = rbf_kernel(Z[test], Z[~test], gamma=0.05)  # test x train
missing = np.triu(rng.random(S.shape) < 0.1, k=1)
S[missing | missing.T] = np.nan  # a pair is missing both ways
print(f"missing similarities: {np.isnan(S).mean():.1%}")

forest = SimilarityForestClassifier(n_estimators=100, random_state=0).fit(S, y[~test])
print(f"held-out accuracy: {np.mean(forest.predict(Q) == y[test]):.3f}")

# %%
# The forest's own proximities (the share of trees where two training objects
# share a leaf), rows ordered by class:
P = forest.proximity().values
order = np.argsort(y[~test], kind="stable")
fig, ax = plt.subplots(figsize=(5.5, 5), layout="constrained")
image = ax.imshow(P[np.ix_(order, order)], cmap="viridis", vmin=0, vmax=1)
ax.set_title("SimForest proximity, rows ordered by class")
fig.colorbar(image, ax=ax)
plt.show()
