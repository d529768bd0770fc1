"""ProximityImputer (the one transformer) in scikit-learn's output API."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn import config_context
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from distforest import ProximityImputer, execution
from distforest.errors import InputError


@pytest.fixture(scope="module")
def holes() -> np.ndarray:
    X = np.random.default_rng(0).normal(size=(80, 3))
    X[::7, 1] = np.nan
    return X


def test_pipeline_gives_pandas_with_the_feature_names(holes):
    frame = pd.DataFrame(holes, columns=["a", "b", "c"])
    pipe = make_pipeline(ProximityImputer(n_estimators=5, random_state=0), StandardScaler())
    pipe.set_output(transform="pandas")
    with execution("synchronous"):
        out = pipe.fit_transform(frame)
        imputer = ProximityImputer(n_estimators=5, random_state=0).fit(frame)
        plain = imputer.transform(frame)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == ["a", "b", "c"]
    expected = StandardScaler().fit_transform(plain)
    np.testing.assert_allclose(out.to_numpy(), expected)
    assert list(pipe.get_feature_names_out()) == ["a", "b", "c"]


def test_arrays_get_scikit_learn_names_and_the_setting_is_respected(holes):
    imputer = ProximityImputer(n_estimators=5, random_state=0)
    with execution("synchronous"):
        default = imputer.fit_transform(holes)
        imputer.set_output(transform="pandas")
        framed = imputer.transform(holes)
        with config_context(transform_output="pandas"):
            globally = ProximityImputer(n_estimators=5, random_state=0).fit_transform(holes)
    assert isinstance(default, np.ndarray) and not np.isnan(default).any()
    assert list(framed.columns) == ["x0", "x1", "x2"]
    np.testing.assert_array_equal(framed.to_numpy(), default)
    assert list(globally.columns) == ["x0", "x1", "x2"]
    assert list(imputer.get_feature_names_out(["p", "q", "r"])) == ["p", "q", "r"]
    with pytest.raises(InputError, match="do not match"):
        imputer.get_feature_names_out(["p"])


def test_a_target_column_is_left_out_of_pandas_output(holes):
    frame = pd.DataFrame(holes, columns=["a", "b", "c"]).assign(label=[0, 1] * 40)
    with execution("synchronous"):
        kept = ProximityImputer(n_estimators=5, random_state=0).fit_transform(frame, y="label")
        imputer = ProximityImputer(n_estimators=5, random_state=0).set_output(transform="pandas")
        features = imputer.fit_transform(frame, y="label")
    assert list(kept.columns) == ["a", "b", "c", "label"]  # default output: the input's form
    assert list(features.columns) == ["a", "b", "c"]
    pd.testing.assert_frame_equal(features, kept[["a", "b", "c"]])
