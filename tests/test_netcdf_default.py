"""``xr.open_zarr(store).to_netcdf("x.nc")`` works on the default install (issue 44, point 4).

The default install is the core dependencies of pyproject.toml: the netCDF engines
that only the test extra brings are made unimportable in a fresh interpreter, which
then writes a proximity store with xarray's default engine and reads it back.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import xarray as xr
from sklearn.datasets import load_iris

from distforest import ProximityForest, execution

ROOT = Path(__file__).resolve().parents[1]
#: Import name of each netCDF engine package (distribution name lower-cased).
ENGINE_MODULES = {"netcdf4": "netCDF4", "h5netcdf": "h5netcdf", "h5py": "h5py"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[;! ]", r, maxsplit=1)[0].lower() for r in requirements}


def core_and_extra() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set().union(*map(_names, project["optional-dependencies"].values()))
    return _names(project["dependencies"]), extras


def test_a_netcdf4_engine_is_a_core_dependency():
    core, _ = core_and_extra()
    assert "h5netcdf" in core and "h5py" in core


def test_to_netcdf_with_the_default_engine_on_the_core_dependencies(tmp_path):
    X, y = load_iris(return_X_y=True)
    store = tmp_path / "prox.zarr"
    with execution("synchronous"):
        ProximityForest(8, random_state=0).fit(X, y).proximity(store=store)
    core, extra = core_and_extra()
    blocked = sorted(ENGINE_MODULES[n] for n in (extra - core) if n in ENGINE_MODULES)
    script = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None  # not installed by default\n"
        "import xarray as xr\n"
        f"xr.open_zarr({str(store)!r}).to_netcdf({str(tmp_path / 'x.nc')!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    back = xr.open_dataset(tmp_path / "x.nc")
    np.testing.assert_array_equal(back["proximity"].values, xr.open_zarr(store)["proximity"].values)
    np.testing.assert_array_equal(back["inbag"].values, xr.open_zarr(store)["inbag"].values)
