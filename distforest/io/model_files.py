"""Read a fitted model from a file that loads without running code.

Three safe formats, told apart by their content:

- a scikit-learn model saved with ``skops.io.dump`` (a zip archive with a
  ``schema.json``), loaded with an explicit list of trusted types: scikit-learn's
  tree ensembles and what they hold; any other type is refused;
- a LightGBM text model (``booster.save_model("model.txt")``, first line ``tree``);
- an XGBoost JSON or UBJSON model (``booster.save_model("model.json")`` / ``.ubj``).

A pickle or joblib file runs code when it is loaded: it is refused with a
message naming the safe formats.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from distforest.errors import InputError, MissingDependencyError

#: The safe formats, as named in messages.
SAFE_FORMATS = (
    "a skops file of a scikit-learn model (skops.io.dump), a LightGBM text model "
    "(booster.save_model('model.txt')) or an XGBoost JSON/UBJSON model "
    "(booster.save_model('model.json'))"
)

#: Types a skops file may hold beyond those skops trusts by itself (scikit-learn's
#: estimators, NumPy arrays and builtins): the trees inside scikit-learn's ensembles.
TRUSTED_SKOPS_TYPES = frozenset(
    {
        "sklearn.tree._tree.Tree",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    }
)

_PICKLE_STARTS = (b"\x80", b"(", b"c", b"}", b"]")


def load_model(path: str | Path) -> Any:
    """Load a fitted model from a safe file (see the module's list).

    Parameters
    ----------
    path : str or Path
        The model file.

    Returns
    -------
    object
        The scikit-learn estimator, ``lightgbm.Booster`` or ``xgboost.Booster``.

    Raises
    ------
    InputError
        For a pickle or joblib file, a skops file holding an untrusted type, or a
        file in no known format (exit 3).
    MissingDependencyError
        When the library the file needs is not installed.
    """
    file = Path(path)
    return _LOADERS[check_model_file(file)](file)


def model_record(path: str | Path) -> dict[str, str]:
    """A model file as a job's spec records it: its path and the SHA-256 of its bytes
    (checked by :func:`check_model_file` first: a pickle is refused before any run)."""
    import hashlib

    check_model_file(path)
    with open(path, "rb") as handle:
        return {"path": str(path), "sha256": hashlib.file_digest(handle, "sha256").hexdigest()}


def check_model_file(path: str | Path) -> str:
    """The format of a model file, checked without loading it: ``"skops"``, ``"lightgbm"``
    or ``"xgboost"`` (a skops file's types checked against the trusted list).

    Raises
    ------
    InputError
        As :func:`load_model`, before any model is built.
    """
    file = Path(path)
    if not file.is_file():
        raise InputError(
            f"model file {str(file)!r} does not exist: give the path of {SAFE_FORMATS}"
        )
    with file.open("rb") as handle:
        head = handle.read(4096)
    if zipfile.is_zipfile(file):
        _skops_trusted(file)
        return "skops"
    if head.startswith(b"tree\n") or head.startswith(b"tree\r\n"):
        return "lightgbm"
    stripped = head.lstrip()
    if stripped.startswith(b"{") and b'"learner"' in head:
        return "xgboost"
    if file.suffix.lower() == ".ubj" or stripped.startswith(b"{L") or stripped.startswith(b"{U"):
        return "xgboost"
    if head.startswith(_PICKLE_STARTS) or file.suffix.lower() in (".pkl", ".pickle", ".joblib"):
        raise InputError(
            f"{str(file)!r} looks like a pickle or joblib file, which runs code when it is "
            f"loaded: distforest refuses it; save the model as {SAFE_FORMATS}"
        )
    raise InputError(f"{str(file)!r} is not a model file distforest reads: give {SAFE_FORMATS}")


def _skops_trusted(file: Path) -> list[str]:
    """The types of a skops file to pass to ``skops.io.load`` (refused if any is untrusted)."""
    try:
        import skops.io as sio
    except ImportError as err:
        raise MissingDependencyError(
            f"{str(file)!r} is a skops file: install skops (pip install skops) to read it"
        ) from err
    try:
        types = set(sio.get_untrusted_types(file=file))
    except Exception as err:  # a zip that is not a skops archive
        raise InputError(
            f"{str(file)!r} is a zip archive but not a skops model file: {err}"
        ) from err
    untrusted = types - TRUSTED_SKOPS_TYPES
    if untrusted:
        raise InputError(
            f"{str(file)!r} holds types distforest does not trust: {sorted(untrusted)}; "
            "it loads only scikit-learn's tree ensembles (RandomForest*, ExtraTrees*, "
            "GradientBoosting*, HistGradientBoosting*) and what skops trusts by default"
        )
    return sorted(types)


def _load_skops(file: Path) -> Any:
    import skops.io as sio

    return sio.load(file, trusted=_skops_trusted(file))


def _load_lightgbm(file: Path) -> Any:
    try:
        import lightgbm
    except ImportError as err:
        raise MissingDependencyError(
            f"{str(file)!r} is a LightGBM model: install lightgbm to read it"
        ) from err
    return lightgbm.Booster(model_file=str(file))


def _load_xgboost(file: Path) -> Any:
    try:
        import xgboost
    except ImportError as err:
        raise MissingDependencyError(
            f"{str(file)!r} is an XGBoost model: install xgboost to read it"
        ) from err
    booster = xgboost.Booster()
    try:
        booster.load_model(str(file))
    except xgboost.core.XGBoostError as err:
        raise InputError(f"{str(file)!r} is not a valid XGBoost model: {err}") from err
    return booster


_LOADERS = {"skops": _load_skops, "lightgbm": _load_lightgbm, "xgboost": _load_xgboost}
