"""Peak RSS of a driver that fits a forest on a Parquet folder (run as a subprocess).

``python driver_memory.py FOLDER STORE {partitions,memory}`` prints one JSON
line: the driver's peak resident memory (``resource.getrusage``, this
process only: the LocalCluster's workers are other processes) and the
checksum of the forest's out-of-bag class probabilities (RF-GAP ``P @ onehot``, the
product behind mislabels and imputation).  ``partitions`` ingests the folder into STORE
and fits from it; ``memory`` is the in-memory path (pandas reads the
folder, load_table encodes it here).
"""

from __future__ import annotations

import json
import resource
import sys


def main(folder: str, store: str, how: str) -> None:
    import numpy as np
    import pandas as pd
    from distributed import Client, LocalCluster

    from distforest import ProximityForest, execution
    from distforest.store.inputs import ingest

    params = {"n_estimators": 4, "max_depth": 4, "max_samples": 0.02, "random_state": 0}
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,  # fmt: skip
        Client(cluster),
        execution(client=None),
    ):
        if how == "partitions":
            data = ingest(folder, store, target="label")
            forest = ProximityForest(**params).fit(data)
        else:
            df = pd.read_parquet(folder)
            forest = ProximityForest(**params).fit(df.drop(columns="label"), df["label"])
        codes = forest.y_
        onehot = np.zeros((codes.size, len(forest.classes_)))
        onehot[np.arange(codes.size), codes] = 1.0
        proba = forest.product(onehot, "rfgap")
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"peak_mb": peak_kb / 1024, "checksum": float(proba[:, 0] @ np.arange(codes.size))}
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
