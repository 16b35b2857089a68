"""Canonical forms: door order and room names do not matter, anything else does; plans over the
canonical list map back to each record's own doors."""

from __future__ import annotations

import random

from batchenum.solvers.nonary import generate, parse, solve, verify_plan
from batchenum.solvers.nonary.canonical import canonical_form


def disguise(doors, rng):
    """The same graph with rooms renamed (0 and -1 kept) and doors shuffled, to rule out
    accidentally-correct behaviour."""
    rooms = sorted({r for _, a, b in doors for r in (a, b)} - {0, -1})
    names = {0: 0, -1: -1, **dict(zip(rooms, rng.sample(range(1, 10_000), len(rooms))))}
    moved = [(n, names[a], names[b]) for n, a, b in doors]
    rng.shuffle(moved)
    return moved


def test_disguised_graphs_share_a_key_and_plans_map_back():
    rng = random.Random(12)
    for raw in generate(300, rooms=5, doors=10, seed=3, cycles=0.4, parallel=0.4):
        doors = parse(raw)
        key, _ = canonical_form(doors)
        assert key[0] == "graph"
        escaped, plan = solve(list(key[1]))
        for _ in range(2):
            other = disguise(doors, rng)
            other_key, order = canonical_form(other)
            assert other_key == key
            mapped = [[order[j], players] for j, players in plan]
            assert verify_plan([list(d) for d in other], mapped) == escaped


def test_order_maps_canonical_positions_to_input_doors():
    doors = parse([[4, 7, 3], [9, 3, -1], [4, 0, 7], [2, 7, 7]])
    key, order = canonical_form(doors)
    labels = {0: 0}
    for j, i in enumerate(order):
        number, a, b = doors[i]
        assert key[1][j][0] == number
        for room, label in ((a, key[1][j][1]), (b, key[1][j][2])):
            if room != -1:
                assert labels.setdefault(room, label) == label  # one consistent renaming
            else:
                assert label == -1
    assert labels[0] == 0 and len(set(labels.values())) == len(labels)


def test_different_graphs_get_different_keys():
    base = [[4, 0, 1], [5, 1, 2], [9, 2, -1]]
    changed = [
        [[4, 0, 1], [5, 1, 2], [9, 1, -1]],  # the exit moved
        [[4, 0, 1], [6, 1, 2], [9, 2, -1]],  # a number changed
        [[4, 1, 0], [5, 1, 2], [9, 2, -1]],  # a door turned round
        [[4, 0, 1], [5, 1, 2], [9, 2, -1], [9, 2, -1]],  # a parallel door added
        [[4, 1, 2], [5, 2, 0], [9, 0, -1]],  # same shape, but room 0 is elsewhere in it
    ]
    key = canonical_form(parse(base))[0]
    keys = {canonical_form(parse(doors))[0] for doors in changed}
    assert key not in keys and len(keys) == len(changed)


def test_symmetric_graph_beyond_the_budget_falls_back_to_door_order_only():
    # five interchangeable rooms hanging off room 0: 5! = 120 labellings tie
    doors = parse([[3, 0, r] for r in range(1, 6)] + [[9, r, -1] for r in range(1, 6)])
    key, order = canonical_form(doors, max_leaves=4)
    assert key[0] == "doors" and sorted(key[1]) == list(key[1]) == sorted(doors)
    assert [doors[i] for i in order] == list(key[1])
    full, _ = canonical_form(doors, max_leaves=120)
    assert full[0] == "graph"
