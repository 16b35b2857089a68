"""batchenum.solvers.dungeon.solve: the published cases, the kernel against the literal oracle, witnesses."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchenum.solvers.dungeon import (
    PathError,
    generate,
    oracle_gold,
    parse_many,
    solve,
    solve_batch,
    verify_path,
    witness,
)


def seed_cases(cases_dir):
    with open(cases_dir / "dungeon_seed.jsonl") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_seed_cases(cases_dir):
    cases = seed_cases(cases_dir)
    assert len(cases) == 11
    for case in cases:
        assert solve(case["grid"]) == case["answer"], case["id"]
        assert oracle_gold(case["grid"]) == case["answer"], case["id"]
    batch = parse_many([case["grid"] for case in cases])
    assert solve_batch(batch).tolist() == [case["answer"] for case in cases]


def test_seed_cases_as_strings_and_with_spaces(cases_dir):
    for case in seed_cases(cases_dir):
        text = "\n".join(case["grid"]).replace(".", " ") + "\n"
        assert solve(text) == case["answer"], case["id"]


@st.composite
def small_grids(draw):
    """Grids up to 7x7 over a small alphabet, so monsters often share letters; one start."""
    height = draw(st.integers(1, 7))
    width = draw(st.integers(1, 7))
    cells = draw(st.lists(st.sampled_from(". .#$$ggG*"), min_size=height * width, max_size=height * width))
    cells[draw(st.integers(0, height * width - 1))] = "@"
    return ["".join(cells[r * width : (r + 1) * width]) for r in range(height)]


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(small_grids())
def test_kernel_matches_oracle_hypothesis(grid):
    assert solve(grid) == oracle_gold(grid)


@pytest.mark.parametrize("wall, gold, monster", [(0.25, 0.1, 0.05), (0.1, 0.2, 0.15), (0.45, 0.1, 0.02), (0, 0.3, 0.3)])
def test_kernel_matches_oracle_on_generated_batches(wall, gold, monster):
    grids = generate(600, (1, 12), (1, 12), seed=11, wall=wall, gold=gold, monster=monster)
    answers = solve_batch(parse_many(grids))
    assert answers.tolist() == [oracle_gold(grid) for grid in grids]


def test_answers_survive_rotations_reflections_and_relabelling():
    """The rules are symmetric under the square's eight symmetries and ignore monster letters."""
    rng = random.Random(5)
    grids = generate(300, (1, 20), (1, 20), seed=3, wall=0.2, gold=0.2, monster=0.08)
    expected = solve_batch(parse_many(grids))
    for turn in range(8):
        moved = [_transform(grid, turn, rng) for grid in grids]
        assert np.array_equal(solve_batch(parse_many(moved)), expected), turn


def _transform(grid, turn, rng):
    """Grid rotated turn % 4 quarter turns, mirrored when turn >= 4, monsters relabelled."""
    cells = np.array([list(row) for row in grid])
    cells = np.rot90(cells, turn % 4)
    cells = cells[:, ::-1] if turn >= 4 else cells
    letters = "abcXYZ*&"
    rows = ["".join(rng.choice(letters) if ch.isalpha() or ch in "*&" else ch for ch in row) for row in cells]
    return rows


def test_monsters_sharing_a_letter_are_different_monsters():
    # The start touches the left g, the gold touches the right g: two monsters, so the step is
    # legal.  Counting monsters by letter would forbid it.
    for grid in (["##.#", "g@$g"], ["###$", "g$@g"], ["##.#", "g@$h"], ["##.#", "*@$*"]):
        assert solve(grid) == 1 == oracle_gold(grid)
    # One monster touching both cells forbids the step, whatever the letter.
    for grid in (["#g#", "@.$"], ["#A#", "@$."], ["@&", "$#"]):
        assert solve(grid) == 0 == oracle_gold(grid)


def test_start_next_to_a_monster_and_trivial_dungeons():
    assert solve(["@g$"]) == 0
    assert solve(["@"]) == 0
    assert solve(["@$$$$"]) == 4
    assert solve(["$g@"]) == 0
    assert solve(["$#", "#@"]) == 1  # a diagonal step passes between two walls


@pytest.mark.parametrize("seed", range(3))
def test_witness_paths_are_legal_and_complete(seed):
    for grid in generate(150, (1, 15), (1, 15), seed=seed, wall=0.2, gold=0.15, monster=0.1):
        paths = witness(grid)
        assert len(paths) == solve(grid)
        for gold, path in paths.items():
            assert path[-1] == gold and grid[gold[0]][gold[1]] == "$"
            assert verify_path(grid, path)


@pytest.mark.parametrize(
    "path, message",
    [
        ([(0, 1)], "must begin at the start"),
        ([], "must begin at the start"),
        ([(0, 0), (0, 2)], "turn 1: (0, 0) -> (0, 2) is not a move"),
        ([(0, 0), (1, 0)], "turn 1: (1, 0) is '#'"),
        ([(0, 0), (-1, 0)], "outside the 3x4 dungeon"),
        ([(0, 0), (0, 1), (1, 2), (1, 3)], "turn 3: next to the monster at (2, 3)"),
        ([(0, 0), (1, 1), (2, 2), (1, 3)], "turn 3: next to the monster at (2, 3)"),
        ([(0, 0), (0, 1), (0, 2), (1, 2), (1, 3)], "turn 4: next to the monster at (2, 3)"),
    ],
)
def test_verify_path_names_the_broken_rule(path, message):
    grid = ["@...", "#..$", "...g"]
    with pytest.raises(PathError) as caught:
        verify_path(grid, path)
    assert message in str(caught.value)


def test_verify_path_accepts_a_legal_walk_past_two_monsters():
    assert verify_path(["@...", "#..$", "...g"], [(0, 0), (0, 1), (0, 2), (1, 3)]) is True
    assert verify_path(["##.#", "g@$g"], [(1, 1), (1, 2)])


def _maze(height, width, rng):
    """A depth-first-carved maze with gold, monsters sharing letters and the start on a path."""
    cells = [["#"] * width for _ in range(height)]
    cells[0][0] = "."
    stack = [(0, 0)]
    while stack:
        r, c = stack[-1]
        steps = [
            (dr, dc)
            for dr, dc in ((2, 0), (-2, 0), (0, 2), (0, -2))
            if 0 <= r + dr < height and 0 <= c + dc < width and cells[r + dr][c + dc] == "#"
        ]
        if not steps:
            stack.pop()
            continue
        dr, dc = rng.choice(steps)
        cells[r + dr // 2][c + dc // 2] = cells[r + dr][c + dc] = "."
        stack.append((r + dr, c + dc))
    open_cells = [(r, c) for r in range(height) for c in range(width) if cells[r][c] == "."]
    for r, c in rng.sample(open_cells, len(open_cells) // 6):
        cells[r][c] = "$"
    for r, c in rng.sample(open_cells, len(open_cells) // 15):
        cells[r][c] = rng.choice("gg*&")
    r, c = rng.choice(open_cells)
    cells[r][c] = "@"
    return ["".join(row) for row in cells]


def test_kernel_matches_oracle_on_mazes():
    rng = random.Random(12)
    mazes = [_maze(rng.randint(1, 25), rng.randint(1, 25), rng) for _ in range(80)]
    assert solve_batch(parse_many(mazes)).tolist() == [oracle_gold(m) for m in mazes]
