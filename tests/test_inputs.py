"""pipeline/inputs.py: slices cover every line once, every line becomes one record or is blank."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import InputError, PipelineError
from pipeline.inputs import (
    RecordSlice,
    describe_input,
    plan_slices,
    read_slice,
    read_slice_arrow,
    string_list_buffers,
)
from pipeline.inputs import _cut_slice

GRID = pa.list_(pa.string())


def read_all(path, field="grid", per_slice=3, fast_type=None) -> RecordSlice:
    """Every slice of the file, concatenated."""
    out = RecordSlice()
    for spec in plan_slices(str(path), field, per_slice):
        part = read_slice(json.loads(json.dumps(spec)), field, fast_type)  # specs must survive JSON
        out.position_label = part.position_label
        for name in ("positions", "ids", "values", "errors"):
            getattr(out, name).extend(getattr(part, name))
    return out


def write_lines(tmp_path, lines, name="batch.jsonl", end="\n"):
    path = tmp_path / name
    path.write_bytes((end.join(lines) + end).encode("utf-8") if lines else b"")
    return path


def good_lines(n):
    return [json.dumps({"id": f"r{i}", "grid": [f"@{i % 10}", "$."], "extra": {"x": [1, 2]}}) for i in range(n)]


@pytest.mark.parametrize("fast_type", [None, GRID])
@pytest.mark.parametrize("per_slice", [1, 2, 3, 7, 100])
def test_slices_cover_every_line_once(tmp_path, per_slice, fast_type):
    lines = good_lines(10)
    lines[4] = ""  # a blank line is skipped but still counts for the line numbers after it
    path = write_lines(tmp_path, lines)
    records = read_all(path, per_slice=per_slice, fast_type=fast_type)
    assert records.position_label == "line"
    assert records.positions == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert records.ids == [f"r{i}" for i in range(10) if i != 4]
    assert records.errors == [None] * 9
    assert records.values[0] == ["@0", "$."]


@pytest.mark.parametrize("per_slice", [1, 2, 5])
def test_byte_ranges_are_contiguous_and_start_at_lines(tmp_path, per_slice):
    path = write_lines(tmp_path, good_lines(7))
    specs = plan_slices(str(path), "grid", per_slice, block=64)
    data = path.read_bytes()
    ranges = [byte_range(data, spec) for spec in specs]
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    for (_, end), (start, _), spec in zip(ranges, ranges[1:], specs[1:]):
        assert end == start and data[start - 1 : start] == b"\n"
        assert spec["first_line"] == specs[0]["first_line"] + per_slice * specs.index(spec)
    assert plan_slices(str(path), "grid", per_slice, block=64) == specs  # deterministic


def byte_range(data: bytes, spec: dict) -> tuple[int, int]:
    """The (start, end) of the bytes a JSONL slice spec resolves to in the file ``data``."""
    start, end = _cut_slice(data[spec["from"] : spec["to"]], spec)
    return spec["from"] + start, spec["from"] + end


def test_last_line_without_newline_and_crlf(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b'{"id": "a", "grid": "x"}\r\n\r\n{"id": "b", "grid": "y"}')
    for per_slice in (1, 2, 5):
        records = read_all(path, per_slice=per_slice)
        assert (records.positions, records.ids, records.values) == ([1, 3], ["a", "b"], ["x", "y"])


def test_malformed_lines_are_reported_by_line(tmp_path):
    lines = [
        '{"id": "ok", "grid": ["@$"]}',
        '{"id": "broken", "grid": [',
        "[1, 2]",
        '{"grid": ["@"]}',
        '{"id": 17, "grid": ["@"]}',
        '{"id": 1.5, "grid": ["@"]}',
        '{"id": true, "grid": ["@"]}',
        '{"id": "nogrid"}',
        '{"id": null, "grid": ["@"]}',
        '{"id": "a"} {"id": "b"}',
        "   ",
    ]
    path = write_lines(tmp_path, lines)
    path.write_bytes(path.read_bytes() + b'{"id": "\xff", "grid": []}\n')
    for fast_type in (None, GRID):
        records = read_all(path, per_slice=4, fast_type=fast_type)
        assert records.positions == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12]
        assert records.ids == ["ok", None, None, None, "17", None, None, "nogrid", None, None, None]
        errors = records.errors
        assert errors[0] is None and errors[4] is None
        assert errors[1].startswith("line 2: not valid JSON")
        assert errors[2] == "line 3: not a JSON object but an array"
        assert errors[3] == "line 4: no 'id'"
        assert errors[5] == "line 6: 'id' must be a string or an integer, not a number"
        assert errors[6] == "line 7: 'id' must be a string or an integer, not a boolean"
        assert errors[7] == "line 8: no 'grid'"
        assert errors[8] == "line 9: no 'id'"
        assert errors[9].startswith("line 10: not valid JSON: Extra data")
        assert errors[10].startswith("line 12: not valid UTF-8")
        assert [v for v, e in zip(records.values, errors) if e] == [None] * 9


@pytest.mark.parametrize(
    "payload, expected",
    [("9.0", 9.0), ('"9"', "9"), ("true", True), ("null", None), ("[1, 2.5]", [1, 2.5]), ("9", 9)],
)
def test_fast_path_never_coerces_types(tmp_path, payload, expected):
    path = write_lines(tmp_path, [f'{{"id": "a", "n": {payload}}}'])
    records = read_all(path, field="n", fast_type=pa.int64())
    assert records.values == [expected] and type(records.values[0]) is type(expected)
    assert records.errors == [None]


def test_fast_path_keeps_nested_types(tmp_path):
    path = write_lines(tmp_path, ['{"id": "a", "doors": [[9, 0, -1]]}', '{"id": "b", "doors": [[9, 0, -1.0]]}'])
    records = read_all(path, field="doors", fast_type=pa.list_(pa.list_(pa.int64())))
    assert records.values == [[[9, 0, -1]], [[9, 0, -1.0]]]
    assert type(records.values[1][0][2]) is float


def test_empty_file_has_no_slices(tmp_path):
    assert plan_slices(str(write_lines(tmp_path, [])), "grid", 10) == []


def test_parquet_row_ranges(tmp_path):
    path = tmp_path / "batch.parquet"
    table = pa.table({"id": [f"p{i}" for i in range(10)], "grid": [[f"@{i}"] for i in range(10)]})
    pq.write_table(table, path, row_group_size=3)
    for per_slice in (1, 4, 10, 50):
        records = read_all(path, per_slice=per_slice)
        assert records.position_label == "row"
        assert records.positions == list(range(1, 11))
        assert records.ids == [f"p{i}" for i in range(10)]
        assert records.values == [[f"@{i}"] for i in range(10)]


def test_parquet_ids_ints_nulls_and_magic_sniffing(tmp_path):
    path = tmp_path / "batch.data"  # no suffix: recognised by its magic bytes
    pq.write_table(pa.table({"id": [5, None, 7], "grid": ["@", "@$", None]}), path)
    records = read_all(path)
    assert records.ids == ["5", None, "7"]
    assert records.errors == [None, "row 2: no 'id'", None]
    assert records.values == ["@", None, None]


def test_parquet_without_id_column_reports_every_row(tmp_path):
    path = tmp_path / "batch.parquet"
    pq.write_table(pa.table({"grid": ["@", "@$"]}), path)
    assert read_all(path).errors == ["row 1: no 'id'", "row 2: no 'id'"]


def test_unusable_inputs_raise_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        plan_slices(str(tmp_path / "missing.jsonl"), "grid", 10)
    with pytest.raises(InputError, match="not a regular file"):
        plan_slices(str(tmp_path), "grid", 10)
    unknown = tmp_path / "batch.bin"
    unknown.write_bytes(b"\x00\x01 what?")
    with pytest.raises(InputError, match="cannot tell the format"):
        plan_slices(str(unknown), "grid", 10)
    fake = tmp_path / "fake.parquet"
    fake.write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="as Parquet"):
        plan_slices(str(fake), "grid", 10)
    nogrid = tmp_path / "nogrid.parquet"
    pq.write_table(pa.table({"id": ["a"]}), nogrid)
    with pytest.raises(InputError, match="no column 'grid'"):
        plan_slices(str(nogrid), "grid", 10)
    assert issubclass(InputError, PipelineError)
    with pytest.raises(ValueError, match="at least 1"):
        plan_slices(str(nogrid), "grid", 0)


def test_changed_file_is_detected(tmp_path):
    path = write_lines(tmp_path, good_lines(3))
    spec = plan_slices(str(path), "grid", 10)[0]
    path.write_bytes(path.read_bytes() + b"\n")
    with pytest.raises(InputError, match="changed during the run"):
        read_slice(spec, "grid")


def test_clean_slices_take_the_pyarrow_path(tmp_path, monkeypatch):
    path = write_lines(tmp_path, good_lines(5))
    monkeypatch.setattr("pipeline.inputs._read_jsonl_lines", lambda *a: pytest.fail("fell back"))
    records = read_all(path, per_slice=2, fast_type=GRID)
    assert records.positions == [1, 2, 3, 4, 5] and records.errors == [None] * 5


def test_describe_input(tmp_path):
    path = write_lines(tmp_path, good_lines(2))
    described = describe_input(str(path))
    assert described["path"] == str(path) and described["size"] == path.stat().st_size
    with pytest.raises(InputError, match="does not exist"):
        describe_input(str(tmp_path / "gone.jsonl"))


def test_read_slice_arrow_agrees_with_read_slice(tmp_path):
    path = write_lines(tmp_path, good_lines(9))
    for spec in plan_slices(str(path), "grid", 4):
        arrow = read_slice_arrow(spec, "grid", GRID)
        plain = read_slice(spec, "grid", GRID)
        assert arrow.positions.tolist() == plain.positions and arrow.ids.to_pylist() == plain.ids
        assert arrow.values.to_pylist() == plain.values and arrow.position_label == "line"


@pytest.mark.parametrize(
    "line",
    ['{"id": "x", "grid": ["@", null]}', '{"id": "x"}', '{"grid": ["@"]}', '{"id": 3, "grid": ["@"]}', "", "[1]",
     '{"id": "x", "grid": "@"}'],
)
def test_read_slice_arrow_declines_anything_doubtful(tmp_path, line):
    path = write_lines(tmp_path, [good_lines(1)[0], line])
    assert read_slice_arrow(plan_slices(str(path), "grid", 10)[0], "grid", GRID) is None


def test_read_slice_arrow_parquet(tmp_path):
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "grid": [["@a"], ["@", "$"], ["é"]]}), path, row_group_size=2)
    spec = plan_slices(str(path), "grid", 2)[1]
    arrow = read_slice_arrow(spec, "grid", GRID)
    assert (arrow.positions.tolist(), arrow.ids.to_pylist(), arrow.values.to_pylist()) == ([3], ["3"], [["é"]])
    assert arrow.position_label == "row"
    pq.write_table(pa.table({"id": ["a", None], "grid": [["@"], ["@"]]}), path)
    assert read_slice_arrow(plan_slices(str(path), "grid", 5)[0], "grid", GRID) is None
    pq.write_table(pa.table({"id": ["a"], "grid": ["@"]}), path)  # a string, not a list of strings
    assert read_slice_arrow(plan_slices(str(path), "grid", 5)[0], "grid", GRID) is None


def test_string_list_buffers_of_a_sliced_array():
    values = pa.array([["ab", "c"], [], ["déf"], ["g", "", "hi"]], type=GRID).slice(1)
    chars, string_offsets, list_offsets = string_list_buffers(values)
    rebuilt = [
        [chars[string_offsets[j] : string_offsets[j + 1]].tobytes().decode() for j in range(lo, hi)]
        for lo, hi in zip(list_offsets[:-1], list_offsets[1:])
    ]
    assert rebuilt == [[], ["déf"], ["g", "", "hi"]]
    assert list_offsets.dtype == string_offsets.dtype == "int64"
