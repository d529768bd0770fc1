"""
MDS of the proximities
======================

Classical multidimensional scaling of ``sqrt(1 - P)``, computed from
matrix-free products with the forest (no n x n matrix is formed), the picture
R's ``MDSplot`` draws.  On the bundled breast-cancer table the two classes
separate along the first coordinate.
"""

import matplotlib.pyplot as plt
import pandas as pd

from distforest import ProximityForest
from distforest.apps.mds import mds
from distforest.examples import bundled_path

table = pd.read_csv(bundled_path("distforest/data/breast_cancer.csv"))
X, y = table.drop(columns=["Id", "Class"]), table["Class"]
forest = ProximityForest(n_estimators=100, random_state=0).fit(X, y)

coords, eigenvalues = mds(forest, n_components=2)
print("eigenvalues:", eigenvalues.round(2))

# %%
fig, ax = plt.subplots(figsize=(5.5, 4.5), layout="constrained")
for label, colour in [("benign", "tab:blue"), ("malignant", "tab:red")]:
    rows = (y == label).to_numpy()
    ax.scatter(coords[rows, 0], coords[rows, 1], s=8, c=colour, label=label)
ax.set_xlabel("MDS 1")
ax.set_ylabel("MDS 2")
ax.legend()
plt.show()
