"""The one place where parameters are checked: declarative constraints and their rules.

Every estimator declares a table ``_parameter_constraints = {name: constraint}``
(in the spirit of scikit-learn's); :func:`validate` checks the parameters
against it once, in ``fit``.  The command line takes its defaults from the
estimators' signatures and its choices from these tables, and the pipeline
loader checks YAML sections with the same tables, so Python, the CLI and
pipelines accept and refuse the same values with the same messages: each
names the parameter, shows the bad value and says what is accepted.
Rules that tie parameters together (``bootstrap`` and ``max_samples``, out-of-bag
methods and ``bootstrap``) are functions here too, called where they apply.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, overload

import numpy as np

from distforest.errors import ParameterError, did_you_mean
from distforest.kernels.names import BINARY_MEASURES as BINARY_MEASURES
from distforest.kernels.names import OUT_OF_BAG_METHODS as OUT_OF_BAG_METHODS
from distforest.kernels.names import PROXIMITY_METHODS as PROXIMITY_METHODS
from distforest.kernels.names import SIMFOREST_KINDS as SIMFOREST_KINDS
from distforest.kernels.names import SIMFOREST_MISSING as SIMFOREST_MISSING
from distforest.kernels.names import TREE_KINDS

TASKS = ("auto", "classification", "regression", "unsupervised")
#: The kernels own the names of what they compute (:mod:`distforest.kernels.names`).
KINDS = TREE_KINDS
MODES = ("x", "standard")
#: Feature scaling before a SimForest's measure on a table.
SIMFOREST_SCALINGS = ("zscore", "none")
#: Clustering methods of a similarity (``apps.clustering``).
CLUSTER_METHODS = ("kernel-kmeans", "spectral", "dbscan")
SIMILARITY_KINDS = ("beta", "basic")
#: Smallest tile: below it a task costs more than its cells.
MIN_TILE = 16
#: Default tile of plain similarity/distance matrices (``pairwise``).
PAIRWISE_TILE = 2048
#: Default rows/columns of one tile of SMERF's predicted distances.
SMERF_TILE = 1024
#: Default candidate rows per tile of the brute k-nearest-neighbour search.
NEIGHBOR_TILE = 8192

#: Measures of plain matrices, neighbours and k-NN (named here, computed in
#: ``forests.measures``, so the command line can list them without loading them).
DISTANCES = ("euclidean", "manhattan", "chebyshev", "minkowski", "mahalanobis")
SIMILARITIES = ("cosine", "rbf", "dot", *BINARY_MEASURES)
METRICS = (*DISTANCES, *SIMILARITIES)
NORMALIZATIONS = ("range", "zscore")
#: Nearest-neighbour searches.
ALGORITHMS = ("auto", "kd_tree", "ball_tree", "brute")
#: Similarities (SMERF: a distance) learned by a forest (k-NN's forest metrics).
FOREST_METRICS = ("rf-proximity", "rfgap", "beta", "simforest", "smerf")


class Constraint(Protocol):
    """A rule for one parameter: returns the value (normalised) or raises ParameterError."""

    def check(self, name: str, value: Any) -> Any: ...

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses, generated for tests (as scikit-learn's
        ``generate_invalid_param_val``)."""
        ...


@dataclass(frozen=True)
class Int:
    """An integer ``>= low`` (and ``<= high``; booleans refused), or None when ``none``.

    ``why`` explains an upper bound in the error message.
    """

    low: int = 1
    none: bool = False
    high: int | None = None
    why: str = ""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        bad: tuple[Any, ...] = (self.low - 1, self.low + 0.5, True, str(self.low))
        bad += () if self.none else (None,)
        return bad + (() if self.high is None else (self.high + 1,))

    def check(self, name: str, value: Any) -> int | None:
        if value is None and self.none:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < self.low:
            more = " or None" if self.none else ""
            raise ParameterError(f"{name} must be an integer >= {self.low}{more}, got {value!r}")
        if self.high is not None and int(value) > self.high:
            raise ParameterError(
                f"{name} must be at most {self.high:,}, got {value!r}"
                + (f" ({self.why})" if self.why else "")
            )
        return int(value)


@dataclass(frozen=True)
class Number:
    """A real number in ``[low, high]`` (booleans refused)."""

    low: float
    high: float
    hint: str = ""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        above = () if np.isinf(self.high) else (self.high + 1,)
        return (self.low - 1, *above, True, "1", None)

    def check(self, name: str, value: Any) -> float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not ok or not self.low <= float(value) <= self.high:
            raise ParameterError(
                f"{name} must be a number in [{self.low:g}, {self.high:g}]{self.hint}, "
                f"got {value!r}"
            )
        return float(value)


@dataclass(frozen=True)
class Fraction:
    """A number in (0, 1], or None when ``none``."""

    none: bool = True

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return (0.0, 1.5, -0.5, True, "0.5") + (() if self.none else (None,))

    def check(self, name: str, value: Any) -> float | None:
        if value is None and self.none:
            return None
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not ok or not 0.0 < float(value) <= 1.0:
            more = " or None" if self.none else ""
            raise ParameterError(f"{name} must be a number in (0, 1]{more}, got {value!r}")
        return float(value)


@dataclass(frozen=True)
class Choice:
    """One of ``options`` (or None when ``none``); a near miss gets a suggestion."""

    options: tuple[str, ...]
    none: bool = False

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests): a near miss, another type, None."""
        return (self.options[0][:-1], 3) + (() if self.none else (None,))

    def check(self, name: str, value: Any) -> str | None:
        if value is None and self.none:
            return None
        if value not in self.options:
            allowed = ", ".join(repr(c) for c in self.options) + (" or None" if self.none else "")
            raise ParameterError(
                f"{name} must be one of {allowed}, got {value!r}{did_you_mean(value, self.options)}"
            )
        return str(value)


@dataclass(frozen=True)
class Bool:
    """``True`` or ``False`` only: ``"no"`` or ``0`` are not quietly taken for booleans."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return ("no", 0, 1, None)

    def check(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            if isinstance(value, np.bool_):
                return bool(value)
            raise ParameterError(f"{name} must be True or False, got {value!r}")
        return value


@dataclass(frozen=True)
class MaxFeatures:
    """scikit-learn's forms: "sqrt", "log2", "auto", None, an int >= 1 or a fraction."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return (0, -1, 1.5, 0.0, "half", True)

    def check(self, name: str, value: Any) -> int | float | str | None:
        if value is None or value in ("sqrt", "log2", "auto"):
            return value
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1:
            return int(value)
        if (
            isinstance(value, numbers.Real)
            and not isinstance(value, bool)
            and 0 < float(value) <= 1
        ):
            return float(value)
        raise ParameterError(
            f"{name} must be 'sqrt', 'log2', 'auto', None, an integer >= 1 or a fraction "
            f"in (0, 1], got {value!r}"
        )


def _count_or_fraction(value: Any, low: int) -> int | float | None:
    """``value`` as an integer count >= ``low`` or a fraction in (0, 1]; else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if isinstance(value, numbers.Integral):
        return int(value) if int(value) >= low else None
    return float(value) if 0 < float(value) <= 1 else None


@dataclass(frozen=True)
class SplitSize:
    """scikit-learn's ``min_samples_split``: an integer >= 2 or a fraction in (0, 1]."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return (1, 0, 1.5, 0.0, "2", True, None)

    def check(self, name: str, value: Any) -> int | float:
        size = _count_or_fraction(value, 2)
        if size is not None:
            return size
        raise ParameterError(
            f"{name} must be an integer >= 2 or a fraction in (0, 1] of the rows, got {value!r}"
        )


def _per_class(name: str, value: Mapping[Any, Any], low: float, what: str) -> dict[Any, Any]:
    """A mapping class label -> number >= ``low`` (integers when ``what`` says so)."""
    if not value:
        raise ParameterError(f"{name} as a mapping needs at least one class, got {{}}")
    out: dict[Any, Any] = {}
    for label, v in value.items():
        whole = isinstance(v, numbers.Integral)
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and float(v) >= low
        if not ok or (what == "count" and not whole):
            kind = "an integer >= 1" if what == "count" else f"a number >= {low:g}"
            raise ParameterError(
                f"{name}[{label!r}] must be {kind}, got {value!r}; "
                "one value per class label, e.g. {'a': 50, 'b': 50}"
            )
        out[label] = int(v) if what == "count" else float(v)
    return out


@dataclass(frozen=True)
class MaxSamples:
    """The forest's ``max_samples``: None, a count >= 1, a fraction in (0, 1], or a
    mapping class -> count (R randomForest's ``sampsize`` with ``strata`` the target:
    so many rows of each class drawn with replacement for every tree)."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return (0, -1, 1.5, 0.0, "half", True, {}, {"a": 0}, {"a": 1.5})

    def check(self, name: str, value: Any) -> int | float | dict[Any, int] | None:
        if value is None:
            return None
        if isinstance(value, Mapping):
            return _per_class(name, value, 1, "count")
        size = _count_or_fraction(value, 1)
        if size is not None:
            return size
        raise ParameterError(
            f"{name} must be None, an integer >= 1 (rows per tree), a fraction in (0, 1] of "
            f"the rows or a mapping class -> rows per tree, got {value!r}"
        )


#: ``class_weight``'s named forms (scikit-learn's).
CLASS_WEIGHTS = ("balanced", "balanced_subsample")


@dataclass(frozen=True)
class ClassWeight:
    """scikit-learn's forests' ``class_weight``: None, "balanced", "balanced_subsample"
    or a mapping class -> weight >= 0."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return ("balance", 3, True, {}, {"a": -1.0}, {"a": "x"})

    def check(self, name: str, value: Any) -> str | dict[Any, float] | None:
        if value is None:
            return None
        if isinstance(value, Mapping):
            return _per_class(name, value, 0.0, "weight")
        if isinstance(value, str) and value in CLASS_WEIGHTS:
            return value
        raise ParameterError(
            f"{name} must be None, 'balanced', 'balanced_subsample' or a mapping class -> "
            f"weight, got {value!r}{did_you_mean(value, CLASS_WEIGHTS)}"
        )


#: Split criteria of scikit-learn's trees, by the task they serve ("auto": gini for
#: classification and unsupervised forests, squared_error for regression).
CLASSIFICATION_CRITERIA = ("gini", "entropy", "log_loss")
REGRESSION_CRITERIA = ("squared_error", "absolute_error", "friedman_mse", "poisson")
CRITERIA = ("auto", *CLASSIFICATION_CRITERIA, *REGRESSION_CRITERIA)


@dataclass(frozen=True)
class RowsPerTree:
    """The column imputer's ``max_samples``: "auto", None, a count >= 1 or a share in (0, 1]."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return (0, -1, 1.5, "all", True)

    def check(self, name: str, value: Any) -> int | float | str | None:
        if value is None or (isinstance(value, str) and value == "auto"):
            return value
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1:
            return int(value)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            if 0 < float(value) <= 1:
                return float(value)
        raise ParameterError(
            f"{name} must be 'auto', None (every observed row), an integer >= 1 (rows per "
            f"tree) or a fraction in (0, 1] (share of the column's observed rows), got {value!r}"
        )


@dataclass(frozen=True)
class LeafBound:
    """A forest's ``leaf_bound``: None (no refinement), "auto", or rows per leaf >= 1."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return (0, -1, 1.5, "all", True)

    def check(self, name: str, value: Any) -> int | str | None:
        if value is None or (isinstance(value, str) and value == "auto"):
            return value
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1:
            return int(value)
        raise ParameterError(
            f"{name} must be None (leaves as grown), 'auto' (refined when the trees are "
            f"grown on a sample of the rows) or an integer >= 1 (most rows a leaf keeps), "
            f"got {value!r}"
        )


@dataclass(frozen=True)
class Seed:
    """None or a non-negative integer (a seed that can be recorded)."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return (-1, 1.5, "0", True)

    def check(self, name: str, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ParameterError(
                f"{name} must be None or a non-negative integer, got {value!r}; "
                "pass an integer to make runs repeatable"
            )
        return int(value)


@dataclass(frozen=True)
class Pair:
    """A pair ``(low, high)`` of numbers with ``low < high``."""

    def bad_values(self) -> tuple[Any, ...]:
        """Values :meth:`check` refuses (for tests)."""
        return ((1, 0), (0, 0), (1,), "ab", 3)

    def check(self, name: str, value: Any) -> tuple[float, float]:
        try:
            low, high = (float(v) for v in value)
        except (TypeError, ValueError):
            raise ParameterError(f"{name} must be a pair (low, high), got {value!r}") from None
        if not low < high:
            raise ParameterError(f"{name} must have low < high, got {value!r}")
        return low, high


@dataclass(frozen=True)
class Checked:
    """Checked elsewhere (by the code that uses it, e.g. a metric parser): taken as is."""

    what: str = ""

    def bad_values(self) -> tuple[Any, ...]:
        """None known here: the code that uses the value checks it."""
        return ()

    def check(self, name: str, value: Any) -> Any:
        return value


@dataclass(frozen=True)
class Parameter:
    """A parameter declared once: its rule, its default and what it means.

    An estimator's constraint table (``_parameter_constraints``), the command
    line's option (:func:`distforest.cli.options.parameter_option`: its type,
    range, default and help) and the pipeline schema's check of the key are
    all made from the declaration.

    Attributes
    ----------
    constraint : Constraint
        What the parameter accepts.
    default : object
        The estimator's default (``tests/test_startup.py`` checks it against
        the estimator's signature).
    help : str
        One line for the command line's ``--help``.
    flag : str
        The command-line option when it is not the name after two dashes, its
        underscores as dashes.  A boolean's option is a pair (the flag, and the
        flag with ``no-`` after its dashes), or with a flag of its own that one
        flag, which sets the value that is not the default.
    """

    constraint: Constraint
    default: Any
    help: str = ""
    flag: str = ""


#: The tree parameters of :class:`~distforest.forests.ProximityForest`, which the
#: imputer passes on to its forests as they are (one table for both).
FOREST_PARAMETERS: dict[str, Parameter] = {
    "task": Parameter(Choice(TASKS), "auto",
                      "auto: unsupervised without --target, classification for labels, "
                      "regression for real values."),
    "n_estimators": Parameter(Int(1), 100, "Number of trees.", flag="--trees"),
    "kind": Parameter(Choice(KINDS), "random-forest", "Tree learner."),
    "max_features": Parameter(MaxFeatures(), "auto",
                              "Features tried per split: auto, sqrt, log2, an integer or a "
                              "fraction."),
    "criterion": Parameter(Choice(CRITERIA), "auto",
                           "Split criterion (scikit-learn's); auto: gini for classes, "
                           "squared_error for values."),
    "min_samples_split": Parameter(SplitSize(), 2,
                                   "Rows a node needs to be split: an integer >= 2 or a "
                                   "fraction."),
    "min_samples_leaf": Parameter(Int(1), 1),
    "max_depth": Parameter(Int(1, none=True), None),
    "max_leaf_nodes": Parameter(Int(2, none=True), None,
                                "Grow each tree best-first up to this many leaves."),
    "min_impurity_decrease": Parameter(Number(0.0, float("inf")), 0.0,
                                       "Split only if the weighted impurity decreases this "
                                       "much."),
    "bootstrap": Parameter(Bool(), True,
                           "Draw each tree's rows with replacement (else every row, once)."),
    "max_samples": Parameter(MaxSamples(), None,
                             "Rows drawn per tree: a count, a fraction, or per class (R's "
                             "sampsize) CLASS:ROWS,... [default: n, 200,000 above 500,000 "
                             "rows]."),
    "class_weight": Parameter(ClassWeight(), None,
                              "balanced, balanced_subsample, or CLASS:WEIGHT,... "
                              "(scikit-learn's class_weight)."),
    "batch_size": Parameter(Int(1, none=True), None,
                            "Trees per task [default: about 4 tasks per worker thread]."),
    "tile_size": Parameter(Int(MIN_TILE), 2048,
                           "Rows/columns of one tile (one task, one Zarr chunk)."),
    "random_state": Parameter(Seed(), None, "random_state: same seed, same result.",
                              flag="--seed"),
}  # fmt: skip
#: The tree parameters of :class:`~distforest.forests.simforest.SimilarityForestClassifier`
#: (its ``metric``, read as NAME[:GAMMA] by the command line, is declared by the estimator):
#: its constraint table and the options of ``distforest simforest fit`` are made from it.
SIMFOREST_PARAMETERS: dict[str, Parameter] = {
    "n_estimators": Parameter(Int(1), 100, "Number of trees.", flag="--trees"),
    "n_pairs": Parameter(Int(1), 1, "Pairs of objects tried per node (the paper's r).",
                         flag="--pairs"),
    "kind": Parameter(Choice(SIMFOREST_KINDS), "similarity",
                      "What --similarity holds (a distance orders by D_ki^2 - D_kj^2)."),
    "max_depth": Parameter(Int(0, none=True), None),
    "min_samples_leaf": Parameter(Int(1), 1),
    "missing": Parameter(Choice(SIMFOREST_MISSING), "stay",
                         "An object whose similarity is missing: stay at the node (the paper), "
                         "both children weighted by size, or the larger child."),
    "bootstrap": Parameter(Bool(), True, "Grow each tree on a bootstrap sample."),
    "batch_size": Parameter(Int(1, none=True), None,
                            FOREST_PARAMETERS["batch_size"].help),
    "tile_size": Parameter(FOREST_PARAMETERS["tile_size"].constraint, 2048,
                           FOREST_PARAMETERS["tile_size"].help),
    "random_state": Parameter(Seed(), 0, "random_state: same seed, same forest.", flag="--seed"),
}  # fmt: skip
#: The parameters of :class:`~distforest.forests.xforest.XForest`: its constraint table and
#: the options of ``distforest xforest`` are made from it.
XFOREST_PARAMETERS: dict[str, Parameter] = {
    "n_estimators": Parameter(Int(1), 1000, "Number of trees.", flag="--trees"),
    "n_directions": Parameter(Int(1), 2, "X: random directions per tree (depth d splits on "
                              "direction d mod X).", flag="--x"),
    "leaf_size": Parameter(Int(1), 10, "A node with at most this many rows is a leaf (the "
                           "paper's tau is this + 1: it splits nodes of at least tau rows)."),
    "beta": Parameter(Number(0, 1, " (the similarity decay per tree edge; the paper uses 0.9)"),
                      0.9, "Similarity decay per edge between two leaves."),
    "mode": Parameter(Choice(MODES), "x",
                      "standard: a fresh direction at every node (Dasgupta-Freund RP tree)."),
    "normalize": Parameter(Bool(), True, "Skip the per-feature min-max normalisation.",
                           flag="--no-normalize"),
    "batch_size": SIMFOREST_PARAMETERS["batch_size"],
    "tile_size": SIMFOREST_PARAMETERS["tile_size"],
    "random_state": Parameter(Seed(), None, "random_state: same seed, same matrix.",
                              flag="--seed"),
}  # fmt: skip
#: The parameters of :class:`~distforest.forests.smerf.SMERF`: its constraint table and the
#: options of ``distforest smerf fit`` are made from it.
SMERF_PARAMETERS: dict[str, Parameter] = {
    "n_estimators": Parameter(Int(1), 100, "Number of trees.", flag="--trees"),
    "max_features": Parameter(MaxFeatures(), "sqrt",
                              "Candidates per split: sqrt, log2, an integer or a fraction."),
    "oblique": Parameter(Bool(), False, "Sparse random +-1 projections as candidates (as SPORF).",
                         flag="--oblique"),
    "max_depth": Parameter(Int(1, none=True), None),
    "min_samples_leaf": Parameter(Int(1), 1),
    "bootstrap": Parameter(Bool(), True, "Every tree sees every row once.",
                           flag="--no-bootstrap"),
    "random_state": Parameter(Seed(), 0, "random_state: same seed, same model.", flag="--seed"),
}  # fmt: skip
#: Rows and columns of one tile (one task, one Zarr chunk), everywhere.
TILE_SIZE = FOREST_PARAMETERS["tile_size"].constraint
#: The constraint table of the forest's tree parameters (from :data:`FOREST_PARAMETERS`).
FOREST_CONSTRAINTS: dict[str, Constraint] = {
    name: parameter.constraint for name, parameter in FOREST_PARAMETERS.items()
}
#: Parameters of pipeline sections and commands that are no estimator's, by key path
#: ``section.key``: the pipeline schema checks the key with the constraint, the command's
#: option is made from the declaration.
SECTION_PARAMETERS: dict[str, Parameter] = {
    "similarity.tile_size": Parameter(TILE_SIZE, PAIRWISE_TILE,
                                      FOREST_PARAMETERS["tile_size"].help),
    "neighbors.k": Parameter(Int(1), 10, "Neighbours per row (the row itself excluded)."),
    "proximity.top_k": Parameter(Int(1, none=True), None,
                                 "Write each row's K nearest rows by proximity (itself "
                                 "excluded; neighbors_index and neighbors_proximity, exact) "
                                 "instead of the n x n matrix."),
    "mds.components": Parameter(Int(1), 2),
    "clustering.k": Parameter(Int(1, none=True), None,
                              "Number of clusters (kernel-kmeans, spectral)."),
    "clustering.n_init": Parameter(Int(1), 10,
                                   "Kernel k-means restarts (the lowest objective wins)."),
    "clustering.min_samples": Parameter(Int(1), 5, "DBSCAN: rows within eps (itself "
                                        "included) to be a core row."),
}  # fmt: skip
#: Most imputation refits accepted: proximity imputation settles in 4 to 6 (Breiman &
#: Cutler's rfImpute); a million is a typo that would run for days.
MAX_IMPUTE_ITERATIONS = 100
IMPUTE_ITERATIONS = Int(
    1, none=True, high=MAX_IMPUTE_ITERATIONS, why="the imputation settles within 4 to 6 iterations"
)
#: How a missing category is chosen: the level with the largest summed weight, or mean weight.
VOTES = ("auto", "sum", "mean")
#: ``column``: one forest per column (the default); ``rfimpute``: R's rfImpute (random-forest
#: trees, Breiman's proximity); the others one forest for all columns, refitted, weighted by
#: the ``rfgap`` / ``original`` / ``oob`` proximity (extra-trees of one feature per split).
IMPUTE_PROXIMITIES = ("column", "rfimpute", *PROXIMITY_METHODS)
#: The imputer's tree learners: ``auto`` is the proximity's own (random-forest for
#: ``rfimpute``, extra-trees for the others).
IMPUTE_KINDS = ("auto", *KINDS)


#: Words that mean None where a parameter takes None.
NONE_WORDS = ("none", "all")


def read_word(name: str, constraint: Constraint, word: Any) -> Any:
    """A command-line word read for ``constraint``, then checked by it.

    None stays None; ``none``/``all`` mean None where the constraint takes
    None; ``CLASS:NUMBER,...`` is a mapping of numbers (per-class sizes and
    weights); an integer, else a real number, else the word itself.
    """
    if word is None:
        return None
    value = word
    if isinstance(word, str) and word.lower() in NONE_WORDS and _takes_none(name, constraint):
        return None
    if isinstance(word, str) and ":" in word:
        pairs = [item.rpartition(":") for item in word.split(",")]
        try:
            value = {label.strip(): _number(v.strip()) for label, _, v in pairs}
        except ValueError:
            raise ParameterError(f"{name}: expected CLASS:NUMBER[,CLASS:NUMBER...], e.g. "
                                 f"yes:100,no:100, got {word!r}") from None  # fmt: skip
    elif isinstance(word, str):
        try:
            value = _number(word)
        except ValueError:
            pass
    return constraint.check(name, value)


def _takes_none(name: str, constraint: Constraint) -> bool:
    try:
        return constraint.check(name, None) is None
    except ParameterError:
        return False


def _number(word: str) -> int | float:
    try:
        return int(word)
    except ValueError:
        return float(word)


def validate(params: Mapping[str, Any], constraints: Mapping[str, Constraint]) -> dict[str, Any]:
    """Check every parameter against its constraint; returns the normalised values.

    Raises
    ------
    ParameterError
        For the first bad value (or a parameter with no constraint, a bug).
    """
    unknown = sorted(set(params) - set(constraints))
    if unknown:
        raise ParameterError(f"no constraint declared for parameter(s) {unknown}")
    return {name: constraints[name].check(name, value) for name, value in params.items()}


# -- rules between parameters -------------------------------------------------------


def check_bootstrap(bootstrap: bool, max_samples: float | None) -> None:
    """``max_samples`` sizes the bootstrap sample: it needs ``bootstrap=True``."""
    if not bootstrap and max_samples is not None:
        raise ParameterError(
            f"max_samples={max_samples!r} cannot be set when bootstrap=False (it is the size "
            "of each tree's bootstrap sample); remove max_samples or set bootstrap=True"
        )


def check_criterion(criterion: str, task: str) -> None:
    """A split criterion of the task's trees (a regression criterion needs regression)."""
    regression = task == "regression"
    fits = CLASSIFICATION_CRITERIA if not regression else REGRESSION_CRITERIA
    if criterion != "auto" and criterion not in fits:
        raise ParameterError(
            f"criterion={criterion!r} is for {'classification' if regression else 'regression'}"
            f" trees, but the task is {task!r}; use one of {', '.join(map(repr, fits))} "
            "or criterion='auto'"
        )


def per_class_codes(
    name: str, given: Mapping[Any, float], classes: Sequence[Any], every: bool
) -> list[Any]:
    """A mapping class label -> value as one value per class code (the sorted classes).

    A key matches a class equal to it or written the same (``"1"`` for ``1``: YAML
    and the command line give text).  ``every``: each class must be given (else 1.0).
    """
    by_text = {str(c): k for k, c in enumerate(classes)}
    values: list[float | None] = [None if every else 1.0] * len(classes)
    for label, value in given.items():
        code = by_text.get(str(label))
        if code is None:
            quote = "; YAML reads yes/no/on/off as booleans: quote the label" * (
                isinstance(label, bool)
            )
            raise ParameterError(
                f"{name} names class {label!r}, which is not in the target; its classes are "
                f"{', '.join(map(repr, classes))}{quote}"
            )
        values[code] = value
    missing = [c for c, v in zip(classes, values, strict=True) if v is None]
    if missing:
        raise ParameterError(
            f"{name} gives no value for class(es) {', '.join(map(repr, missing))}; give one for "
            f"every class, e.g. {name}={{{', '.join(f'{c!r}: 100' for c in classes[:3])}}}"
        )
    return [int(v) if every else float(v) for v in values if v is not None]


def check_out_of_bag(method: str, bootstrap: bool, where: str = "method") -> None:
    """Out-of-bag and RF-GAP weights need rows left out of each tree: ``bootstrap=True``."""
    check_out_of_bag_uses({where: method}, bootstrap)


def check_out_of_bag_uses(
    uses: Mapping[str, str], bootstrap: bool, bootstrap_name: str = "bootstrap"
) -> None:
    """The rule for several settings at once: each ``where -> method`` of ``uses`` whose
    method weighs rows by being out of bag (:data:`OUT_OF_BAG_METHODS`, and the
    the imputation's, of the same names) needs ``bootstrap`` true.

    ``bootstrap_name`` names the setting in the message (``forest.bootstrap`` in a pipeline).
    """
    needs = [f"{where}={method!r}" for where, method in uses.items()
             if method in OUT_OF_BAG_METHODS]  # fmt: skip
    if needs and not bootstrap:
        raise ParameterError(
            f"{', '.join(needs)} need{'s' if len(needs) == 1 else ''} out-of-bag rows, but "
            f"{bootstrap_name}=False (every row is in every tree); use the 'original' "
            f"proximity or set {bootstrap_name}=True"
        )


# -- single checks, for functions that are not estimators ---------------------------


@overload
def check_int(
    name: str, value: Any, *, low: int = 1, allow_none: Literal[False] = False
) -> int: ...


@overload
def check_int(name: str, value: Any, *, low: int = 1, allow_none: Literal[True]) -> int | None: ...


def check_int(name: str, value: Any, *, low: int = 1, allow_none: bool = False) -> int | None:
    """``value`` as int after checking it is an integer >= ``low`` (see :class:`Int`)."""
    return Int(low, allow_none).check(name, value)


def check_choice(name: str, value: Any, choices: Collection[str]) -> str:
    """``value`` after checking it is one of ``choices`` (see :class:`Choice`)."""
    result = Choice(tuple(choices)).check(name, value)
    assert result is not None
    return result


def check_tile_size(value: Any) -> int:
    """The tile size, with the one bound every matrix uses."""
    result = TILE_SIZE.check("tile_size", value)
    assert result is not None
    return result


def check_random_state(value: Any) -> int | None:
    """None or a non-negative integer (see :class:`Seed`)."""
    return Seed().check("random_state", value)


def check_against_data(params: Mapping[str, Any], n_samples: int, n_features: int) -> None:
    """Refuse tree parameters the training table makes meaningless, before any tree grows.

    ``min_samples_leaf`` above half the rows (no node can split: every tree
    is one leaf and every proximity 1) and an integer ``max_features`` above
    the table's features raise :class:`ParameterError` (exit 2).
    """
    leaf = params.get("min_samples_leaf")
    if isinstance(leaf, numbers.Integral) and not isinstance(leaf, bool):
        if int(leaf) > 1 and 2 * int(leaf) > n_samples:  # (1 row: one leaf, whatever the size)
            raise ParameterError(
                f"min_samples_leaf={leaf} but the table has {n_samples} rows: no tree could "
                f"split (a split needs 2 x min_samples_leaf rows) and every proximity would be "
                f"1; use at most {max(1, n_samples // 2)}"
            )
    mtry = params.get("max_features")
    if isinstance(mtry, numbers.Integral) and not isinstance(mtry, bool) and int(mtry) > n_features:
        raise ParameterError(
            f"max_features={mtry} but the table has {n_features} features; use at most "
            f"{n_features}, a fraction in (0, 1] or 'sqrt'"
        )
