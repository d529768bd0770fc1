"""Reproduce Sathe & Aggarwal, "Similarity Forests" (KDD 2017) with the SimForest kernels.

Run by hand, never in CI, from the repository root on a committed tree::

    python benchmarks/bench_simforest.py [--reps 10] [--trees 100] [--parts 1,2,3,4,5,6]

Writes ``benchmarks/results/simforest.json`` and the generated tables of
``benchmarks/results/simforest.md`` (the discussion at its end is written by
hand after a run).  Protocol (the paper's): z-scored features (scaler fitted
on the training part), stratified 80/20 train/test split per repetition,
accuracy on the test part, 100 trees, r = 1 pair per node.  10 % of the
training part of repetition 0 is held out to tune the SVM (RBF bandwidth and
C); the tuned values are then used for every repetition and every noise or
missing level, and the final models are trained on the whole training part.

Parts: 1 features given; 2 noisy similarity matrices; 3 missing
similarities; 4 edit distance between DNA sequences; 5 bootstrap on/off
(folded into parts 1 and 3); 6 scale (time and evaluations per tree).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from numba import njit
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from distforest.kernels.simfetch import (
    CountingFetch,
    fetch_columns,
    fetch_elementwise,
    fetch_function,
    fetch_rows,
)
from distforest.kernels.simtrees import SimTreeParams, grow_forest, grow_tree, predict_forest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DATA as SHARED_DATA
from _measure import RESULTS as RESULTS_DIR
from _measure import driver_peak_bytes
from _measure import parser as make_parser

HERE = Path(__file__).resolve().parent
DATA = SHARED_DATA
if not DATA.exists():
    DATA = Path("/work/shared/data")
GAMMAS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)  # times 1 / n_features
CS = (0.1, 1.0, 10.0, 100.0)
#: Bounds libsvm on noisy, indefinite precomputed kernels (a ConvergenceWarning says so).
MAX_ITER = 1_000_000


# ----------------------------------------------------------------------------- data
def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Features (float) and integer labels of a benchmark dataset."""
    if name == "WDBC":
        d = load_breast_cancer()
        return d.data.astype(float), d.target.astype(np.int64)
    file, target = {
        "Ionosphere": ("Ionosphere.csv", "Class"),
        "WBC": ("BreastCancer.csv", "Class"),
        "Diabetes": ("PimaIndiansDiabetes.csv", "diabetes"),
        "Splice": ("DNA.csv", "Class"),
    }[name]
    df = pd.read_csv(DATA / file)
    if name == "WBC":
        df = df.drop(columns="Id").dropna()  # 16 rows with a missing Bare.nuclei dropped
    if name == "Ionosphere":
        df = df.drop(columns="V2")  # constant
    y = np.unique(df[target].astype(str), return_inverse=True)[1].astype(np.int64)
    return df.drop(columns=target).to_numpy(dtype=float), y


def dna_sequences() -> tuple[np.ndarray, np.ndarray]:
    """The DNA set's 60-letter sequences as uint8 codes (A=100, C=010, G=001, T=000)."""
    df = pd.read_csv(DATA / "DNA.csv")
    bits = df.iloc[:, :180].to_numpy().reshape(len(df), 60, 3)
    codes = np.where(bits.sum(2) == 0, 3, bits.argmax(2)).astype(np.uint8)
    y = np.unique(df["Class"].astype(str), return_inverse=True)[1].astype(np.int64)
    return codes, y


@njit(cache=True)
def _levenshtein(a, b):  # pragma: no cover - numba
    prev = np.arange(b.shape[0] + 1)
    cur = np.empty_like(prev)
    for i in range(1, a.shape[0] + 1):
        cur[0] = i
        for j in range(1, b.shape[0] + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        prev, cur = cur, prev
    return prev[b.shape[0]]


@njit(cache=True)
def edit_block(A, B):  # pragma: no cover - numba
    out = np.empty((A.shape[0], B.shape[0]))
    for i in range(A.shape[0]):
        for j in range(B.shape[0]):
            out[i, j] = _levenshtein(A[i], B[j])
    return out


# ----------------------------------------------------------------------------- models
def rbf(A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2 * A @ B.T
    return np.exp(-gamma * np.maximum(d2, 0.0))


def cosine(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(A, axis=1)[:, None]
    nb = np.linalg.norm(B, axis=1)[None, :]
    return (A @ B.T) / np.maximum(na * nb, 1e-12)


def kernel(kind: str, A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    if kind == "rbf":
        return rbf(A, B, gamma)
    if kind == "cosine":
        return cosine(A, B)
    return A @ B.T


def simforest(M, y, Q, trees, seed, missing=("stay",), **kw) -> dict[str, np.ndarray]:
    """SimForest predictions for each prediction rule in ``missing`` (one fit per training rule)."""
    seeds = [
        int(s.generate_state(1, np.uint64)[0]) for s in np.random.SeedSequence(seed).spawn(trees)
    ]
    out = {}
    fitted = {}
    for rule in missing:
        train_rule = "larger" if rule == "larger" else "stay"  # "both" trains like "stay"
        if train_rule not in fitted:
            params = SimTreeParams(missing=train_rule, **kw)
            fitted[train_rule] = grow_forest(fetch_rows(M), y, seeds, params, int(y.max()) + 1)
        proba = predict_forest(fitted[train_rule], fetch_columns(Q), Q.shape[0], missing=rule)
        out[rule] = proba.argmax(axis=1)
    return out


def split(X, y, rep):
    Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.2, random_state=rep, stratify=y)
    sc = StandardScaler().fit(Xa)
    return sc.transform(Xa), sc.transform(Xb), ya, yb


def tune(X, y) -> dict[str, float]:
    """SVM RBF (gamma, C) and cosine / dot C on 10 % of repetition 0's training part."""
    Xa, _, ya, _ = split(X, y, 0)
    Xf, Xh, yf, yh = train_test_split(Xa, ya, test_size=0.1, random_state=0, stratify=ya)
    p = X.shape[1]
    best = {}
    for kind, gammas in (("rbf", GAMMAS), ("cosine", (1.0,)), ("dot", (1.0,))):
        scores = []
        for g in gammas:
            K, Kh = kernel(kind, Xf, Xf, g / p), kernel(kind, Xh, Xf, g / p)
            for C in CS:
                svm = SVC(kernel="precomputed", C=C).fit(K, yf)
                scores.append(((svm.predict(Kh) == yh).mean(), g / p, C))
        acc = max(s[0] for s in scores)
        _, gamma, C = next(s for s in scores if s[0] == acc)  # first of the best
        best[f"{kind}_gamma"], best[f"{kind}_C"] = gamma, C
    return best


def svm_precomputed(K, y, Kt, C) -> np.ndarray:
    return SVC(kernel="precomputed", C=C, max_iter=MAX_ITER).fit(K, y).predict(Kt)


def acc(pred, y) -> float:
    return float((pred == y).mean() * 100)


def summary(values) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "std": float(np.std(values)), "n": len(values)}


# ----------------------------------------------------------------------------- parts
def part_features(names, reps, trees, tuned):
    out = {}
    for name in names:
        X, y = load(name)
        t = tuned[name]
        rows: dict[str, list[float]] = {}
        for rep in range(reps):
            Xa, Xb, ya, yb = split(X, y, rep)
            res = {}
            for kind in ("dot", "rbf"):
                M, Q = kernel(kind, Xa, Xa, t["rbf_gamma"]), kernel(kind, Xb, Xa, t["rbf_gamma"])
                res[f"simforest_{kind}"] = acc(simforest(M, ya, Q, trees, rep)["stay"], yb)
                if kind == "rbf":
                    nb = simforest(M, ya, Q, trees, rep, bootstrap=False)["stay"]
                    res["simforest_rbf_no_bootstrap"] = acc(nb, yb)
            rf = RandomForestClassifier(n_estimators=trees, random_state=rep, n_jobs=1)
            res["random_forest"] = acc(rf.fit(Xa, ya).predict(Xb), yb)
            svm = SVC(kernel="rbf", gamma=t["rbf_gamma"], C=t["rbf_C"]).fit(Xa, ya)
            res["svm_rbf"] = acc(svm.predict(Xb), yb)
            for k, v in res.items():
                rows.setdefault(k, []).append(v)
        out[name] = {k: summary(v) for k, v in rows.items()}
        print(name, {k: round(v["mean"], 2) for k, v in out[name].items()}, flush=True)
    return out


def noisy(K, rng, alpha, symmetric):
    noise = rng.uniform(0.0, alpha, size=K.shape)
    if symmetric:
        noise = np.triu(noise) + np.triu(noise, 1).T
    return K + noise


def part_noise(configs, alphas, reps, trees, tuned):
    out = {}
    for name, kind in configs:
        X, y = load(name)
        t = tuned[name]
        key = f"{name} {kind}"
        out[key] = {}
        for alpha in alphas:
            sf, sv = [], []
            for rep in range(reps):
                Xa, Xb, ya, yb = split(X, y, rep)
                rng = np.random.default_rng(1000 + rep)
                g = t["rbf_gamma"]
                M = noisy(kernel(kind, Xa, Xa, g), rng, alpha, True)
                Q = noisy(kernel(kind, Xb, Xa, g), rng, alpha, False)
                sf.append(acc(simforest(M, ya, Q, trees, rep)["stay"], yb))
                sv.append(acc(svm_precomputed(M, ya, Q, t[f"{kind}_C"]), yb))
            out[key][str(alpha)] = {"simforest": summary(sf), "svm": summary(sv)}
            print(key, alpha, round(np.mean(sf), 2), round(np.mean(sv), 2), flush=True)
    return out


def holes(K, rng, frac, symmetric):
    mask = rng.random(K.shape) < frac
    if symmetric:
        mask = np.triu(mask, 1)
        mask = mask | mask.T
    out = K.copy()
    out[mask] = np.nan
    return out


def column_mean_fill(M, Q):
    means = np.nanmean(M, axis=0)
    return np.where(np.isnan(M), means[None, :], M), np.where(np.isnan(Q), means[None, :], Q)


RULES = ("stay", "both", "larger")


def part_missing(configs, fracs, reps, trees, tuned, alpha=0.0, no_bootstrap=False):
    out = {}
    for name, kind in configs:
        X, y = load(name)
        t = tuned[name]
        key = f"{name} {kind}" + (f" noise {alpha}" if alpha else "")
        out[key] = {}
        for frac in fracs:
            rows: dict[str, list[float]] = {}
            for rep in range(reps):
                Xa, Xb, ya, yb = split(X, y, rep)
                rng = np.random.default_rng(2000 + rep)
                g = t["rbf_gamma"]
                M, Q = kernel(kind, Xa, Xa, g), kernel(kind, Xb, Xa, g)
                if alpha:
                    M, Q = noisy(M, rng, alpha, True), noisy(Q, rng, alpha, False)
                M, Q = holes(M, rng, frac, True), holes(Q, rng, frac, False)
                for rule, pred in simforest(M, ya, Q, trees, rep, missing=RULES).items():
                    rows.setdefault(f"simforest_{rule}", []).append(acc(pred, yb))
                if no_bootstrap:
                    pred = simforest(M, ya, Q, trees, rep, bootstrap=False)["stay"]
                    rows.setdefault("simforest_stay_no_bootstrap", []).append(acc(pred, yb))
                Mf, Qf = column_mean_fill(M, Q)
                rows.setdefault("svm", []).append(
                    acc(svm_precomputed(Mf, ya, Qf, t[f"{kind}_C"]), yb)
                )
            out[key][str(frac)] = {k: summary(v) for k, v in rows.items()}
            print(key, frac, {k: round(np.mean(v), 2) for k, v in rows.items()}, flush=True)
    return out


def part_edit(reps, trees, n_objects):
    seqs, y = dna_sequences()
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(seqs.shape[0], size=min(n_objects, seqs.shape[0]), replace=False))
    seqs, y = seqs[idx], y[idx]
    t0 = time.perf_counter()
    D = edit_block(seqs, seqs)
    dense_s = time.perf_counter() - t0
    sf, knn, ks = [], [], []
    ids = np.arange(len(y))
    for rep in range(reps):
        a, b = train_test_split(ids, test_size=0.2, random_state=rep, stratify=y)
        M, Q = D[np.ix_(a, a)], D[np.ix_(b, a)]
        sf.append(acc(simforest(M, y[a], Q, trees, rep, kind="distance")["stay"], y[b]))
        f, h = train_test_split(np.arange(len(a)), test_size=0.1, random_state=0, stratify=y[a])
        best_k = max(
            (1, 3, 5, 9, 15, 25),
            key=lambda k: (
                KNeighborsClassifier(k, metric="precomputed")
                .fit(M[np.ix_(f, f)], y[a][f])
                .score(M[np.ix_(h, f)], y[a][h])
            ),
        )
        ks.append(best_k)
        kn = KNeighborsClassifier(best_k, metric="precomputed").fit(M, y[a])
        knn.append(acc(kn.predict(Q), y[b]))
    # on the fly: edit distances computed only as the trees ask for them
    a, b = train_test_split(ids, test_size=0.2, random_state=0, stratify=y)
    counting = CountingFetch(fetch_function(edit_block, seqs[a]))
    seeds = list(range(trees))
    t0 = time.perf_counter()
    forest = grow_forest(counting, y[a], seeds, SimTreeParams(kind="distance"), 3)
    fly_s = time.perf_counter() - t0
    test_fetch = CountingFetch(fetch_function(edit_block, seqs[a], seqs[b]))
    pred = predict_forest(forest, test_fetch, len(b)).argmax(axis=1)
    return {
        "n_objects": len(y),
        "simforest": summary(sf),
        "knn": summary(knn),
        "knn_k": ks,
        "dense_matrix_seconds": dense_s,
        "on_the_fly": {
            "n_train": len(a),
            "fit_seconds": fly_s,
            "train_evaluations": counting.evaluations,
            "dense_train_evaluations": len(a) * len(a),
            "test_evaluations": test_fetch.evaluations,
            "dense_test_evaluations": len(a) * len(b),
            "accuracy": acc(pred, y[b]),
        },
    }


def part_scale(sizes, n_trees):
    out = {}
    for n in sizes:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, 10))
        y = (X[:, 0] + X[:, 1] * X[:, 2] + 0.5 * rng.normal(size=n) > 0).astype(np.int64)

        def cheap(a, b, X=X):
            return np.exp(-0.1 * ((X[a] - X[b]) ** 2).sum(axis=1))

        fetch = CountingFetch(fetch_elementwise(cheap))
        grow_tree(fetch, y[:50], 0)  # compile
        times, evals, nodes, depth = [], [], [], []
        for s in range(n_trees):
            t0 = time.perf_counter()
            tree = grow_tree(fetch, y, s)
            times.append(time.perf_counter() - t0)
            evals.append(tree.n_evaluations)
            nodes.append(tree.n_nodes)
            depth.append(int(tree.depth.max()))
        out[str(n)] = {
            "seconds_per_tree": summary(times),
            "evaluations_per_tree": summary(evals),
            "evaluations_over_n_log2_n": float(np.mean(evals) / (n * math.log2(n))),
            "nodes": summary(nodes),
            "max_depth": summary(depth),
            "peak_rss_mb": driver_peak_bytes() / 2**20,
        }
        print(n, out[str(n)], flush=True)
    return out


# ----------------------------------------------------------------------------- report
def machine() -> dict[str, object]:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, cwd=HERE,
    ).stdout.strip()  # fmt: skip
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "memory_gb": round(mem, 1),
        "python": platform.python_version(),
        "commit": commit + (" (dirty)" if dirty else ""),
    }


PAPER = {
    "features": {"Ionosphere": (100.0, 94.36, 87.32), "WBC": (96.35, 96.35, 96.35)},
    "noise 2.5": {"Ionosphere rbf": (71.69, 68.59), "Ionosphere cosine": (74.22, 65.91),
                  "Diabetes rbf": (68.44, 64.87)},
    "missing 0.15": {"Ionosphere rbf": (95.49, 77.46), "WBC rbf": (97.00, 90.94),
                     "Splice rbf": (79.81, 74.94)},
}  # fmt: skip


def _ms(d) -> str:
    return f"{d['mean']:.2f} ± {d['std']:.2f}"


def render(result: dict) -> str:
    """Markdown tables of a result dict (the generated part of simforest.md)."""
    m, a = result["machine"], result["args"]
    lines = [
        "## Run",
        "",
        f"- date: {m['date']}; machine: {m['cpus']} cores, {m['memory_gb']} GB; "
        f"Python {m['python']}; single process",
        f"- commit: `{m['commit']}`",
        f"- command: `{result.get('command', '')}`",
        f"- repetitions: {a['reps']} (parts 1-3), {a['edit_reps']} (part 4); trees: {a['trees']}; "
        f"total {result['total_seconds']:.0f} s",
        "- tuned SVM parameters (10 % of repetition 0's training part): "
        + "; ".join(f"{k}: gamma {v['rbf_gamma']:.3g}, C {v['rbf_C']:g}, cosine C "
                    f"{v['cosine_C']:g}" for k, v in result.get("tuned", {}).items()),
        "",
    ]  # fmt: skip
    if "features" in result:
        lines += [
            "## 1. Features given (accuracy %, mean ± std over repetitions)",
            "",
            "| data | SimForest dot | SimForest RBF | SimForest RBF, no bootstrap | RF | SVM RBF "
            "| paper SimForest / RF / SVM |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in result["features"].items():
            paper = PAPER["features"].get(name)
            ps = " / ".join(f"{v:.2f}" for v in paper) if paper else "-"
            lines.append(
                f"| {name} | {_ms(r['simforest_dot'])} | {_ms(r['simforest_rbf'])} | "
                f"{_ms(r['simforest_rbf_no_bootstrap'])} | {_ms(r['random_forest'])} | "
                f"{_ms(r['svm_rbf'])} | {ps} |"
            )
        lines.append("")
    if "noise" in result:
        alphas = list(next(iter(result["noise"].values())))
        lines += [
            "## 2. Noisy similarities, U[0, alpha] added (SimForest / SVC precomputed, accuracy %)",
            "",
            "| data, similarity | "
            + " | ".join(f"alpha {x}" for x in alphas)
            + " | paper at 2.5 |",
            "|---|" + "---|" * (len(alphas) + 1),
        ]
        for key, r in result["noise"].items():
            paper = PAPER["noise 2.5"].get(key)
            cells = [f"{r[x]['simforest']['mean']:.2f} / {r[x]['svm']['mean']:.2f}" for x in alphas]
            ps = f"{paper[0]:.2f} / {paper[1]:.2f}" if paper else "-"
            lines.append(f"| {key} | " + " | ".join(cells) + f" | {ps} |")
        lines.append("")
    if "missing" in result:
        lines += [
            "## 3. Missing similarities (accuracy %, mean ± std)",
            "",
            "| data, similarity | missing | stay (paper rule) | both | larger | stay, no bootstrap "
            "| SVM (column mean) | paper SimForest / SVM |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, fr in result["missing"].items():
            for frac, r in fr.items():
                paper = PAPER["missing 0.15"].get(key) if frac == "0.15" else None
                ps = f"{paper[0]:.2f} / {paper[1]:.2f}" if paper else "-"
                nb = r.get("simforest_stay_no_bootstrap")
                lines.append(
                    f"| {key} | {float(frac):.0%} | {_ms(r['simforest_stay'])} | "
                    f"{_ms(r['simforest_both'])} | {_ms(r['simforest_larger'])} | "
                    f"{_ms(nb) if nb else '-'} | {_ms(r['svm'])} | {ps} |"
                )
        lines.append("")
    if "edit_distance" in result:
        e = result["edit_distance"]
        f = e["on_the_fly"]
        lines += [
            "## 4. DNA sequences, edit distance (no features)",
            "",
            f"{e['n_objects']} sequences of 60 letters decoded from the DNA set; accuracy %.",
            "",
            "| SimForest (distance form) | k-NN (k tuned) | k chosen |",
            "|---|---|---|",
            f"| {_ms(e['simforest'])} | {_ms(e['knn'])} | {e['knn_k']} |",
            "",
            f"On the fly (edit distances computed only when a tree asks): {f['n_train']} "
            f"training sequences, {a['trees']} trees grown in {f['fit_seconds']:.1f} s with "
            f"{f['train_evaluations']:,} evaluations ({f['train_evaluations'] / a['trees']:,.0f} "
            f"per tree; the dense training matrix is {f['dense_train_evaluations']:,}); "
            f"prediction {f['test_evaluations']:,} evaluations (dense "
            f"{f['dense_test_evaluations']:,}); accuracy {f['accuracy']:.2f} %.",
            "",
        ]
    if "scale" in result:
        lines += [
            "## 6. Scale: one tree, cheap callable (RBF on 10 features, element-wise), "
            "single process",
            "",
            "| n | seconds per tree | evaluations per tree | / (n log2 n) | nodes | max depth "
            "| peak RSS MB |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, r in result["scale"].items():
            lines.append(
                f"| {int(n):,} | {_ms(r['seconds_per_tree'])} | "
                f"{r['evaluations_per_tree']['mean']:,.0f} | "
                f"{r['evaluations_over_n_log2_n']:.2f} | "
                f"{r['nodes']['mean']:,.0f} | {r['max_depth']['mean']:.0f} | "
                f"{r['peak_rss_mb']:.0f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = make_parser(__doc__)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--parts", default="1,2,3,4,6")
    ap.add_argument("--edit-objects", type=int, default=1500)
    ap.add_argument("--edit-reps", type=int, default=5)
    ap.add_argument("--scale-sizes", default="10000,100000")
    ap.add_argument("--out", default=str(RESULTS_DIR / "simforest.json"))
    ap.add_argument("--render", help="only print the markdown tables of this JSON result")
    args = ap.parse_args()
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return
    parts = set(args.parts.split(","))
    result: dict = {"machine": machine(), "args": vars(args)}
    result["command"] = "python " + " ".join(
        os.path.relpath(a) if a == __file__ else a for a in sys.argv
    )
    t0 = time.perf_counter()
    names = ["Ionosphere", "WBC", "Diabetes", "Splice", "WDBC"]
    tuned = {n: tune(*load(n)) for n in names} if parts & {"1", "2", "3"} else {}
    result["tuned"] = tuned
    if "1" in parts:
        result["features"] = part_features(names, args.reps, args.trees, tuned)
    if "2" in parts:
        configs = [
            ("Ionosphere", "rbf"),
            ("Ionosphere", "cosine"),
            ("Diabetes", "rbf"),
            ("WBC", "rbf"),
        ]
        result["noise"] = part_noise(
            configs, [0.0, 1.0, 2.0, 2.5, 3.0, 4.0], args.reps, args.trees, tuned
        )
    if "3" in parts:
        configs = [
            ("Ionosphere", "rbf"),
            ("WBC", "rbf"),
            ("Splice", "rbf"),
            ("Diabetes", "rbf"),
            ("WDBC", "rbf"),
        ]
        res = part_missing(configs, [0.15], args.reps, args.trees, tuned, no_bootstrap=True)
        sweep = [("Ionosphere", "rbf"), ("WBC", "rbf")]
        res.update(
            {
                f"sweep {k}": v
                for k, v in part_missing(
                    sweep, [0.05, 0.1, 0.2, 0.3], args.reps, args.trees, tuned
                ).items()
            }
        )
        both = [("Ionosphere", "rbf"), ("Diabetes", "rbf")]
        res.update(part_missing(both, [0.15], args.reps, args.trees, tuned, alpha=1.0))
        result["missing"] = res
    if "4" in parts:
        result["edit_distance"] = part_edit(args.edit_reps, args.trees, args.edit_objects)
        print(result["edit_distance"], flush=True)
    if "6" in parts:
        sizes = [int(s) for s in args.scale_sizes.split(",")]
        result["scale"] = part_scale(sizes, 5)
    result["total_seconds"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("wrote", args.out, "in", round(result["total_seconds"]), "s")


if __name__ == "__main__":
    main()
