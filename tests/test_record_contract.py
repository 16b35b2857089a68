"""The batch contract (issue 14): every record ends in ``answers`` or ``errors`` with one verdict,
whichever reader reads it (the pyarrow fast path or the line-by-line reader, JSONL or Parquet),
whichever records share its shard; valid records are answered; structural problems are one
message naming the file.  Expected verdicts come from the rules: SPEC section 2 and 3, JSON
(RFC 8259: UTF-8 text, strings of Unicode characters) and the limits the README states.

Rules used for the answers: the dungeon ``["@$"]`` has one gold cell next to the start and no
monster, so 1; the door list ``[[9, 0, -1]]`` is used once, by one group of 3 to 5 players whose
sum is a multiple of 9, and a group of 5 exists (players 1, 2, 4, 5, 6: sum 18), so 5.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import assert_exit, cli, run_dungeon_shards

from batchenum.jobs.dungeons import DungeonJob
from batchenum.jobs.nonary import NonaryJob
from batchenum.pipeline.errors import InputError
from batchenum.pipeline.inputs import plan_slices, read_records
from batchenum.pipeline.inputs.jsonl import MAX_DEPTH, MAX_NUMBER_DIGITS
from batchenum.pipeline.job import PlanContext

GRID = pa.list_(pa.string())
OK_DUNGEON = b'{"id": "ok", "grid": ["@$"]}'  # answer 1
OK_DOORS = b'{"id": "ok", "doors": [[9, 0, -1]]}'  # answer 5
BOM = b"\xef\xbb\xbf"


def verdicts(job) -> dict[int, tuple[str, str, str | None]]:
    """line -> ("answer" or "error", id, reason or None), checking accounting on the way."""
    out = run_dungeon_shards(job)
    answers, errors = out["answers"], out["errors"]
    result = {line: ("answer", ident, None) for line, ident in zip(answers.get("line", []), answers.get("id", []))}
    for line, ident, reason in zip(errors.get("line", []), errors.get("id", []), errors.get("error", [])):
        assert line not in result, f"line {line} has two verdicts"
        result[line] = ("error", ident, reason)
    for _, ident, reason in result.values():  # what goes to a Parquet table must be valid UTF-8
        ident.encode("utf-8")
        if reason is not None:
            reason.encode("utf-8")
            assert len(reason) <= 300
    return result


def both_jobs(tmp_path, lines: list[bytes], name="batch.jsonl"):
    """(dungeon verdicts, nonary verdicts) for a file whose lines carry both a grid and doors,
    each checked to be the same for every shard size (so for both reading paths)."""
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    results = []
    for job_class in (DungeonJob, NonaryJob):
        seen = [verdicts(job_class(str(path), records_per_shard=size)) for size in (1, 2, 100)]
        assert seen[0] == seen[1] == seen[2], f"{job_class.__name__}: the verdict depends on the shard"
        results.append(seen[0])
    return results


def record(ident: bytes = b'"x"', extra: bytes = b"") -> bytes:
    """A line valid for both jobs (answers 1 and 5) with ``ident`` as its raw JSON id."""
    return b'{"id": ' + ident + b', "grid": ["@$"], "doors": [[9, 0, -1]]' + extra + b"}"


CLEAN = [record(b'"c1"'), record(b'"c2"')]


def assert_answered(verdict, ident):
    assert verdict[0] == "answer" and verdict[1] == ident, verdict


def assert_rejected(verdict, ident, *words):
    assert verdict[0] == "error" and verdict[1] == ident, verdict
    for word in words:
        assert word in verdict[2], verdict


# ----------------------------------------------------------------------- UTF-8 and surrogates


@pytest.mark.parametrize("where", ["id", "payload", "extra"])
@pytest.mark.parametrize("bad", [b"\xff", b"\xed\xa0\x80", b"\xc0\xaf"], ids=["ff", "encoded-surrogate", "overlong"])
def test_invalid_utf8_is_one_record_error_in_a_clean_shard(tmp_path, where, bad):
    line = {
        "id": record(b'"bad' + bad + b'"'),
        "payload": b'{"id": "bad", "grid": ["@' + bad + b'"], "doors": [[9, 0, -1], "' + bad + b'"]}',
        "extra": record(b'"bad"', b', "note": "' + bad + b'"'),
    }[where]
    for dungeons, nonary in [both_jobs(tmp_path, [line] + CLEAN), both_jobs(tmp_path, CLEAN + [line])]:
        bad_line = 1 if dungeons[1][0] == "error" else 3
        for result in (dungeons, nonary):
            assert_rejected(result[bad_line], f"line {bad_line}", f"line {bad_line}: not valid UTF-8")
            assert sum(v[0] == "answer" for v in result.values()) == 2


@pytest.mark.parametrize("escape", [b"\\ud800", b"\\udfff", b"\\uDC00\\uD800"])
@pytest.mark.parametrize("where", ["id", "payload", "extra", "key"])
def test_lone_surrogate_escapes_are_rejected(tmp_path, escape, where):
    line = {
        "id": record(b'"a' + escape + b'"'),
        "payload": b'{"id": "a", "grid": ["@' + escape + b'"], "doors": [[9, 0, -1], "' + escape + b'"]}',
        "extra": record(b'"a"', b', "note": ["' + escape + b'"]'),
        "key": record(b'"a"', b', "' + escape + b'": 1'),
    }[where]
    dungeons, nonary = both_jobs(tmp_path, CLEAN + [line])
    for result in (dungeons, nonary):
        assert_rejected(result[3], "line 3", "line 3: a string holds the escape \\ud", "surrogate")
        assert_answered(result[1], "c1")


def test_a_surrogate_pair_is_one_character_and_answered(tmp_path):
    dungeons, nonary = both_jobs(tmp_path, CLEAN + [record(b'"smile\\ud83d\\ude00"')])
    assert_answered(dungeons[3], "smile\U0001f600")
    assert_answered(nonary[3], "smile\U0001f600")


def test_cli_runs_the_issue_repro_to_the_end(tmp_path):
    """printf '{"id":"ok","grid":["@$"]}\\n{"id":"bad\\xff","grid":["@"]}\\n' used to end with exit 1."""
    import pandas as pd

    path = tmp_path / "u.jsonl"
    path.write_bytes(b'{"id":"ok","grid":["@$"]}\n{"id":"bad\xff","grid":["@"]}\n{"id":"a\\ud800","grid":["@"]}\n')
    run = cli("run", "dungeons", "--input", str(path), "--out", str(tmp_path / "o"), "--serial", "--quiet", expect=None)
    assert_exit(run, 0)
    assert "dungeons: read 3, answered 1, rejected 2" in run.stdout + run.stderr
    errors = pd.read_parquet(tmp_path / "o" / "dungeons" / "errors")
    assert errors.id.tolist() == ["line 2", "line 3"]
    assert errors.error[0] == "line 2: not valid UTF-8 (byte 11 of the line)"


# ------------------------------------------------------------------------------------ the BOM


def test_a_bom_at_the_start_of_the_file_is_skipped_in_both_jobs(tmp_path):
    dungeons, nonary = both_jobs(tmp_path, [BOM + record(b'"first"')] + CLEAN)
    for result in (dungeons, nonary):
        assert_answered(result[1], "first")
        assert len(result) == 3 and all(v[0] == "answer" for v in result.values())


def test_a_bom_alone_on_line_1_leaves_a_blank_line(tmp_path):
    dungeons, nonary = both_jobs(tmp_path, [BOM] + CLEAN)
    assert sorted(dungeons) == sorted(nonary) == [2, 3]


def test_a_bom_anywhere_else_is_rejected(tmp_path):
    dungeons, nonary = both_jobs(tmp_path, CLEAN + [BOM + record(b'"late"'), record(b'"c3"')])
    for result in (dungeons, nonary):
        assert_rejected(result[3], "line 3", "line 3: a byte order mark (U+FEFF) is allowed only at the very start")
        assert_answered(result[4], "c3")


def test_a_bom_file_with_another_suffix_is_recognised_as_jsonl(tmp_path):
    path = tmp_path / "batch.txt"
    path.write_bytes(BOM + OK_DUNGEON + b"\n")
    assert verdicts(DungeonJob(str(path)))[1] == ("answer", "ok", None)


# ------------------------------------------------------------------ what json.loads cannot read


def test_nesting_and_number_limits_hold_on_both_paths(tmp_path):
    deep = lambda d: b"[" * d + b"]" * d  # noqa: E731
    lines = [
        record(b'"deep-ok"', b', "x": ' + deep(MAX_DEPTH - 1)),  # the record object is one level
        record(b'"deep-bad"', b', "x": ' + deep(MAX_DEPTH)),
        record(b'"long-ok"', b', "x": ' + b"7" * MAX_NUMBER_DIGITS),
        record(b'"long-bad"', b', "x": ' + b"7" * (MAX_NUMBER_DIGITS + 1)),
        record(b'"deep-in-string"', b', "x": "' + b"[" * 500 + b'"'),
        record(b'"very-deep"', b', "x": ' + deep(5000)),  # json.loads alone would raise RecursionError
        record(b"1" * 5000),  # an integer id too long for int(): rejected, not a crash
    ]
    dungeons, nonary = both_jobs(tmp_path, lines)
    for result in (dungeons, nonary):
        assert_answered(result[1], "deep-ok")
        assert_rejected(result[2], "line 2", f"nested more than {MAX_DEPTH} deep")
        assert_answered(result[3], "long-ok")
        assert_rejected(result[4], "line 4", f"a number of {MAX_NUMBER_DIGITS + 1:,} digits")
        assert_answered(result[5], "deep-in-string")
        assert_rejected(result[6], "line 6", "nested more than")
        assert_rejected(result[7], "line 7", "a number of 5,000 digits")


def test_two_objects_on_a_line_next_to_a_blank_line(tmp_path):
    """pyarrow splits objects on one line, so two objects plus a blank line used to look clean."""
    lines = [
        record(b'"a"') + b" " + record(b'"b"'),
        b"   ",
        record(b'"c"'),
        record(b'"d"') + b"\r" + record(b'"e"'),
        b"",
    ]
    dungeons, nonary = both_jobs(tmp_path, lines)
    for result in (dungeons, nonary):
        assert sorted(result) == [1, 3, 4]
        assert_rejected(result[1], "line 1", "line 1: not valid JSON: Extra data")
        assert_answered(result[3], "c")
        assert_rejected(result[4], "line 4", "Extra data")


@pytest.mark.parametrize("first", [b"null", b"5", b'"x"', b"[]", b"{}"])
def test_a_first_line_that_is_not_an_object_is_a_record_error(tmp_path, first):
    """pyarrow 26 crashes the process (SIGSEGV) reading a block whose first line is null."""
    dungeons, nonary = both_jobs(tmp_path, [first] + CLEAN)
    for result in (dungeons, nonary):
        assert result[1][0] == "error" and result[1][1] == "line 1"
        assert_answered(result[2], "c1")


def test_control_character_message_says_at_once(tmp_path):
    dungeons, nonary = both_jobs(tmp_path, [b'{"id": "t", "grid": ["@\t$"]}'])
    for result in (dungeons, nonary):
        assert result[1][2] == "line 1: not valid JSON: Invalid control character at column 24"


# ------------------------------------------------------------------------------ plain reasons


@pytest.mark.parametrize(
    "doors, words",
    [
        ("[[true, 0, -1]]", ["number must be an integer, not true (a boolean)", "[true, 0, -1]"]),
        ("[[9, 0, null]]", ["to_room must be an integer, not null", "[9, 0, null]"]),
        ('[["9", 0, -1]]', ['number must be an integer, not "9" (a string)']),
        ("[[9.0, 0, -1]]", ["not 9.0 (a number)"]),
        ('[[9, 0, -1], {"a": 1}]', ["door 1: must be a list [number, from_room, to_room], not an object"]),
        ('"doors"', ['doors must be a list of [number, from_room, to_room] triples, not "doors" (a string)']),
        ("[[" + "4" * 600 + ", 0, 1], [9, 1, -1]]", ["number must be in 1..9, not 444444... (600 digits)"]),
        ("[[9, 0, -1], [2, 0, -" + "3" * 640 + "]]", ["to_room -333333... (640 digits) is negative"]),
        ("[[" + "4" * 4200 + ", 0, 1], [9, 1, -1]]", ["line 1: a number of 4,200 digits (at most 640 are read)"]),
    ],
)
def test_nonary_reasons_are_plain_words(tmp_path, doors, words):
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "r", "doors": ' + doors + "}\n")
    ((_, ident, reason),) = verdicts(NonaryJob(str(path))).values()
    assert ident == ("line 1" if "4" * 4200 in doors else "r")
    for word in words:
        assert word in reason
    for python in ("True", "None", "NoneType", "Decimal(", "'"):
        assert python not in reason
    assert len(reason) < 200


def test_parquet_decimals_and_binary_are_named_in_words(tmp_path):
    import decimal

    path = tmp_path / "d.parquet"
    doors = pa.array(
        [[[decimal.Decimal(9), decimal.Decimal(0), decimal.Decimal(-1)]]], type=pa.list_(pa.list_(pa.decimal128(5, 0)))
    )
    pq.write_table(pa.table({"id": ["dec"], "doors": doors}), path)
    ((_, _, reason),) = verdicts(NonaryJob(str(path))).values()
    assert reason == "row 1: door 0 [9, 0, -1]: number must be an integer, not 9 (a decimal number)"
    pq.write_table(pa.table({"id": [b"bin"], "grid": [b"@$"]}), path)
    ((_, ident, reason),) = verdicts(DungeonJob(str(path))).values()
    assert (ident, reason) == ("row 1", "row 1: 'id' must be a string or an integer, not binary data")


def test_reasons_are_capped(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"id": "wide", "grid": ["@" + "." * 5000, "." * 4000]}) + "\n")
    ((kind, _, reason),) = verdicts(DungeonJob(str(path))).values()
    assert kind == "error" and "row 2 has 4000 characters but row 1 has 5001" in reason and len(reason) <= 300


# ------------------------------------------------------------------------------------ Parquet


def _invalid_strings(values: list[bytes]) -> pa.Array:
    """A string array holding exactly these bytes, valid UTF-8 or not (pyarrow does not check)."""
    return pa.array(values, type=pa.binary()).view(pa.string())


@pytest.mark.parametrize("dictionary", [False, True])
def test_parquet_strings_that_are_not_utf8_are_row_errors(tmp_path, dictionary):
    path = tmp_path / "b.parquet"
    ids = _invalid_strings([b"ok", b"bad\xff", b"ok2", b"x", b"sur\xed\xa0\x80"])
    if dictionary:  # read back as dictionary<string>: another Arrow layout for the same strings
        ids = pa.DictionaryArray.from_arrays(pa.array(range(5), type=pa.int32()), ids)
    rows = _invalid_strings([b"@$", b"@$", b"@$", b"@\xff", b"@$"])
    grid = pa.ListArray.from_arrays(pa.array([0, 1, 2, 3, 4, 5], type=pa.int32()), rows)
    pq.write_table(pa.table({"id": ids, "grid": grid}), path, row_group_size=2)
    expected = {
        1: ("answer", "ok", None),
        2: ("error", "row 2", "row 2: 'id' holds text that is not valid UTF-8"),
        3: ("answer", "ok2", None),
        4: ("error", "row 4", "row 4: 'grid' holds text that is not valid UTF-8"),
        5: ("error", "row 5", "row 5: 'id' holds text that is not valid UTF-8"),
    }
    for size in (1, 2, 10):
        assert {int(k): v for k, v in verdicts(DungeonJob(str(path), records_per_shard=size)).items()} == expected
    for spec in plan_slices(str(path), "grid", 2):
        records = read_records(spec, "grid", GRID)
        named = dict(zip(records.positions.tolist(), records.ids.to_pylist()))
        named.update(zip(records.rejected.positions.tolist(), records.rejected.names))
        assert all(named[row] == expected[row][1] for row in named)  # never an id that is not UTF-8


def test_parquet_surrogate_id_in_nonary(tmp_path):
    path = tmp_path / "n.parquet"
    doors = pa.array([[[9, 0, -1]], [[9, 0, -1]]], type=pa.list_(pa.list_(pa.int64())))
    pq.write_table(pa.table({"id": _invalid_strings([b"a\xed\xa0\x80", b"b"]), "doors": doors}), path)
    assert verdicts(NonaryJob(str(path))) == {
        1: ("error", "row 1", "row 1: 'id' holds text that is not valid UTF-8"),
        2: ("answer", "b", None),
    }


@pytest.mark.parametrize("column", ["id", "grid"])
def test_duplicated_parquet_column_is_refused_at_planning(tmp_path, column):
    path = tmp_path / "dup.parquet"
    arrays = {"id": pa.array(["a"]), "grid": pa.array([["@$"]])}
    names = ["id", "grid", column]
    pq.write_table(pa.Table.from_arrays([arrays[name] for name in names], names=names), path)
    message = f"Parquet input {path} has 2 columns named '{column}': keep exactly one and write the file again"
    with pytest.raises(InputError) as caught:
        DungeonJob(str(path)).plan(PlanContext())
    assert str(caught.value) == message
    run = cli("run", "dungeons", "--input", str(path), "--out", str(tmp_path / "o"), "--serial", expect=None)
    assert_exit(run, 1)
    assert message in run.stderr and "KeyError" not in run.stderr


# -------------------------------------------------------------------------------- compression


@pytest.mark.parametrize(
    "kind, tool, compress",
    [
        ("gzip", "gunzip", gzip.compress),
        ("bzip2", "bunzip2", bz2.compress),
        ("xz", "unxz", lzma.compress),
        ("zstd", "unzstd", lambda data: b"\x28\xb5\x2f\xfd" + data),  # the zstd frame magic
    ],
)
@pytest.mark.parametrize("name", ["batch.jsonl.gz", "batch.jsonl", "batch.parquet"])
def test_compressed_input_is_read_only_when_its_name_says_gzip_or_zstd(tmp_path, kind, tool, compress, name):
    path = tmp_path / name
    path.write_bytes(compress(OK_DUNGEON + b"\n"))
    if kind == "gzip" and name == "batch.jsonl.gz":  # read through pyarrow's gzip codec
        assert verdicts(DungeonJob(str(path))) == {1: ("answer", "ok", None)}
        return
    readable = {"gzip": ".gz", "zstd": ".zst"}.get(kind) if name != "batch.parquet" else None
    advice = (
        f"name it .jsonl{readable} to have it read as {kind}-compressed JSONL"
        if readable
        else f"decompress it first (for example with {tool})"
    )
    message = f"input {path} is {kind}-compressed: {advice}"
    with pytest.raises(InputError, match="compressed") as caught:
        plan_slices(str(path), "grid", 10)
    assert str(caught.value).startswith(message)
    if kind == "gzip":
        run = cli("run", "nonary", "--input", str(path), "--out", str(tmp_path / "o"), "--serial", expect=None)
        assert_exit(run, 1)
        assert message in run.stderr


# -------------------------------------------------------------------------------- time budget


def test_record_timeout_covers_the_preparation_of_a_long_chain(tmp_path):
    """A chain of 3,001 doors: its canonical form alone takes tens of seconds (one refinement
    round per room), so with a budget of 0.5 s the record must become an error row quickly."""
    doors = [[1, r, r + 1] for r in range(3000)] + [[9, 3000, -1]]
    path = tmp_path / "chain.jsonl"
    path.write_bytes(json.dumps({"id": "chain", "doors": doors}).encode() + b"\n" + OK_DOORS + b"\n")
    started = time.monotonic()
    result = verdicts(NonaryJob(str(path), max_doors=100_000, record_timeout=0.5))
    elapsed = time.monotonic() - started
    assert result[1] == (
        "error",
        "chain",
        "line 1: timed out: the time budget of 0.5 s ran out while preparing "
        "the graph, before the search; raise it with --record-timeout",
    )
    assert result[2] == ("answer", "ok", None)
    assert elapsed < 60, f"took {elapsed:.1f} s: the budget did not stop the preparation (about 100 s)"


def test_record_timeout_inf_means_no_limit():
    from batchenum.jobs import REGISTRY
    from batchenum.pipeline.cli import parse_job
    from batchenum.pipeline.errors import UsageError

    assert parse_job(REGISTRY, ["nonary", "--input", "x.jsonl", "--record-timeout", "inf"]).record_timeout == math.inf
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(UsageError, match="--record-timeout must be"):
            parse_job(REGISTRY, ["nonary", "--input", "x.jsonl", "--record-timeout", bad])


def test_record_timeout_inf_answers(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(OK_DOORS + b"\n")
    assert verdicts(NonaryJob(str(path), record_timeout=math.inf)) == {1: ("answer", "ok", None)}


def test_text_that_starts_like_bzip2_is_not_called_compressed(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"BZh, not bzip2\n" + OK_DUNGEON + b"\n")
    result = verdicts(DungeonJob(str(path)))
    assert result[1][0] == "error" and result[2] == ("answer", "ok", None)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_utf16_or_utf32_input_says_to_convert(tmp_path, encoding):
    path = tmp_path / "wide.jsonl"
    path.write_bytes(OK_DUNGEON.decode().encode(encoding))  # Python writes the byte order mark
    with pytest.raises(InputError, match="is UTF-16 or UTF-32 text .*: convert it to UTF-8"):
        plan_slices(str(path), "grid", 10)
