"""Reproduce the simulations of Tomita & Vogelstein's SMERF paper with distforest's SMERF.

Run by hand, never in CI, from the repository root on a committed tree::

    python benchmarks/bench_smerf.py simulations [--reps 10] [--trees 100]
    python benchmarks/bench_smerf.py links [--reps 5] [--trees 100]
    python benchmarks/bench_smerf.py speed [--sizes 2000,5000,20000] [--trees 100]
                                           [--predict-rows 5000]
    python benchmarks/bench_smerf.py stored [--input stored,memory] [--rows 6000]
                                            [--features 20] [--trees 20]
    python benchmarks/bench_smerf.py render      # tables + plots from the JSON

(or ``python -m benchmarks smerf PART [options]``).  ``stored`` measures the
driver's memory of a fit by input kind (``--input``: a folder of Parquet parts
ingested into a run store, or a DataFrame in memory) and writes
``benchmarks/results/smerf_stored.{json,md}``.

Writes ``benchmarks/results/smerf.json`` (every part keeps its own key) and
the generated tables of ``benchmarks/results/smerf.md``; plots go to
``docs/smerf_<setting>.png``.

Simulations (issue 12, item 5): d = 20 features, only the first two
relevant; training sizes 20, 40, 80, 160, 320; 200 test points; 10
repetitions.  For each setting, the observed D is the true distance on the
training pairs; every method is scored on the 200 x 200 test pairs:

- ``regression``: y = x1 + x2, D = (y_a - y_b)^2 / 2 (a rank-one Mahalanobis
  distance: the setting designed for the Mahalanobis baseline);
- ``bilinear``: similarity y_a y_b, D = -y_a y_b (designed for the bilinear
  baseline);
- ``radial``: D = (|x_a[:2]| - |x_b[:2]|)^2 with (x1, x2) uniform in the unit
  disc (no linear method can express it);
- ``swissroll`` (the authors' pilot scripts): a 3-D swiss roll, position t
  along the roll rescaled to [0, 1], noise sd 0.01, D = |t_a - t_b|
  (similarity 1 - |t_a - t_b|); d = 3 here, not 20.

Features other than the relevant ones are uniform on [-1, 1].  Metrics per
test point (its 199 other test points): mAP@10 (the ten true nearest are the
relevant ones), Spearman correlation of predicted and true distances; RMSE
over all test pairs.  SMERF is run with its defaults (bootstrap, sqrt(d)
candidates, grown to purity), axis-aligned and oblique (sparse +-1
projections, as the reference rerf implementation).  Baselines: Mahalanobis
``(x_a - x_b)^T M (x_a - x_b)`` and bilinear ``-x_a^T W x_b``, each fitted
by (minimum-norm) least squares on the training pairs (M, W symmetric,
unconstrained); Euclidean distance
(its RMSE after a least-squares fit ``a * e + b`` on the training pairs); on
the swiss roll also an Isomap-style geodesic distance (shortest paths in the
10-nearest-neighbour graph of training and test points, unsupervised).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.sparse.csgraph import shortest_path
from scipy.stats import spearmanr
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.neighbors import kneighbors_graph

from distforest import SMERF, execution

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import RESULTS as RESULTS_DIR
from _measure import (
    Measure,
    commit,
    machine_info,
    the_command,
    write_markdown,
    write_result,
)
from _measure import parser as make_parser

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = RESULTS_DIR / "smerf.json"
REPORT = RESULTS_DIR / "smerf.md"
SETTINGS = ("regression", "bilinear", "radial", "swissroll")
SIZES = (20, 40, 80, 160, 320)
N_TEST = 200
D_FEATURES = 20


# -- data ------------------------------------------------------------------------------------


def simulate(setting: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Features X (n, d) and a latent value per row from which the true D follows."""
    if setting == "swissroll":
        t = rng.uniform(1.5 * np.pi, 4.5 * np.pi, n)
        X = np.column_stack([t * np.cos(t), rng.uniform(0, 21, n), t * np.sin(t)])
        X += rng.normal(0, 0.01, X.shape)
        return X, (t - 1.5 * np.pi) / (3 * np.pi)
    X = rng.uniform(-1, 1, size=(n, D_FEATURES))
    if setting == "radial":
        r = np.sqrt(rng.uniform(0, 1, n))
        phi = rng.uniform(0, 2 * np.pi, n)
        X[:, 0], X[:, 1] = r * np.cos(phi), r * np.sin(phi)
        return X, r
    return X, X[:, 0] + X[:, 1]


def true_distance(setting: str, za: np.ndarray, zb: np.ndarray) -> np.ndarray:
    if setting == "regression":
        return (za[:, None] - zb[None, :]) ** 2 / 2
    if setting == "bilinear":
        return -za[:, None] * zb[None, :]
    if setting == "radial":
        return (za[:, None] - zb[None, :]) ** 2
    return np.abs(za[:, None] - zb[None, :])


# -- baselines -------------------------------------------------------------------------------


def _sym_features(U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Rows u^T A v for symmetric A as linear features of A's upper triangle."""
    d = U.shape[1]
    iu = np.triu_indices(d)
    outer = U[:, :, None] * V[:, None, :]
    sym = outer + np.transpose(outer, (0, 2, 1))
    sym[:, np.arange(d), np.arange(d)] /= 2
    return sym[:, iu[0], iu[1]]


def _sym_matrix(coef: np.ndarray, d: int) -> np.ndarray:
    A = np.zeros((d, d))
    A[np.triu_indices(d)] = coef
    return (A + A.T) - np.diag(np.diag(A))


def fit_mahalanobis(X: np.ndarray, D: np.ndarray) -> np.ndarray:
    a, b = np.triu_indices(X.shape[0], 1)
    delta = X[a] - X[b]
    coef = np.linalg.lstsq(_sym_features(delta, delta), D[a, b], rcond=None)[0]
    return _sym_matrix(coef, X.shape[1])


def mahalanobis(M: np.ndarray, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    delta = A[:, None, :] - B[None, :, :]
    return np.einsum("ijk,kl,ijl->ij", delta, M, delta)


def fit_bilinear(X: np.ndarray, D: np.ndarray) -> np.ndarray:
    a, b = np.triu_indices(X.shape[0])
    coef = np.linalg.lstsq(_sym_features(X[a], X[b]), -D[a, b], rcond=None)[0]
    return _sym_matrix(coef, X.shape[1])


def euclidean(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return np.sqrt(((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


def geodesic(X: np.ndarray, n_test: int, k: int = 10) -> np.ndarray:
    graph = kneighbors_graph(X, k, mode="distance")
    graph = graph.maximum(graph.T)
    G = shortest_path(graph, directed=False, indices=np.arange(len(X) - n_test, len(X)))
    G = G[:, len(X) - n_test :]
    return np.where(np.isfinite(G), G, np.nanmax(G[np.isfinite(G)]) * 2)


# -- metrics ---------------------------------------------------------------------------------


def scores(pred: np.ndarray, truth: np.ndarray, k: int = 10) -> dict[str, float]:
    n = truth.shape[0]
    aps, rhos = [], []
    for i in range(n):
        others = np.delete(np.arange(n), i)
        t, p = truth[i, others], pred[i, others]
        relevant = set(np.argsort(t, kind="stable")[:k].tolist())
        ranked = np.argsort(p, kind="stable")[:k]
        hits, total = 0, 0.0
        for rank, j in enumerate(ranked, start=1):
            if j in relevant:
                hits += 1
                total += hits / rank
        aps.append(total / k)
        rho = spearmanr(p, t).statistic
        rhos.append(0.0 if np.isnan(rho) else rho)
    iu = np.triu_indices(n, 1)
    rmse = float(np.sqrt(np.mean((pred[iu] - truth[iu]) ** 2)))
    return {"map10": float(np.mean(aps)), "spearman": float(np.mean(rhos)), "rmse": rmse}


# -- parts -----------------------------------------------------------------------------------


def run_simulations(reps: int, trees: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    rows = []
    importances: dict[str, list[list[float]]] = {}
    for setting in SETTINGS:
        for n in sizes:
            for rep in range(reps):
                rng = np.random.default_rng([rep, n, SETTINGS.index(setting)])
                X, z = simulate(setting, n + N_TEST, rng)
                Xtr, Xte, ztr, zte = X[:n], X[n:], z[:n], z[n:]
                Dtr = true_distance(setting, ztr, ztr)
                truth = true_distance(setting, zte, zte)
                preds: dict[str, np.ndarray] = {}
                tick = time.perf_counter()
                with execution("synchronous"):
                    model = SMERF(n_estimators=trees, random_state=rep).fit(Xtr, Dtr)
                    preds["SMERF"] = model.predict_distance(Xte, Xte).values.astype(float)
                    smerf_s = time.perf_counter() - tick
                    oblique = SMERF(n_estimators=trees, oblique=True, random_state=rep)
                    oblique.fit(Xtr, Dtr)
                    preds["SMERF oblique"] = oblique.predict_distance(Xte, Xte).values.astype(float)
                if setting == "radial" and n == max(sizes):
                    importances.setdefault(setting, []).append(model.feature_importances_.tolist())
                preds["Mahalanobis (LS)"] = mahalanobis(fit_mahalanobis(Xtr, Dtr), Xte, Xte)
                preds["bilinear (LS)"] = -Xte @ fit_bilinear(Xtr, Dtr) @ Xte.T
                e_tr, e_te = euclidean(Xtr, Xtr), euclidean(Xte, Xte)
                iu = np.triu_indices(n, 1)
                design = np.column_stack([e_tr[iu], np.ones(iu[0].size)])
                a, b = np.linalg.lstsq(design, Dtr[iu], rcond=None)[0]
                eu_scores = scores(e_te, truth)
                eu_scores["rmse"] = scores(a * e_te + b, truth)["rmse"]
                if setting == "swissroll":
                    geo = geodesic(X, N_TEST)
                    g_tr = geodesic(np.vstack([Xte, Xtr]), n)  # train block, for the scale fit
                    a_g, b_g = np.linalg.lstsq(
                        np.column_stack([g_tr[iu], np.ones(iu[0].size)]), Dtr[iu], rcond=None
                    )[0]
                    geo_scores = scores(geo, truth)
                    geo_scores["rmse"] = scores(a_g * geo + b_g, truth)["rmse"]
                for method, pred in preds.items():
                    seconds = {"seconds": smerf_s} if method == "SMERF" else {}
                    rows.append({"setting": setting, "n": n, "rep": rep, "method": method,
                                 **scores(pred, truth), **seconds})  # fmt: skip
                rows.append({"setting": setting, "n": n, "rep": rep, "method": "Euclidean",
                             **eu_scores})  # fmt: skip
                if setting == "swissroll":
                    rows.append({"setting": setting, "n": n, "rep": rep,
                                 "method": "geodesic (Isomap-style)", **geo_scores})  # fmt: skip
            print(f"{setting} n={n}: done", file=sys.stderr, flush=True)
    return {"rows": rows, "importances": importances, "reps": reps, "trees": trees,
            "sizes": list(sizes)}  # fmt: skip


def attributed_sbm(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Nodes with 6 attributes; the block (of 4) is set by the signs of the first two."""
    X = rng.normal(size=(n, 6))
    block = (X[:, 0] > 0).astype(int) * 2 + (X[:, 1] > 0).astype(int)
    P = np.full((4, 4), 0.02)
    np.fill_diagonal(P, 0.25)
    prob = P[block[:, None], block[None, :]]
    upper = np.triu(rng.random((n, n)) < prob, 1)
    A = (upper | upper.T).astype(float)
    return X, A


def run_links(reps: int, trees: int, n: int = 400) -> dict[str, Any]:
    """Link prediction: train on a fraction of the nodes, predict links among the others."""
    rows = []
    for fraction in (0.1, 0.3, 0.5, 0.7, 0.9):
        for rep in range(reps):
            rng = np.random.default_rng([rep, int(fraction * 10)])
            X, A = attributed_sbm(n, rng)
            order = rng.permutation(n)
            k = round(fraction * n)
            tr, te = np.sort(order[:k]), np.sort(order[k:])
            D = 1.0 - A[np.ix_(tr, tr)]
            np.fill_diagonal(D, 0.0)
            with execution("synchronous"):
                model = SMERF(n_estimators=trees, random_state=rep).fit(X[tr], D)
                pred = model.predict_distance(X[te], X[te]).values.astype(float)
            iu = np.triu_indices(len(te), 1)
            truth = A[np.ix_(te, te)][iu]
            a, b = np.triu_indices(len(tr), 1)
            logit = LogisticRegression(max_iter=1000).fit(
                np.abs(X[tr][a] - X[tr][b]), A[np.ix_(tr, tr)][a, b]
            )
            p_lr = logit.predict_proba(np.abs(X[te][iu[0]] - X[te][iu[1]]))[:, 1]
            for method, score in (("SMERF", -pred[iu]), ("logistic |x_a - x_b|", p_lr)):
                rows.append({"fraction": fraction, "rep": rep, "method": method,
                             "auc_roc": float(roc_auc_score(truth, score)),
                             "auc_pr": float(average_precision_score(truth, score)),
                             "n_train": int(k)})  # fmt: skip
        print(f"links fraction={fraction}: done", file=sys.stderr, flush=True)
    return {"rows": rows, "reps": reps, "trees": trees, "n_nodes": n}


def _speed_child(n: int, trees: int, workers: int, tile: int, out: str, pred_rows: int) -> None:
    """One speed measurement in its own process (peak RSS of this process + workers).

    D (the radial distance, float32) is written block by block to a Zarr array
    and handed to ``fit`` as that path: the benchmark never builds it whole;
    ``fit`` checks it block by block and each worker reads it once (SMERF grows
    trees on D in memory, in each worker).
    Prediction: ``pred_rows`` new rows against the n training rows.
    Peak RSS: of all processes together, and of each process on its own
    (:class:`_measure.Measure`).
    """
    import zarr
    from distributed import Client, LocalCluster

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(n, 20))
    r = np.sqrt(X[:, 0] ** 2 + X[:, 1] ** 2)
    d_path = "/tmp/smerf_speed_D.zarr"
    arr = zarr.create_array(d_path, shape=(n, n), chunks=(tile, tile), dtype="float32",
                            overwrite=True)  # fmt: skip
    for start in range(0, n, tile):
        block = r[start : start + tile, None] - r[None, :]
        arr[start : start + tile] = (block**2).astype(np.float32)
    del block
    with Measure("speed") as m:
        with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None) as lc:
            with Client(lc) as client:
                with m.phase("fit") as fit:
                    model = SMERF(n_estimators=trees, random_state=0).set_execution(client)
                    model.fit(X, d_path)
                Q = rng.uniform(-1, 1, size=(min(n, pred_rows), 20))
                with m.phase("predict") as pred:
                    model.predict_distance(Q, store=out, tile_size=tile, overwrite=True)
    r = m.result
    processes = r["processes"]
    driver = next(p for p in processes if p["role"] == "driver")
    cpu = {p["name"]: p["cpu_s"] for p in r["phases"]}
    print(json.dumps({"n": n, "trees": trees, "workers": workers, "fit_seconds": fit["wall_s"],
                      "predict_seconds": pred["wall_s"], "pred_rows": Q.shape[0],
                      "fit_cpu_seconds": cpu["fit"], "predict_cpu_seconds": cpu["predict"],
                      "cells_per_second": Q.shape[0] * n / pred["wall_s"], "d_source": "zarr",
                      "peak_rss_bytes": r["peak_rss_tree_bytes"], "tile_size": tile,
                      "max_rss_driver_kb": r["driver_peak_bytes"] // 1024,
                      "peak_rss_driver_bytes": driver["peak_bytes"],
                      "peak_rss_other_bytes": sorted(
                          (p["peak_bytes"] for p in processes if p is not driver), reverse=True),
                      "phases": r["phases"]}))  # fmt: skip


def run_speed(sizes: tuple[int, ...], trees: int, workers: int, pred_rows: int,
              save: Any) -> dict[str, Any]:  # fmt: skip
    """Each size in its own process; ``save(part)`` after each (a long run keeps what it did)."""
    rows: list[dict[str, Any]] = []
    for n in sizes:
        load_before = os.getloadavg()
        cmd = [sys.executable, __file__, "_speed", "--n", str(n), "--trees", str(trees),
               "--workers", str(workers), "--predict-rows", str(pred_rows)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["load_before"] = load_before
        row["load_after"] = os.getloadavg()
        row["commit"] = _about()["commit"]
        rows.append(row)
        print(f"speed n={n}: {row}", file=sys.stderr, flush=True)
        save({"rows": rows})
    return {"rows": rows}


# -- the fit's driver memory by input kind ------------------------------------------------


def run_stored(inputs: list[str], n: int, d: int, trees: int) -> list[dict[str, Any]]:
    """Driver memory of a SMERF fit from a folder of Parquet parts (``stored``) or in memory.

    A 2-worker LocalCluster (one thread each) runs every fit; D is a ``.npy``
    file, read once by each worker.  Per input kind: the fit's wall time, the
    driver's and the process tree's peak RSS during ``fit`` (the ingest runs
    before it), and the sizes of what the fitted model keeps on the driver
    (the forest's node columns and leaf members) or in the store.
    """
    import tempfile

    import pandas as pd
    from distributed import Client, LocalCluster

    from distforest.io.distances import load_distances
    from distforest.store.inputs import ingest

    rng = np.random.default_rng(0)
    X = np.round(rng.uniform(-1, 1, (n, d)), 6)
    g = X[:, 0] ** 2 + X[:, 1]
    work = tempfile.mkdtemp(prefix="bench-smerf-stored-")
    np.save(f"{work}/D.npy", ((g[:, None] - g[None, :]) ** 2 / 2).astype(np.float32))
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(d)])
    os.mkdir(f"{work}/parts")
    for k, cut in enumerate(np.array_split(np.arange(n), 5)):
        frame.iloc[cut].to_parquet(f"{work}/parts/p{k}.parquet")
    rows = []
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
        Measure("smerf stored") as m,
    ):
        dist = load_distances(f"{work}/D.npy", n=n)
        with execution(client), client.as_current():
            SMERF(n_estimators=2).fit(frame.iloc[:300], np.zeros((300, 300), np.float32))  # warm
            for kind in inputs:
                data: Any = frame
                if kind == "stored":
                    data = ingest(f"{work}/parts", f"{work}/run.zarr", allow_missing=False,
                                  dtype=np.float64)  # fmt: skip
                with m.phase(f"fit {kind}") as phase:
                    model = SMERF(n_estimators=trees, random_state=0).fit(data, dist)
                f = model.forest_
                rows.append({
                    "input": kind, "rows": n, "features": d, "trees": trees,
                    "fit_s": round(phase["wall_s"], 1),
                    "driver_peak_mb": round(phase["peak_rss_driver_bytes"] / 1e6),
                    "tree_peak_mb": round(phase["peak_rss_tree_bytes"] / 1e6),
                    "forest_nodes_mb": round(sum(v.nbytes for v in f.nodes.values()) / 1e6, 1),
                    "leaf_members_mb": round(f.leaf_members.nbytes / 1e6, 1),
                    "leaves_inbag_mb": round((model.leaves_.nbytes + model.inbag_.nbytes) / 1e6, 2),
                    "leaves_kind": type(model.leaves_).__name__,
                })  # fmt: skip
                print(rows[-1], file=sys.stderr, flush=True)
    return rows


# -- report ----------------------------------------------------------------------------------


def _about() -> dict[str, Any]:
    """Date, commit, machine, load and command of this run (the keys older results hold)."""
    m = machine_info()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit(),
        "cores": m["cores"],
        "memory_gb": round(m["mem_total_bytes"] / 1e9, 1),
        "python": m["python"],
        "loadavg": os.getloadavg(),
        "command": the_command(),
    }


def _mean_se(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0


def render(data: dict[str, Any]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = ["<!-- generated by benchmarks/bench_smerf.py render: edit the script, not this -->"]
    sim = data.get("simulations")
    if sim:
        about = sim["about"]
        out += [
            "## Simulations (issue 12, item 5)",
            "",
            f"Run {about['date']} on commit {about['commit']}, {about['cores']} cores, "
            f"{about['memory_gb']} GB, load average at the end {about['loadavg']}; command "
            f"`{about['command']}`. {sim['reps']} repetitions, SMERF with {sim['trees']} trees "
            "(defaults otherwise). Accuracy figures do not depend on the machine's load.",
            "",
        ]
        metrics = (("map10", "mAP@10", True), ("spearman", "Spearman", True),
                   ("rmse", "RMSE", False))  # fmt: skip
        for setting in SETTINGS:
            rows = [r for r in sim["rows"] if r["setting"] == setting]
            if not rows:
                continue
            methods = list(dict.fromkeys(r["method"] for r in rows))
            sizes = sorted({r["n"] for r in rows})
            out += [f"### {setting}", ""]
            fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
            for ax, (key, label, _) in zip(axes, metrics, strict=True):
                out += [f"{label} (mean ± standard error over repetitions)", "",
                        "| method | " + " | ".join(f"n={n}" for n in sizes) + " |",
                        "|---|" + "---|" * len(sizes)]  # fmt: skip
                for method in methods:
                    cells, means, ses = [], [], []
                    for n in sizes:
                        m, se = _mean_se([r[key] for r in rows
                                          if r["method"] == method and r["n"] == n])  # fmt: skip
                        cells.append(f"{m:.3f} ± {se:.3f}")
                        means.append(m)
                        ses.append(se)
                    out.append(f"| {method} | " + " | ".join(cells) + " |")
                    ax.errorbar(sizes, means, yerr=ses, marker="o", label=method, capsize=2)
                ax.set_xscale("log", base=2)
                if key == "rmse":  # least squares below d(d+1)/2 pairs is far off: log scale
                    ax.set_yscale("log")
                ax.set_xticks(sizes, [str(n) for n in sizes])
                ax.set_xlabel("training points")
                ax.set_title(label)
                out.append("")
            axes[0].legend(fontsize="small")
            fig.suptitle(f"SMERF simulations: {setting}")
            fig.tight_layout()
            path = ROOT / "docs" / f"smerf_{setting}.png"
            path.parent.mkdir(exist_ok=True)
            fig.savefig(path, dpi=90)
            plt.close(fig)
            out += [f"![{setting}](../../docs/smerf_{setting}.png)", ""]
        imp = sim["importances"].get("radial")
        if imp:
            mean = np.mean(np.asarray(imp), axis=0)
            top = np.argsort(-mean)[:5]
            out += ["### Importances on the radial setting (n = 320, mean over repetitions)", "",
                    "| feature | importance |", "|---|---|"]  # fmt: skip
            out += [f"| x{k + 1} | {mean[k]:.3f} |" for k in top]
            out += [f"| (the other {len(mean) - 5}, largest) | {np.sort(mean)[-6]:.3f} |", ""]
    links = data.get("links")
    if links:
        about = links["about"]
        out += ["## Link prediction (issue 12, item 6)", "",
                f"Run {about['date']} on commit {about['commit']}; command `{about['command']}`. "
                f"{links['n_nodes']} nodes, {links['reps']} repetitions, {links['trees']} trees.",
                "", "| train fraction | method | AUC-ROC | AUC-PR |",
                "|---|---|---|---|"]  # fmt: skip
        for fraction in sorted({r["fraction"] for r in links["rows"]}):
            for method in dict.fromkeys(r["method"] for r in links["rows"]):
                sel = [r for r in links["rows"]
                       if r["fraction"] == fraction and r["method"] == method]  # fmt: skip
                roc, roc_se = _mean_se([r["auc_roc"] for r in sel])
                pr, pr_se = _mean_se([r["auc_pr"] for r in sel])
                label = method.replace("|", "\\|")  # a markdown table cell
                out.append(f"| {fraction:.1f} | {label} | {roc:.3f} ± {roc_se:.3f} | "
                           f"{pr:.3f} ± {pr_se:.3f} |")  # fmt: skip
        out.append("")
    speed = data.get("speed")
    if speed:
        about = speed["about"]
        out += ["## Speed and scale (issue 12, item 7)", "",
                f"Run {about['date']} on commit {about['commit']}, {about['cores']} cores, "
                f"{about['memory_gb']} GB; command `{about['command']}`"
                + "".join(f"; {c}" for c in speed.get("more_commands", [])) + ". **Wall times "
                "taken while other engineers' jobs shared the 2 cores (load averages well "
                "above 2 in the table) are drafts, not clean measurements.** CPU seconds "
                "(user + system of the driver and its workers) depend little on the load: "
                "CPU / 2 is about "
                "what the step would take on the 2 cores alone.", "",
                "| n | trees | workers | fit (s) | fit CPU (s) | predicted rows x n | "
                "predict to Zarr (s) | predict CPU (s) | cells per CPU-second | "
                "peak RSS, all processes (GB) | peak RSS driver / largest workers (GB) | "
                "load before / after | commit |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in speed["rows"]:
            driver = r.get("peak_rss_driver_bytes", r["max_rss_driver_kb"] * 1024)
            others = " / ".join(f"{b / 1e9:.2f}" for b in r.get("peak_rss_other_bytes", [])[:2])
            cells = r.get("pred_rows", r["n"]) * r["n"]
            fit_cpu, pred_cpu = r.get("fit_cpu_seconds"), r.get("predict_cpu_seconds")
            out.append(
                f"| {r['n']} | {r['trees']} | {r['workers']} | {r['fit_seconds']:.1f} | "
                f"{'-' if fit_cpu is None else f'{fit_cpu:.1f}'} | "
                f"{r.get('pred_rows', r['n'])} x {r['n']} | {r['predict_seconds']:.1f} | "
                f"{'-' if pred_cpu is None else f'{pred_cpu:.1f}'} | "
                f"{'-' if pred_cpu is None else f'{cells / pred_cpu:.3g}'} | "
                f"{r['peak_rss_bytes'] / 1e9:.2f} | {driver / 1e9:.2f} / {others or '-'} | "
                f"{r['load_before'][0]:.1f} / {r['load_after'][0]:.1f} | {r.get('commit', '-')} |"
            )
        out.append("")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("part", choices=("simulations", "links", "speed", "stored", "render",
                                         "_speed"))  # fmt: skip
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--sizes", default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--predict-rows", type=int, default=5000,
                        help="speed: new rows predicted against the n training rows")  # fmt: skip
    parser.add_argument(
        "--input",
        default="stored,memory",
        help="stored: the input kinds to fit from, of stored (a folder of "
        "Parquet parts ingested into a run store) and memory (a DataFrame)",
    )
    parser.add_argument("--rows", type=int, default=6000, help="stored: rows")
    parser.add_argument("--features", type=int, default=20, help="stored: features")
    args = parser.parse_args()
    if args.part == "stored":
        kinds = [k for k in args.input.split(",") if k]
        if not kinds or set(kinds) - {"stored", "memory"}:
            parser.error(f"--input {args.input!r}: give stored, memory or stored,memory")
        rows = run_stored(kinds, args.rows, args.features, args.trees)
        notes = inspect.cleandoc(run_stored.__doc__ or "").split("\n\n", 1)[1]
        title = "SMERF: the fit's driver memory by input kind"
        write_result("smerf_stored", rows, title=title, notes=notes)
        return
    if args.part == "_speed":
        _speed_child(args.n, args.trees, args.workers, 1024, "/tmp/smerf_speed_prediction.zarr",
                     args.predict_rows)  # fmt: skip
        return
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.part == "simulations":
        sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES
        data["simulations"] = run_simulations(args.reps or 10, args.trees, sizes)
    elif args.part == "links":
        data["links"] = run_links(args.reps or 5, args.trees)
    elif args.part == "speed":
        sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else (2000, 5000)

        # earlier rows are kept (each names its commit); the earlier run's command moves
        # to "more_commands"
        old = data.get("speed") or {}
        before = old.get("rows", [])
        more = list(old.get("more_commands", []))
        if "about" in old:
            a = old["about"]
            more.insert(0, f"`{a['command']}` (commit {a['commit']}, {a['date']})")

        def save(part: dict[str, Any]) -> None:
            data["speed"] = {"rows": before + part["rows"], "more_commands": more}
            _write(data, "speed")

        run_speed(sizes, args.trees, args.workers, args.predict_rows, save)
    if args.part not in ("render", "speed"):
        _write(data, args.part)
    write_markdown(REPORT, render(data) + _notes())


def _write(data: dict[str, Any], part: str) -> None:
    """Record ``data[part]`` with the machine and commit, JSON and Markdown."""
    data[part]["about"] = _about()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    write_markdown(REPORT, render(data) + _notes())


def _notes() -> str:
    path = HERE / "results" / "smerf_notes.md"
    return "\n" + path.read_text() if path.exists() else ""


if __name__ == "__main__":
    main()
