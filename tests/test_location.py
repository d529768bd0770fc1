"""distforest.location: local paths keep their fast paths, URLs carry their options."""

from __future__ import annotations

import json
import pickle

from distforest import location
from distforest.location import Location


def test_a_location_is_its_url_and_keeps_its_options_through_str_join_and_pickle():
    loc = Location("s3://bucket/out", {"key": "k", "secret": "hidden"})
    assert loc == "s3://bucket/out" and repr(loc) == "'s3://bucket/out'"
    assert json.dumps({"p": loc}) == '{"p": "s3://bucket/out"}'
    assert "hidden" not in f"{loc} {loc!r} {loc!s}"
    for derived in (str(loc), loc / "p.zarr", location.join(loc, "p.zarr", "forest"),
                    location.parent(loc / "p.zarr"), pickle.loads(pickle.dumps(loc))):  # fmt: skip
        assert location.options(derived) == {"key": "k", "secret": "hidden"}, derived
    assert location.join(loc, "p.zarr", "forest") == "s3://bucket/out/p.zarr/forest"
    assert location.parent(loc / "p.zarr") == "s3://bucket/out"


def test_what_counts_as_remote_and_how_it_is_shown(tmp_path):
    assert location.is_remote("s3://b/x") and location.is_remote("memory://x")
    assert location.is_remote("simplecache::s3://b/x")
    assert not location.is_remote(str(tmp_path)) and not location.is_remote(tmp_path)
    assert not location.is_remote(f"file://{tmp_path}")
    assert location.local(f"file://{tmp_path}") == str(tmp_path)
    assert location.display("ftp://user:pw@host/x.csv") == "ftp://host/x.csv"
    assert location.with_options(str(tmp_path), {"a": 1}) == str(tmp_path)
    assert location.options(location.with_options("s3://b", {"a": 1})) == {"a": 1}
