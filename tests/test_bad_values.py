"""Bad values generated from the constraint objects: every estimator refuses each one.

As scikit-learn's ``generate_invalid_param_val``: each constraint of
``forests.constraints`` knows values it refuses (``bad_values``); every
estimator's ``fit`` must refuse each of them, for each of its parameters, with
a ParameterError naming the parameter; and the command line and the pipeline
loader answer a bad value with the message Python gives.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from sklearn.datasets import load_iris

from distforest import (
    KNNClassifier,
    KNNRegressor,
    ProximityForest,
    ProximityImputer,
    SimilarityForestClassifier,
    XForest,
    execution,
)
from distforest.cli.main import cli
from distforest.errors import ParameterError
from distforest.forests import constraints as C
from distforest.forests.smerf import SMERF

PACKAGE = Path(__file__).resolve().parents[1] / "distforest"
X, Y = load_iris(return_X_y=True)
X, Y = X[::5], Y[::5]  # 30 rows: nothing is fitted, the parameters are refused first
D = np.abs(X[:, None, 0] - X[None, :, 0])
S = np.exp(-D)
FITS = {
    ProximityForest: (X, Y),
    XForest: (X,),
    SimilarityForestClassifier: (S, Y),
    SMERF: (X, D),
    ProximityImputer: (np.where(np.eye(30, 4, dtype=bool), np.nan, X),),
    KNNClassifier: (X, Y),
    KNNRegressor: (X, X[:, 0]),
}


def _cases():
    for cls in FITS:
        for name, constraint in cls._parameter_constraints.items():
            for bad in constraint.bad_values():
                yield pytest.param(cls, name, bad, id=f"{cls.__name__}-{name}-{bad!r}")


def test_every_constraint_generates_bad_values():
    """Only parameters checked by the code that uses them (Checked) generate none."""
    for cls in FITS:
        for name, constraint in cls._parameter_constraints.items():
            assert constraint.bad_values() or isinstance(constraint, C.Checked), (cls, name)
            for bad in constraint.bad_values():
                with pytest.raises(ParameterError, match=re.escape(name)):
                    constraint.check(name, bad)


@pytest.mark.parametrize(("cls", "name", "bad"), list(_cases()))
def test_every_estimator_refuses_every_generated_bad_value(cls, name, bad):
    estimator = cls().set_params(**{name: bad})  # __init__ only stores (scikit-learn's contract)
    with execution("synchronous"), pytest.raises(ParameterError) as refused:
        estimator.fit(*FITS[cls])
    assert str(refused.value).startswith(name), (name, bad, str(refused.value))
    assert repr(bad) in str(refused.value)  # the message shows the bad value


def _python_message(name: str, value: object, constraints=C.FOREST_CONSTRAINTS) -> str:
    with pytest.raises(ParameterError) as refused:
        constraints[name].check(name, value)
    return str(refused.value)


@pytest.mark.parametrize("name", ["n_estimators", "kind", "bootstrap", "max_samples",
                                  "max_features", "min_samples_leaf"])  # fmt: skip
def test_pipeline_keys_get_python_message_for_each_bad_value(tmp_path, name):
    base = (
        f"input: {{path: {PACKAGE / 'data' / 'breast_cancer.csv'}, target: Class, drop: [Id]}}\n"
        f"output: {{dir: {tmp_path}}}\n"
    )
    path = tmp_path / "p.yaml"
    for bad in C.FOREST_CONSTRAINTS[name].bad_values():
        if bad is None:
            continue  # null in a pipeline file means the default (jobs.pipeline_schema)
        path.write_text(base + yaml.safe_dump({"forest": {name: bad}}))
        result = CliRunner().invoke(cli, ["validate", str(path)])
        want = f"forest.{_python_message(name, bad)}"
        assert result.exit_code == 4 and want in " ".join(result.output.split()), (
            bad,
            result.output,
        )


@pytest.mark.parametrize(
    ("command", "cls", "name", "out"),
    [("proximity", ProximityForest, "max_features", "o.zarr"),
     ("impute", ProximityImputer, "max_samples", "o.csv")],
)  # fmt: skip
def test_command_line_options_get_python_message_for_each_bad_value(
    tmp_path, command, cls, name, out
):
    csv = tmp_path / "x.csv"
    csv.write_text("a,b,y\n1,2,0\n3,,1\n5,7,0\n")
    option = "--" + name.replace("_", "-")
    tried = 0
    for bad in cls._parameter_constraints[name].bad_values():
        if not isinstance(bad, int | float) or isinstance(bad, bool):
            continue  # a word on the command line: "True" or "half" are other values there
        args = [command, str(csv), "--target", "y", "--out", str(tmp_path / out)]
        result = CliRunner().invoke(cli, [*args, option, str(bad)])
        want = _python_message(name, bad, cls._parameter_constraints)
        assert result.exit_code == 2 and want in " ".join(result.output.split()), (
            bad,
            result.output,
        )
        tried += 1
    assert tried >= 3
