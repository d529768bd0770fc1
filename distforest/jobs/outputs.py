"""Result files of the commands: checked before work, written atomically.

The applications and pictures (pandas, matplotlib) are imported by the
functions that write them: checking an output path must not load them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from distforest import location
from distforest.errors import StoreError

if TYPE_CHECKING:
    import pandas as pd

#: The files every run writes beside its outputs (distforest.jobs.report).
REPORT_FILES = ("report.json", "report.md")


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
            raise location.existing_output(path)
        return
    out = Path(location.local(path))
    if out.is_dir():
        raise StoreError(f"output {path!r} is a directory; give a file name")
    if out.exists() and not overwrite:
        raise location.existing_output(path)
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


def record_path(out: str) -> str:
    """The store of a job whose outputs are files (``outliers``, ``cluster``, ...): its spec
    and finished stages, beside its CSV ``out``: ``DIR/NAME.run.zarr`` for ``DIR/NAME.csv``."""
    head, sep, name = str(out).rpartition("/")
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return f"{head}{sep}{stem}.run.zarr"


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
    """Outlier scores and flags to CSV (and a picture); returns what was written."""
    from distforest.apps.outliers import FLAG_COLUMN, outlier_flags, stored_path, write_scores_csv

    store = None if plot or location.is_remote(out) else stored_path(forest)
    if store is not None:  # scored and written by tasks, chunk by chunk
        return {"outlier scores": write_scores_csv(forest, store, out)}
    found = outlier_flags(forest)
    frame = _frame(forest)
    frame["outlier"] = found.scores
    frame[FLAG_COLUMN] = found.flags
    written = {"outlier scores": write_csv(frame, out)}
    if plot:
        from distforest.apps.plots import plot_scores  # matplotlib: only for a picture

        labels, names = class_labels(forest)
        picture = plot_scores(found.scores, plot, labels=labels, class_names=names,
                              threshold=found.thresholds, title=title)  # fmt: skip
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
    """MDS coordinates to CSV (and a scatter with the flagged outliers circled)."""
    from distforest.apps.mds import mds, write_mds_csv
    from distforest.apps.outliers import outlier_flags, stored_path

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
        marked = outlier_flags(forest).flags
        picture = plot_embedding(coordinates, plot, labels=labels, class_names=names,
                                 marked=marked, title=title)  # fmt: skip
        written["MDS picture"] = location.resolved(picture)
    return written


#: Job fields naming what a run reads (a table, a model store, a distance matrix, labels).
INPUT_FIELDS = (
    "input",
    "model",
    "training",
    "distances",
    "labels",
    "matrix",
    "data",
    "train",
    "reference",
)
#: Keys naming what a run writes, in a job's fields and in its sections (``outliers.out``, ...).
OUTPUT_FIELDS = ("out", "plot", "store", "directory")


def _where(path: Any) -> tuple[str, str]:
    """``(kind, key)`` comparing ``path`` with others: a local path resolved (links followed,
    ``file://`` removed), a URL without its credentials; a trailing ``/`` dropped."""
    if location.is_remote(path):
        return "url", location.display(path).rstrip("/")
    # (realpath, not Path.resolve: a loop of links is the reader's to report, not an error here)
    return "local", os.path.realpath(os.path.expanduser(location.local(path)))


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def cluster_files(connect: Any) -> list[str]:
    """The files a run's cluster settings read: the cluster file and a scheduler file."""
    files: list[str] = []
    cluster = (connect or {}).get("cluster") if isinstance(connect, dict) else None
    if isinstance(cluster, (str, os.PathLike)):
        files.append(os.fspath(cluster))
    elif cluster is not None:
        source = getattr(cluster, "source", "")
        if source and not source.startswith("<"):
            files.append(source)
        scheduler_file = (getattr(cluster, "options", None) or {}).get("scheduler_file")
        if isinstance(scheduler_file, str):
            files.append(scheduler_file)
    return files


def refuse_writing_inputs(outputs: dict[str, Any], inputs: dict[str, Any],
                          folders: Collection[str] = ()) -> None:  # fmt: skip
    """Before anything is written: refuse an output that is, holds or lies inside an input.

    ``outputs`` and ``inputs`` map what each path is (``"output.store"``,
    ``"model"``, ...) to the path; the outputs named in ``folders`` may be folders
    (stores), refused also when they hold an input (a file output cannot).
    Local paths are compared resolved (a link to an input is that input), URLs
    without credentials; a glob input is every file it matches.  ``--overwrite``
    does not change this: a run never replaces or writes into what it reads.

    Raises
    ------
    StoreError
        Exit 6, naming the output, the input and how they overlap.
    """
    import glob

    read: list[tuple[str, str, tuple[str, str]]] = []
    for what, path in inputs.items():
        if not path or not isinstance(path, (str, os.PathLike)):
            continue
        text = os.fspath(path)
        matched = [] if location.is_remote(text) or not glob.has_magic(text) else glob.glob(text)
        for one in matched or [text]:
            read.append((what, one, _where(one)))
    for what, path in outputs.items():
        if not path or not isinstance(path, (str, os.PathLike)):
            continue
        kind, key = _where(os.fspath(path))
        for source, shown, (in_kind, in_key) in read:
            if kind != in_kind:
                continue
            if _within(key, in_key):
                how = "is" if key == in_key else "lies inside"
            elif what in folders and _within(in_key, key):
                how = "holds"
            else:
                continue
            raise StoreError(
                f"{what} {location.display(path)!r} {how} the {source} "
                f"{location.display(shown)!r}, which this run reads; inputs are never "
                "written, also not with --overwrite: choose another output path"
            )


def check_job_inputs_read_only(job: Any) -> None:
    """:func:`refuse_writing_inputs` for a job: its input fields and cluster files against
    its output store, the files its sections write and its reports."""
    inputs = {name: getattr(job, name, None) for name in INPUT_FIELDS}
    for i, path in enumerate(cluster_files(getattr(job, "connect", None))):
        inputs["cluster file" if i == 0 else "scheduler file"] = path
    outputs: dict[str, Any] = {}

    def collect(prefix: str, section: dict[str, Any]) -> None:
        for key, inner in section.items():
            if isinstance(inner, dict):
                collect(f"{prefix}{key}.", inner)
            elif key in (*OUTPUT_FIELDS, "model") and isinstance(inner, str):
                outputs[f"{prefix}{key}"] = inner

    for name in getattr(job, "__dataclass_fields__", {}):
        value = getattr(job, name, None)
        if name in OUTPUT_FIELDS and isinstance(value, str):
            outputs["output store" if name == "out" else name] = value
        elif isinstance(value, dict) and name not in ("connect", "forest"):
            collect(f"{name}.", value)
    out = getattr(job, "out", None)
    folder = getattr(job, "report_dir", None) or (location.parent(out) if out else None)
    for report in REPORT_FILES if folder else ():
        outputs[report] = location.join(folder, report)
    refuse_writing_inputs(outputs, inputs, folders={"output store"})


def check_writable(path: str) -> None:
    """Refuse an output whose folder this process cannot write (exit 6, one line).

    The folder is the nearest existing one on the way to ``path`` (missing
    folders are created by the commands): a read-only mount or a folder
    without write permission fails here, before any work, instead of at the
    end of the run.
    """
    out = Path(path)
    folder = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if out.is_dir() and not out.is_symlink():
        folder = out  # a store or folder being replaced: written inside
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        why = "is not a folder" if not folder.is_dir() else "is not writable (read-only, or "
        why += "" if not folder.is_dir() else "no permission)"
        raise StoreError(f"cannot write {path!r}: {str(folder)!r} {why}; choose another path")
