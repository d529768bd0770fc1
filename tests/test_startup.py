"""Start-up: a light ``--help``, small runs without a cluster, numba's cache directory.

No wall-clock times are asserted here (machines differ); the measured times
are in benchmarks/results/startup.md (``benchmarks/bench_startup.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import distforest.parallel.cluster
from distforest.cli.main import COMMANDS, cli
from distforest.cli.options import FOREST_DEFAULTS
from distforest.forests.proximity_forest import ProximityForest
from distforest.kernels import jit_cache

#: What ``--help`` must not load (each takes a noticeable share of a second or more).
HEAVY = ("dask", "distributed", "sklearn", "zarr", "xarray", "numba", "pandas", "matplotlib")

#: Every command and subcommand: ``--help`` of each imports none of :data:`HEAVY`.
SUBCOMMANDS = {"knn": ("fit", "predict"), "simforest": ("fit", "predict", "proximity"),
               "smerf": ("fit", "predict", "importances")}  # fmt: skip
HELP_ARGS = [
    ["--help"],
    *([name, "--help"] for name in sorted(COMMANDS)),
    *([name, sub, "--help"] for name, subs in SUBCOMMANDS.items() for sub in subs),
]


def invoke(*args: object) -> click.testing.Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def loaded_after(code: str) -> list[str]:
    """The :data:`HEAVY` modules loaded by ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(set(sys.modules))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    return [m for m in HEAVY if m in modules]


# -- --help ---------------------------------------------------------------------------


def test_group_help_lists_every_command_with_its_short_help():
    result = invoke("--help")
    assert result.exit_code == 0, result.output
    listed = result.output.split("Commands:")[1]
    for name in COMMANDS:
        assert f"\n  {name} " in listed
    assert re.search(r"\n  proximity +Fit a forest on INPUT and write its proximity", listed)
    assert set(cli.list_commands(click.Context(cli))) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_lazy_table_agrees_with_the_command(name):
    """The table's one-line help is the command's own (so the list cannot drift)."""
    command = cli.get_command(click.Context(cli), name)
    assert isinstance(command, click.Command) and command.name in (name, f"{name}_cmd")
    stand_in = click.Command(name, help=COMMANDS[name][1])
    for limit in (30, 45, 80, 200):
        assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit)


def test_unknown_command_is_still_refused():
    result = CliRunner().invoke(cli, ["proximty"])
    assert result.exit_code == 2 and "No such command 'proximty'" in result.output


def test_help_loads_no_heavy_module():
    """``--help`` of the group and of every (sub)command, in one fresh interpreter each
    group of calls: none imports Dask, scikit-learn, Zarr, xarray, numba, pandas."""
    code = (
        "from click.testing import CliRunner\n"
        "from distforest.cli.main import cli\n"
        f"for args in {HELP_ARGS!r}:\n"
        "    result = CliRunner().invoke(cli, args)\n"
        "    assert result.exit_code == 0 and 'Usage:' in result.output, (args, result.output)\n"
    )
    assert loaded_after(code) == []


def test_subcommands_are_all_probed():
    for name, subs in SUBCOMMANDS.items():
        group = cli.get_command(click.Context(cli), name)
        assert isinstance(group, click.Group)
        assert sorted(group.commands) == sorted(subs)
    groups = [n for n in COMMANDS if isinstance(cli.get_command(click.Context(cli), n),
                                                click.Group)]  # fmt: skip
    assert sorted(groups) == sorted(SUBCOMMANDS)


def test_import_of_the_package_and_the_cli_is_light():
    assert loaded_after("import distforest, distforest.cli.main, distforest.errors") == []


def test_the_probe_can_fail():
    """The subprocess probe sees heavy modules when they are imported."""
    assert loaded_after("import distforest\ndistforest.ProximityForest") != []


def test_package_names_load_on_first_use():
    import distforest

    assert distforest.ProximityForest is ProximityForest
    assert set(distforest.__all__) <= set(dir(distforest))
    with pytest.raises(AttributeError, match="no attribute 'ProximityForrest'"):
        distforest.ProximityForrest  # noqa: B018


def test_small_imputation_loads_no_cluster_store_or_jit_module(breast_cancer_csv, tmp_path):
    """A small ``impute`` run (in this process) needs scikit-learn, pandas and Zarr (the
    job's store beside the output: its spec and stages), nothing else heavy: distributed,
    xarray and numba cost a second of start-up.  Of Dask, only its configuration is read
    (distforest's settings live in ``dask.config``; ``import dask.config`` takes about
    0.1 s), never ``dask.array``."""
    out = tmp_path / "imputed.csv"
    args = ["-q", "impute", str(breast_cancer_csv), "--target", "Class", "--drop", "Id",
            "--trees", "4", "--iterations", "2", "--out", str(out)]  # fmt: skip
    code = (f"from distforest.cli.main import cli\ncli({args!r}, standalone_mode=False)\n"
            "import sys\nassert not {'dask.array', 'dask.dataframe'} & set(sys.modules)"
            )  # fmt: skip
    assert loaded_after(code) == ["dask", "sklearn", "zarr", "pandas"]  # (else the probe fails)
    assert out.exists()


@pytest.mark.parametrize("command", ["xforest", "smerf fit"])
def test_small_model_runs_load_neither_xarray_nor_matplotlib(command, breast_cancer_csv,
                                                             tmp_path):  # fmt: skip
    """A small ``xforest`` or ``smerf fit`` writes its store without xarray (opened only to
    read a matrix back) or matplotlib (only for a picture): 0.3-0.5 s of start-up."""
    import pandas as pd

    X = pd.read_csv(breast_cancer_csv).drop(columns=["Id", "Class", "Bare.nuclei"])
    X = X.head(60)
    X.to_csv(tmp_path / "x.csv", index=False)
    values = X.to_numpy(float)
    np.save(tmp_path / "d.npy", np.sqrt(((values[:, None] - values[None]) ** 2).sum(-1)))
    out = tmp_path / "out.zarr"
    args = [*command.split(), str(tmp_path / "x.csv"), "--trees", "4", "--out", str(out)]
    if command == "smerf fit":
        args += ["--distances", str(tmp_path / "d.npy")]
    code = f"from distforest.cli.main import cli\ncli({args!r}, standalone_mode=False)\n"
    loaded = loaded_after(code)
    assert "xarray" not in loaded and "matplotlib" not in loaded, loaded
    assert "zarr" in loaded and (out / "zarr.json").exists()  # (the probe fails otherwise)


def test_not_fitted_error_is_one_class_and_sklearns():
    from sklearn.exceptions import NotFittedError as SklearnNotFitted

    from distforest import errors
    from distforest.errors import NotFittedError

    assert errors.NotFittedError is NotFittedError
    assert issubclass(NotFittedError, SklearnNotFitted)
    assert issubclass(NotFittedError, errors.DistforestError)
    with pytest.raises(AttributeError):
        errors.NotAnError  # noqa: B018


def test_cli_defaults_are_the_estimators():
    """The defaults the command line writes out (for a light ``--help``) are the estimators'."""
    import inspect

    from distforest.apps.impute import ProximityImputer
    from distforest.cli import impute_cmd, simforest_cmd, smerf_cmd, xforest_cmd
    from distforest.forests.simforest import SimilarityForestClassifier
    from distforest.forests.smerf import SMERF
    from distforest.forests.xforest import XForest

    assert FOREST_DEFAULTS == ProximityForest().get_params()
    assert xforest_cmd.XFOREST_DEFAULTS == XForest().get_params()
    assert simforest_cmd.DEFAULTS == SimilarityForestClassifier().get_params()
    assert smerf_cmd.SMERF_DEFAULTS == SMERF().get_params()
    signature = inspect.signature(ProximityImputer.__init__).parameters.items()
    assert impute_cmd.DEFAULTS == {k: p.default for k, p in signature if k != "self"}


def test_names_are_owned_by_the_kernels_and_imported_above():
    """The kernels own the names (kernels.names); constraints import them, never restate them."""
    from distforest.forests import constraints as C
    from distforest.kernels import leafsums, metrics, names, simtrees

    assert metrics.BINARY_MEASURES is names.BINARY_MEASURES is C.BINARY_MEASURES
    assert simtrees.KINDS is names.SIMFOREST_KINDS is C.SIMFOREST_KINDS
    assert simtrees.MISSING is names.SIMFOREST_MISSING is C.SIMFOREST_MISSING
    assert C.KINDS is names.TREE_KINDS and C.PROXIMITY_METHODS is names.PROXIMITY_METHODS
    assert tuple(leafsums.METHOD_CODES) == names.PROXIMITY_METHODS
    assert C.OUT_OF_BAG_METHODS is names.OUT_OF_BAG_METHODS


# -- small runs in this process -------------------------------------------------------


def arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of a Zarr store, by path."""
    out: dict[str, np.ndarray] = {}

    def walk(group: zarr.Group, prefix: str) -> None:
        for name, member in group.members():
            if isinstance(member, zarr.Group):
                walk(member, f"{prefix}{name}/")
            else:
                out[f"{prefix}{name}"] = member[...]

    walk(zarr.open_group(str(path), mode="r"), "")
    return out


@pytest.mark.parametrize("method", ["original", "rfgap"])
def test_small_run_in_process_equals_the_cluster_run(client, breast_cancer_csv, tmp_path,
                                                     monkeypatch, method):  # fmt: skip
    common = ["-q", "proximity", breast_cancer_csv, "--target", "Class", "--drop", "Id",
              "--trees", "12", "--tile-size", "256", "--seed", "3", "--method", method]  # fmt: skip
    on_cluster = invoke(*common, "--scheduler", client.scheduler.address,
                        "--out", tmp_path / "cluster.zarr")  # fmt: skip
    assert on_cluster.exit_code == 0, on_cluster.output

    def no_cluster(**kwargs: object) -> None:
        raise AssertionError(f"a small run without cluster options connected: {kwargs}")

    monkeypatch.setattr(distforest.parallel.cluster, "connect", no_cluster)
    here = invoke(*common, "--out", tmp_path / "here.zarr")
    assert here.exit_code == 0, here.output

    a, b = arrays(tmp_path / "cluster.zarr"), arrays(tmp_path / "here.zarr")
    assert sorted(a) == sorted(b) and len(a) > 5
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].tobytes() == b[name].tobytes(), name
    assert zarr.open_group(str(tmp_path / "here.zarr"), mode="r").attrs["status"] == "complete"


def test_cluster_options_keep_the_cluster(monkeypatch, breast_cancer_csv, tmp_path):
    """--workers asks for a LocalCluster: the job connects even on a small input."""
    calls = []

    def refuse(**kwargs: object) -> None:
        calls.append(kwargs)
        raise RuntimeError("connect called")

    monkeypatch.setattr(distforest.parallel.cluster, "connect", refuse)
    with pytest.raises(RuntimeError, match="connect called"):
        invoke("-q", "proximity", breast_cancer_csv, "--target", "Class", "--trees", "2",
               "--workers", "1", "--out", tmp_path / "p.zarr")  # fmt: skip
    assert calls and calls[0]["n_workers"] == 1


def test_small_pipeline_runs_in_process_and_its_report_says_so(breast_cancer_csv, tmp_path,
                                                              monkeypatch):  # fmt: skip
    monkeypatch.setattr(distforest.parallel.cluster, "connect", None)  # calling it would fail
    path = tmp_path / "small.yaml"
    path.write_text(
        f"input: {{path: {breast_cancer_csv}, target: Class, drop: [Id]}}\n"
        "forest: {n_estimators: 5, random_state: 0}\n"
        f"output: {{dir: {tmp_path / 'out'}, store: run.zarr}}\n"
    )
    result = invoke("-q", "run", path)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["engine"]["engine"] == "in-process" and report["tasks"] is None
    assert report["peak_worker_memory_bytes"] == {} and report["retries"] is None
    md = (tmp_path / "out" / "report.md").read_text()
    assert "- tasks: run in this process (small input, no cluster asked for)" in md


# -- numba's cache directory ----------------------------------------------------------


@pytest.fixture
def numba_env(monkeypatch):
    """Restore NUMBA_CACHE_DIR and numba's own setting after the test."""
    from numba.core import config

    monkeypatch.setattr(config, "CACHE_DIR", config.CACHE_DIR)
    monkeypatch.delenv(jit_cache.ENV, raising=False)
    return monkeypatch


def test_cache_goes_under_xdg_cache_home(numba_env, tmp_path):
    from numba.core import config

    numba_env.setenv("XDG_CACHE_HOME", str(tmp_path))
    chosen = jit_cache.configure_cache()
    assert chosen == str(tmp_path / "distforest" / "numba") == os.environ[jit_cache.ENV]
    assert config.CACHE_DIR == chosen and Path(chosen).is_dir()


def test_users_own_numba_cache_dir_is_kept(numba_env, tmp_path):
    numba_env.setenv(jit_cache.ENV, str(tmp_path / "mine"))
    numba_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jit_cache.configure_cache() == str(tmp_path / "mine")
    assert not (tmp_path / "xdg").exists()


def test_unwritable_cache_home_falls_back_to_a_private_temporary_dir(numba_env, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    numba_env.setenv("XDG_CACHE_HOME", str(blocker))
    chosen = Path(jit_cache.configure_cache())
    assert blocker not in chosen.parents and chosen.is_dir()
    assert chosen.name.startswith("distforest-numba-") and (chosen.stat().st_mode & 0o077) == 0


def test_kernels_compile_into_the_cache_dir(tmp_path):
    """A fresh process caches a compiled kernel under XDG_CACHE_HOME; one with nowhere
    to write there still imports and runs the kernels (from a temporary cache)."""
    # a kernel that compiles in 0.4 s (the leaf-count kernels take 3.5 s), checked
    # against splitmix64 in Python's integers
    code = (
        "import numpy as np\n"
        "from distforest.kernels.rptrees import GOLDEN, MIX_1, MIX_2, child_key as f\n"
        "z, m = 7 ^ GOLDEN, 2**64\n"
        "z = ((z ^ (z >> 30)) * MIX_1) % m\n"
        "z = ((z ^ (z >> 27)) * MIX_2) % m\n"
        "assert int(f(np.uint64(7), np.int64(0))) == z ^ (z >> 31)\n"
        "print(f._cache._cache_path)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != jit_cache.ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "XDG_CACHE_HOME": str(tmp_path)})  # fmt: skip
    where = Path(out.stdout.strip())
    assert tmp_path / "distforest" / "numba" in where.parents
    assert any(p.name.startswith("rptrees.child_key") for p in where.iterdir())
    (tmp_path / "file").write_text("")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "XDG_CACHE_HOME": str(tmp_path / "file")})  # fmt: skip
    assert "distforest-numba-" in out.stdout


# -- the end of a command's process -------------------------------------------------------


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip


#: A reference cycle whose finaliser writes a file, left as garbage.
CYCLE = (
    "import gc, sys\n"
    "class Holder:\n"
    "    def __del__(self):\n"
    "        with open(sys.argv[1], 'w') as f: f.write('finalised')\n"
    "h = Holder(); h.me = h; del h\n"
)


def test_exit_spares_old_objects_but_collects_young_garbage(tmp_path):
    """After spare_exit_collection the old objects are frozen (skipped by the collections
    of the interpreter's shutdown), while the young garbage is still collected: the
    finaliser of a cycle left just before the end runs, as on a plain exit."""
    out = tmp_path / "cycle.txt"
    code = CYCLE + (
        "from distforest.cli.main import spare_exit_collection\n"
        "spare_exit_collection()\n"
        "print(gc.get_freeze_count())\n"
    )
    done = run_python(code, str(out))
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) > 1_000  # the modules' objects
    assert out.read_text() == "finalised"


def test_a_frozen_cycle_is_never_collected(tmp_path):
    """The probe above can fail: a cycle frozen before it is collected is never
    finalised (why the young generations are collected first)."""
    out = tmp_path / "cycle.txt"
    assert run_python(CYCLE + "gc.freeze()\n", str(out)).returncode == 0
    assert not out.exists()
    assert run_python(CYCLE, str(out)).returncode == 0  # a plain exit collects it
    assert out.read_text() == "finalised"


@pytest.mark.parametrize(("argv", "status"), [(["--version"], 0), (["proximity"], 2)])
def test_main_keeps_the_exit_status_and_the_exit_handlers(argv, status, tmp_path):
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('handlers ran', gc.get_freeze_count() > 0))\n"
        "from distforest.cli.main import main\n"
        "sys.argv = ['distforest', *sys.argv[1:]]\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == status, done.stderr
    assert done.stdout.strip().endswith("handlers ran True")


def test_what_jobs_re_exports_for_the_shell_resolves_and_loads_nothing_heavy():
    """Every name of ``distforest.jobs.SHELL`` is found (a renamed function fails here, not
    in a user's command), and importing ``distforest.jobs`` loads none of :data:`HEAVY`."""
    import distforest.jobs as jobs

    for name in jobs.SHELL:
        assert getattr(jobs, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        jobs.nothing_here  # noqa: B018
    assert loaded_after("import distforest.jobs") == []
