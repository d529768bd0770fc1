"""A job is a list of stages (issue 39): for every kind of job, the dry run prints the
stages the run executes, writes nothing, the run writes its report, and a second run on
the same output while the first holds it is refused."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.errors import BusyError
from distforest.store.lock import StoreLock
from distforest.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]

BC = ROOT / "distforest" / "data" / "breast_cancer.csv"
#: A pipeline of each kind that ships none: name -> its YAML.
WRITTEN = {
    "similarity": f"kind: similarity\ninput: {{path: {BC}, drop: [Id, Class, Bare.nuclei]}}\n"
                  "similarity: {metric: euclidean, normalize: range, tile_size: 128}\n"
                  "output: {dir: OUT, store: similarity.zarr}\n",
}  # fmt: skip
#: Pipeline -> (its store under output.dir, --set items that keep it small).
KINDS = {
    "similarity": ("similarity.zarr", []),
    "main": ("breast_cancer.zarr", ["forest.n_estimators=6", "forest.tile_size=256",
                          "impute.n_estimators=5", "impute.iterations=1"]),
    "xforest_cluster": ("ionosphere_xforest.zarr", ["xforest.n_estimators=6"]),
    "simforest": ("model.zarr", ["simforest.n_estimators=4"]),
    "smerf": ("model.zarr", ["smerf.n_estimators=4"]),
}  # fmt: skip


def _args(tmp_path: Path, pipeline: str) -> list[str]:
    sets = [f"output.dir={tmp_path / 'out'}", *KINDS[pipeline][1]]
    path = ROOT / "pipelines" / f"{pipeline}.yaml"
    if pipeline in WRITTEN:
        path = tmp_path / f"{pipeline}.yaml"
        if not path.exists():
            path.write_text(WRITTEN[pipeline].replace("OUT", str(tmp_path / "out")))
    return [str(path), *(a for s in sets for a in ("--set", s))]


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and the digest of its bytes."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def _planned_stages(output: str) -> list[tuple[str, int]]:
    """(name, tasks) of each stage the dry run printed."""
    names = re.findall(r"^    \d+\. (\w+):", output, flags=re.M)
    tasks = [int(t.replace(",", "")) for t in re.findall(r"^ {20}([\d,]+) tasks, about", output,
                                                         flags=re.M)]  # fmt: skip
    assert len(names) == len(tasks) > 0, output
    return list(zip(names, tasks, strict=True))


@pytest.mark.parametrize("pipeline", list(KINDS))
def test_the_dry_run_prints_the_stages_the_run_executes(tmp_path, monkeypatch, pipeline):
    monkeypatch.chdir(ROOT)  # the shipped pipelines name their input relative to the root
    _args(tmp_path, pipeline)  # (a pipeline written by the test: written now, before)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("kept\n")
    before = _tree(tmp_path)
    dry = CliRunner().invoke(cli, ["run", *_args(tmp_path, pipeline), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert _tree(tmp_path) == before  # nothing written, nothing changed
    planned = _planned_stages(dry.output)

    store = tmp_path / "out" / KINDS[pipeline][0]
    with StoreLock(store, "other-run"):  # another live run holds the output
        busy = CliRunner().invoke(cli, ["-q", "run", *_args(tmp_path, pipeline)])
    assert busy.exit_code == BusyError.exit_code, busy.output
    assert "other-run" in busy.output or "lock" in busy.output.lower(), busy.output
    assert not store.exists()

    result = CliRunner().invoke(cli, ["-q", "run", *_args(tmp_path, pipeline)])
    assert result.exit_code == 0, result.output
    record = RunStore.open(store).attrs["stages"]
    ran = [(name, entry["planned_tasks"]) for name, entry in record.items()
           if "planned_tasks" in entry]  # fmt: skip
    assert ran == planned  # the same stages, in the same order, with the same tasks
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [n for n in report["stages"] if n in dict(planned)] == [n for n, _ in planned]
    for name, _ in planned:  # each stage's estimate beside its measurement
        entry = report["stages"][name]
        assert entry["seconds"] >= 0 and entry["process_peak_bytes"] > 0
        assert set(entry["estimate"]) == {"cpu_seconds", "worker_bytes"}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| stage | seconds | estimate (core-s) |" in md
    assert all(f"| {name} |" in md for name, _ in planned)
    assert (tmp_path / "out" / "notes.txt").read_text() == "kept\n"


ION = ROOT / "distforest" / "data" / "ionosphere.csv"
#: Breast-cancer rows with their class, a small forest.
FOREST = ["--target", "Class", "--drop", "Id", "--trees", "5"]
#: A k-NN model's training rows: breast cancer's complete columns, its class.
KNN = ["--target", "Class", "--drop", "Id", "--drop", "Bare.nuclei"]
#: Command -> (its arguments but --out, its output file, its store beside it; None: the
#: output is the store).  "P" is a proximity store of breast cancer (the model scored).
COMMANDS = {
    "similarity": ([str(BC), "--drop", "Id", "--drop", "Bare.nuclei", "--drop", "Class",
                    "--tile-size", "128"], "s.zarr", None),
    "neighbors": ([str(BC), "--drop", "Id", "--drop", "Bare.nuclei", "--drop", "Class"],
                  "s.zarr", None),
    "proximity": ([str(BC), "--drop", "Bare.nuclei", *FOREST, "--tile-size", "256"], "s.zarr",
                  None),
    "proximity top-k": ([str(BC), "--drop", "Bare.nuclei", *FOREST, "--top-k", "5",
                         "--tile-size", "256"], "s.zarr", None),
    "outliers": ([str(BC), *FOREST, "--plot", "PLOT"], "o.csv", "o.run.zarr"),
    "mislabels": ([str(BC), *FOREST, "--top", "3"], "o.csv", "o.run.zarr"),
    "mds": ([str(BC), *FOREST, "--components", "3", "--plot", "PLOT"], "o.csv", "o.run.zarr"),
    "importances": ([str(BC), *FOREST, "--repeats", "2"], "o.csv", "o.run.zarr"),
    "cluster": (["X", "--method", "kernel-kmeans", "--k", "2", "--n-init", "2",
                 "--truth", f"{ION}:Class", "--plot", "PLOT"], "c.csv", "c.run.zarr"),
    "simforest proximity": (["M", "--tile-size", "256"], "p.zarr", None),
    "simforest predict": (["M", str(ION)], "pr.csv", "pr.run.zarr"),
    "smerf fit": ([str(BC), "--drop", "Id", "--drop", "Class", "--drop", "Bare.nuclei",
                   "--trees", "5", "--distances", "D"], "m.zarr", None),
    "smerf predict": (["S", str(BC), "--drop", "Id", "--drop", "Class", "--drop", "Bare.nuclei",
                       "--tile-size", "256"], "d.zarr", None),
    "impute": ([str(BC), *FOREST[:4], "--trees", "4", "--iterations", "2", "--seed", "0"],
               "i.csv", "i.run.zarr"),
    "knn fit": ([str(BC), *KNN, "--k", "3"], "m.zarr", None),
    "knn predict": (["K", str(BC)], "pr.csv", "pr.run.zarr"),
    "score": (["P", str(BC), "--id", "Id"], "sc.csv", "sc.run.zarr"),
    "simforest fit": ([str(ION), "--target", "Class", "--trees", "6"], "f.zarr", None),
    "xforest": ([str(ION), "--target", "Class", "--trees", "10", "--seed", "0", "--tile-size",
                 "128"], "x.zarr", None),
}  # fmt: skip


def _command(tmp_path: Path, command: str) -> tuple[list[str], Path, Path]:
    """The command's arguments writing into ``tmp_path / "o"``, its output and its store
    (``cluster``: of an X-Forest store written first, outside that folder)."""
    given, name, store = COMMANDS[command]
    folder = tmp_path / "o"
    if command == "cluster" and not (tmp_path / "x.zarr").exists():
        made = CliRunner().invoke(cli, ["-q", "xforest", str(ION), "--target", "Class",
                                        "--trees", "30", "--tile-size", "128",
                                        "--out", str(tmp_path / "x.zarr")])  # fmt: skip
        assert made.exit_code == 0, made.output
    if command.startswith("simforest") and not (tmp_path / "m.zarr").exists():
        fit = ["simforest", "fit", str(ION), "--target", "Class", "--trees", "6"]
        made = CliRunner().invoke(cli, ["-q", *fit, "--out", str(tmp_path / "m.zarr")])
        assert made.exit_code == 0, made.output
    if command.startswith("smerf") and not (tmp_path / "D.npy").exists():
        X = pd.read_csv(BC).drop(columns=["Id", "Class", "Bare.nuclei"]).to_numpy(float)
        np.save(tmp_path / "D.npy", np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1)))
    if command == "smerf predict" and not (tmp_path / "s.zarr").exists():
        fit = ["smerf", "fit", str(BC), "--drop", "Id", "--drop", "Class", "--drop",
               "Bare.nuclei", "--trees", "5", "--distances", str(tmp_path / "D.npy")]  # fmt: skip
        made = CliRunner().invoke(cli, ["-q", *fit, "--out", str(tmp_path / "s.zarr")])
        assert made.exit_code == 0, made.output
    if command == "knn predict" and not (tmp_path / "k.zarr").exists():
        made = CliRunner().invoke(cli, ["-q", "knn", "fit", str(BC), *KNN, "--k", "3",
                                        "--out", str(tmp_path / "k.zarr")])  # fmt: skip
        assert made.exit_code == 0, made.output
    if command == "score" and not (tmp_path / "p.zarr").exists():
        made = CliRunner().invoke(cli, ["-q", "proximity", str(BC), *FOREST,
                                        "--out", str(tmp_path / "p.zarr")])  # fmt: skip
        assert made.exit_code == 0, made.output
    places = {"X": tmp_path / "x.zarr", "M": tmp_path / "m.zarr", "S": tmp_path / "s.zarr",
              "D": tmp_path / "D.npy", "PLOT": folder / "p.png", "K": tmp_path / "k.zarr",
              "P": tmp_path / "p.zarr"}  # fmt: skip
    args = [str(places.get(a, a)) for a in given]
    return (
        [*command.removesuffix(" top-k").split(), *args, "--out", str(folder / name)],
        folder / name,
        folder / (store or name),
    )


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_runs_the_stages_its_dry_run_printed(tmp_path, command):
    """The commands that are job kinds: the dry run writes nothing, the run executes its
    stages (names and tasks), reports, refuses a concurrent run and is not repeated."""
    args, out, store = _command(tmp_path, command)
    before = _tree(tmp_path)
    dry = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert not (tmp_path / "o").exists() and _tree(tmp_path) == before
    planned = _planned_stages(dry.output)
    with StoreLock(store, "other-run"):
        busy = CliRunner().invoke(cli, ["-q", *args])
    assert busy.exit_code == BusyError.exit_code, busy.output
    assert "other-run" in busy.output, busy.output
    assert not out.exists()
    result = CliRunner().invoke(cli, ["-q", *args])
    assert result.exit_code == 0, result.output
    assert out.exists() and RunStore.open(store).is_complete
    record = RunStore.open(store).attrs["stages"]
    assert [(n, e["planned_tasks"]) for n, e in record.items() if "planned_tasks" in e] == planned
    report = json.loads((out.parent / "report.json").read_text())
    assert report["store"] == str(store.resolve()) or report["store"].endswith(store.name)
    assert [n for n in report["stages"]] == [n for n, _ in planned]
    written = _tree(out.parent)
    again = CliRunner().invoke(cli, ["-q", *args])  # (the summary says so, not a log line)
    assert again.exit_code == 0 and "already complete" in again.output, again.output
    assert {k: v for k, v in _tree(out.parent).items() if not k.startswith("report")} == {
        k: v for k, v in written.items() if not k.startswith("report")
    }


#: Command -> (its pipeline form: the YAML, what it writes under output.dir).  Words of
#: the YAML: OUT output.dir, BC and ION the bundled tables, DIST the observed distances,
#: MODEL a SimForest model, PM a proximity store (the command's inputs, made by _command).
#: What it writes: a file (bytes compared) or a store (every chunk of every array the
#: command wrote, byte for byte; a pipeline's store may hold more, e.g. a proximity), or
#: STORE:ARRAY, that array only (``simforest proximity``: a pipeline's model chunks its
#: leaves by its tile_size, the model of ``simforest fit`` by its rows; same values).
PIPELINE_FORMS = {
    "similarity": ("kind: similarity\ninput: {path: BC, drop: [Id, Bare.nuclei, Class]}\n"
                   "similarity: {tile_size: 128}\noutput: {dir: OUT, store: s.zarr}\n",
                   "s.zarr"),
    "neighbors": ("kind: knn\ninput: {path: BC, drop: [Id, Bare.nuclei, Class]}\n"
                  "neighbors: {k: 10, out: s.zarr}\noutput: {dir: OUT}\n", "s.zarr"),
    "proximity": ("input: {path: BC, target: Class, drop: [Id, Bare.nuclei]}\n"
                  "forest: {n_estimators: 5, random_state: 0, tile_size: 256}\n"
                  "output: {dir: OUT, store: run.zarr}\n", "run.zarr"),
    "proximity top-k": ("input: {path: BC, target: Class, drop: [Id, Bare.nuclei]}\n"
                        "forest: {n_estimators: 5, random_state: 0, tile_size: 256}\n"
                        "proximity: {top_k: 5}\noutput: {dir: OUT, store: run.zarr}\n",
                        "run.zarr"),
    "outliers": ("input: {path: BC, target: Class, drop: [Id]}\n"
                 "forest: {n_estimators: 5, random_state: 0}\n"
                 "outliers: {out: o.csv, plot: p.png}\noutput: {dir: OUT}\n", "o.csv"),
    "mislabels": ("input: {path: BC, target: Class, drop: [Id]}\n"
                  "forest: {n_estimators: 5, random_state: 0, task: classification}\n"
                  "mislabels: {out: o.csv}\noutput: {dir: OUT}\n", "o.csv"),
    "mds": ("input: {path: BC, target: Class, drop: [Id]}\n"
            "forest: {n_estimators: 5, random_state: 0}\n"
            "mds: {out: o.csv, components: 3}\noutput: {dir: OUT}\n", "o.csv"),
    "importances": ("kind: importances\ninput: {path: BC, target: Class, drop: [Id]}\n"
                    "forest: {n_estimators: 5, random_state: 0}\n"
                    "importances: {out: o.csv, repeats: 2}\noutput: {dir: OUT}\n", "o.csv"),
    "cluster": ("kind: xforest\ninput: {path: ION, target: Class}\n"
                "xforest: {n_estimators: 30, random_state: 0, tile_size: 128}\n"
                "clustering: {method: kernel-kmeans, k: 2, n_init: 2, out: c.csv}\n"
                "output: {dir: OUT}\n", "c.csv"),
    "simforest proximity": ("kind: simforest\ninput: {path: ION, target: Class}\n"
                            "simforest: {n_estimators: 6, random_state: 0, tile_size: 256}\n"
                            "output: {dir: OUT, store: run.zarr}\n", "run.zarr:proximity"),
    "simforest predict": ("kind: simforest-predict\nmodel: MODEL\ninput: {path: ION}\n"
                          "predict: {out: pr.csv}\noutput: {dir: OUT}\n", "pr.csv"),
    "smerf fit": ("kind: smerf\ninput: {path: BC, drop: [Id, Class, Bare.nuclei]}\n"
                  "smerf: {n_estimators: 5, random_state: 0, distances: DIST}\n"
                  "output: {dir: OUT, store: run.zarr}\n", "run.zarr"),
    "smerf predict": ("kind: smerf\ninput: {path: BC, drop: [Id, Class, Bare.nuclei]}\n"
                      "smerf: {n_estimators: 5, random_state: 0, tile_size: 256, "
                      "distances: DIST}\ndistance: {oob: false, out: d.zarr}\n"
                      "output: {dir: OUT}\n", "d.zarr"),
    "impute": ("input: {path: BC, target: Class, drop: [Id]}\n"
               "forest: {n_estimators: 4, random_state: 0}\n"
               "impute: {out: i.csv, n_estimators: 4, iterations: 2}\noutput: {dir: OUT}\n",
               "i.csv"),
    "knn fit": ("kind: knn\ninput: {path: BC, target: Class, drop: [Id, Bare.nuclei]}\n"
                "knn: {k: 3, model: m.zarr}\noutput: {dir: OUT}\n", "m.zarr"),
    "knn predict": ("kind: knn\ninput: {path: BC, target: Class, drop: [Id, Bare.nuclei]}\n"
                    "knn: {k: 3, model: m.zarr, predict: {input: BC, out: pr.csv}}\n"
                    "output: {dir: OUT}\n", "pr.csv"),
    "score": ("model: PM\ninput: {path: BC, id: Id}\nscore: {out: sc.csv}\n"
              "output: {dir: OUT}\n", "sc.csv"),
    "simforest fit": ("kind: simforest\ninput: {path: ION, target: Class}\n"
                      "simforest: {n_estimators: 6}\noutput: {dir: OUT}\n", "simforest.zarr"),
    "xforest": ("kind: xforest\ninput: {path: ION, target: Class}\n"
                "xforest: {n_estimators: 10, random_state: 0, tile_size: 128}\n"
                "output: {dir: OUT, store: run.zarr}\n", "run.zarr"),
}  # fmt: skip


@pytest.mark.parametrize("command", list(PIPELINE_FORMS))
def test_a_command_and_its_pipeline_form_write_the_same_bytes(tmp_path, command):
    """Every computing command and its pipeline form (a kind of its own, or a section of
    another kind's pipeline: ``cluster`` an X-Forest pipeline's clustering against
    ``xforest`` then ``cluster``, ``impute`` a proximity pipeline's) write the same bytes."""
    assert set(PIPELINE_FORMS) == set(COMMANDS)
    args, out, _ = _command(tmp_path, command)
    result = CliRunner().invoke(cli, ["-q", *args])
    assert result.exit_code == 0, result.output
    text, name = PIPELINE_FORMS[command]
    folder = tmp_path / "piped"
    words = {"OUT": folder, "BC": BC, "ION": ION, "DIST": tmp_path / "D.npy",
             "MODEL": tmp_path / "m.zarr", "PM": tmp_path / "p.zarr"}  # fmt: skip
    yaml = tmp_path / "p.yaml"
    yaml.write_text(re.sub(r"\b(OUT|BC|ION|DIST|MODEL|PM)\b", lambda m: str(words[m[1]]), text))
    run = CliRunner().invoke(cli, ["-q", "run", str(yaml)])
    assert run.exit_code == 0, run.output
    if out.suffix == ".zarr":  # every array's chunks the command wrote (or ARRAY's)
        name, _, array = name.partition(":")
        command_chunks = {k: v for k, v in _tree(out).items()
                          if re.match(rf"{array}(.*/)?c/", k)}  # fmt: skip
        piped = {k: v for k, v in _tree(folder / name).items() if k in command_chunks}
        assert piped == command_chunks and len(piped) >= 2, sorted(set(command_chunks) - set(piped))
    else:
        assert (folder / name).read_bytes() == out.read_bytes() and out.stat().st_size > 500


#: Command -> where the run is SIGKILLed (``DISTFOREST_SIGKILL_AT``): ``STAGE:N`` once the
#: stage finished N of its tasks, ``STAGE`` when its work ended, before it is recorded.
KILLS = {"similarity": "tiles:7", "neighbors": "neighbors", "proximity": "tiles:3",
         "proximity top-k": "neighbors:1", "outliers": "outliers", "mislabels": "fit:3",
         "mds": "fit:2", "importances": "importances", "cluster": "clustering",
         "simforest proximity": "tiles:2", "simforest predict": "predict",
         "smerf fit": "fit", "smerf predict": "tiles:4", "impute": "impute",
         "knn fit": "fit", "knn predict": "predict", "score": "score",
         "simforest fit": "fit", "xforest": "tiles:3"}  # fmt: skip
#: Those in ``make test`` (kinds of different stage shapes); the others are marked slow.
KILLED_FAST = ("similarity", "outliers", "impute", "xforest")


KILLED = [c if c in KILLED_FAST else pytest.param(c, marks=pytest.mark.slow) for c in KILLS]


@pytest.mark.parametrize("command", KILLED)
def test_a_command_killed_by_sigkill_in_a_stage_resumes_to_the_same_bytes(tmp_path, command):
    """Every computing command, SIGKILLed (the whole run, its process group) at a set
    point of a stage: run again, it takes over the dead run's lock, resumes from what the
    killed run finished and writes the bytes of an uninterrupted run, its store complete."""
    import os
    import signal
    import subprocess
    import sys

    assert set(KILLS) == set(COMMANDS)  # every command (19 kinds with top-k proximity)
    args, out, store = _command(tmp_path, command)
    clean = tmp_path / "clean"
    clean_args = [a.replace(str(tmp_path / "o"), str(clean)) for a in args]
    assert CliRunner().invoke(cli, ["-q", *clean_args]).exit_code == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DISTFOREST_SIGKILL_AT": KILLS[command]}
    log = tmp_path / "killed.log"
    with log.open("w") as fh:
        killed = subprocess.run([sys.executable, "-m", "distforest", "-q", *args], env=env,
                                start_new_session=True, stdout=fh, stderr=subprocess.STDOUT,
                                timeout=600, check=False)  # fmt: skip
    stage = KILLS[command].partition(":")[0]
    assert killed.returncode == -signal.SIGKILL, log.read_text()
    assert f"SIGKILL in stage {stage}" in log.read_text(), log.read_text()
    assert store.exists() and not RunStore.open(store).is_complete
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0, again.output
    assert "resumed" in again.output, again.output
    assert RunStore.open(store).is_complete
    if stage == "tiles":  # the tiles the killed run wrote are kept, not written again
        kept = re.search(r"resuming \w+: (\d+) of \d+ tiles already written", again.output)
        assert kept and int(kept.group(1)) >= int(KILLS[command].partition(":")[2]), again.output

    def files(folder: Path) -> dict[str, str]:
        # zarr writes a chunk to NAME.<uuid>.partial, then renames it: a kill between the
        # two leaves that empty file behind; it is no chunk (the resumed run wrote NAME)
        return {k: v for k, v in _tree(folder).items()
                if not k.startswith("report") and ".run.zarr" not in k
                and not (k.endswith((".json", ".partial")) or ".lock" in k)}  # fmt: skip

    assert files(clean) == files(out.parent) and len(files(clean)) >= 1


def test_the_kill_point_is_read_from_the_environment(monkeypatch):
    """``DISTFOREST_SIGKILL_AT``: unset, no kill point; ``STAGE`` or ``STAGE:N``; anything
    else refused with the form to write."""
    from distforest.errors import ParameterError
    from distforest.jobs.runs import KILL_AT, KillPoint

    monkeypatch.delenv(KILL_AT, raising=False)
    assert KillPoint.from_env() is None
    monkeypatch.setenv(KILL_AT, "tiles:3")
    assert KillPoint.from_env() == KillPoint("tiles", 3)
    monkeypatch.setenv(KILL_AT, "fit")
    assert KillPoint.from_env() == KillPoint("fit", None)
    for bad in ("tiles:0", "tiles:x", ":3"):
        monkeypatch.setenv(KILL_AT, bad)
        with pytest.raises(ParameterError, match=rf"{KILL_AT}='{bad}': expected STAGE or "
                           r"STAGE:N"):  # fmt: skip
            KillPoint.from_env()
