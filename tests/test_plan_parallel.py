"""Planning a JSONL input in parallel (issue 10, item 3): newlines counted per block, by Ray tasks for
a large input, and cuts found by the readers, must give exactly the slices of a plain scan of the
whole file, whoever counted."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.inputs import _slice_bytes, input_storage, plan_slices

SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def reference_cuts(data: bytes, lines_per_slice: int) -> list[tuple[int, int, int]]:
    """The test oracle, the planner before issue 10 item 3: scan the whole file, cut just after every
    newline that ends a multiple of ``lines_per_slice`` lines; (start, end, first_line) per slice."""
    cuts = [0]
    seen = 0
    for offset, byte in enumerate(data):
        if byte == 0x0A:
            seen += 1
            if seen % lines_per_slice == 0:
                cuts.append(offset + 1)
    if cuts[-1] != len(data):
        cuts.append(len(data))  # the tail, possibly a last line without a newline
    return [(start, end, 1 + k * lines_per_slice) for k, (start, end) in enumerate(zip(cuts, cuts[1:]))]


def resolved(path, specs: list[dict], data: bytes) -> list[tuple[int, int, int]]:
    """(start, end, first_line) of each planned slice, found from the bytes its reader returns."""
    out, start = [], 0
    for spec in specs:
        sliced = _slice_bytes(json.loads(json.dumps(spec)), input_storage(str(path)))  # specs must survive JSON
        assert data[start : start + len(sliced)] == sliced
        out.append((start, start + len(sliced), spec["first_line"]))
        start += len(sliced)
    return out


def in_process_map(fn, items):
    return [fn(item) for item in items]


pieces = st.sampled_from([b"\n", b"\n", b"\r\n", b"{", b'"x"', b" ", b"}", b"\xef\xbb\xbf", b"y" * 37])


@SETTINGS
@given(st.lists(pieces, max_size=60).map(b"".join), st.integers(1, 9), st.integers(1, 48), st.integers(1, 5))
@example(b"", 1, 1, 1)  # an empty file has no slices
@example(b"a\nb\n", 2, 4, 1)  # ends with a newline exactly at a cut, at the end of a block
@example(b"a\nb", 1, 1, 1)  # a last line without a newline
@example(b"y" * 100 + b"\n" + b"y" * 100, 1, 8, 2)  # lines far longer than a block
def test_block_plan_resolves_to_the_reference_slices(tmp_path_factory, data, lines_per_slice, block, task_blocks):
    path = tmp_path_factory.mktemp("plan") / "batch.jsonl"
    path.write_bytes(data)
    expected = reference_cuts(data, lines_per_slice)
    by_driver = plan_slices(str(path), "grid", lines_per_slice, block=block)
    by_tasks = plan_slices(str(path), "grid", lines_per_slice, in_process_map, block=block, task_blocks=task_blocks,
                           driver_bytes=0)
    assert by_tasks == by_driver
    assert resolved(path, by_driver, data) == expected
