"""Property tests for record reading (issue 14): random bytes and random JSON at the readers of
both jobs, through both paths (the pyarrow fast path and the line-by-line reader; JSONL and
Parquet).  Invariants: no exception escapes, one verdict per record, answered + rejected =
records, the verdict of a record does not depend on the path or on the records sharing its
shard, and everything written to a table is valid UTF-8."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from helpers import plain_columns
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from batchenum.jobs.dungeons import DungeonJob
from batchenum.jobs.nonary import NonaryJob
from batchenum.pipeline.errors import InputError
from batchenum.pipeline.inputs import plan_slices, read_records
from batchenum.pipeline.job import PlanContext, Shard

GRID = pa.list_(pa.string())
BOM = b"\xef\xbb\xbf"
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Bytes that readers disagree on when handled carelessly.
HOSTILE = [
    b"\xff",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    BOM,
    b"\t",
    b"\r",
    b"\x0b",
    b"\x0c",
    b" ",
    b"\n",
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b"\\",
    b"\x00",
    b",",
    b"9" * 641,
    b"[" * 70,
    b"1e400",
    b"NaN",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-20, 20) | st.floats(allow_nan=True) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
grids = st.lists(st.text(alphabet="@$.#g ", min_size=1, max_size=4), min_size=1, max_size=3)
doors = st.lists(st.tuples(st.integers(1, 9), st.integers(0, 3), st.integers(-1, 3)).map(list), min_size=1, max_size=4)


@st.composite
def lines(draw) -> bytes:
    """One line: a plausible record (often valid for one job), random JSON, random bytes, or a
    record with one hostile fragment spliced in anywhere."""
    kind = draw(st.sampled_from(["record", "record", "json", "bytes", "spliced"]))
    if kind == "bytes":
        return draw(st.binary(max_size=30))
    if kind == "json":
        return json.dumps(draw(json_values), ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    record = {"id": draw(st.one_of(st.text(max_size=5), st.integers(-5, 99), json_values))}
    if draw(st.booleans()):
        record["grid"] = draw(st.one_of(grids, json_values))
    if draw(st.booleans()):
        record["doors"] = draw(st.one_of(doors, json_values))
    if draw(st.booleans()):
        record["extra"] = draw(json_values)
    text = json.dumps(record, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    if kind == "spliced":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(HOSTILE)) + text[at:]
    return text


def non_blank_lines(data: bytes) -> list[int]:
    """The line numbers that are records: every line with something besides ASCII whitespace
    (a BOM at the very start of the file is not content)."""
    data = data[len(BOM) :] if data.startswith(BOM) else data
    return [k for k, line in enumerate(data.split(b"\n"), 1) if line.strip()]


def read_everything(path, field: str, per_slice: int, fast: bool, monkeypatch) -> list[tuple]:
    """(position, id, value, error) for every record of every slice, through ``read_records``:
    with the fast path where it reads a slice (``fast``), else the reference readers only."""
    out = []
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr("batchenum.pipeline.inputs.jsonl._fast_records", lambda *a, **k: None)
        for spec in plan_slices(str(path), field, per_slice):
            part = read_records(spec, field, GRID, check=lambda value: value if _strings(value) else _no(value))
            label = part.position_label
            out.extend(
                zip(part.positions.tolist(), part.ids.to_pylist(), part.payloads.to_pylist(), [None] * len(part))
            )
            rejected = part.rejected
            out.extend(
                (p, None if name == f"{label} {p}" else name, None, reason)
                for p, name, reason in zip(rejected.positions.tolist(), rejected.names, rejected.reasons)
            )
    return sorted(out, key=lambda record: record[0])


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _no(value):
    raise ValueError(f"not a list of strings: {type(value).__name__}")


def job_verdicts(job) -> dict[int, tuple]:
    """line -> (table, id, reason); checks one verdict per record and UTF-8 on the way."""
    result = {}
    for shard in job.plan(PlanContext()):
        outcome = job.run_shard(Shard(shard.id, json.loads(json.dumps(dict(shard.spec)))))
        answers, errors = (plain_columns(outcome.tables[table]) for table in ("answers", "errors"))
        assert outcome.stats["records"] == len(answers["id"]) + len(errors["id"])
        for line, ident in zip(list(answers["line"]), answers["id"]):
            assert line not in result
            result[int(line)] = ("answer", ident.encode("utf-8"), None)
        for line, ident, reason in zip(list(errors["line"]), errors["id"], errors["error"]):
            assert line not in result
            result[int(line)] = ("error", ident.encode("utf-8"), reason.encode("utf-8"))
            assert len(reason) <= 300
    return result


@SETTINGS
@given(st.lists(lines(), max_size=8), st.booleans())
@example([b'{"id": "a", "grid": ["@$"], "doors": [[9, 0, -1]]}', b'{"id": 7, "grid": ["@"]}'], True)  # fast path
@example([b"null", b'{"id": "a", "grid": ["@"]}'], False)  # pyarrow 26 crashed on a first line "null"
@example([b'{"id": "a", "grid": ["@"]} {"id": "b", "grid": ["@"]}', b" "], False)  # two objects, a blank
@example([b"\xfe\xff"], False)  # a UTF-16 byte order mark
@example([b'{"id":"a","grid":["@$","#."]}', b'{"id": "b", "grid": []}'], True)  # jsonl_strict reads these
@example([b'{"id":"a","grid":["@$","#."]}', b'{"id":"a\\u0041","grid":["@"]}'], False)  # ...not this escape
def test_jsonl_readers_agree_on_random_lines(tmp_path_factory, monkeypatch, content, bom):
    data = (BOM if bom else b"") + b"\n".join(content) + b"\n"
    path = tmp_path_factory.mktemp("p") / "batch.jsonl"
    path.write_bytes(data)
    try:
        plan_slices(str(path), "grid", 1)
    except InputError as error:  # random bytes that start like gzip, zstd or UTF-16: refused as a whole
        refusals = ("-compressed: ", "is UTF-16 or UTF-32 text")
        assert any(refusal in str(error) for refusal in refusals) and not data.startswith(b"{")
        return
    records = non_blank_lines(data)
    for field in ("grid", "doors"):
        readings = [
            read_everything(path, field, per_slice, fast, monkeypatch)
            for per_slice in (1, 3, 50)
            for fast in (False, True)
        ]
        assert all(reading == readings[0] for reading in readings)
        assert [position for position, *_ in readings[0]] == records
        for _, ident, _, error in readings[0]:
            assert (ident is None) <= (error is not None)
            if ident is not None:
                ident.encode("utf-8")
            if error is not None:
                error.encode("utf-8")
    for job_class in (DungeonJob, NonaryJob):
        seen = [job_verdicts(job_class(str(path), records_per_shard=size)) for size in (1, 50)]
        assert seen[0] == seen[1]
        assert sorted(seen[0]) == records  # answered + rejected = records, each once


parquet_strings = st.one_of(
    st.text(max_size=5).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"\xff", b"a\xed\xa0\x80", b"@$", b"@", b"ok"]),
)


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), parquet_strings),
            st.one_of(st.none(), st.lists(st.one_of(st.none(), parquet_strings), max_size=3)),
        ),
        max_size=8,
    ),
    st.integers(1, 4),
)
def test_parquet_readers_agree_on_random_rows(tmp_path_factory, monkeypatch, rows, group):
    path = tmp_path_factory.mktemp("p") / "batch.parquet"
    ids = pa.array([ident for ident, _ in rows], type=pa.binary()).view(pa.string())
    grid = pa.array([value for _, value in rows], type=pa.list_(pa.binary())).cast(pa.list_(pa.binary()))
    grid = (
        pa.ListArray.from_arrays(grid.offsets, grid.values.view(pa.string()), mask=grid.is_null())
        if len(rows)
        else pa.array([], type=GRID)
    )
    pq.write_table(pa.table({"id": ids, "grid": grid}), path, row_group_size=group)
    readings = [read_everything(path, "grid", per_slice, True, monkeypatch) for per_slice in (1, 3, 50)]
    assert all(reading == readings[0] for reading in readings)
    assert [position for position, *_ in readings[0]] == list(range(1, len(rows) + 1))
    seen = [job_verdicts(DungeonJob(str(path), records_per_shard=size)) for size in (1, 50)]
    assert seen[0] == seen[1] and sorted(seen[0]) == list(range(1, len(rows) + 1))
