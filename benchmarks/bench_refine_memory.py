"""Refined forest's memory by part: a fit task, the driver's join of node parts, the co-leaf index.

Run by hand (never in CI)::

    python -m benchmarks refine_memory [--rows 1000000] [--trees 2] [--part-trees 13]
        [--parts 3] [--store STORE.zarr] [--work /tmp/dfbench-refine-memory]

Data: ``bench_out_of_core.py``'s generator (N rows x 20 features, 3 classes), as in
``bench_refine.py``; the forest is the default top-k job's (trees on 200,000 rows
above 1,000,000, ``leaf_bound='auto'``: bound 8).  Everything runs in this process,
one phase at a time, its peak RSS sampled (``_measure.Measure``) against the RSS at
the phase's start:

1. *a fit task*: ``fit_tree_batch`` (grow ``--trees`` trees on the sample, route every
   row) then ``refine_grown`` (their crowded leaves refined), as a growing task runs
   them (numba compiled beforehand on 20,000 rows: a worker compiles once);
2. *the driver's join*: the nodes of the refined batch, repeated to ``--part-trees``
   trees a part, written as ``--parts`` batches' parts (``SinkHandle.put_nodes``) and
   joined into ``forest/`` (``RunStore.join_forest``), as a fit's driver does;
3. *the co-leaf index* (``--store``: a store written by ``distforest proximity
   --top-k``): ``build_stored_index``, what every worker process of the neighbours
   stage builds, and the bytes of its parts.

Results: ``results/refine-memory-parts.json`` and ``.md`` (the CLI runs beside them:
``results/refine-memory.md``).
"""

from __future__ import annotations

import gc
import shutil
import sys
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _measure import GB, Measure, parser, write_result  # noqa: E402
from bench_out_of_core import make_data  # noqa: E402

MB = 1e6


def arguments() -> Any:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--trees", type=int, default=2, help="Trees of the measured fit task.")
    p.add_argument("--part-trees", type=int, default=13, help="Trees a joined part holds.")
    p.add_argument("--parts", type=int, default=3)
    p.add_argument("--store", default=None, help="A top-k store: measure its co-leaf index.")
    p.add_argument("--work", default="/tmp/dfbench-refine-memory")
    return p.parse_args()


def _rows(rows: int, work: Path) -> tuple[Any, Any]:
    import numpy as np
    import pandas as pd

    from distforest.kernels.trees import tree_input

    folder = work / f"data-{rows}"
    if not (folder / "parts").exists():
        shutil.rmtree(folder, ignore_errors=True)
        make_data(rows, folder, parts_only=True)
    frame = pd.read_parquet(folder / "parts")
    y = pd.Categorical(frame.pop("label")).codes.astype(np.int64)
    X = tree_input(frame.to_numpy(np.float32))
    del frame
    gc.collect()
    return X, y


def _phase(m: Measure, name: str, run: Any) -> tuple[Any, dict[str, Any]]:
    """Run ``run()`` as phase ``name``; its peak over the RSS at its start, in the record."""
    with m.phase(f"{name}-start") as start:
        pass
    with m.phase(name) as record:
        value = run()
    record["over_start_bytes"] = record["peak_rss_driver_bytes"] - start["peak_rss_driver_bytes"]
    return value, record


def main() -> None:
    import numpy as np

    from distforest.forests.proximity_forest import ProximityForest
    from distforest.forests.refine import refine_grown, refine_rule
    from distforest.kernels.trees import fit_tree_batch
    from distforest.parallel.tasks import plan_seeds
    from distforest.store.run_store import RunStore
    from distforest.store.sink import FIT_GROUP, SinkHandle

    args = arguments()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    X, y = _rows(args.rows, work)
    n, d = X.shape
    valid = ProximityForest(leaf_bound="auto")._validated()

    def params(rows: int) -> Any:
        return ProximityForest._tree_params(valid, "classification", [0, 1, 2], rows)

    rule, why = refine_rule("auto", params(n), n, d)
    if rule is None:
        raise SystemExit(f"{n:,} rows are not refined by default ({why}): pass --rows 1000000")
    _, seeds = plan_seeds(0, max(args.trees, 1))
    small = 20_000  # numba compiled before anything is measured
    refine_grown(fit_tree_batch(X[:small], y[:small], seeds[:1], params(small), True),
                 X[:small], y[:small], seeds[:1], rule)  # fmt: skip
    w = args.trees
    rows: list[dict[str, Any]] = []
    with Measure("refine-memory") as m:
        tops = params(n)
        grown, rec = _phase(m, "grow and route",
                            lambda: fit_tree_batch(X, y, seeds[:w], tops, True))  # fmt: skip
        rows.append({"part": f"fit task: grow {w} trees' tops, route every row",
                     **_per(rec, n, w)})  # fmt: skip
        refine = partial(refine_grown, grown, X, y, seeds[:w], rule)
        batch, rec = _phase(m, "refine", refine)
        del refine, grown
        node_bytes = sum(v.nbytes for v in batch.nodes.values())
        rows.append({"part": f"fit task: refine {w} trees", **_per(rec, n, w),
                     "nodes_per_row_tree": round(float(batch.node_counts.mean()) / n, 3),
                     "node_bytes_per_row_tree": round(node_bytes / (n * w), 1)})  # fmt: skip
        store = work / "join.zarr"
        shutil.rmtree(store, ignore_errors=True)
        rs = RunStore.create(store, attrs={})
        rs.group.require_group(FIT_GROUP)
        per_part = int(batch.node_counts.mean()) * args.part_trees
        handle = SinkHandle(rs.path, 2048)
        for k in range(args.parts):  # the batch's nodes, repeated to a part's size
            handle.put_nodes(k, {f: np.resize(np.roll(v, 7919 * k, axis=0),
                                              (per_part, *v.shape[1:]))
                                 for f, v in batch.nodes.items()})  # fmt: skip
        del batch
        counts = np.full(args.parts * args.part_trees, per_part // args.part_trees)
        _, rec = _phase(m, "join", lambda: rs.join_forest(
            [f"{FIT_GROUP}/nodes_{k}" for k in range(args.parts)], counts,
            np.arange(len(counts), dtype=np.uint64)))  # fmt: skip
        what = f"driver: join {args.parts} parts of {args.part_trees} trees ({per_part:,} nodes)"
        rows.append({"part": what, **_per(rec, n, args.part_trees)})
        shutil.rmtree(store, ignore_errors=True)
        if args.store:
            from distforest.forests.proximity_neighbors import build_stored_index
            from distforest.kernels import coleaf

            coleaf.warm_up()
            index, rec = _phase(m, "index", lambda: build_stored_index(args.store, "original"))
            names = ("members", "weights", "member_offset", "leaf_offset", "leaf_start")
            held = {name: part.nbytes for name, part in zip(names, index.parts, strict=True)}
            rows.append({"part": f"neighbours: co-leaf index of {index.n:,} x {index.n_trees}",
                         **_per(rec, index.n, index.n_trees),
                         "held_MB": round(index.nbytes / MB),
                         **{f"{k}_B_per_row_tree": round(v / (index.n * index.n_trees), 2)
                            for k, v in held.items() if v}})  # fmt: skip
    notes = (f"Rows: {n:,} x {d}; refinement: {why}. `peak_over_start_MB`: the phase's "
             "peak RSS of this process over its RSS when the phase started (sampled every "
             "0.2 s); `per_row_tree_B`: that over rows x trees (the join: over rows x a "
             "part's trees). Driver's peak of the whole run: "
             f"{m.result.get('driver_peak_bytes', 0) / GB:.2f} GB.")  # fmt: skip
    columns = ["part", "peak_over_start_MB", "per_row_tree_B", "wall_s", "nodes_per_row_tree",
               "node_bytes_per_row_tree", "held_MB", "members_B_per_row_tree",
               "leaf_start_B_per_row_tree"]  # fmt: skip
    command = (f"python -m benchmarks refine_memory --rows {args.rows} --trees {w} "
               f"--part-trees {args.part_trees} --parts {args.parts} --work WORK"
               + (" --store STORE" if args.store else ""))  # fmt: skip
    write_result("refine-memory-parts", rows, title="Refined forest: memory by part",
                 columns=columns, notes=notes, data=m.result, command=command)  # fmt: skip


def _per(record: dict[str, Any], rows: int, trees: int) -> dict[str, Any]:
    over = record["over_start_bytes"]
    return {"peak_over_start_MB": round(over / MB),
            "per_row_tree_B": round(over / (rows * trees), 1),
            "wall_s": round(record["wall_s"], 1)}  # fmt: skip


if __name__ == "__main__":
    main()
