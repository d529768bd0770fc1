"""Input that is not what it seems is read right or refused, never silently wrong."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from distforest.errors import InputError
from distforest.forests.pairwise import pairwise
from distforest.io import load_table
from distforest.store.run_store import RunStore


def test_semicolon_file_with_decimal_commas_is_read_as_numbers(tmp_path):
    path = tmp_path / "eu.csv"
    path.write_text("a;b;Class\n-0,026;1,5;x\n0,125;2;y\n3,75;-1,25;x\n")
    table = load_table(path, target="Class")
    np.testing.assert_array_equal(table.X, [[-0.026, 1.5], [0.125, 2.0], [3.75, -1.25]])
    assert table.categories == {}  # numbers, not ordinal codes of sorted strings


def test_pipe_delimited_file(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("a|b|c\n1|2|3\n4|5|6\n")
    table = load_table(path)
    assert table.feature_names == ("a", "b", "c")
    np.testing.assert_array_equal(table.X, [[1, 2, 3], [4, 5, 6]])


def test_decimal_comma_text_column_is_read_as_numbers_not_made_categories():
    frame = pd.DataFrame({"a": ["-0,026", "1,5", "2,25"], "b": [1.0, 2.0, 3.0]})
    table = load_table(frame)
    assert table.categories == {}
    np.testing.assert_array_equal(table.X[:, 0], [-0.026, 1.5, 2.25])


def test_values_beyond_float32_name_file_column_and_row(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("a,b\n1,2\n3,1e308\n5,6\n")
    with pytest.raises(InputError, match=r"big.csv: column 'b' holds 1e\+308 \(data row 2"):
        load_table(path)


def test_no_matrix_with_inf_is_marked_complete(tmp_path):
    X = np.array([[0.0, 1.0], [1e300, 2.0], [3.0, 4.0]] * 6)
    with pytest.raises(InputError, match=r"distance\[.*\] is inf.*rescale"):
        pairwise(X, store=tmp_path / "d.zarr", tile_size=16, client="synchronous")
    assert not RunStore.open(tmp_path / "d.zarr").is_complete


def test_a_folder_given_to_a_whole_table_reader_says_which_commands_read_folders(tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]}).to_parquet(folder / "part-0.parquet")
    expected = (r"export is a folder: this reader takes one table whole.*by partitions, on the "
                r"workers, by the commands `proximity`")  # fmt: skip
    with pytest.raises(InputError, match=expected):
        load_table(folder)
