"""The importances job's split and score, and scoring new rows against a saved forest.

``held_out`` and ``measure`` are the importances job's split and score
(:mod:`distforest.jobs.forest_answers`); ``score_rows`` scores new rows
against a saved forest.
"""

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


def score_rows(model: str, input: str, id_column: str | None, method: str,
               na_values: tuple[str, ...], connect: dict[str, Any],
               training: str | None = None, target: str | None = None,
               ) -> tuple[Any, Any, Any]:  # fmt: skip
    """``distforest score``: each row's predictions and outlier score against a saved
    forest; returns the scores (a DataFrame), the forest and the rows' table (the code
    of scoring pipelines too: :mod:`distforest.apps.scoring`)."""
    from distforest.apps.scoring import new_rows_table
    from distforest.apps.scoring import score_rows as scores_of
    from distforest.jobs.score import open_model
    from distforest.parallel.placement import place

    forest = open_model(model, training, target, na_values)
    table = new_rows_table(forest, input, id_column=id_column, na_values=na_values)
    with place(table.X.size, connect):
        result = scores_of(forest, table, method=method)
    return result, forest, table
