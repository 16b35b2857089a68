"""The solver against the published cases, the brute-force oracle and the plan replayer."""

from __future__ import annotations

import json
import random

import pytest
from batch_cases import NONARY_HARD
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchenum.solvers.nonary import PlanError, SolveTimeout, brute_force, generate, parse, solve, verify_plan
from batchenum.solvers.nonary.solve import _compile, _fits_kernel, _Search, solve_parsed


def seed_cases(cases_dir):
    with open(cases_dir / "nonary_seed.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.mark.slow  # minutes of CPU on a loaded machine: an end-to-end run
def test_published_cases(cases_dir):
    cases = seed_cases(cases_dir)
    assert len(cases) == 10
    for case in cases:
        escaped, plan = solve(case["doors"])
        assert escaped == case["answer"], case["id"]
        assert verify_plan(case["doors"], plan) == escaped, case["id"]


def test_published_cases_agree_with_the_oracle(cases_dir):
    for case in seed_cases(cases_dir):
        assert brute_force(case["doors"]) == case["answer"], case["id"]


@pytest.mark.parametrize("doors, answer", NONARY_HARD, ids=[f"hard-{i}" for i in range(len(NONARY_HARD))])
def test_hard_graphs(doors, answer):
    escaped, plan = solve(doors)
    assert escaped == answer
    assert verify_plan(doors, plan) == answer


rooms = st.integers(0, 3)
doors_strategy = st.lists(
    st.one_of(st.tuples(st.just(9), rooms, st.just(-1)), st.tuples(st.integers(1, 8), rooms, rooms)),
    min_size=1,
    max_size=6,
).filter(lambda doors: any(number == 9 for number, _, _ in doors))


@settings(max_examples=2500, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(doors_strategy)
def test_agrees_with_the_oracle_on_small_graphs(doors):
    doors = [list(d) for d in doors]
    escaped, plan = solve(doors)
    assert escaped == brute_force(doors)
    assert verify_plan(doors, plan) == escaped


def test_agrees_with_the_oracle_on_generated_graphs():
    graphs = generate(300, rooms=3, doors=7, seed=5, cycles=0.5, parallel=0.5, nines=0.3)
    for doors in graphs:
        escaped, plan = solve(doors)
        assert escaped == brute_force(doors), doors
        assert verify_plan(doors, plan) == escaped


def test_pure_python_search_agrees_with_the_kernel():
    for doors in generate(300, rooms=4, doors=12, seed=8, cycles=0.5, parallel=0.4, nines=0.2):
        graph = _compile(parse(doors))
        if not graph.nines:
            continue
        escaped, _ = _Search(graph, None).run()
        assert escaped == solve(doors)[0], doors


def test_many_rooms_use_the_pure_python_search():
    # 70 rooms in a chain is past the kernel's 62-room layout
    chain = [[3 + r % 2, r, r + 1] for r in range(69)] + [[9, 69, -1], [9, 0, -1], [1, 0, 69], [3, 0, 69]]
    assert not _fits_kernel(_compile(parse(chain)))
    escaped, plan = solve(chain)
    assert escaped == brute_force(chain) and verify_plan(chain, plan) == escaped


def test_deep_plans_pass_the_recursion_limit():
    # one group walks 1100 doors of a chain: 1101 moves, deeper than Python's default limit
    chain = [[3, r, r + 1] for r in range(1100)] + [[9, 1100, -1]]
    escaped, plan = solve(chain, timeout=120)
    assert escaped == 4 and len(plan) == 1101 and verify_plan(chain, plan) == 4


def test_relabelled_and_shuffled_graphs_have_the_same_answer():
    rng = random.Random(3)
    for doors, answer in NONARY_HARD[1:]:
        names = {0: 0, -1: -1, **dict(zip(range(1, 4), rng.sample(range(10, 99), 3)))}
        moved = [[n, names[a], names[b]] for n, a, b in doors]
        rng.shuffle(moved)
        escaped, plan = solve(moved)
        assert escaped == answer and verify_plan(moved, plan) == answer


def test_time_budget():
    doors, _ = NONARY_HARD[1]
    with pytest.raises(SolveTimeout, match="time budget"):
        solve_parsed(parse(doors), timeout=1e-6)


def test_unreachable_door_nine_means_nobody_escapes():
    assert solve([[9, 4, -1], [3, 4, 5]]) == (0, [])
    assert solve([[1, 0, 1], [9, 2, -1]]) == (0, [])


class TestVerifyPlan:
    DOORS = [[8, 0, 1], [9, 1, -1], [6, 0, 2]]

    def test_a_good_plan_counts_the_escaped(self):
        assert verify_plan(self.DOORS, [[0, [3, 4, 5, 6, 8]], [1, [3, 4, 5, 6]]]) == 4
        assert verify_plan(self.DOORS, []) == 0

    @pytest.mark.parametrize(
        "plan, words",
        [
            ([[3, [1, 2, 5]]], ["move 0", "door index 3"]),
            ([[0, [1, 2, 5]], [0, [3, 4, 1]]], ["move 1", "already used"]),
            ([[0, [1, 7]]], ["move 0", "3 to 5 players, not 2"]),
            ([[0, [1, 2, 3, 4, 5, 2]]], ["repeat"]),
            ([[0, [1, 2, 3]]], ["sum to 6", "not 8 mod 9"]),
            ([[0, [1, 2, 14]]], ["14 is not a player"]),
            ([[1, [2, 3, 4]]], ["move 0", "player 2 is in room 0, not in room 1"]),
            ([[0, [3, 4, 5, 6, 8]], [1, [3, 4, 5, 6]], [2, [3, 1, 2]]], ["move 2", "player 3 is in the exit"]),
            ([[0, "123"]], ["players must be a list"]),
            ([[0]], ["move 0", "must be [door_index"]),
            ([[True, [1, 2, 5]]], ["door index True"]),
        ],
    )
    def test_each_broken_rule_is_named(self, plan, words):
        with pytest.raises(PlanError) as caught:
            verify_plan(self.DOORS, plan)
        for word in words:
            assert word in str(caught.value)


def test_full_tables_only_slow_the_search_down(monkeypatch):
    import importlib

    graphs = generate(60, rooms=4, doors=16, seed=13, cycles=0.5, parallel=0.4, nines=0.15)
    expected = [solve(doors)[0] for doors in graphs]
    solve_module = importlib.import_module("batchenum.solvers.nonary.solve")
    monkeypatch.setattr(solve_module, "_MAX_MEMO_BYTES", 1 << 13)  # frozen at its first 2048 states
    monkeypatch.setattr(solve_module, "_MAX_NETS_BYTES", 1 << 10)
    for doors, answer in zip(graphs, expected):
        escaped, plan = solve(doors)
        assert escaped == answer and verify_plan(doors, plan) == answer
