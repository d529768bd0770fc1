"""The importances job's split and score (:mod:`distforest.jobs.forest_answers`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distforest.errors import ParameterError

if TYPE_CHECKING:
    from distforest.io import Table


def held_out(table: Any, forest: Any, test_size: float) -> tuple[Any, Any]:
    """The table split into rows to fit and rows to measure on (stratified for classes)."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    from distforest.forests.targets import resolve_task
    from distforest.io import Table

    task = resolve_task(forest.task, table.y, table.target_name)
    if task not in ("classification", "regression"):
        raise ParameterError(f"importances needs a classification or regression task, not {task!r}")
    rows = np.arange(table.n_samples)
    strata = table.y if task == "classification" else None
    fit, held = train_test_split(
        rows, test_size=test_size, random_state=forest.random_state, stratify=strata
    )

    def part(index: Any) -> Table:
        return Table(table.X[index], table.feature_names, table.categories, table.y[index],
                     table.target_name, table.source)  # fmt: skip

    return part(np.sort(fit)), part(np.sort(held))


def measure(forest: Any, test: Any, repeats: int) -> tuple[Any, float]:
    """The importance table and the held-out score of a fitted forest."""
    from distforest.apps.importances import importance_table, labelled_frame

    ranking = importance_table(forest, test, n_repeats=repeats, random_state=forest.random_state)
    return ranking, float(forest.score(labelled_frame(test), test.y))
