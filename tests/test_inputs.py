"""pipeline/inputs: slices cover every line once, every line becomes one record or is blank."""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field as dataclass_field

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchenum.pipeline.arrow import string_list_buffers
from batchenum.pipeline.errors import InputError, PipelineError
from batchenum.pipeline.inputs import describe_input, plan_slices, read_records
from batchenum.pipeline.inputs.plan import load_slice

GRID = pa.list_(pa.string())


@dataclass
class AllRecords:
    """Every record of a file in input order, accepted or rejected: one entry per record in each
    list (id None: the record has none; value None and an error: it was rejected)."""

    positions: list = dataclass_field(default_factory=list)
    ids: list = dataclass_field(default_factory=list)
    values: list = dataclass_field(default_factory=list)
    errors: list = dataclass_field(default_factory=list)
    position_label: str = "line"


def read_all(path, field="grid", per_slice=3, payload_type=GRID, check=None) -> AllRecords:
    """Every slice of the file, concatenated."""
    rows = []
    out = AllRecords()
    for spec in plan_slices(str(path), field, per_slice):
        part = read_records(json.loads(json.dumps(spec)), field, payload_type, check=check)  # specs survive JSON
        label = out.position_label = part.position_label
        rows += zip(part.positions.tolist(), part.ids.to_pylist(), part.payloads.to_pylist(), [None] * len(part))
        rejected = part.rejected
        rows += [
            (p, None if name == f"{label} {p}" else name, None, reason)
            for p, name, reason in zip(rejected.positions.tolist(), rejected.names, rejected.reasons)
        ]
    for row in sorted(rows, key=lambda row: row[0]):
        for name, value in zip(("positions", "ids", "values", "errors"), row):
            getattr(out, name).append(value)
    return out


@pytest.fixture(params=["fast", "reference"])
def readers(request, monkeypatch):
    """Both JSONL readers: as chosen (the fast path where it reads a slice), or the reference only."""
    if request.param == "reference":
        monkeypatch.setattr("batchenum.pipeline.inputs.jsonl._fast_records", lambda *a, **k: None)
    return request.param


def write_lines(tmp_path, lines, name="batch.jsonl", end="\n"):
    path = tmp_path / name
    path.write_bytes((end.join(lines) + end).encode("utf-8") if lines else b"")
    return path


def good_lines(n):
    return [json.dumps({"id": f"r{i}", "grid": [f"@{i % 10}", "$."], "extra": {"x": [1, 2]}}) for i in range(n)]


@pytest.mark.parametrize("per_slice", [1, 2, 3, 7, 100])
def test_slices_cover_every_line_once(tmp_path, per_slice, readers):
    lines = good_lines(10)
    lines[4] = ""  # a blank line is skipped but still counts for the line numbers after it
    path = write_lines(tmp_path, lines)
    records = read_all(path, per_slice=per_slice)
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
    """The (start, end) of the bytes a JSONL slice spec resolves to in the file ``data``, found
    here by counting newlines, and checked against what ``load_slice`` reads."""
    newlines = [spec["from"] + at for at, byte in enumerate(data[spec["from"] : spec["to"]]) if byte == 0x0A]
    start = newlines[spec["skip"] - 1] + 1 if spec["skip"] else spec["from"]
    end = newlines[spec["skip"] + spec["lines"] - 1] + 1 if spec["lines"] else spec["to"]
    assert load_slice(spec).data == data[start:end]
    return start, end


def test_last_line_without_newline_and_crlf(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b'{"id": "a", "grid": "x"}\r\n\r\n{"id": "b", "grid": "y"}')
    for per_slice in (1, 2, 5):
        records = read_all(path, per_slice=per_slice, payload_type=pa.string())
        assert (records.positions, records.ids, records.values) == ([1, 3], ["a", "b"], ["x", "y"])


def test_malformed_lines_are_reported_by_line(tmp_path, readers):
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
    for per_slice in (4,):
        records = read_all(path, per_slice=per_slice)
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
def test_payloads_are_never_coerced(tmp_path, payload, expected):
    path = write_lines(tmp_path, [f'{{"id": "a", "n": {payload}}}'])
    records = read_all(path, field="n", payload_type=pa.int64())
    if type(expected) is int:
        assert records.values == [expected] and records.errors == [None]
    else:  # rejected, not read as 9
        assert records.values == [None] and records.errors[0].startswith("line 1: 'n' is not of type int64")
    seen = read_all(path, field="n", payload_type=pa.string(), check=lambda value: type(value).__name__)
    assert seen.values == [type(expected).__name__] and seen.errors == [None]  # a check sees the JSON type


def test_nested_types_are_kept(tmp_path):
    path = write_lines(tmp_path, ['{"id": "a", "doors": [[9, 0, -1]]}', '{"id": "b", "doors": [[9, 0, -1.0]]}'])
    records = read_all(path, field="doors", payload_type=pa.list_(pa.list_(pa.int64())))
    assert records.values == [[[9, 0, -1]], None] and records.errors[1].startswith("line 2: 'doors' is not of type")
    seen = read_all(path, field="doors", payload_type=pa.string(), check=json.dumps)
    assert seen.values == ["[[9, 0, -1]]", "[[9, 0, -1.0]]"]


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
    records = read_all(path, payload_type=pa.string())
    assert records.ids == ["5", None, "7"]
    assert records.errors == [None, "row 2: no 'id'", "row 3: 'grid' is not of type string (null)"]
    assert records.values == ["@", None, None]


def test_parquet_without_id_column_reports_every_row(tmp_path):
    path = tmp_path / "batch.parquet"
    pq.write_table(pa.table({"grid": ["@", "@$"]}), path)
    assert read_all(path).errors == ["row 1: no 'id'", "row 2: no 'id'"]


def test_unusable_inputs_raise_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        plan_slices(str(tmp_path / "missing.jsonl"), "grid", 10)
    with pytest.raises(InputError, match=f"input folder {tmp_path} holds no files"):
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
        read_records(spec, "grid", GRID)


def test_clean_slices_take_the_pyarrow_path(tmp_path, monkeypatch):
    path = write_lines(tmp_path, good_lines(5))
    monkeypatch.setattr("batchenum.pipeline.inputs.jsonl._read_lines", lambda *a: pytest.fail("fell back"))
    records = read_all(path, per_slice=2)
    assert records.positions == [1, 2, 3, 4, 5] and records.errors == [None] * 5


def test_describe_input(tmp_path):
    path = write_lines(tmp_path, good_lines(2))
    described = describe_input(str(path))
    assert described["path"] == str(path) and described["size"] == path.stat().st_size
    with pytest.raises(InputError, match="does not exist"):
        describe_input(str(tmp_path / "gone.jsonl"))


def test_fast_path_agrees_with_the_reference(tmp_path, monkeypatch):
    path = write_lines(tmp_path, good_lines(9))
    for spec in plan_slices(str(path), "grid", 4):
        fast = read_records(spec, "grid", GRID)
        with monkeypatch.context() as patch:
            patch.setattr("batchenum.pipeline.inputs.jsonl._fast_records", lambda *a, **k: None)  # the reference only
            plain = read_records(spec, "grid", GRID)
        assert fast.positions.tolist() == plain.positions.tolist() and fast.ids.equals(plain.ids)
        assert fast.payloads.to_pylist() == plain.payloads.to_pylist() and fast.position_label == "line"
        assert len(fast.rejected) == len(plain.rejected) == 0 and fast.fingerprint == plain.fingerprint


def fell_back(monkeypatch, module: str, reader: str) -> list:
    """A list that gets an entry each time the reference reader ``module.reader`` is called."""
    calls, original = [], getattr(__import__(f"batchenum.pipeline.inputs.{module}", fromlist=[reader]), reader)
    monkeypatch.setattr(f"batchenum.pipeline.inputs.{module}.{reader}", lambda *a: calls.append(1) or original(*a))
    return calls


@pytest.mark.parametrize(
    "line",
    [
        '{"id": "x", "grid": ["@", null]}',
        '{"id": "x"}',
        '{"grid": ["@"]}',
        '{"id": 3, "grid": ["@"]}',
        "",
        "[1]",
        '{"id": "x", "grid": "@"}',
    ],
)
def test_fast_path_declines_anything_doubtful(tmp_path, line, monkeypatch):
    path = write_lines(tmp_path, [good_lines(1)[0], line])
    calls = fell_back(monkeypatch, "jsonl", "_read_lines")
    read_records(plan_slices(str(path), "grid", 10)[0], "grid", GRID)
    assert calls


def test_parquet_fast_path(tmp_path, monkeypatch):
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "grid": [["@a"], ["@", "$"], ["é"]]}), path, row_group_size=2)
    spec = plan_slices(str(path), "grid", 2)[1]
    calls = fell_back(monkeypatch, "parquet", "_read_rows")
    arrow = read_records(spec, "grid", GRID)
    assert (arrow.positions.tolist(), arrow.ids.to_pylist(), arrow.payloads.to_pylist()) == ([3], ["3"], [["é"]])
    assert arrow.position_label == "row" and not calls
    pq.write_table(pa.table({"id": ["a", None], "grid": [["@"], ["@"]]}), path)
    read_records(plan_slices(str(path), "grid", 5)[0], "grid", GRID)
    assert len(calls) == 1
    pq.write_table(pa.table({"id": ["a"], "grid": ["@"]}), path)  # a string, not a list of strings
    read_records(plan_slices(str(path), "grid", 5)[0], "grid", GRID)
    assert len(calls) == 2


def test_string_list_buffers_of_a_sliced_array():
    values = pa.array([["ab", "c"], [], ["déf"], ["g", "", "hi"]], type=GRID).slice(1)
    chars, string_offsets, list_offsets = string_list_buffers(values)
    rebuilt = [
        [chars[string_offsets[j] : string_offsets[j + 1]].tobytes().decode() for j in range(lo, hi)]
        for lo, hi in zip(list_offsets[:-1], list_offsets[1:])
    ]
    assert rebuilt == [[], ["déf"], ["g", "", "hi"]]
    assert list_offsets.dtype == string_offsets.dtype == "int64"
