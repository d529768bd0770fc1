"""Fitting a proximity forest for a command, and the app commands' steps around it.

``fitted_forest`` loads (or, for a partitioned input, stores) the input and
fits where :func:`~distforest.parallel.placement.place` says; ``held_out``
and ``measure`` are the importances command's split and score; ``score_rows``
scores new rows against a saved forest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from distforest.errors import ParameterError

if TYPE_CHECKING:
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.io import Table
    from distforest.store.inputs import StoredTable


@contextmanager
def fitted_forest(
    source: str,
    target: str | None,
    input_kw: dict[str, Any],
    forest_kw: dict[str, Any],
    connect: dict[str, Any],
    progress: Any = None,
    check: Callable[[Table], None] | None = None,
    model: str | None = None,
) -> Iterator[tuple[Table | StoredTable, ProximityForest]]:
    """Load the input, ``check`` it (before any cluster starts), fit where it runs
    (:func:`~distforest.parallel.placement.place`).

    The cluster, if any, stays up inside the block.  A partitioned input is read on
    the workers, so it always uses a cluster (``check`` is not applied to it).  With
    ``model`` (a model file, :func:`~distforest.io.model_files.load_model`) the input's
    rows are routed through that model's trees instead (``forest_kw`` unused).
    """
    from distforest.forests.proximity_forest import ProximityForest
    from distforest.io import load_table
    from distforest.io.model_files import load_model
    from distforest.jobs.inputs import partitioned_input
    from distforest.parallel.placement import place
    from distforest.store.source import opened

    fitted = None if model is None else load_model(model)  # refused before any work
    if partitioned_input(source):  # read by partitions on the workers, never whole here
        from distforest.parallel.cluster import connect as connect_to
        from distforest.parallel.execution import execution

        with (
            connect_to(**connect) as client,
            execution(client),  # the forest's tasks and ...
            client.as_current(),  # ... the partitions' run on this cluster
            opened(
                source,
                target=target,
                partitions=True,
                drop=input_kw.get("drop", ()),
                na_values=input_kw.get("na_values", ()),
                id=input_kw.get("id"),
            ) as stored,
        ):
            # partitions=True: always a StoredTable
            if fitted is not None:
                yield cast("StoredTable", stored), ProximityForest.from_model(fitted, stored)
                return
            forest = ProximityForest(**forest_kw).set_execution(client, progress=progress)
            yield cast("StoredTable", stored), forest.fit(stored)
        return
    table = load_table(source, target=target, **input_kw)
    if check is not None:
        check(table)
    with place(table.X.size, connect, progress=progress):
        if fitted is not None:
            yield table, ProximityForest.from_model(fitted, table)
        else:
            yield table, ProximityForest(**forest_kw).fit(table)


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
