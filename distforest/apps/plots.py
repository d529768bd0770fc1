"""Pictures of pairwise matrices, drawn without loading an n x n matrix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from distforest import location


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
    return _save(fig, path)


def _save(fig: Any, path: str | Path) -> Any:
    """Save ``fig`` as ``path``: a local file (folders made), or one object at a URL."""
    if location.is_remote(path):
        import io

        buffer = io.BytesIO()
        fig.savefig(buffer, format=Path(str(path)).suffix.lstrip(".") or "png")
        location.write_bytes(path, buffer.getvalue())
        return path
    out = Path(location.local(path))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def plot_embedding(
    coordinates: np.ndarray,
    path: str | Path,
    *,
    labels: np.ndarray | None = None,
    class_names: Sequence[str] = (),
    marked: np.ndarray | None = None,
    title: str = "",
    max_points: int = 50_000,
) -> Path:
    """Scatter plot of 2-D coordinates coloured by class, marked rows circled.

    Parameters
    ----------
    coordinates : ndarray, shape (n, >= 2)
    path : str or Path
        PNG file to write.
    labels : ndarray of int, optional
        Class code of each row.
    class_names : sequence of str
    marked : ndarray of bool, optional
        Rows to circle in red (the flagged outliers), only those.
    title : str
    max_points : int
        Draw an evenly spaced subset of at most this many points.

    Returns
    -------
    Path
    """
    n = coordinates.shape[0]
    keep = np.arange(n) if n <= max_points else np.linspace(0, n - 1, max_points).astype(int)
    xy = coordinates[keep, :2]
    fig = Figure(figsize=(6.4, 5.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    size = max(2.0, 30.0 * min(1.0, 1000 / len(keep)))
    if labels is None:
        ax.scatter(xy[:, 0], xy[:, 1], s=size, alpha=0.7)
    else:
        codes = np.asarray(labels)[keep]
        for code in np.unique(codes):
            name = class_names[code] if code < len(class_names) else str(code)
            sel = codes == code
            ax.scatter(xy[sel, 0], xy[sel, 1], s=size, alpha=0.7, label=name)
        ax.legend(loc="best", fontsize="small", markerscale=1.5)
    if marked is not None and marked[keep].any():
        sel = marked[keep]
        ax.scatter(xy[sel, 0], xy[sel, 1], s=size * 4, facecolors="none", edgecolors="red",
                   linewidths=1.0, label="outlier")  # fmt: skip
        ax.legend(loc="best", fontsize="small")
    ax.set_xlabel("dimension 1")
    ax.set_ylabel("dimension 2")
    shown = f" ({len(keep)} of {n} rows)" if len(keep) < n else ""
    ax.set_title((title or "MDS") + shown)
    fig.tight_layout()
    return _save(fig, path)


def plot_scores(
    scores: np.ndarray,
    path: str | Path,
    *,
    labels: np.ndarray | None = None,
    class_names: Sequence[str] = (),
    threshold: float | np.ndarray | None = None,
    title: str = "",
) -> Path:
    """Per-row scores as vertical lines grouped by class (like R's ``plot.outlier``).

    Parameters
    ----------
    scores : ndarray, shape (n,)
    path : str or Path
    labels : ndarray of int, optional
    class_names : sequence of str
    threshold : float or ndarray, optional
        Draw a horizontal line at this score, or one a class code over that
        class's rows (the outlier flag's thresholds).
    title : str

    Returns
    -------
    Path
    """
    n = scores.shape[0]
    rows, drawn = ordered_sample(labels, n, max_rows=20_000)
    fig = Figure(figsize=(7.2, 4.0), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    if drawn is None:
        ax.vlines(x, 0, scores[rows], linewidth=0.6)
    else:
        for code in np.unique(drawn):
            sel = drawn == code
            name = class_names[code] if code < len(class_names) else str(code)
            ax.vlines(
                x[sel], 0, scores[rows][sel], linewidth=0.6, label=name, color=f"C{code % 10}"
            )
        ax.legend(loc="best", fontsize="small")
    if threshold is not None and np.ndim(threshold) == 0:
        ax.axhline(float(threshold), color="red", linestyle="--", linewidth=0.8)
    elif threshold is not None:
        codes = np.zeros(len(rows), dtype=np.int64) if drawn is None else drawn
        for code in np.unique(codes):
            where = x[codes == code]
            ax.hlines(np.asarray(threshold)[code], where[0] - 0.5, where[-1] + 0.5, color="red",
                      linestyle="--", linewidth=0.8)  # fmt: skip
    ax.set_xlabel("rows (grouped by class)" if drawn is not None else "row")
    ax.set_ylabel("score")
    ax.set_title(title or "outlier scores")
    fig.tight_layout()
    return _save(fig, path)


def plot_importances(
    importances: np.ndarray,
    names: Sequence[str],
    path: str | Path,
    *,
    title: str = "",
    max_features: int = 30,
) -> Path:
    """Horizontal bars of feature importances, largest on top (at most ``max_features``).

    Parameters
    ----------
    importances : ndarray, shape (n_features,)
    names : sequence of str
        One name per feature.
    path : str or Path
        PNG file to write.
    title : str
    max_features : int

    Returns
    -------
    Path
    """
    order = np.argsort(-np.asarray(importances), kind="stable")[:max_features][::-1]
    fig = Figure(figsize=(6.4, 0.9 + 0.28 * len(order)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.barh(np.arange(len(order)), np.asarray(importances)[order], color="C0")
    ax.set_yticks(np.arange(len(order)), [str(names[k]) for k in order])
    ax.set_xlabel("importance (share of the total objective decrease)")
    shown = f" (top {len(order)} of {len(names)})" if len(order) < len(names) else ""
    ax.set_title((title or "feature importances") + shown)
    fig.tight_layout()
    return _save(fig, path)
