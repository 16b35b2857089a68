"""What the transfer-matrix Palago count would take at n = 64 and 70, from its measured growth.

    python benchmarks/palago_projection.py                          # the committed figures only
    python benchmarks/palago_projection.py --store /work/n60/store  # with a run's committed heights
    python benchmarks/palago_projection.py --json                   # one JSON document

Analysis only: it reads the n = 56 run's cost statement (CPU seconds, peak resident memory, peak
states and state-steps per shard, every height swept whole: kept as published in
benchmarks/data/palago_cost_n56.parquet), the committed one (results/transfer/palago/cost.parquet)
when it reaches further, the figures of earlier runs that the docs give (n = 40..50, transcribed in
DOCUMENTED with where each comes from) and, with --store, the committed height shards, symmetric
pieces and checkpoint indexes of a run in progress (read only).
It fits the growth per tile of each quantity (least squares on its logarithm; the range is the
slowest and fastest growth between consecutive measured sizes, widened to two standard errors of
the fitted slope) and projects from the last measured size, printing:

- the work: the heights' state-steps and CPU-hours (the state-steps at the cost a split step was
  measured at, once a published run split its heights; the range from the whole sweeps' CPU growth
  and from the cost a step has in a generation of a task's size), the symmetric shards';
- the largest height's peak states and what one process holding them whole would need;
- per cluster of 16, 128 and 1,024 CPUs (``--cpus-per-node`` a node): the tasks of the largest
  phase (tasks_for, TASK_STATES), each task's peak, the object store's share, the peak per node;
- the largest task's share of the work (the bound on speedup) and the costliest height's
  critical path (its phases run one after another);
- the bytes a phase moves (the whole generation, each state once) and in all;
- what must change before such a run: the code's limits checked against the projection, a node
  past ``--node-gib``, a shuffle whose own cost is most of the costliest height's path.

docs/palago_transfer.md, "Projection to n = 64 and 70", gives its output and the assumptions.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from batchenum.jobs.palago_transfer import SYMMETRIC_PIECE_SECONDS, rotation_parts
from batchenum.pipeline.parquet_format import recorded_metadata
from batchenum.solvers.palago import mirror
from batchenum.solvers.palago.transfer import (
    MAX_N,
    PIECE_STATES,
    TASK_STATES,
    max_height,
    next_phase,
    tasks_for,
)

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "results" / "transfer" / "palago"
# The n = 56 run's cost statement as published (18a7b03), every height swept whole in one process:
# the per-height figures come from it, whatever results/ holds later (a split run holds no height
# in one process, so it tells no bytes a state in one).
FROZEN = Path(__file__).resolve().parent / "data" / "palago_cost_n56.parquet"
TARGETS = (60, 64, 70)  # 60: the run under way will check it
CLUSTERS = (16, 128, 1024)
GIB = 2**30

# Figures of earlier runs that no committed file holds: (n, value, where the docs give it).
DOCUMENTED = {
    # all heights' CPU seconds of the sweep, one process each n (docs/palago.md, "Per height")
    "heights_cpu": ((44, 91.0, "palago.md per height"), (46, 187.0, "ibid."), (48, 373.0, "ibid.")),
    # all heights' state-steps (ibid., the note under the table)
    "heights_steps": ((44, 230.5e6, "palago.md per height"), (46, 465.8e6, "ibid."), (48, 936.6e6, "ibid.")),
    # the largest height's states at its largest generation (ibid.; n = 50: palago_transfer.md, "The table to n = 50")
    "largest_states": (
        (44, 678_695.0, "palago.md per height, h012"),
        (46, 1_188_495.0, "ibid., h013"),
        (48, 2_213_908.0, "ibid., h013"),
        (50, 4.6e6, "palago_transfer.md, table to n = 50, h014"),
    ),
    # a state's resident bytes at the largest heights, whole in one process, pooled rows (ibid.: 370-430 at n = 48)
    "process_bytes": ((48, 400.0, "palago.md per height, 370-430"),),
    # the reflection's half-plane sweep, one shard (palago_transfer.md, "What n = 56 and n = 60 need")
    "mirror_cpu": ((40, 0.56, "palago_transfer.md, section 7"), (50, 9.9, "ibid.")),
    # every rotation group's search together (ibid.: the six 11.6 s at n = 48)
    "rotation_cpu": ((48, 11.6, "palago_transfer.md, section 7"),),
}
# The costliest height's share of the heights' CPU: h013 at n = 48 (85.9 of 373 s), h015 at n = 56.
COSTLIEST_SHARE_48 = 85.9 / 373.0
COSTLIEST_AT = 0.27  # the costliest height is about 0.27 n (h013 at 48, h015 at 56)
# Today's rows (one word a coefficient) against the pooled rows the n = 56 run swept with: h015 at
# n = 56 took 2,252 CPU s against 2,715 and grew 5.75 GiB for its 23,666,154 states (261 bytes a
# state) against 8.85 GiB (palago_transfer.md, "One word a coefficient").  One height, once.
NARROW_CPU_FACTOR = 2252 / 2714.862
NARROW_PROCESS_BYTES = 5.75 * GIB / 23_666_154
# A split task's peak per state it holds: 7.7-8.1 GB for about 8 million states (h013 at n = 60 in
# two parts: palago_transfer.md section 6; the checkpoint's index: 16,046,607 states in 2 parts).
TASK_BYTES = (7.7e9 / 8.023e6, 8.1e9 / 8.023e6)
WORKER_BYTES = 0.24 * GIB  # a Ray worker with the kernels loaded (palago_transfer.md, split memory)
# A state in a bucket or a checkpoint part (the same rows): h013 at n = 50, a split save at column 5
# (135.4 MiB for 2,084,376 states); h011 and h010 at n = 50 saved whole, one word a coefficient.
STORED_BYTES = (135.4 * 2**20 / 2_084_376, 86.0, 110.0)
# What a nested task costs besides its sweep: about 30 ms, and under 1 ms a bucket it returns
# (palago_transfer.md section 6, `palago_split.py --task-cost`).
TASK_SECONDS, BUCKET_SECONDS = 0.030, 0.001
SKEW = (1.0, 2.0)  # the largest task's states over the mean: assumed (n = 36: 0.96 of 16 buckets)
ROTATION_PIECE_IMBALANCE = 1.25  # the largest of a group's pieces over their mean, n = 46
COUNT_BITS = 125  # the exact arithmetic's reach: 2^64 * P (palago_transfer.md, Exact wide arithmetic)


@dataclass(frozen=True)
class Point:
    n: int
    value: float
    source: str


@dataclass
class Growth:
    """A quantity's growth per tile: ``per_tile`` fitted by least squares on log(value), ``low`` and
    ``high`` the slowest and fastest growth between consecutive points, widened to two standard
    errors of the slope (when there are three points or more)."""

    name: str
    points: list[Point]
    per_tile: float = 0.0
    low: float = 0.0
    high: float = 0.0
    intercept: float = 0.0

    def __post_init__(self) -> None:
        points = sorted(self.points, key=lambda p: p.n)
        if len(points) < 2:
            raise ValueError(f"{self.name}: a growth needs two measured sizes, not {len(points)}")
        self.points = points
        n = np.array([p.n for p in points], float)
        y = np.log([p.value for p in points])
        slope, self.intercept = np.polyfit(n, y, 1)
        local = np.diff(y) / np.diff(n)
        low, high = min(local.min(), slope), max(local.max(), slope)  # two points: equal but for rounding
        if len(points) > 2:
            residual = y - (slope * n + self.intercept)
            se = math.sqrt(residual @ residual / (len(n) - 2) / ((n - n.mean()) @ (n - n.mean())))
            low, high = min(low, slope - 2 * se), max(high, slope + 2 * se)
        self.per_tile, self.low, self.high = math.exp(slope), math.exp(low), math.exp(high)

    @property
    def last(self) -> Point:
        return self.points[-1]

    def fitted(self, n: int) -> float:
        return math.exp(self.intercept + math.log(self.per_tile) * n)

    def at(self, n: int) -> tuple[float, float, float]:
        """(central, low, high) at n, projected from the last measured size."""
        tiles = n - self.last.n
        grow = (self.per_tile**tiles, self.low**tiles, self.high**tiles)
        central, a, b = (self.last.value * g for g in grow)
        return central, min(a, b), max(a, b)

    def worst_residual(self) -> float:
        """The fit's largest relative miss of a measured point."""
        return max(abs(self.fitted(p.n) / p.value - 1) for p in self.points)


@dataclass
class Measured:
    """What the inputs give: the committed run's heights and symmetric shards, and a run's store."""

    max_n: int
    heights: dict[int, dict]  # height -> its cost row at max_n
    mirror_cpu: float
    mirror_bytes: int  # the mirror sweep's peak resident memory beyond its process's start
    rotation_cpu: float
    fixed: dict[int, int]
    reflection: dict[int, int]  # A_ref(n) = free_stabiliser_2 + free_stabiliser_6: the mirror kernel's int64 counts
    later: list[Measured] = field(default_factory=list)  # published runs past this one
    store: dict = field(default_factory=dict)

    @property
    def last_n(self) -> int:
        return max([self.max_n, *(run.max_n for run in self.later)])


def committed(folder: Path = COMMITTED, frozen: Path = FROZEN) -> Measured:
    """The n = 56 run's figures (``frozen``) and, when the committed table reaches further, its
    cost statement as a later run; the counts from the committed table."""
    columns = ["n", "fixed", "free_stabiliser_2", "free_stabiliser_6"]
    counts = pq.read_table(folder / "creature_counts.parquet", columns=columns).to_pydict()
    m = cost_statement(frozen, counts)
    latest = cost_statement(folder / "cost.parquet", counts)
    if latest.max_n > m.max_n:
        m.later.append(latest)
    return m


def cost_statement(path: Path, counts: dict) -> Measured:
    """One published cost statement (palago_publish's cost.parquet) with the table's counts."""
    cost = pq.read_table(path)
    max_n = json.loads(recorded_metadata(cost.schema)["params"])["max_n"]
    rows = cost.to_pylist()
    heights = {int(r["shard"][1:]): r for r in rows if re.fullmatch(r"h\d+", r["shard"])}
    rotation = [r["cpu_seconds"] for r in rows if r["shard"].startswith("s-rotation")]
    (mirror,) = [r for r in rows if r["shard"] == "s-reflection"]
    mirror_bytes = mirror["peak_rss_bytes"] - mirror["start_rss_bytes"]
    fixed = {int(n): int(x) for n, x in zip(counts["n"], counts["fixed"])}
    reflection = {
        int(n): int(f2) + int(f6)
        for n, f2, f6 in zip(counts["n"], counts["free_stabiliser_2"], counts["free_stabiliser_6"])
    }
    return Measured(max_n, heights, mirror["cpu_seconds"], mirror_bytes, sum(rotation), fixed, reflection)


def store_figures(store: Path) -> dict:
    """A run's committed heights (state-steps and peak states; no CPU: a height split by code
    before 03cd5fd recorded its own thread's only), its reflection shard's CPU, and the bytes a
    state its checkpoint parts take on disk.  Reads only."""
    job = store / "palago"
    if not (job / "_plan.json").is_file():
        raise ValueError(f"{store} keeps no plan ({job / '_plan.json'}): give the --out folder of a palago run")
    plan = json.loads((job / "_plan.json").read_text())
    planned = [s for s in plan["shards"] if re.fullmatch(r"h\d+", s)]
    heights, mirror_cpu = {}, None
    for path in sorted((job / "_shards" / "partial_counts").glob("*.parquet")):
        stats = json.loads(recorded_metadata(pq.read_schema(path)).get("stats", "{}"))
        if re.fullmatch(r"h\d+", path.stem) and "state_steps" in stats:
            # a split height's peak states are its tasks' peaks added up: an upper bound
            heights[int(path.stem[1:])] = {"state_steps": stats["state_steps"], "peak_states": stats["peak_states"]}
    rotation = []
    for path in sorted((job / "_shards" / "symmetric_counts").glob("s-rotation-*.parquet")):
        rotation.append(json.loads(recorded_metadata(pq.read_schema(path))["stats"])["cpu_ms"] / 1000)
    rotation_pieces = sum(1 for s in plan["shards"] if s.startswith("s-rotation-"))
    reflection = job / "_shards" / "symmetric_counts" / "s-reflection.parquet"
    if reflection.is_file():
        mirror_cpu = json.loads(recorded_metadata(pq.read_schema(reflection))["stats"])["cpu_ms"] / 1000
    saves = []
    for index in sorted((job / "_checkpoints").glob("h*.ckpt")):
        progress = json.loads(index.read_bytes().split(b"\n", 1)[0]).get("progress", "")
        found = re.match(r"column (\d+), ([\d,]+) states in (\d+) parts", progress)
        if not found:
            continue
        column, states = int(found[1]), int(found[2].replace(",", ""))
        parts = list(index.parent.glob(f"{index.stem}.c{column:04d}-*.part"))
        if len(parts) == int(found[3]):
            size = sum(p.stat().st_size for p in parts)
            saves.append({"height": int(index.stem[1:]), "column": column, "states": states, "bytes": size})
    return {
        "max_n": plan["params"]["max_n"],
        "heights": heights,
        "complete": len(heights) == len(planned),
        "mirror_cpu": mirror_cpu,
        # every rotation piece's CPU, estimated from those committed (their mean times the plan's count)
        "rotation_cpu": sum(rotation) / len(rotation) * rotation_pieces if len(rotation) >= 2 else None,
        "rotation_pieces": (len(rotation), rotation_pieces),
        "saves": saves,
    }


def growths(m: Measured) -> dict[str, Growth]:
    """Every fitted growth, from the documented figures, the committed run and a store's."""
    doc = {name: [Point(*p) for p in points] for name, points in DOCUMENTED.items()}
    h, n = m.heights, m.max_n
    cpu = _cpu_with_resumed(h)
    here = f"results/transfer n = {n}"
    whole = not _split(h)  # a split height's process holds none of its states
    fits = {
        "heights_cpu": doc["heights_cpu"]
        + ([Point(n, cpu, here + " (with the resumed part)")] if not _cpu_missing(h) else []),
        "heights_steps": doc["heights_steps"] + [Point(n, sum(r["state_steps"] for r in h.values()), here)],
        "largest_states": doc["largest_states"] + [Point(n, max(r["peak_states"] for r in h.values()), here)],
        "mirror_cpu": doc["mirror_cpu"] + [Point(n, m.mirror_cpu, here)],
        "rotation_cpu": doc["rotation_cpu"] + [Point(n, m.rotation_cpu, here)],
        "process_bytes": doc["process_bytes"]
        + ([Point(n, _process_bytes(h), here + ", the costliest height")] if whole else []),
    }
    for run in m.later:
        _add_later(fits, run)
    # the rotation search's growth rose from 1.31 a tile (n = 48 to 56) to 1.76 (56 to 60): the
    # last two sizes are the ones to project with
    fits["rotation_cpu"] = fits["rotation_cpu"][-2:]
    s = m.store if m.store and m.store["max_n"] > m.last_n else {}  # a store joins only past the published n
    if s and s["complete"]:
        where = f"store n = {s['max_n']}"
        fits["heights_steps"].append(Point(s["max_n"], sum(r["state_steps"] for r in s["heights"].values()), where))
        fits["largest_states"].append(Point(s["max_n"], max(r["peak_states"] for r in s["heights"].values()), where))
    if s and s["mirror_cpu"]:
        fits["mirror_cpu"].append(Point(s["max_n"], s["mirror_cpu"], f"store n = {s['max_n']}"))
    if s and s["rotation_cpu"]:
        done, planned = s["rotation_pieces"]
        where = f"store n = {s['max_n']}, {done} of {planned} pieces' mean times {planned}"
        fits["rotation_cpu"].append(Point(s["max_n"], s["rotation_cpu"], where))
    return {name: Growth(name, points) for name, points in fits.items() if len(points) >= 2}


def _add_later(fits: dict[str, list[Point]], run: Measured) -> None:
    """A later published run's points: its states and state-steps always, its symmetric shards'
    CPU (they never split), and its heights' CPU and bytes only if every height was swept whole: a
    split height's step costs what a task's share of the generation costs, not a whole one's
    (0.48 us at n = 60 against 0.68 at n = 56), so its CPU is another curve (``split_step_us``)."""
    h, where = run.heights, f"results/transfer n = {run.max_n}"
    fits["heights_steps"].append(Point(run.max_n, sum(r["state_steps"] for r in h.values()), where))
    fits["largest_states"].append(Point(run.max_n, max(r["peak_states"] for r in h.values()), where))
    fits["mirror_cpu"].append(Point(run.max_n, run.mirror_cpu, where))
    fits["rotation_cpu"].append(Point(run.max_n, run.rotation_cpu, where))
    if not _split(h):
        fits["heights_cpu"].append(Point(run.max_n, _cpu_with_resumed(h), where + " (with the resumed parts)"))
        fits["process_bytes"].append(Point(run.max_n, _process_bytes(h), where + ", the costliest height"))


def _cpu_with_resumed(heights: dict[int, dict]) -> float:
    """The heights' CPU seconds, a resumed height's part before its resume at its finishing rate."""
    return sum(
        r["cpu_seconds"] / (1 - (r.get("state_steps_resumed") or 0) / (r["state_steps"] or 1)) for r in heights.values()
    )


def split_step_us(m: Measured) -> dict[int, float]:
    """{n: CPU microseconds a state-step} of each later run whose heights ran split, their tasks'
    CPU recorded: the measured cost of the split sweep, beside the fits of whole sweeps."""
    return {
        run.max_n: _cpu_with_resumed(run.heights) / sum(r["state_steps"] for r in run.heights.values()) * 1e6
        for run in m.later
        if _split(run.heights) and not _cpu_missing(run.heights)
    }


# Far below any height's CPU per state-step measured (0.3-0.9 us): such a shard's CPU is not its sweep's.
SPLIT_CPU_PER_STEP = 0.05e-6


def _split(heights: dict[int, dict]) -> list[int]:
    """Heights that ran split: their shard says so (``split_tasks``, since 03cd5fd), or, by older
    code, its recorded CPU cannot be their sweep's (their tasks' was not counted)."""
    return [height for height, r in heights.items() if r.get("split_tasks") or _thread_cpu_only(r)]


def _cpu_missing(heights: dict[int, dict]) -> list[int]:
    """Heights whose recorded CPU leaves out their tasks' (split by code before 03cd5fd)."""
    return [height for height, r in heights.items() if not r.get("split_tasks") and _thread_cpu_only(r)]


def _thread_cpu_only(r: dict) -> bool:
    return r["state_steps"] >= 1e6 and r["cpu_seconds"] < SPLIT_CPU_PER_STEP * r["state_steps"]


def _process_bytes(heights: dict[int, dict]) -> float:
    """Resident bytes a state of the costliest height: its peak beyond its start over its peak states."""
    r = max(heights.values(), key=lambda r: r["cpu_seconds"])
    return (r["peak_rss_bytes"] - r["start_rss_bytes"]) / r["peak_states"]


def step_cost(m: Measured) -> tuple[float, float, float]:
    """CPU seconds a state-step costs as a function of the generation's size, from the committed
    run's heights of at least 10^8 state-steps: (a, b, worst miss) of a + b log10(peak states)."""
    split = _split(m.heights)
    rows = [
        r
        for height, r in m.heights.items()
        if r["state_steps"] >= 1e8 and not r["state_steps_resumed"] and height not in split
    ]
    if len(rows) < 2:
        raise ValueError("the committed run has fewer than two heights swept whole: no step cost to fit")
    x = np.log10([r["peak_states"] for r in rows])
    y = np.array([r["cpu_seconds"] / r["state_steps"] for r in rows])
    b, a = np.polyfit(x, y, 1)
    return a, b, float(np.max(np.abs((a + b * x) / y - 1)))


def per_height(m: Measured) -> list[dict]:
    """Each height's growth per tile from n = 48 to the committed run (palago.md's n = 48 row) and,
    with a store, its state-steps' growth from the committed run to the store's n."""
    at_48 = {  # height: (CPU s, peak states) at n = 48, docs/palago.md "Per height"
        9: (3.8, 79_213), 10: (14.7, 321_820), 11: (47.6, 983_596), 12: (81.3, 1_829_263), 13: (85.9, 2_213_908),
        14: (65.6, 1_940_258), 15: (42.5, 1_316_073), 16: (19.0, 723_527), 17: (7.5, 325_844), 18: (2.7, 119_926),
    }  # fmt: skip
    tiles = m.max_n - 48
    total = sum(r["cpu_seconds"] for r in m.heights.values())
    rows = []
    for height, r in sorted(m.heights.items()):
        row = {"height": height, "cpu": r["cpu_seconds"], "share": r["cpu_seconds"] / total}
        row["peak_states"], row["state_steps"] = r["peak_states"], r["state_steps"]
        if height in at_48:
            row["cpu_per_tile"] = (r["cpu_seconds"] / at_48[height][0]) ** (1 / tiles)
            row["states_per_tile"] = (r["peak_states"] / at_48[height][1]) ** (1 / tiles)
        later = m.store["heights"].get(height) if m.store and m.store["max_n"] > m.last_n else None
        if later:
            row["steps_per_tile_after"] = (later["state_steps"] / r["state_steps"]) ** (
                1 / (m.store["max_n"] - m.max_n)
            )
        rows.append(row)
    return rows


def project(m: Measured, fits: dict[str, Growth], n: int, cpus_per_node: int, node_gib: float = 64.0) -> dict:
    """Every projected figure for size n, each a (central, low, high) triple where it has a range."""
    steps = fits["heights_steps"].at(n)
    a, b, _ = step_cost(m)
    # Split, a step costs what it costs in a generation of a task's size (at most TASK_STATES): the
    # low end, with today's rows.  The central figure is the state-steps at the cost a split step
    # was measured at (the last split run's), else the heights' own CPU growth, whole generations,
    # with today's rows; the high end that growth with the pooled rows the runs measured.
    step_task = (a + b * math.log10(TASK_STATES)) * NARROW_CPU_FACTOR
    cpu_fit = fits["heights_cpu"].at(n)
    measured = split_step_us(m)
    central = steps[0] * measured[max(measured)] * 1e-6 if measured else cpu_fit[0] * NARROW_CPU_FACTOR
    heights_cpu = (central, min(steps[1] * step_task, cpu_fit[1], central), max(cpu_fit[2], central))
    mirror_cpu, rotation_cpu = fits["mirror_cpu"].at(n), fits["rotation_cpu"].at(n)
    symmetric = _sum(mirror_cpu, rotation_cpu)
    total = _sum(heights_cpu, symmetric)
    largest = fits["largest_states"].at(n)
    stored = (float(np.mean(STORED_BYTES)), min(STORED_BYTES), max(STORED_BYTES))
    share_56 = max(r["cpu_seconds"] for r in m.heights.values()) / sum(r["cpu_seconds"] for r in m.heights.values())
    work = {
        "largest_states": largest,
        "heights_cpu": heights_cpu,
        "mirror_cpu": mirror_cpu,
        "rotation_cpu": rotation_cpu,
        "total_cpu": total,
        "heights_at_once": sum(r["peak_states"] for r in m.heights.values())
        / max(r["peak_states"] for r in m.heights.values()),
        "costliest": round(COSTLIEST_AT * n),
        "costliest_share": (share_56, min(share_56, COSTLIEST_SHARE_48), max(share_56, COSTLIEST_SHARE_48)),
    }
    clusters = [cluster(n, c, cpus_per_node, work) for c in CLUSTERS]
    result = {
        "n": n,
        "heights": max_height(n),
        "heights_state_steps": steps,
        "heights_cpu_hours": _scaled(heights_cpu, 1 / 3600),
        "symmetric_cpu_hours": _scaled(symmetric, 1 / 3600),
        "rotation_group_s": rotation_cpu[0] / 3,  # one of the three rotation groups' search
        "total_cpu_hours": _scaled(total, 1 / 3600),
        "step_us_split": step_task * 1e6,
        "split_step_measured": (max(measured), measured[max(measured)]) if measured else None,  # (n, us)
        "largest_height_peak_states": largest,
        # today's rows (one word a coefficient), growing as the pooled rows' bytes did
        "largest_height_whole_gib": tuple(
            s * NARROW_PROCESS_BYTES * g / _process_bytes(m.heights) / GIB
            for s, g in zip(largest, fits["process_bytes"].at(n))
        ),
        # the mirror sweep is one task, unsplit: its memory grows as its CPU (assumed; measured at n = 56 only)
        "mirror_gib": tuple(m.mirror_bytes * c / m.mirror_cpu / GIB for c in mirror_cpu),
        "mirror_hours": _scaled(mirror_cpu, 1 / 3600),
        # a column run whole (fewer than 2 PIECE_STATES states at its start, assumed to grow at most
        # tenfold within it) in the height's process, at the split step's cost
        "unsplit_column_s": 2 * PIECE_STATES * 10 * round(COSTLIEST_AT * n) * step_task,
        "costliest_height": work["costliest"],
        "costliest_share": work["costliest_share"],
        "phase_gb_at_peak": tuple(s * b / 1e9 for s, b in zip(largest, stored)),
        "moved_tb_in_all": tuple(s * b / 1e12 for s, b in zip(steps, stored)),
        "clusters": clusters,
    }
    return {**result, "changes": changes(m, n, result, node_gib)}


def _sum(x: tuple, y: tuple) -> tuple:
    return tuple(a + b for a, b in zip(x, y))


def _scaled(x: tuple, factor: float) -> tuple:
    return tuple(a * factor for a in x)


def cluster(n: int, cpus: int, cpus_per_node: int, work: dict) -> dict:
    """One cluster's figures, each (central, low, high), every input taken at the same end of its
    range: the largest phase's tasks, a node's peak, the largest task, the costliest height's
    critical path and the bound they set on speedup."""
    nodes = -(-cpus // cpus_per_node)
    pieces = rotation_parts(n)
    ends = (
        (0, float(np.mean(TASK_BYTES)), float(np.mean(STORED_BYTES)), float(np.mean(SKEW))),
        (1, TASK_BYTES[0], min(STORED_BYTES), SKEW[0]),
        (2, TASK_BYTES[1], max(STORED_BYTES), SKEW[1]),
    )
    variants = [_cluster_end(n, cpus, cpus_per_node, nodes, pieces, work, *end) for end in ends]
    figures = {key: tuple(v[key] for v in variants) for key in variants[0]}
    return {"cpus": cpus, "nodes": nodes, "cpus_per_node": min(cpus, cpus_per_node), **figures}


def _cluster_end(n, cpus, cpus_per_node, nodes, pieces, work, i, task_bytes, stored_bytes, skew) -> dict:
    states = work["largest_states"][i]
    tasks = tasks_for(int(states), cpus, PIECE_STATES, TASK_STATES)
    # a node runs a task a CPU, each holding its share at about 1 kB a state beside its worker; the
    # object store holds the phase's input buckets not yet swept and its output buckets so far (a
    # task's inputs go once it is done), spread over the nodes: one generation, and the inputs and
    # outputs of the tasks running at once on top (all of both when every task runs at once)
    running = min(cpus_per_node, cpus, -(-tasks // nodes))
    tasks_gib = running * (states / tasks * task_bytes + WORKER_BYTES) / GIB
    store_gib = (1 + min(1, cpus / tasks)) * states * stored_bytes / nodes / GIB
    # the costliest height's phases run one after another: its work over the tasks of a phase,
    # the largest task skew times the mean, plus each phase's task and bucket cost
    height = work["costliest"]
    a, b = next_phase(height, height, int(states), tasks)
    phases = -(-height // (b - a)) * ((n - 1) // 2)  # at most (n - 1) // 2 columns
    buckets = max(min(cpus, 2 * tasks), 2 * -(-int(states) // TASK_STATES))
    costliest_cpu = work["heights_cpu"][i] * work["costliest_share"][i]
    sweep = costliest_cpu / tasks * skew
    overhead = phases * (TASK_SECONDS + BUCKET_SECONDS * buckets)
    critical = sweep + overhead
    # the largest task that cannot split: the mirror sweep, whole, or a rotation piece
    piece = work["rotation_cpu"][i] / (3 * pieces) * ROTATION_PIECE_IMBALANCE
    largest_task = max(work["mirror_cpu"][i], piece)
    bound = max(largest_task, critical)
    return {
        "tasks_at_peak": tasks,
        "states_per_task": states / tasks,
        "node_tasks_gib": tasks_gib,
        "node_store_gib": store_gib,
        "node_peak_gib": tasks_gib + store_gib,
        # every height's largest generation in the store at once (their sum over the largest, n = 56)
        "node_store_all_heights_gib": store_gib * work["heights_at_once"],
        "largest_task_s": largest_task,
        "largest_task_share": largest_task / work["total_cpu"][i],
        "phases_of_costliest": phases,
        "critical_path_s": critical,
        "critical_path_overhead_s": overhead,  # of which the tasks' and buckets' own cost
        "speedup_bound": work["total_cpu"][i] / bound,
        "wall_hours": max(work["total_cpu"][i] / cpus, bound) / 3600,
        "objects_a_phase": tasks * buckets,
    }


def changes(m: Measured, n: int, projected: dict, node_gib: float = 64.0) -> list[str]:
    """What the code cannot do at n as it stands, checked against its limits and the projection."""
    out = []
    if max_height(n) > max_height(MAX_N):
        out.append(
            f"heights to {max_height(n)}: a state's key holds {max_height(MAX_N)} rows (solvers/palago/transfer.py "
            f"MAX_N = {MAX_N}; mirror.py MAX_N = {mirror.MAX_N}): a fourth key word, 8 bytes a state more"
        )
    piece = projected["rotation_group_s"] / rotation_parts(n)
    if not 0.5 < piece / SYMMETRIC_PIECE_SECONDS < 2:
        out.append(
            f"rotation pieces: the plan cuts each group into {rotation_parts(n):,} (ROTATION_GROUP_GROWTH 1.73 a tile "
            f"from 4.0 s at n = 48) for pieces of a minute, but a group's search is projected at "
            f"{projected['rotation_group_s']:,.0f} CPU s: pieces of {piece:.0f} s; refit the constant"
        )
    clusters = projected["clusters"]
    mirror_gib, mirror_hours = projected["mirror_gib"][0], projected["mirror_hours"][0]
    bound = [c for c in clusters if c["largest_task_s"][0] >= c["critical_path_s"][0]]
    if bound or mirror_gib > node_gib:
        out.append(
            f"the mirror sweep is one task: {mirror_hours:.2f} h and {mirror_gib:.0f} GiB, the bound on speedup on "
            f"{len(bound)} of {len(clusters)} clusters: split it as the heights are"
        )
    for c in clusters:
        if c["node_peak_gib"][0] > node_gib:
            out.append(
                f"on {c['cpus']:,} CPUs a node needs {_tri(c['node_peak_gib'])} GiB, past {node_gib:.0f}: "
                f"its object store's share is {c['node_store_gib'][0]:.0f} GiB; spill to a fast disk, or phases "
                "of several steps (each ships the whole generation)"
            )
    for c in clusters:
        if c["critical_path_overhead_s"][0] > c["critical_path_s"][0] / 2:
            out.append(
                f"on {c['cpus']:,} CPUs a phase makes {c['objects_a_phase'][0]:,} bucket objects, and the tasks' "
                f"and buckets' own cost is {c['critical_path_overhead_s'][0]:.0f} s of the costliest height's "
                f"{c['critical_path_s'][0]:.0f}: a shuffle of two levels (tasks grouped under fewer buckets)"
            )
    last = max(m.fixed)
    bits = math.log2(m.fixed[last]) + (n - last) * math.log2(m.fixed[last] / m.fixed[last - 1])
    verdict = "within" if bits < COUNT_BITS - 8 else "near or past"
    out.append(f"counts: fixed({n}) about 2^{bits:.0f}, {verdict} the exact arithmetic's 2^{COUNT_BITS}")
    ref = m.reflection
    ref_bits = math.log2(ref[last]) + (n - last) * math.log2(ref[last] / ref[last - 2]) / 2  # A_ref alternates
    verdict = "within" if ref_bits < 62 else "past"
    out.append(f"the mirror sweep's int64 counts: A_ref({n}) about 2^{ref_bits:.0f}, {verdict} 2^63")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, help="a run's --out folder, read only: its committed heights count too")
    parser.add_argument("--committed", type=Path, default=COMMITTED, help="the committed table's folder")
    parser.add_argument("--cpus-per-node", type=int, default=16, help="CPUs of one node (default 16)")
    parser.add_argument(
        "--node-gib", type=float, default=64.0, help="a node's memory, past which a change is named (default 64)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if args.cpus_per_node < 1 or args.node_gib <= 0:
        parser.error("--cpus-per-node must be at least 1 and --node-gib positive")
    m = committed(args.committed)
    if args.store:
        try:
            m.store = store_figures(args.store)
        except ValueError as error:
            parser.error(str(error))
    fits = growths(m)
    result = {
        "growths": {name: growth_dict(g) for name, g in fits.items()},
        "step_cost": dict(zip(("a", "b", "worst_miss"), step_cost(m))),
        "split_step_us": split_step_us(m),
        "per_height": per_height(m),
        "store": {**m.store, "joins": m.store["max_n"] > m.last_n} if m.store else None,
        "projections": [project(m, fits, n, args.cpus_per_node, args.node_gib) for n in TARGETS],
        "cpus_per_node": args.cpus_per_node,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print_text(result)


def growth_dict(g: Growth) -> dict:
    return {
        "per_tile": g.per_tile,
        "low": g.low,
        "high": g.high,
        "worst_residual": g.worst_residual(),
        "points": [asdict(p) for p in g.points],
        "fitted": [g.fitted(p.n) for p in g.points],
    }


def _tri(x, fmt="{:,.0f}") -> str:
    """central (lowest-highest): each end of a range takes every input at one end of its own."""
    return f"{fmt.format(x[0])} ({fmt.format(min(x))}-{fmt.format(max(x))})"


def print_text(r: dict) -> None:
    _print_measured(r)
    for p in r["projections"]:
        _print_projection(p)


def _print_measured(r: dict) -> None:

    print("Growth per tile (least squares on the log; range: consecutive sizes, +-2 standard errors)")
    for name, g in r["growths"].items():
        points = ", ".join(f"{p['n']}: {p['value']:.4g}" for p in g["points"])
        print(
            f"  {name:15} {g['per_tile']:.3f} ({g['low']:.3f}-{g['high']:.3f}), the fit misses a point by "
            f"{g['worst_residual']:.1%} at most; measured {points}"
        )
    c = r["step_cost"]
    print(
        f"  a state-step's CPU at n = 56: {c['a'] * 1e6:.3f} + {c['b'] * 1e6:.3f} log10(generation) us, "
        f"missing a height by {c['worst_miss']:.0%} at most"
    )
    for n, us in r["split_step_us"].items():
        print(
            f"  a state-step's CPU split across tasks at n = {n}: {us:.3f} us (the heights' CPU, resumed parts included)"
        )
    print("Per height (committed run): CPU s, share, peak states, growth per tile from n = 48 of CPU and states")
    for h in r["per_height"]:
        if h["cpu"] >= 10:
            line = f"  h{h['height']:03d} {h['cpu']:8,.0f} {h['share']:6.1%} {h['peak_states']:12,}"
            if "cpu_per_tile" in h:
                line += f"  x{h['cpu_per_tile']:.2f} x{h['states_per_tile']:.2f}"
            if "steps_per_tile_after" in h:
                line += f"  state-steps to the store's n: x{h['steps_per_tile_after']:.3f} a tile"
            print(line)
    if r["store"]:
        s = r["store"]
        joins = "its figures join the fits" if s["joins"] else "not past the committed n: not fitted"
        print(f"Store n = {s['max_n']}: {len(s['heights'])} heights committed, complete: {s['complete']}; {joins}")
        for save in s["saves"]:
            print(
                f"  h{save['height']:03d} saved at column {save['column']}: {save['states']:,} states, "
                f"{save['bytes'] / save['states']:.0f} bytes a state on disk"
            )


def _print_projection(p: dict) -> None:
    print(f"\nn = {p['n']} (heights 1..{p['heights']}; central (low-high))")
    print(f"  heights' state-steps   {_tri(p['heights_state_steps'], '{:.3g}')}")
    measured = p["split_step_measured"]
    step = f"a split step {measured[1]:.2f} us as at n = {measured[0]}, " if measured else ""
    print(f"  heights' CPU-hours     {_tri(p['heights_cpu_hours'])} ({step}{p['step_us_split']:.2f} us at the low end)")
    print(f"  symmetric CPU-hours    {_tri(p['symmetric_cpu_hours'], '{:.2f}')}")
    print(f"  total CPU-hours        {_tri(p['total_cpu_hours'])}")
    print(f"  largest height's peak  {_tri(p['largest_height_peak_states'], '{:.3g}')} states")
    print(f"  ... whole in a process {_tri(p['largest_height_whole_gib'])} GiB")
    print(
        f"  costliest height       h{p['costliest_height']:03d}, "
        f"{_tri(p['costliest_share'], '{:.2f}')} of the heights' CPU"
    )
    print(
        f"  the mirror sweep       {_tri(p['mirror_hours'], '{:.2f}')} h in one task, "
        f"{_tri(p['mirror_gib'], '{:.1f}')} GiB (its memory assumed to grow as its CPU)"
    )
    print(f"  an unsplit column      {p['unsplit_column_s']:.2f} s at most")
    print(f"  a phase moves          {_tri(p['phase_gb_at_peak'])} GB at the largest generation")
    print(f"  all phases move        {_tri(p['moved_tb_in_all'])} TB")
    print()
    print(
        "  | CPUs | nodes | tasks | GiB a node | its tasks + store (all heights' store) | largest task s, share "
        "| costliest height's path s | speedup at most | wall h |"
    )
    print("  |---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k in p["clusters"]:
        print(
            f"  | {k['cpus']:,} | {k['nodes']} | {k['tasks_at_peak'][0]:,} | {_tri(k['node_peak_gib'])} "
            f"| {k['node_tasks_gib'][0]:.0f} + {k['node_store_gib'][0]:.0f} ({k['node_store_all_heights_gib'][0]:.0f}) "
            f"| {k['largest_task_s'][0]:,.0f}, {_tri(k['largest_task_share'], '{:.4f}')} "
            f"| {_tri(k['critical_path_s'])} | {_tri(k['speedup_bound'])} | {_tri(k['wall_hours'], '{:.2f}')} |"
        )
    print("  must change first:")
    for change in p["changes"]:
        print(f"    - {change}")


if __name__ == "__main__":
    main()
