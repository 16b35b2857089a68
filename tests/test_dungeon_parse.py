"""batchenum.solvers.dungeon.parse: every way a grid can break the contract gets a specific error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchenum.solvers.dungeon import (
    BadCharacterError,
    DungeonError,
    EmptyGridError,
    GridTooLargeError,
    NotAGridError,
    RaggedGridError,
    StartError,
    parse,
    parse_flat,
    parse_many,
)
from batchenum.solvers.dungeon.kernel import first_equal_kernel


@pytest.mark.parametrize(
    "grid, error, message",
    [
        (None, NotAGridError, "grid must be a string or a list of strings, not null"),
        (42, NotAGridError, "not an integer"),
        ({"rows": ["@"]}, NotAGridError, "not an object"),
        (["@.", 7], NotAGridError, "row 2 is not a string but an integer"),
        (["@.", None], NotAGridError, "row 2 is not a string but null"),
        ([["@"]], NotAGridError, "row 1 is not a string but a list"),
        ([], EmptyGridError, "grid is empty"),
        ("", EmptyGridError, "grid is empty"),
        ("\n", EmptyGridError, "grid is empty"),
        (["@.", ""], EmptyGridError, "row 2 is empty"),
        ("@.\n\n", EmptyGridError, "row 2 is empty"),
        (["@..", "..", "..."], RaggedGridError, "row 2 has 2 characters but row 1 has 3"),
        ("@..\n....", RaggedGridError, "row 2 has 4 characters but row 1 has 3"),
        (["...", "..."], StartError, "no start '@'"),
        (["@..", "..@"], StartError, "2 starts '@' (at row 1, column 1 and row 2, column 3)"),
        (["@@@", "@.."], StartError, "4 starts '@' (at row 1, column 1 and row 1, column 2 and 2 more)"),
        (["@.", ".\t"], BadCharacterError, "row 2, column 2: character '\\t' (U+0009) is not allowed"),
        (["@.", "1."], BadCharacterError, "row 2, column 1: character '1' (U+0031)"),
        (["@é"], BadCharacterError, "row 1, column 2: character 'é' (U+00E9)"),
        (["@.", ".\x00"], BadCharacterError, "row 2, column 2: character '\\x00' (U+0000)"),
        (["@\r"], BadCharacterError, "character '\\r'"),
        ("@.\r\n..\r\n", BadCharacterError, "row 1, column 3: character '\\r'"),
        (["@", "\u2603"], BadCharacterError, "row 2, column 1: character '☃' (U+2603)"),
        (["@%"], BadCharacterError, "character '%'"),
        (["..", ".."], StartError, "no start"),
        (["1.", ".."], BadCharacterError, "row 1, column 1"),  # a bad character is named before the start
    ],
)
def test_invalid_grids(grid, error, message):
    with pytest.raises(error) as caught:
        parse(grid)
    assert message in str(caught.value)
    assert isinstance(caught.value, DungeonError) and isinstance(caught.value, ValueError)


def test_too_many_cells_names_the_limit():
    with pytest.raises(GridTooLargeError, match="grid has 12 cells, more than the limit of 10") as caught:
        parse(["@...", "....", "...."], max_cells=10)
    assert (caught.value.cells, caught.value.limit) == (12, 10)
    assert parse(["@...", "....", "...."], max_cells=12).height == 3


@pytest.mark.parametrize(
    "grid",
    [["@.$", ".g#"], "@.$\n.g#", "@.$\n.g#\n", ("@.$", ".g#")],
)
def test_valid_forms(grid):
    dungeon = parse(grid)
    assert (dungeon.height, dungeon.width, dungeon.start) == (2, 3, (0, 0))
    assert dungeon.monsters == ((1, 1),) and dungeon.gold == ((0, 2),)


def test_every_allowed_character_and_a_start_next_to_a_monster():
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ*&"
    dungeon = parse(["@" + letters, ". $#" + "." * (len(letters) - 3)])
    assert len(dungeon.monsters) == len(letters)
    assert parse(["g@g"]).monsters == ((0, 0), (0, 2))


def test_parse_many_keeps_every_record_in_place():
    grids = [["@$"], None, ["@x", "$."], "@\t", ["@@"], ["$@"], ["@"], "@é\n$$"]
    batch = parse_many(grids)
    assert batch.index.tolist() == [0, 2, 5, 6]
    assert [type(e).__name__ if e else None for e in batch.errors] == [
        None,
        "NotAGridError",
        None,
        "BadCharacterError",
        "StartError",
        None,
        None,
        "BadCharacterError",
    ]
    assert batch.starts.tolist() == [0, 0, 1, 0]
    assert batch.heights.tolist() == [1, 2, 1, 1] and batch.widths.tolist() == [2, 2, 2, 1]
    assert [batch.cells_of(k).tolist() for k in range(4)] == [[4, 2], [4, 3, 2, 0], [2, 4], [4]]
    assert batch.monsters.tolist() == [0, 1, 0, 0] and batch.gold_total.tolist() == [1, 1, 1, 0]


def test_unique_merges_grids_that_differ_only_in_spelling():
    grids = [["@.g", "$.."], "@ h\n$  ", ["@.g", "$.$"], ["@.", "g$", ".."], ["@.g$.."]]
    unique, inverse = parse_many(grids).unique()
    assert inverse.tolist() == [0, 0, 1, 2, 3]
    assert unique.index.tolist() == [0, 2, 3, 4]
    assert [unique.cells_of(k).tolist() for k in range(4)] == [
        [4, 0, 3, 2, 0, 0],
        [4, 0, 3, 2, 0, 2],
        [4, 0, 3, 2, 0, 0],
        [4, 0, 3, 2, 0, 0],
    ]


def test_empty_batch():
    batch = parse_many([])
    assert len(batch) == 0 and batch.errors == []
    unique, inverse = batch.unique()
    assert len(unique) == 0 and len(inverse) == 0


def test_counts_of_a_dungeon_larger_than_the_packed_counters():
    # the classifier counts in 21-bit fields emptied every 2**20 cells: 2.2 million gold cells in
    # one dungeon would overflow them if it did not
    grid = ["@" + "$" * 1999] + ["$" * 2000] * 1099 + ["g$" * 1000] * 10
    expected = ("".join(grid).count("g"), "".join(grid).count("$"))
    for batch in (parse_many([grid]), parse_flat(*flat_buffers([grid]))):
        assert batch.errors == [None]
        assert (int(batch.monsters[0]), int(batch.gold_total[0]), int(batch.starts[0])) == (*expected, 0)


def flat_buffers(grids):
    """(chars, row_offsets, grid_offsets) of lists of rows, as Arrow would lay them out."""
    rows = [row for grid in grids for row in grid]
    lengths = [len(row.encode("utf-8")) for row in rows]
    chars = np.frombuffer("".join(rows).encode("utf-8"), dtype=np.uint8)
    row_offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    grid_offsets = np.concatenate([[0], np.cumsum([len(g) for g in grids], dtype=np.int64)]).astype(np.int64)
    return chars, row_offsets, grid_offsets


def assert_same_batch(flat, plain):
    assert [(type(e), str(e)) if e else None for e in flat.errors] == [
        (type(e), str(e)) if e else None for e in plain.errors
    ]
    for name in ("index", "heights", "widths", "starts", "monsters", "gold_total"):
        assert getattr(flat, name).tolist() == getattr(plain, name).tolist(), name
    for k in range(len(plain)):
        assert flat.cells_of(k).tolist() == plain.cells_of(k).tolist()


ODD_GRIDS = [
    ["@$"],
    [],
    ["@.", ""],
    [""],
    ["", ""],
    ["@é", "$."],
    ["@é", "$"],
    ["é@", "$."],
    ["@..", ".."],
    ["..", ".."],
    ["@@"],
    ["@\t"],
    ["@" * 12],
    ["@", "$", "g"],
    ["@1", "$$"],
    ["a@A", "*&$", " #."],
    ["@\u2603"],
    ["\x00@"],
]


@pytest.mark.parametrize("max_cells", [None, 5])
def test_parse_flat_matches_parse_many_on_odd_grids(max_cells):
    flat = parse_flat(*flat_buffers(ODD_GRIDS), max_cells=max_cells)
    assert_same_batch(flat, parse_many(ODD_GRIDS, max_cells=max_cells))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.text(alphabet="@@..$#gé\t", max_size=4), max_size=4), max_size=6))
def test_parse_flat_matches_parse_many(grids):
    assert_same_batch(parse_flat(*flat_buffers(grids), max_cells=8), parse_many(grids, max_cells=8))


def test_parse_flat_empty():
    batch = parse_flat(np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(1, np.int64))
    assert len(batch) == 0 and batch.errors == []


def unique_by_dict(batch):
    """The reference: the first dungeon of each (width, cell codes), numbered in order of appearance."""
    first_of, firsts, inverse = {}, [], []
    for k in range(len(batch)):
        key = (int(batch.widths[k]), batch.cells_of(k).tobytes())
        if key not in first_of:
            first_of[key] = len(firsts)
            firsts.append(k)
        inverse.append(first_of[key])
    return firsts, inverse


def with_start(width: int, cells: str) -> list[str]:
    """Rows of ``width`` from ``cells``, the first cell a start: a valid dungeon."""
    cells = "@" + cells[1:]
    return [cells[k : k + width] for k in range(0, len(cells), width)]


# few cells, so that equal dungeons (and equal cells under other widths) are common
small_grids = st.lists(
    st.builds(
        lambda width, rows, text: with_start(width, (text * width * rows)[: width * rows]),
        st.integers(1, 5),
        st.integers(1, 4),
        st.text(alphabet=".$#g ", min_size=1, max_size=4),
    ),
    max_size=40,
)


@given(small_grids)
@settings(max_examples=200, deadline=None)
def test_unique_agrees_with_a_dictionary(grids):
    batch = parse_many(grids)
    assert len(batch) == len(grids)
    firsts, inverse = unique_by_dict(batch)
    distinct, found = batch.unique()
    assert found.tolist() == inverse
    assert distinct.index.tolist() == batch.index[firsts].tolist()


@given(small_grids)
@settings(max_examples=200, deadline=None)
def test_equal_hashes_never_merge_different_dungeons(grids):
    # every hash forced equal: only the byte comparison can tell dungeons apart
    batch = parse_many(grids)
    sizes = batch.heights * batch.widths
    first_equal = np.empty(len(batch), dtype=np.int64)
    first_equal_kernel(
        batch.codes,
        batch.offsets,
        sizes,
        batch.widths,
        np.arange(len(batch)),
        np.zeros(len(batch), dtype=np.uint64),
        first_equal,
    )
    firsts, inverse = unique_by_dict(batch)
    assert first_equal.tolist() == [firsts[inverse[k]] for k in range(len(batch))]
