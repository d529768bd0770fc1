"""What a target asks of a forest: the task it implies, and the codes the trees fit."""

from __future__ import annotations

from typing import Any

import numpy as np

from distforest.errors import InputError, ParameterError
from distforest.forests.constraints import TASKS, check_choice

#: An integer target with at most this many distinct values is taken as classes.
MAX_AUTO_CLASSES = 50


def resolve_task(task: str, y: np.ndarray | None, target_name: str | None) -> str:
    """Decide classification / regression / unsupervised from the target.

    ``auto``: no target -> unsupervised; a non-numeric, boolean or
    integer-valued target with at most :data:`MAX_AUTO_CLASSES` distinct
    values -> classification; any other numeric target -> regression.
    """
    check_choice("task", task, TASKS)
    if task == "unsupervised":
        return task
    if y is None:
        if task == "auto":
            return "unsupervised"
        raise ParameterError(
            f"task={task!r} requires y to be passed, but the target y is None: pass y (or "
            "--target COLUMN), or use task='unsupervised'"
        )
    if task != "auto":
        if task == "regression" and not np.issubdtype(y.dtype, np.number):
            try:  # numbers held as objects (a DataFrame column of mixed type) are fine
                y.astype(np.float64)
            except (TypeError, ValueError):
                raise InputError(
                    f"Unknown label type: target {target_name or 'y'!r} is not numeric (dtype "
                    f"{y.dtype}, e.g. {y[0]!r}), so it cannot be used for regression; use "
                    "task='classification'"
                ) from None
        return task
    if not np.issubdtype(y.dtype, np.number) or y.dtype == bool:
        return "classification"
    values = np.unique(y)
    integral = bool(np.all(np.mod(values, 1) == 0))
    return "classification" if integral and values.size <= MAX_AUTO_CLASSES else "regression"


def require_classes(task: str, y: np.ndarray | None, target_name: str | None, what: str) -> None:
    """Refuse a target that ``task`` would not fit as classes, for a classification-only ``what``.

    With ``task="auto"``, a target of real values (or of more than
    :data:`MAX_AUTO_CLASSES` integers) is refused: treating every value as a
    class would give a silent, meaningless answer.  ``task="classification"``
    says the numbers are class codes and is accepted.
    """
    if task == "classification":
        return
    resolved = resolve_task(task, y, target_name)
    if resolved == "classification":
        return
    if y is None or resolved == "unsupervised":
        raise ParameterError(f"{what} needs class labels: give the class column as --target")
    values = np.unique(y)
    shown = ", ".join(repr(v.item()) for v in values[:3])
    raise InputError(
        f"{what} checks class labels, but target {target_name!r} holds {values.size} distinct "
        f"numbers (e.g. {shown}), a continuous value rather than a class: give a class column "
        "as the target, or, if these numbers are class codes, say so with --task "
        "classification (forest.task: classification in a pipeline)"
    )


def check_classes(y: Any) -> None:
    """A classification target must hold classes (scikit-learn's rule and words)."""
    from sklearn.utils.multiclass import check_classification_targets

    try:
        check_classification_targets(y)
    except ValueError as exc:
        raise InputError(
            f"{exc}; for a numeric target use task='regression' (or task='auto')"
        ) from None


def fit_target(task: str, source: Any) -> tuple[str, np.ndarray | None, list[Any]]:
    """The task a source's target implies and the target as the trees fit it.

    A target kept as codes of its sorted labels (a stored table's) is read as
    those codes, in the smallest integer type, and its labels decide the task
    as all its values would; any other is read whole and encoded by
    :func:`encode_target`.

    Parameters
    ----------
    task : str
        The estimator's ``task`` parameter.
    source : RowSource

    Returns
    -------
    task : str
    y_fit : ndarray or None
    classes : list
    """
    labels = source.target_classes()
    if labels is not None:
        resolved = resolve_task(task, np.asarray(labels, dtype=object), source.target_name)
        if resolved == "classification":
            return resolved, source.read_codes(), list(labels)
    y = source.read_y()
    resolved = resolve_task(task, y, source.target_name)
    if resolved == "classification":
        check_classes(y)
    y_fit, classes = encode_target(resolved, y)
    return resolved, y_fit, classes


def encode_target(task: str, y: np.ndarray | None) -> tuple[np.ndarray | None, list[Any]]:
    """Target as the trees need it: class codes 0..k-1, or floats.

    Returns
    -------
    y_fit : ndarray or None
    classes : list
        Class labels in code order (empty for regression / unsupervised).
    """
    if task == "unsupervised" or y is None:
        return None, []
    if task == "regression":
        return np.asarray(y, dtype=np.float64), []
    classes, codes = np.unique(y, return_inverse=True)
    return codes.astype(np.int64), [c.item() if hasattr(c, "item") else c for c in classes]
