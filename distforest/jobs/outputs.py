"""Result files of the commands: checked before work, written atomically.

The applications and pictures (pandas, matplotlib) are imported by the
functions that write them: checking an output path must not load them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from distforest import location
from distforest.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd

#: Outlier scores above this are flagged (Breiman & Cutler's rule of thumb).
OUTLIER_THRESHOLD = 10.0


def check_new_file(path: str | None, overwrite: bool) -> None:
    """Before any work: refuse to replace an existing file, or to write where nobody can.

    Raises :class:`StoreError` (exit 6) for an existing file without
    ``overwrite``, a directory in the file's place, or a folder that cannot be
    created or written.
    """
    if not path:
        return
    if location.is_remote(path):
        if location.exists(path) and not overwrite:
            raise StoreError(
                f"output {location.display(path)!r} already exists; pass --overwrite or choose "
                "another path"
            )
        return
    out = Path(location.local(path))
    if out.is_dir():
        raise StoreError(f"output {path!r} is a directory; give a file name")
    if out.exists() and not overwrite:
        raise StoreError(f"output {path!r} already exists; pass --overwrite or choose another path")
    folder = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(
            f"cannot write {path!r}: {str(folder)!r} is not a writable directory; choose "
            "another output path"
        )


@contextlib.contextmanager
def _replaced(path: str | Path) -> Iterator[IO[str]]:
    """A new temporary file beside ``path``, renamed onto it when the block succeeds.

    The temporary gets a fresh random name and is opened ``O_CREAT | O_EXCL |
    O_NOFOLLOW`` (mode 0666 less the umask, as any new file): a file or symbolic
    link planted beside the output is never opened, truncated or followed.
    The rename replaces ``path`` itself (a link there is replaced, not followed).
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    name = out.with_name(f".{out.name}.{secrets.token_hex(6)}.partial")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(name, flags, 0o666)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            yield fh
        os.replace(name, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


def write_csv(frame: pd.DataFrame, path: str) -> str:
    """Write via a new temporary file and rename, so no half-written CSV is left
    (on object storage: one upload, as every object is written whole)."""
    if location.is_remote(path):
        location.write_bytes(path, frame.to_csv(index=False).encode())
        return path
    out = Path(location.local(path))
    with _replaced(out) as fh:
        frame.to_csv(fh, index=False)
    return location.resolved(out)


def write_text(path: str | Path, text: str) -> str:
    """Write a text file via a new temporary file and rename (an object in one upload)."""
    if location.is_remote(path):
        location.write_bytes(path, text.encode())
        return str(path)
    out = Path(location.local(path))
    with _replaced(out) as fh:
        fh.write(text)
    return str(out.resolve())


def class_labels(forest: Any) -> tuple[np.ndarray | None, list[str]]:
    """Class codes and names of a classification forest, else (None, [])."""
    if forest.task_ == "classification":
        return forest.y_, [str(c) for c in forest.classes_]
    return None, []


def _frame(forest: Any) -> pd.DataFrame:
    labels, names = class_labels(forest)
    import pandas as pd

    ids = getattr(forest, "sample_ids_", None)
    if ids is None:
        frame = pd.DataFrame({"row": np.arange(forest.n_samples_)})
    else:  # the rows' IDs first, under the ID column's name
        frame = pd.DataFrame({forest.id_name_: np.asarray(ids)})  # (a store's array: read now)
    if labels is not None:
        frame["label"] = np.asarray(names, dtype=object)[labels]
    return frame


def write_outliers(forest: Any, out: str, plot: str | None, title: str) -> dict[str, str]:
    """Outlier scores to CSV (and a picture); returns what was written."""
    from distforest.apps.outliers import outlier_scores, stored_path, write_scores_csv

    store = None if plot or location.is_remote(out) else stored_path(forest)
    if store is not None:  # scored and written by tasks, chunk by chunk
        return {"outlier scores": write_scores_csv(forest, store, out)}
    scores = outlier_scores(forest)
    frame = _frame(forest)
    frame["outlier"] = scores
    written = {"outlier scores": write_csv(frame, out)}
    if plot:
        from distforest.apps.plots import plot_scores  # matplotlib: only for a picture

        labels, names = class_labels(forest)
        picture = plot_scores(scores, plot, labels=labels, class_names=names,
                              threshold=OUTLIER_THRESHOLD, title=title)  # fmt: skip
        written["outlier picture"] = location.resolved(picture)
    return written


def write_mislabels(forest: Any, out: str, top: int = 0) -> tuple[dict[str, str], Any]:
    """The ranked suspects to CSV; returns what was written and the ranking's
    :class:`~distforest.apps.mislabels.RankingSummary` (with its ``top`` first rows)."""
    from distforest.apps.mislabels import RankingSummary, mislabel_scores, require_classification
    from distforest.apps.outliers import stored_path

    require_classification(forest)
    store = None if location.is_remote(out) else stored_path(forest)
    if store is not None:  # ranked and written by tasks, chunk by chunk
        from distforest.apps.mislabels import write_ranking_csv

        written, summary = write_ranking_csv(forest, store, out, top)
        return {"suspects": written}, summary

    ranking = mislabel_scores(forest)
    return {"suspects": write_csv(ranking, out)}, RankingSummary.of(ranking, top)


def write_mds(
    forest: Any,
    out: str,
    plot: str | None,
    *,
    components: int = 2,
    dissimilarity: str = "sqrt",
    title: str = "",
) -> dict[str, str]:
    """MDS coordinates to CSV (and a scatter with outliers circled)."""
    from distforest.apps.mds import mds, write_mds_csv
    from distforest.apps.outliers import outlier_scores, stored_path

    store = None if plot or location.is_remote(out) else stored_path(forest)
    if store is not None:  # solved and written by tasks, chunk by chunk
        csv = write_mds_csv(forest, store, out, components, dissimilarity)
        return {"MDS coordinates": csv}
    coordinates, _ = mds(forest, components, dissimilarity=dissimilarity)
    frame = _frame(forest)
    for k in range(components):
        frame[f"dim{k + 1}"] = coordinates[:, k]
    written = {"MDS coordinates": write_csv(frame, out)}
    if plot and components >= 2:
        from distforest.apps.plots import plot_embedding  # matplotlib: only for a picture

        labels, names = class_labels(forest)
        marked = outlier_scores(forest) > OUTLIER_THRESHOLD
        picture = plot_embedding(coordinates, plot, labels=labels, class_names=names,
                                 marked=marked, title=title)  # fmt: skip
        written["MDS picture"] = location.resolved(picture)
    return written
