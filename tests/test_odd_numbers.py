"""Odd numbers: one reading rule for numbers, nothing silently wrong.

A text column's decimal mark is decided from the whole column (or set with
``--decimal`` / ``input.decimal``), a thousands separator is never guessed, a
mixed column is refused naming the column, a row and the option that settles
it; nested Parquet columns, a continuous target for ``mislabels`` and floats
beyond float32 (features, similarities, distances) are refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from distforest.cli.main import cli
from distforest.errors import InputError
from distforest.io import load_table
from distforest.io.tables import read_frame


def refused(args: list[str], code: int, *words: str) -> str:
    """Run the CLI in-process: exit ``code``, one error line holding ``words``, no traceback."""
    result = CliRunner().invoke(cli, ["-q", *map(str, args)])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = [x for x in result.output.splitlines() if x.startswith("distforest: error:")]
    assert len(lines) == 1, result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the rule, on the file the red team used --------------------------------------


def test_semicolon_file_with_dot_and_comma_columns_reads_each_column_right(tmp_path):
    # one decimal-comma column, the others with dots: -2.5557 stays -2.5557 (not -25557)
    path = _write(tmp_path, "eu.csv", "lat;lon;share\n-2.5557;41.81;0,5\n3.25;-0.125;1,25\n")
    table = load_table(path)
    np.testing.assert_array_equal(table.X, [[-2.5557, 41.81, 0.5], [3.25, -0.125, 1.25]])
    assert table.categories == {}
    frame = read_frame(path)  # what impute and predict read: the same numbers
    np.testing.assert_array_equal(frame.to_numpy(dtype=float), table.X)


def test_a_column_mixing_decimal_marks_is_refused_naming_column_rows_and_option(tmp_path):
    text = "a;b\n" + "".join(f"{i};{i},36\n" for i in range(40)) + "7;0.12\n"
    path = _write(tmp_path, "mixed.csv", text)
    with pytest.raises(InputError) as err:
        load_table(path)
    msg = str(err.value)
    for word in ("mixed.csv", "column 'b'", "'0.12' (data row 41)", "'0,36' (data row 1)",
                 "--decimal ,", "--decimal ."):  # fmt: skip
        assert word in msg, (word, msg)
    # the option settles it: with ',' the dot value is named as the wrong mark
    with pytest.raises(InputError, match=r"'0.12', data row 41"):
        load_table(path, decimal=",")


def test_decimal_option_reads_the_file_its_way_and_refuses_the_other_mark(tmp_path):
    from distforest.io.tables import decimal_mark

    path = _write(tmp_path, "comma.csv", "a;b\n1;0,5\n2;1,5\n3;2\n")
    np.testing.assert_array_equal(load_table(path, decimal=",").X[:, 1], [0.5, 1.5, 2.0])
    with pytest.raises(InputError, match=r"column 'b' holds numbers written with ','"):
        load_table(path, decimal=".")
    dots = _write(tmp_path, "dots.csv", "a,b\n1,0.5\n2,1.5\n")
    with decimal_mark(","), pytest.raises(InputError, match=r"'0.5', data row 1"):
        load_table(dots)  # pandas would have read these as floats: checked all the same


def test_decimal_commas_with_a_stray_marker_are_refused_not_made_200_categories(tmp_path):
    text = "a;b\n" + "".join(f"{i};{i},{i % 10}\n" for i in range(200)) + "5;n.v.\n"
    path = _write(tmp_path, "nv.csv", text)
    with pytest.raises(InputError, match=r"column 'b'.*'n.v.' \(row 201\).*--na-values n.v."):
        load_table(path)
    table = load_table(path, na_values=["n.v."])
    assert table.categories == {}
    assert table.X[7, 1] == 7.7 and np.isnan(table.X[200, 1])


def test_thousands_separators_are_never_read(tmp_path):
    path = _write(tmp_path, "k.csv", "a;b\n" + "1;2\n" * 20 + "3;1.234,5\n")
    with pytest.raises(InputError, match=r"'1.234,5' \(row 21\).*thousands separator"):
        load_table(path)


def test_cli_decimal_option_and_pipeline_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = "a;b\n" + "".join(f"{i};{i % 5},5\n" for i in range(30)) + "9;0.25\n"
    path = _write(tmp_path, "m.csv", text)
    refused(["proximity", path, "--out", "p.zarr", "--trees", "2"], 3, "column 'b'", "--decimal")
    refused(["proximity", path, "--out", "p.zarr", "--trees", "2", "--decimal", ","], 3,
            "'0.25', data row 31")  # fmt: skip
    assert not (tmp_path / "p.zarr").exists()
    good = _write(tmp_path, "g.csv", "a;b\n" + "".join(f"{i};{i % 5}\n" for i in range(30)))
    pipe = _write(tmp_path, "p.yaml", f"input: {{path: {good}, decimal: ','}}\n"
                  "forest: {n_estimators: 2}\noutput: {dir: out}\n")  # fmt: skip
    assert CliRunner().invoke(cli, ["validate", str(pipe)]).exit_code == 0
    bad = _write(tmp_path, "b.yaml", f"input: {{path: {good}, decimal: ';'}}\noutput: {{dir: o}}\n")
    result = CliRunner().invoke(cli, ["validate", str(bad)])
    assert result.exit_code == 4 and "input.decimal" in result.output, result.output
    mixed = _write(tmp_path, "x.yaml", f"input: {{path: {path}, decimal: '.'}}\n"
                   "forest: {n_estimators: 2}\noutput: {dir: out2}\n")  # fmt: skip
    refused(["run", mixed], 3, "column 'b'", "--decimal ,")


def test_counts_of_numbers_and_the_decimal_they_decide():
    from distforest.io.encoding import NumberCounts, count_numbers, decide_decimal

    values = pd.Series(["1,5", "2", None, "x", "3,25", "y", "4"] * 3, dtype=object)
    whole = count_numbers(values)
    assert (whole.comma, whole.plain, whole.fail, whole.dot) == (6, 6, 6, 0)
    assert whole.failures[:2] == ((4, "x"), (6, "y"))
    assert decide_decimal(NumberCounts(comma=5, plain=2), "c", "f") == ","
    assert decide_decimal(NumberCounts(fail=5, plain=2), "c", "f") is None  # text labels


# -- nested Parquet, a continuous target, floats beyond float32 ----------------------


@pytest.mark.parametrize(
    "column", [[[1, 2], [3], [4, 5]], [{"u": 1}, {"u": 2}, {"u": 3}]], ids=["list", "struct"]
)
def test_nested_parquet_columns_are_refused(tmp_path, column):
    path = tmp_path / "nested.parquet"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": column}).to_parquet(path)
    with pytest.raises(InputError, match=r"nested.parquet: column 'b' holds nested values"):
        load_table(path)
    assert load_table(path, drop=["b"]).n_features == 1  # a dropped one is fine


def test_mislabels_refuses_a_continuous_target(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(40, 3)), columns=["a", "b", "y"])
    path = tmp_path / "cont.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "m.csv"
    refused(["mislabels", path, "--target", "y", "--out", out, "--trees", "2"], 3,
            "continuous", "--task classification")  # fmt: skip
    assert not out.exists()


def test_distances_and_similarities_beyond_float32_are_refused(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 3))
    pd.DataFrame(X, columns=["a", "b", "c"]).to_csv(tmp_path / "X.csv", index=False)
    D = np.abs(X[:, None, 0] - X[None, :, 0]) * 1e300
    np.save(tmp_path / "D.npy", D)
    refused(["smerf", "fit", tmp_path / "X.csv", "--distances", tmp_path / "D.npy",
             "--out", tmp_path / "s.zarr", "--trees", "2"], 3, "float32")  # fmt: skip
    assert not (tmp_path / "s.zarr").exists()
    S = np.exp(-D / 1e300) * 1e39
    np.save(tmp_path / "S.npy", S)
    pd.DataFrame({"label": ["a", "b"] * 10}).to_csv(tmp_path / "labels.csv", index=False)
    refused(["simforest", "fit", "--similarity", tmp_path / "S.npy", "--labels",
             tmp_path / "labels.csv", "--out", tmp_path / "f.zarr", "--trees", "2"], 3,
            "float32")  # fmt: skip
    assert not (tmp_path / "f.zarr").exists()


def test_features_beyond_float32_are_refused(tmp_path):
    path = _write(tmp_path, "big.csv", "a;b\n1;2,5\n2;1e300\n3;4\n")
    refused(["proximity", path, "--out", tmp_path / "p.zarr", "--trees", "2"], 3,
            "column 'b'", "float32")  # fmt: skip
