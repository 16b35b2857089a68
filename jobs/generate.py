"""``batchenum generate dungeons`` and ``batchenum generate nonary``: seeded random batches for the
record jobs, written as JSONL or Parquet.  Their options are ``Param`` declarations, as a job's are."""

from __future__ import annotations

from typing import Any

from batchenum.jobs.dungeons import GRID_TYPE
from batchenum.jobs.nonary import DOORS_TYPE
from batchenum.pipeline.cli import ParamCommand, write_generated
from batchenum.pipeline.params import Param, ParamError
from batchenum.solvers import dungeon, nonary

__all__ = ["COMMANDS", "GenerateDungeons", "GenerateDoorGraphs"]


class _Generate(ParamCommand):
    """What every generate command takes: how many records, a seed, and the file to write."""

    noun = ""  # what the batch holds, for --help and the line said when it is written
    count = Param(int, low=1, metavar="N", help="how many {job.noun}")
    seed = Param(int, default=0, metavar="S", help="random seed")
    out = Param(str, metavar="FILE", help="output file: Parquet if it ends in .parquet, else JSONL")


class GenerateDungeons(_Generate):
    path = ("generate", "dungeons")
    help = "write a batch of seeded random dungeons (JSONL or Parquet)"
    noun = "dungeons"
    height = Param(str, default="32", metavar="H", help="rows, or a range like 1-60 drawn per dungeon")
    width = Param(str, default="32", metavar="W", help="columns, or a range like 1-60 drawn per dungeon")
    wall = Param(float, default=0.25, low=0, high=1, metavar="P", help="wall density")
    gold = Param(float, default=0.05, low=0, high=1, metavar="P", help="gold density")
    monster = Param(float, default=0.03, low=0, high=1, metavar="P", help="monster density")

    @classmethod
    def check_params(cls, values: dict[str, Any]) -> None:
        for name in ("height", "width"):
            _size(name, values[name])

    def run(self) -> int:
        """Write the generated dungeons to ``out`` (atomically); returns the exit status."""
        height, width = _size("height", self.height), _size("width", self.width)
        grids = dungeon.generate(
            self.count, height, width, self.seed, wall=self.wall, gold=self.gold, monster=self.monster
        )
        return write_generated(self.out, "grid", "d", grids, GRID_TYPE, self.noun)


def _size(name: str, text: str) -> int | tuple[int, int]:
    """``32``, or a range ``1-60`` drawn per dungeon; ParamError naming ``name`` otherwise."""
    low, dash, high = text.partition("-")
    try:
        values = (int(low), int(high)) if dash else int(low)
    except ValueError:
        raise ParamError(f"{{{name}}} must be a whole number or a range low-high, not {text!r}") from None
    lowest = min(values) if isinstance(values, tuple) else values
    if lowest < 1 or (isinstance(values, tuple) and values[0] > values[1]):
        raise ParamError(f"{{{name}}} must be at least 1, a range low-high with low <= high, not {text!r}")
    return values


class GenerateDoorGraphs(_Generate):
    path = ("generate", "nonary")
    help = "write a batch of seeded random door graphs (JSONL or Parquet)"
    noun = "door graphs"
    rooms = Param(int, default=4, low=1, metavar="R", help="rooms, room 0 included")
    doors = Param(int, default=12, low=1, metavar="D", help="doors per graph")
    cycles = Param(
        float, default=0.2, low=0, high=1, metavar="P", help="chance that a door goes back to an earlier room or itself"
    )
    parallel = Param(
        float, default=0.2, low=0, high=1, metavar="P", help="chance that a door repeats the rooms of an earlier one"
    )
    nines = Param(float, default=0.25, low=0, high=1, metavar="P", help="share of doors numbered 9")

    def run(self) -> int:
        """Write the generated door graphs to ``out`` (atomically); returns the exit status."""
        graphs = nonary.generate(
            self.count,
            rooms=self.rooms,
            doors=self.doors,
            seed=self.seed,
            cycles=self.cycles,
            parallel=self.parallel,
            nines=self.nines,
        )
        return write_generated(self.out, "doors", "g", graphs, DOORS_TYPE, self.noun)


COMMANDS = [GenerateDungeons.command(), GenerateDoorGraphs.command()]
