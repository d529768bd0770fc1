"""SimForest predictions: the new objects read as the model needs them, the CSV written.

Used by ``distforest simforest predict``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.jobs.outputs import write_csv


def read_predict_input(model: str, data: str | None, matrix: str | None,
                       na_values: tuple[str, ...]) -> tuple[Any, Any, int]:  # fmt: skip
    """The saved model, its new objects (scaled features, or a similarity matrix) and
    their number; the input that does not match how the model was fitted is refused."""
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.io import load_table, read_frame
    from distforest.io.matrices import load_matrix
    from distforest.jobs.simforest import scale
    from distforest.store.run_store import RunStore

    forest = SimilarityForestClassifier.load(model)
    attrs = RunStore.open(model).attrs
    fitted_on_table = attrs.get("measure") not in ("precomputed", "function")
    if fitted_on_table:
        if data is None or matrix is not None:
            raise ParameterError(
                f"model {model!r} was fitted on a table: give the new rows as DATA "
                "(not --similarity)"
            )
        names = attrs.get("feature_names") or []
        frame = read_frame(data, na_values=na_values)
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise InputError(
                f"{data!r} lacks the model's feature column(s) {missing}; it needs "
                f"{', '.join(names)}"
            )
        table = load_table(frame[names], min_rows=1)
        source: Any = scale(table.X.astype(np.float64), attrs.get("scaling"))
        n = source.shape[0]
    else:
        if matrix is None or data is not None:
            raise ParameterError(
                f"model {model!r} was fitted on a similarity matrix: give --similarity Q.npy "
                "(test objects x training objects)"
            )
        source = load_matrix(matrix, f"--similarity {matrix!r}")
        n = source.shape[0]
    return forest, source, n


def predict_to_csv(forest: Any, source: Any, out: str) -> str:
    """Predict on the current placement; write ``prediction, proba_<label>...`` to ``out``."""
    import pandas as pd

    proba = forest.predict_proba(source)
    frame = pd.DataFrame({"prediction": forest.classes_[np.argmax(proba, axis=1)]})
    for k, label in enumerate(forest.classes_):
        frame[f"proba_{label}"] = proba[:, k]
    return write_csv(frame, out)
