"""``report.json`` and ``report.md``: what a run did, for the operator.

The JSON has the config, versions, timings per stage, tasks and retries,
bytes written, peak worker memory and data-quality counts; the Markdown
says the same for people and shows the pictures the run produced.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from distforest import location
from distforest._version import __version__
from distforest.errors import StoreError
from distforest.jobs.outputs import REPORT_FILES, write_text
from distforest.parallel.cluster import engine_report
from distforest.store.lock import describe_holder

PACKAGES = ("dask", "distributed", "numpy", "zarr", "xarray", "scikit-learn", "numba", "pandas")


def versions() -> dict[str, str]:
    """Versions of Python, distforest and the packages that shape the results."""
    out = {"python": platform.python_version(), "distforest": __version__}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _disk_usage(path: Any) -> int:
    return location.size(path)


def _relative(path: Any, folder: Any) -> str:
    """``path`` as a link from a report in ``folder``."""
    if location.is_remote(path) or location.is_remote(folder):
        return location.name(path)
    return os.path.relpath(path, folder)


def table_quality(table: Any, stages: dict[str, Any]) -> dict[str, Any]:
    """The data-quality counts of a report: the input's rows, features, missing cells."""
    if hasattr(table, "quality"):  # read by partitions: from the summaries
        out = table.quality()
    else:
        X = table.X
        out = {
            "rows": int(X.shape[0]),
            "features": int(X.shape[1]),
            "missing_cells": int(np.isnan(X).sum()),
            "rows_with_missing": int(np.isnan(X).any(axis=1).sum()),
        }
    for stage, key in (("impute", "cells_imputed"), ("mislabels", "disagreeing_labels")):
        if key in stages.get(stage, {}):
            out[key] = stages[stage][key]
    return out


def cluster_facts(monitor: Any) -> dict[str, Any]:
    """What a run's cluster did, read while its client is open.

    Parameters
    ----------
    monitor : RunMonitor or None
        The run's monitor; None for a run in this process.

    Returns
    -------
    dict
        ``engine`` (:func:`~distforest.parallel.cluster.engine_report`),
        ``tasks`` (per task kind, None when in-process or not countable),
        ``retries`` (their sum, or None) and ``peak_worker_memory_bytes``.
    """
    tasks = None if monitor is None else monitor.tasks()  # None: the run was in-process
    return {
        "engine": engine_report(None if monitor is None else monitor.client),
        "tasks": tasks,
        "retries": None if tasks is None else sum(t["retries"] for t in tasks.values()),
        "peak_worker_memory_bytes": {} if monitor is None else dict(monitor.peak_memory),
    }


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _write_reports(out_dir: Any, report: dict[str, Any], markdown: str) -> dict[str, str]:
    """``report.json`` (with the digest of the markdown, to know it later) and ``report.md``."""
    markdown = location.scrub(markdown)  # no secret in a report (a URL's credentials, ...)
    report = {**report, "markdown_digest": _digest(markdown)}
    text = location.scrub(json.dumps(report, indent=2, default=str))
    return {
        "report": write_text(location.join(out_dir, "report.json"), text),
        "report (markdown)": write_text(location.join(out_dir, "report.md"), markdown),
    }


def _ours(folder: Path) -> set[str]:
    """The report files in ``folder`` that distforest wrote (of any run)."""
    try:
        data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(data, dict) or not {"run_id", "versions", "markdown_digest"} <= set(data):
        return set()
    try:
        same = (
            _digest((folder / "report.md").read_text(encoding="utf-8")) == data["markdown_digest"]
        )
    except (OSError, ValueError):
        same = False
    return {"report.json", "report.md"} if same else {"report.json"}


def check_reports(folder: str | Path, replace: bool, store: str | None = None) -> None:
    """Before any work: refuse to replace report files that distforest did not write.

    ``report.json`` / ``report.md`` in ``folder`` are replaced when they are
    distforest's reports (the JSON of a run, the markdown written with it: its
    digest is in the JSON), or when ``replace`` (overwrite, restart, resume);
    anything else there is refused as any other existing output is
    (:class:`~distforest.errors.StoreError`, exit 6).  With ``store`` (a
    pipeline's run: its output folder is the run's own), the report of a run of
    another store is refused too, naming that store, unless ``replace``.
    """
    folder = Path(folder)
    if store is not None and not replace:
        other = location.written_by(folder / "report.json")
        if other is not None and not location.same_file(other, store):
            raise location.existing_output(folder / "report.json")
    ours = _ours(folder)
    for name in REPORT_FILES:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            raise StoreError(f"cannot write the report {str(path)!r}: it is a directory")
        if (path.exists() or path.is_symlink()) and name not in ours and not replace:
            raise StoreError(
                f"{path} already exists and is not a report distforest wrote; move it away, "
                "write the output to another folder, or pass --overwrite (overwrite: true in "
                "a pipeline) to replace it"
            )


def write_report(job: Any, result: Any, rs: Any, stages: dict[str, Any],
                 facts: dict[str, Any] | None, run: Any, out_dir: Any,
                 quality: dict[str, Any] | None = None) -> dict[str, str]:  # fmt: skip
    """Write ``report.json`` and ``report.md`` into ``out_dir``: the one report of every job.

    ``stages`` is the store's record (each stage's measured seconds and
    memory beside its estimate), ``facts`` what the cluster did
    (:func:`cluster_facts`), ``run`` the :class:`~distforest.jobs.runs.Run`
    and ``quality`` the input's data-quality counts (None: not counted).

    Returns
    -------
    dict
        ``{"report": path of the JSON, "report (markdown)": path of the .md}``.
    """
    files = {label: p for s in stages.values() for label, p in s.get("outputs", {}).items()}
    files.update({k: v for k, v in result.outputs.items() if k not in ("store", "model")})
    written = {"store": _disk_usage(rs.path)}
    written.update({label: _disk_usage(p) for label, p in files.items() if location.exists(p)})
    facts = facts or cluster_facts(None)
    report = {
        "run_id": run.run_id,
        "job": job.name,
        "kind": type(job).__name__,
        "pipeline": job.source,
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "mode": run.mode,
        "took_over_stale_lock_of": run.took_over,
        "spec_hash": run.record["spec_hash"],
        "config": json.loads(json.dumps(job.__dict__, default=str)),
        "spec": run.record["spec"],
        "cluster": job.connect,
        "engine": facts["engine"],
        "versions": versions(),
        "seconds": round(result.seconds, 3),
        "stages": stages,
        "seconds_per_stage": {k: v.get("seconds") for k, v in stages.items()},
        "tasks": facts["tasks"],
        "retries": facts["retries"],
        "bytes_written": written,
        "peak_worker_memory_bytes": facts["peak_worker_memory_bytes"],
        "data_quality": quality,
        "store": rs.path,
    }
    return _write_reports(out_dir, report, _markdown(report, files, out_dir))


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _markdown(report: dict[str, Any], files: dict[str, Any], out_dir: Any) -> str:
    lines = [
        f"# distforest run {report['run_id']}: {report['job']}",
        "",
        f"- finished: {report['finished']} on {report['host']} ({report['mode']} run, "
        f"{report['seconds']:.1f} s)",
        f"- pipeline: {report['pipeline']}",
        f"- store: `{report['store']}` (spec {report['spec_hash']})",
        f"- distforest {report['versions']['distforest']}, dask {report['versions']['dask']}, "
        f"zarr {report['versions']['zarr']}, scikit-learn {report['versions']['scikit-learn']}",
    ]
    if report["took_over_stale_lock_of"]:
        lines.append(
            f"- took over the stale lock of {describe_holder(report['took_over_stale_lock_of'])}"
        )
    lines += ["", "## Stages", "",
              "| stage | seconds | estimate (core-s) | memory | estimate | notes |",
              "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    hidden = ("seconds", "outputs", "estimate", "process_peak_bytes")
    for name, entry in report["stages"].items():
        notes = ", ".join(f"{k} {v}" for k, v in entry.items() if k not in hidden)
        guess = entry.get("estimate") or {}
        lines.append(
            f"| {name} | {entry.get('seconds', 0):.1f} | {guess.get('cpu_seconds', 0):.1f} | "
            f"{_mb(entry.get('process_peak_bytes', 0))} | {_mb(guess.get('worker_bytes', 0))} "
            f"| {notes} |"
        )
    lines += _cluster_lines(report)
    lines += ["", "## Data", ""]
    for k, v in (report["data_quality"] or {}).items():
        counted = "not counted (read by partitions)" if v is None else f"{v:,}"
        lines.append(f"- {k.replace('_', ' ')}: {counted}")
    lines += ["", "## Outputs", ""]
    for label, size in report["bytes_written"].items():
        lines.append(f"- {label}: `{files.get(label, report['store'])}` ({_mb(size)})")
    pictures = [(label, p) for label, p in files.items() if str(p).endswith(".png")]
    for label, p in pictures:
        rel = _relative(p, out_dir)
        lines += ["", f"### {label}", "", f"![{label}]({rel})"]
    return "\n".join(lines) + "\n"


def _cluster_lines(facts: dict[str, Any]) -> list[str]:
    """The Markdown "Cluster" section from a report's :func:`cluster_facts` keys."""
    lines = ["", "## Cluster", ""]
    engine = facts["engine"]
    lines.append(
        f"- engine: {engine['engine']} ({engine.get('class', '?')}, "
        f"{engine.get('cluster_file', '-')}), scheduler {engine['scheduler']}"
        f"{' (TLS)' if engine['tls'] else ''}, dashboard {engine.get('dashboard') or 'off'}"
    )
    lines.append(f"- workers at the end: {', '.join(engine['workers']) or 'none'}")
    if facts["tasks"] is None and engine["engine"] == "in-process":
        lines.append("- tasks: run in this process (small input, no cluster asked for)")
    elif facts["tasks"] is None:
        lines.append("- tasks and retries: not available from this scheduler")
    else:
        for kind, t in sorted(facts["tasks"].items()):
            lines.append(f"- {kind}: {t['tasks']} tasks, {t['retries']} retried")
    for worker, peak in sorted(facts["peak_worker_memory_bytes"].items()):
        lines.append(f"- worker {worker}: peak memory {_mb(peak)}")
    return lines
