"""Saving and loading fitted estimators: declared by each estimator, done here once.

A persisted estimator declares what it keeps, as class attributes:

- ``_stored_fields``: its fitted scalar attributes, each a :class:`Field`
  naming the JSON attribute of the store (a dotted path such as
  ``"input.n_samples"``) and how the value is encoded and decoded;
- ``_stored_arrays``: its fitted arrays, each an :class:`Array` naming the
  array at the store's root (a name of :data:`distforest.store.schema.ARRAYS`);
- ``_store_tag`` / ``_store_requires`` / ``_store_hint``: the attribute that
  says which estimator wrote a store, what a loadable store must hold and how
  to make one (the refusal's suggestion);
- ``_unstored_params``: constructor parameters that are not saved (code, or a
  path the model does not need).

Its constructor parameters are saved as ``params`` (with the entropy of the
seed as ``random_state``) and given back to the constructor on loading.  What
a declaration cannot say (the trees of each kind of forest, a matrix written
by blocks, attributes rebuilt from others) are two hooks, :meth:`Persisted._save_parts`
and :meth:`Persisted._load_parts`.  A store is plain Zarr arrays and JSON
attributes: loading one never runs code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import zarr

from distforest import location
from distforest.errors import StoreError
from distforest.store.run_store import RunStore, complete_output

#: A :class:`Field` whose attribute must be in every store.
REQUIRED = object()
#: A :class:`Field` default: a store without the key (or holding ``None``) leaves
#: the attribute unset.
UNSET = object()


@dataclass(frozen=True)
class Field:
    """A fitted scalar attribute kept as a JSON attribute of the store.

    Parameters
    ----------
    key : str
        Dotted path in the store's attributes (``"input.n_samples"``).  A dict
        value is merged with what other fields put under the same key.
    attr : str or None
        The estimator's attribute.  ``None``: written for readers of the store
        (computed by ``encode`` from the estimator), never read back.
    encode, decode : callable, optional
        Attribute value to JSON and back (``decode`` is not given ``None``).
    default : object
        The value when the key is missing (a store written before it was
        kept); :data:`REQUIRED` refuses such a store, :data:`UNSET` leaves
        the attribute unset (also when the store holds ``None``).
    model_only : bool
        Written by :meth:`Persisted.save` only, not in the provenance that
        matrix stores record.
    """

    key: str
    attr: str | None = None
    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any], Any] | None = None
    default: Any = REQUIRED
    model_only: bool = False


@dataclass(frozen=True)
class Array:
    """A fitted array kept under the store's root.

    Parameters
    ----------
    name : str
        The array's name in the store (its layout comes from the store schema).
    attr : str
        The estimator's attribute.
    rows : bool
        A per-row array, chunked by ``tile_size`` rows.
    optional : bool
        ``None`` is not written, and a store without the array loads ``None``
        (stores written before it was kept).
    keep : callable, optional
        Written only when ``keep(value)`` holds (else loads ``None``).
    dtype : str, optional
        The attribute's dtype after loading, when it differs from the stored one.
    """

    name: str
    attr: str
    rows: bool = True
    optional: bool = False
    keep: Callable[[Any], bool] | None = None
    dtype: str | None = None


def _get(attrs: dict[str, Any], key: str) -> Any:
    value: Any = attrs
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return UNSET
        value = value[part]
    return value


def _put(attrs: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for part in parents:
        attrs = attrs.setdefault(part, {})
    if isinstance(value, dict) and isinstance(attrs.get(last), dict):
        attrs[last].update(value)
    else:
        attrs[last] = dict(value) if isinstance(value, dict) else value


class Persisted:
    """Mixin: :meth:`save` and :meth:`load` from the estimator's declarations."""

    _store_tag: ClassVar[tuple[str, str] | None] = None
    _store_requires: ClassVar[tuple[str, ...]] = ()
    _store_hint: ClassVar[str] = "fit it again"
    _stored_fields: ClassVar[tuple[Field, ...]] = ()
    _stored_arrays: ClassVar[tuple[Array, ...]] = ()
    _unstored_params: ClassVar[tuple[str, ...]] = ()
    #: ``save`` marks the store complete unless told otherwise (else the caller does).
    _save_completes: ClassVar[bool] = False
    #: ``load`` refuses an unfinished store unless told otherwise.
    _load_requires_complete: ClassVar[bool] = False
    #: Rows of one chunk of the row arrays when the parameters give no ``tile_size``.
    _default_tile_size: ClassVar[int] = 2048

    params_: dict[str, Any]
    random_state_: Any
    leaves_: Any
    fit_id_: str

    # -- hooks ------------------------------------------------------------------

    def _check_saveable(self) -> None:
        """Refuse to save an unfitted (or otherwise unsaveable) estimator."""
        getattr(self, "_check_fitted")()  # noqa: B009 - every estimator has it

    def _row_ids(self) -> dict[str, Any]:
        """Keyword arguments of :meth:`RunStore.write_coordinates` (row IDs, if any)."""
        return {}

    def _array_attrs(self, name: str) -> dict[str, Any] | None:
        """JSON attributes of stored array ``name``."""
        return None

    def _save_parts(self, rs: RunStore, tile_size: int) -> None:
        """Write what the declarations do not say (the trees)."""

    def _load_parts(self, rs: RunStore) -> None:
        """Read what the declarations do not say (the trees), once fields and arrays are set."""

    @classmethod
    def _rows_in_store(cls, rs: RunStore) -> bool:
        """Whether :meth:`load` leaves the per-row arrays of ``rs`` in the store even
        unasked (``rows_in_store``): an estimator's habit for its stored fits."""
        return False

    # -- the one implementation -------------------------------------------------

    def _provenance(self, *, model: bool = False) -> dict[str, Any]:
        """The store's JSON attributes: tag, parameters and the declared fields."""
        out: dict[str, Any] = {}
        if self._store_tag is not None:
            out[self._store_tag[0]] = self._store_tag[1]
        params = {k: v for k, v in self.params_.items() if k not in self._unstored_params}
        params["random_state"] = self.random_state_
        out["params"] = params
        for field in self._stored_fields:
            if field.model_only and not model:
                continue
            value = self if field.attr is None else getattr(self, field.attr, None)
            _put(out, field.key, field.encode(value) if field.encode is not None else value)
        return out

    def _write_arrays(
        self, rs: RunStore, tile_size: int, names: tuple[str, ...] | None = None
    ) -> None:
        """Write the declared arrays (only ``names``, if given)."""
        for spec in self._stored_arrays:
            if names is not None and spec.name not in names:
                continue
            value = getattr(self, spec.attr, None)
            if value is None and spec.optional:
                continue
            if spec.keep is not None and not spec.keep(value):
                continue
            rows = {"rows": tile_size} if spec.rows else {}
            if isinstance(value, zarr.Array):  # a stored fit's leaves: copied a chunk at a time
                rs.copy_named(spec.name, value, attrs=self._array_attrs(spec.name), **rows)
                continue
            rs.write_named(spec.name, np.asarray(value), attrs=self._array_attrs(spec.name), **rows)

    def save(
        self,
        store: str | Path,
        *,
        overwrite: bool = False,
        attrs: dict[str, Any] | None = None,
        tile_size: int | None = None,
        complete: bool | None = None,
    ) -> RunStore:
        """Write the fitted estimator to a new store: plain Zarr arrays and JSON, no pickle.

        Parameters
        ----------
        store : str or Path
            Directory of the Zarr store to create.
        overwrite : bool
            Replace an existing distforest store.
        attrs : dict, optional
            More JSON attributes, recorded as the store is created (a job's spec).
        tile_size : int, optional
            Rows of one chunk of the row arrays; default the estimator's ``tile_size``.
        complete : bool, optional
            Mark the store complete.  Default: the estimator's habit (a model is
            complete when written; a forest that a job goes on writing
            proximities into is completed by its caller).

        Returns
        -------
        RunStore
        """
        self._check_saveable()
        tile = tile_size or int(self.params_.get("tile_size", self._default_tile_size))
        head = {**self._provenance(model=True), **(attrs or {})}
        rs = RunStore.create(store, attrs=head, overwrite=overwrite)
        n, n_trees = self.leaves_.shape[:2]
        rs.write_coordinates(n, n_trees, **self._row_ids())
        self._save_parts(rs, tile)
        self._write_arrays(rs, tile)
        if self._save_completes if complete is None else complete:
            complete_output(rs)
        return rs

    def _same_as_stored(self, rs: RunStore) -> bool:
        """Whether ``rs`` holds this very fit though its ``fit_id`` differs (an earlier,
        identical fit); only a ``fit_id`` match counts unless an estimator says more."""
        return False

    def _open_or_create(self, store: str | Path, overwrite: bool) -> RunStore:
        """The store of this fit to add a matrix to: found again (marked running) or saved.

        A store written by this fit (same ``fit_id``, or :meth:`_same_as_stored`)
        is reopened, so an interrupted matrix resumes; otherwise the estimator
        is saved to a new store (refused if one exists, unless ``overwrite``).
        """
        if location.exists(store):
            with contextlib.suppress(StoreError):
                rs = RunStore.open(store, mode="r+")
                if rs.attrs.get("fit_id") == self.fit_id_ or self._same_as_stored(rs):
                    self.fit_id_ = rs.attrs["fit_id"]
                    rs.mark_running()
                    return rs
        return self.save(store, overwrite=overwrite)

    @classmethod
    def _check_store(cls, rs: RunStore) -> None:
        attrs = rs.attrs
        tag = cls._store_tag
        if tag is not None and attrs.get(tag[0]) != tag[1]:
            why = f"{tag[0]} {attrs.get(tag[0])!r}"
        else:
            missing = [name for name in cls._store_requires if name not in rs.group]
            if not missing:
                return
            why = f"it holds no {missing}"
        raise StoreError(f"{rs.path!r} is not a {cls.__name__} model ({why}); {cls._store_hint}")

    @classmethod
    def load(
        cls,
        store: str | Path,
        *,
        require_complete: bool | None = None,
        rows_in_store: bool = False,
    ) -> Self:
        """An estimator fitted as the one :meth:`save` wrote; it predicts exactly as that one.

        Parameters
        ----------
        store : str or Path
        require_complete : bool, optional
            Refuse a store still marked running.  Default: the estimator's
            habit (a forest's own store is read while its job resumes).
        rows_in_store : bool
            Leave the per-row arrays (leaves, in-bag counts) in the store: the
            estimator's attributes are its Zarr arrays, read on use, as after a
            fit from a stored table (this process does not hold them).
        """
        must = cls._load_requires_complete if require_complete is None else require_complete
        rs = RunStore.open(store, require_complete=must)
        cls._check_store(rs)
        attrs = rs.attrs
        saved = dict(attrs["params"])
        names = getattr(cls, "_get_param_names")()  # noqa: B009 - sklearn's BaseEstimator
        est = cls(**{k: v for k, v in saved.items() if k in names})
        est.params_ = saved
        est.random_state_ = saved["random_state"]
        for field in cls._stored_fields:
            if field.attr is None:
                continue
            value = _get(attrs, field.key)
            if value is UNSET:
                if field.default is REQUIRED:
                    raise StoreError(
                        f"{rs.path!r} is not a complete {cls.__name__} model (no attribute "
                        f"{field.key!r}); {cls._store_hint}"
                    )
                value = field.default
            if value is UNSET or (value is None and field.default is UNSET):
                continue
            if value is not None and field.decode is not None:
                value = field.decode(value)
            setattr(est, field.attr, value)
        rows_in_store = rows_in_store or cls._rows_in_store(rs)
        for spec in cls._stored_arrays:
            if spec.name in rs.group and spec.rows and rows_in_store and spec.dtype is None:
                setattr(est, spec.attr, rs.array(spec.name))
            elif spec.name in rs.group:
                value = rs.read(spec.name)
                setattr(est, spec.attr, value if spec.dtype is None else value.astype(spec.dtype))
            elif spec.optional or spec.keep is not None:
                setattr(est, spec.attr, None)
            else:
                raise StoreError(
                    f"{rs.path!r} is not a complete {cls.__name__} model (no array "
                    f"{spec.name!r}); {cls._store_hint}"
                )
        est._load_parts(rs)
        return est


def as_list(values: Any) -> list[Any]:
    """A sequence as a JSON list."""
    return list(values)


def as_tuple(values: Any) -> tuple[Any, ...]:
    """A JSON list as a tuple."""
    return tuple(values)


def plain_items(values: Any) -> list[Any]:
    """Numpy scalars as Python scalars (class labels), for JSON."""
    return [v.item() if hasattr(v, "item") else v for v in values]


def numeric(values: np.ndarray) -> bool:
    """Whether an array holds numbers (text or objects are not stored)."""
    return bool(values.dtype.kind in "fiub")


def _source_and_fingerprint(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record[k] for k in ("source", "fingerprint")}


#: What a store records of the table a model was fitted on (the forests' first fields).
INPUT_FIELDS = (
    Field("input", "input_", decode=_source_and_fingerprint),
    Field("input.n_samples", "n_samples_", decode=int),
    Field("input.n_features", "n_features_in_", decode=int),
    Field("input.feature_names", "feature_names_in_", encode=as_list, decode=as_tuple),
)
