"""The compiled reader of ``{"id": "...", "FIELD": ["...", ...]}`` lines must read exactly what
pyarrow's JSON reader reads, and decline (None) every slice it does not read entirely."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.json as pa_json
from hypothesis import example, given, settings
from hypothesis import strategies as st

from batchenum.pipeline.inputs.jsonl_strict import read_id_and_strings

SCHEMA = pa.schema([("id", pa.string()), ("grid", pa.list_(pa.string()))])
printable = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=6)
records = st.tuples(printable, st.lists(printable, max_size=4), st.booleans())


def line(ident: str, rows: list[str], spaced: bool) -> bytes:
    separators = (", ", ": ") if spaced else (",", ":")
    return json.dumps({"id": ident, "grid": rows}, separators=separators).encode()


def pyarrow_rows(data: bytes) -> list[dict] | None:
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            parse_options=pa_json.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid:
        return None
    return table.to_pylist()


@given(st.lists(records, min_size=1, max_size=8), st.booleans())
@settings(max_examples=300, deadline=None)
def test_well_formed_lines_read_as_pyarrow_reads_them(lines, final_newline):
    data = b"\n".join(line(*record) for record in lines) + (b"\n" if final_newline else b"")
    table = read_id_and_strings(data, "grid")
    # json.dumps escapes '"' and '\\': such lines are declined, and read the general way
    if any('"' in text or "\\" in text for ident, rows, _ in lines for text in [ident, *rows]):
        assert table is None
    else:
        assert table is not None and table.to_pylist() == pyarrow_rows(data)


@given(st.lists(records, min_size=1, max_size=4), st.data())
@settings(max_examples=500, deadline=None)
@example([("a", ["@"], False)], None)
def test_any_byte_changed_is_read_as_pyarrow_reads_it_or_declined(lines, data):
    text = bytearray(b"\n".join(line(*record) for record in lines) + b"\n")
    if data is not None:
        at = data.draw(st.integers(0, len(text) - 1))
        text[at] = data.draw(st.sampled_from(b'{}[]:,"\\ \t\r\nx@.0\x00\xc3'))
    table = read_id_and_strings(bytes(text), "grid")
    if table is not None:
        rows = pyarrow_rows(bytes(text))
        assert rows is not None and table.to_pylist() == rows
        assert table.num_rows == bytes(text).count(b"\n") + (0 if text.endswith(b"\n") else 1)


def test_other_shapes_are_declined():
    declined = [
        b"",  # nothing to read
        b'{"grid":["@"],"id":"a"}\n',  # keys in another order
        b'{"id":"a","grid":["@"],"x":1}\n',  # another key
        b'{"id":7,"grid":["@"]}\n',  # a number for an id
        b'{"id":"a","grid":["@"]}\r\n',  # CRLF
        b'{"id":"a","grid":["@"]}\n\n{"id":"b","grid":["@"]}\n',  # a blank line
        b'{"id":"\xc3\xa9","grid":["@"]}\n',  # not ASCII
        b'{"id":"a","grid":["@"]}{"id":"b","grid":["@"]}\n',  # two objects on a line
        b'{"id":"a","grid":["@",]}\n',  # a trailing comma
        b'{"id":"a","grid":"@"}\n',  # not a list
        b'\t{"id":"a","grid":["@"]}\n',  # whitespace other than spaces
    ]
    for data in declined:
        assert read_id_and_strings(data, "grid") is None, data
