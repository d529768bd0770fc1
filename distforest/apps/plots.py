"""Pictures of pairwise matrices, drawn without loading an n x n matrix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def ordered_sample(
    labels: np.ndarray | None, n: int, max_rows: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Rows to draw, grouped by label, at most ``max_rows`` evenly spaced ones.

    Returns
    -------
    rows : ndarray of int
        Row indices in drawing order.
    drawn_labels : ndarray or None
        The labels of those rows.
    """
    order = np.arange(n) if labels is None else np.argsort(labels, kind="stable")
    if n > max_rows:
        order = order[np.linspace(0, n - 1, max_rows).round().astype(np.int64)]
    return order, None if labels is None else np.asarray(labels)[order]


def plot_matrix(
    matrix: xr.DataArray,
    path: str | Path,
    *,
    labels: np.ndarray | None = None,
    class_names: Sequence[str] = (),
    title: str = "",
    max_rows: int = 2000,
) -> Path:
    """Save a heat map of a square pairwise matrix with rows ordered by label.

    Parameters
    ----------
    matrix : xarray.DataArray
        Square matrix (lazy and Zarr-backed, or in memory).
    path : str or Path
        PNG file to write.
    labels : ndarray of int, optional
        Class code of each row; rows are grouped by it and the groups are
        outlined.
    class_names : sequence of str
        Name of each class code, for the axis ticks.
    title : str
    max_rows : int
        Draw at most this many evenly spaced rows (and the same columns), so
        only a ``max_rows x max_rows`` block is ever read into memory.

    Returns
    -------
    Path
        The written file.
    """
    n = matrix.shape[0]
    rows, drawn = ordered_sample(labels, n, max_rows)
    dim_i, dim_j = matrix.dims
    block = np.asarray(matrix.isel({dim_i: rows, dim_j: rows}).values)
    fig = Figure(figsize=(6.4, 5.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(block, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    fig.colorbar(image, ax=ax, label=str(matrix.name or "value"))
    if drawn is not None:
        edges = np.flatnonzero(np.diff(drawn)) + 0.5
        for e in edges:
            ax.axhline(e, color="white", linewidth=0.8)
            ax.axvline(e, color="white", linewidth=0.8)
        bounds = np.concatenate([[-0.5], edges, [len(drawn) - 0.5]])
        centres = (bounds[:-1] + bounds[1:]) / 2
        codes = drawn[np.concatenate([[0], (edges + 0.5).astype(int)])]
        names = [class_names[c] if c < len(class_names) else str(c) for c in codes]
        ax.set_yticks(centres, names)
        ax.set_xticks(centres, names, rotation=30, ha="right")
    else:
        ax.set_xlabel("sample")
        ax.set_ylabel("sample")
    shown = f" ({len(rows)} of {n} rows)" if len(rows) < n else ""
    ax.set_title((title or "pairwise matrix") + shown)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out
