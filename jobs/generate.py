"""``batchenum generate dungeons`` and ``batchenum generate nonary``: seeded random batches for the
record jobs, written as JSONL or Parquet."""

from __future__ import annotations

import argparse

from batchenum.jobs.dungeons import GRID_TYPE
from batchenum.jobs.nonary import DOORS_TYPE
from batchenum.pipeline.cli import Command, add_generate_arguments, positive_int, probability, write_generated
from batchenum.solvers import dungeon, nonary

__all__ = ["COMMANDS", "add_dungeon_arguments", "generate_dungeons", "add_door_graph_arguments", "generate_door_graphs"]

# ------------------------------------------------------------------------------------------ dungeons


def _size(text: str) -> int | tuple[int, int]:
    """argparse type: ``32`` or a range ``1-60`` drawn per dungeon."""
    low, _, high = text.partition("-")
    values = (positive_int(low), positive_int(high)) if high else positive_int(low)
    if isinstance(values, tuple) and values[0] > values[1]:
        raise argparse.ArgumentTypeError(f"range {text!r} must be low-high with low <= high")
    return values


def add_dungeon_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``batchenum generate dungeons``."""
    add_generate_arguments(parser, "dungeons")
    parser.add_argument("--height", type=_size, default=32, help="rows, or a range like 1-60 (default 32)")
    parser.add_argument("--width", type=_size, default=32, help="columns, or a range like 1-60 (default 32)")
    parser.add_argument("--wall", type=probability, default=0.25, help="wall density (default 0.25)")
    parser.add_argument("--gold", type=probability, default=0.05, help="gold density (default 0.05)")
    parser.add_argument("--monster", type=probability, default=0.03, help="monster density (default 0.03)")


def generate_dungeons(args: argparse.Namespace) -> int:
    """Write the generated dungeons to ``args.out`` (atomically); returns the exit status."""
    grids = dungeon.generate(
        args.count, args.height, args.width, args.seed, wall=args.wall, gold=args.gold, monster=args.monster
    )
    return write_generated(args.out, "grid", "d", grids, GRID_TYPE, "dungeons")


# ---------------------------------------------------------------------------------------- door graphs


def add_door_graph_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``batchenum generate nonary``."""
    add_generate_arguments(parser, "door graphs")
    parser.add_argument("--rooms", type=positive_int, default=4, help="rooms, room 0 included (default 4)")
    parser.add_argument("--doors", type=positive_int, default=12, help="doors per graph (default 12)")
    parser.add_argument(
        "--cycles",
        type=probability,
        default=0.2,
        help="chance that a door goes back to an earlier room or itself (default 0.2)",
    )
    parser.add_argument(
        "--parallel",
        type=probability,
        default=0.2,
        help="chance that a door repeats the rooms of an earlier one (default 0.2)",
    )
    parser.add_argument("--nines", type=probability, default=0.25, help="share of doors numbered 9 (default 0.25)")


def generate_door_graphs(args: argparse.Namespace) -> int:
    """Write the generated door graphs to ``args.out`` (atomically); returns the exit status."""
    graphs = nonary.generate(
        args.count,
        rooms=args.rooms,
        doors=args.doors,
        seed=args.seed,
        cycles=args.cycles,
        parallel=args.parallel,
        nines=args.nines,
    )
    return write_generated(args.out, "doors", "g", graphs, DOORS_TYPE, "door graphs")


COMMANDS = [
    Command(
        ("generate", "dungeons"),
        "write a batch of seeded random dungeons (JSONL or Parquet)",
        add_dungeon_arguments,
        generate_dungeons,
    ),
    Command(
        ("generate", "nonary"),
        "write a batch of seeded random door graphs (JSONL or Parquet)",
        add_door_graph_arguments,
        generate_door_graphs,
    ),
]
