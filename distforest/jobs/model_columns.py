"""A saved model's feature columns read from new rows (a table or one of its parts).

Shared by the predictions of k-NN and SimForest models, whole or by partitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from distforest.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["check_columns", "feature_matrix"]


def check_columns(data: str, columns: list[str], names: tuple[str, ...]) -> None:
    """Refuse DATA without all of the model's feature columns (naming them)."""
    missing = [n for n in names if n not in columns]
    if missing:
        raise InputError(
            f"{data}: the model needs column(s) {missing} that are not there; "
            f"available: {', '.join(columns[:20])}"
        )


def feature_matrix(
    frame: pd.DataFrame,
    data: str,
    attrs: dict[str, Any],
    names: tuple[str, ...],
    first_row: int = 0,
) -> np.ndarray:
    """The model's feature columns of ``frame`` as float64; labels coded as when fitted.

    ``data`` names the table (or its part file) in messages, and ``first_row`` is
    the number of the frame's first row in the whole table (rows counted from 0).
    """
    import pandas as pd

    fitted = attrs.get("categories", {})
    X = np.empty((len(frame), len(names)))
    for j, name in enumerate(names):
        col = frame[name]
        if name in fitted:
            code = {label: float(i) for i, label in enumerate(fitted[name])}
            labels = col.astype(str).where(col.notna())
            unseen = sorted(set(labels.dropna()) - set(code))
            if unseen:
                raise InputError(f"{data}: column {name!r} has label(s) {unseen[:5]} "
                                 "not seen when the model was fitted")  # fmt: skip
            X[:, j] = labels.map(code).astype(float).to_numpy()
            continue
        try:
            X[:, j] = pd.to_numeric(col).to_numpy(dtype=float)
        except (TypeError, ValueError):
            bad = np.flatnonzero(pd.to_numeric(col, errors="coerce").isna().to_numpy()
                                 & col.notna().to_numpy())  # fmt: skip
            at = int(bad[0]) if bad.size else 0
            raise InputError(
                f"{data}: column {name!r} must be numeric as when fitted, but row "
                f"{first_row + at} holds {col.iloc[at]!r}; fix or remove that value"
            ) from None
    return X
