"""Records that several test files read: mixed batches of dungeons and door graphs, each line with
what it must become, and door graphs hard for the plain exhaustive search."""

from __future__ import annotations

import json

_DUNGEON_BIG = ["@" + "." * 10] + ["." * 11] * 9  # 110 cells

# (line content, expected id, expected error fragment or None for a valid record)
DUNGEON_MIXED = [
    ('{"id": "ok-1", "grid": ["@..", ".$.", "..."]}', "ok-1", None),
    ('{"id": "broken", "grid": ["@', "line 2", "line 2: not valid JSON"),
    ("", None, None),  # blank: not a record
    ('{"grid": ["@$"]}', "line 4", "line 4: no 'id'"),
    ('{"id": 42, "grid": ["@....", "...$g", "....."]}', "42", None),
    ('{"id": "ragged", "grid": ["@..", ".."]}', "ragged", "line 6: row 2 has 2 characters but row 1 has 3"),
    ('{"id": "nostart", "grid": ["...", ".$."]}', "nostart", "line 7: no start '@'"),
    ('{"id": "twostarts", "grid": ["@.@"]}', "twostarts", "line 8: 2 starts '@'"),
    ('{"id": "tab", "grid": ["@\\t$"]}', "tab", "line 9: row 1, column 2: character '\\t'"),
    ('{"id": "accent", "grid": ["@\\u00e9"]}', "accent", "line 10: row 1, column 2: character 'é'"),
    ('{"id": "digit", "grid": ["@1"]}', "digit", "line 11: row 1, column 2: character '1'"),
    ('{"id": "null", "grid": null}', "null", "line 12: grid must be a string or a list of strings, not null"),
    ('{"id": "number", "grid": 9.0}', "number", "not a number"),
    ('{"id": "empty", "grid": []}', "empty", "line 14: grid is empty"),
    ('{"id": "notrow", "grid": ["@$", 5]}', "notrow", "line 15: row 2 is not a string but an integer"),
    ('{"id": "text", "grid": "@....\\n...g$\\n.....\\n"}', "text", None),
    (
        json.dumps({"id": "big", "grid": _DUNGEON_BIG}),
        "big",
        "line 17: grid has 110 cells, more than the limit of 100 (raise it with --max-cells)",
    ),
    ('{"id": "dup-a", "grid": ["##.#", "g@$g"]}', "dup-a", None),
    ('{"id": "dup-b", "grid": ["# .#", "h@$h"]}', "dup-b", None),
    ('{"id": "nogrid"}', "nogrid", "line 20: no 'grid'"),
    ("[1, 2, 3]", "line 21", "line 21: not a JSON object"),
    ('{"id": true, "grid": ["@"]}', "line 22", "line 22: 'id' must be a string or an integer"),
]
DUNGEON_ANSWERS = {"ok-1": 1, "42": 1, "text": 0, "dup-a": 1, "dup-b": 1}

# (line, id as reported, reason fragment or None for a valid record)
NONARY_MIXED = [
    ('{"id": "ok-1", "doors": [[8, 0, 1], [9, 1, -1]]}', "ok-1", None),
    ('{"id": "renamed", "doors": [[9, 7, -1], [8, 0, 7]]}', "renamed", None),
    ('{"id": 42, "doors": [[9, 0, -1]]}', "42", None),
    ('{"id": "float", "doors": [[9.0, 0, -1]]}', "float", "must be an integer"),
    ('{"id": "string", "doors": [["9", 0, -1]]}', "string", "must be an integer"),
    ('{"id": "bool", "doors": [[9, 0, true]]}', "bool", "must be an integer"),
    ('{"id": "null", "doors": [[9, 0, null]]}', "null", "must be an integer"),
    ('{"id": "number", "doors": [[10, 0, 1], [9, 1, -1]]}', "number", "1..9"),
    ('{"id": "short", "doors": [[9, 0]]}', "short", "3 fields"),
    ('{"id": "nine-inside", "doors": [[9, 0, 1]]}', "nine-inside", "must lead to the exit"),
    ('{"id": "to-exit", "doors": [[9, 0, -1], [3, 0, -1]]}', "to-exit", "only doors numbered 9"),
    ('{"id": "from-exit", "doors": [[9, 0, -1], [3, -1, 0]]}', "from-exit", "leave the exit"),
    ('{"id": "room", "doors": [[9, 0, -1], [3, 0, -5]]}', "room", "-5"),
    ('{"id": "empty", "doors": []}', "empty", "empty"),
    ('{"id": "no-nine", "doors": [[3, 0, 1]]}', "no-nine", "no door numbered 9"),
    ('{"id": "not-list", "doors": "9,0,-1"}', "not-list", "must be a list"),
    (json.dumps({"id": "big", "doors": [[9, 0, -1]] * 7}), "big", "raise it with --max-doors"),
    ('{"id": "no-doors"}', "no-doors", "no 'doors'"),
    ('{"doors": [[9, 0, -1]]}', None, "no 'id'"),
    ("{not json", None, "not valid JSON"),
    ('{"id": "ok-2", "doors": [[6, 0, 1], [3, 0, 1], [4, 1, 2], [5, 1, 2], [9, 2, -1], [9, 2, -1]]}', "ok-2", None),
]
NONARY_ANSWERS = {"ok-1": 4, "renamed": 4, "42": 5, "ok-2": 9}

# Graphs that a plain exhaustive search (solvers.nonary.oracle.brute_force) took 27 to 199 s to
# answer; the answers are its results.
NONARY_HARD = [
    (
        [
            [2, 2, 3],
            [6, 3, 1],
            [3, 0, 2],
            [8, 3, 2],
            [3, 0, 1],
            [1, 3, 0],
            [3, 3, 3],
            [2, 2, 3],
            [1, 0, 2],
            [7, 2, 3],
            [3, 1, 0],
            [9, 2, -1],
            [3, 1, 2],
            [9, 0, -1],
            [6, 1, 3],
            [4, 2, 3],
            [1, 0, 3],
            [7, 2, 3],
            [5, 3, 2],
            [1, 0, 0],
        ],
        9,
    ),
    (
        [
            [5, 0, 3],
            [8, 0, 2],
            [6, 2, 3],
            [3, 2, 3],
            [4, 1, 3],
            [8, 3, 0],
            [8, 0, 1],
            [9, 3, -1],
            [1, 3, 2],
            [9, 0, -1],
            [3, 3, 1],
            [1, 0, 3],
            [2, 1, 2],
            [3, 3, 2],
            [8, 2, 3],
            [2, 2, 3],
            [3, 3, 0],
        ],
        8,
    ),
    (
        [
            [7, 0, 3],
            [9, 1, -1],
            [4, 1, 2],
            [8, 2, 3],
            [6, 0, 3],
            [1, 0, 2],
            [4, 0, 2],
            [1, 2, 3],
            [6, 3, 1],
            [4, 3, 1],
            [7, 3, 0],
            [1, 3, 3],
            [1, 2, 3],
            [6, 0, 2],
            [6, 0, 1],
            [8, 1, 3],
            [9, 0, -1],
            [4, 0, 1],
            [5, 1, 2],
            [1, 2, 3],
        ],
        8,
    ),
    (
        [
            [7, 0, 1],
            [9, 1, -1],
            [9, 1, -1],
            [2, 0, 2],
            [8, 1, 2],
            [3, 2, 0],
            [4, 0, 2],
            [1, 2, 0],
            [1, 0, 2],
            [2, 2, 0],
            [4, 2, 0],
            [3, 2, 0],
            [3, 2, 1],
            [6, 0, 0],
            [8, 0, 2],
            [5, 1, 2],
            [9, 1, -1],
            [9, 1, -1],
            [4, 1, 2],
            [3, 2, 2],
        ],
        7,
    ),
]
