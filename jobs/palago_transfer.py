"""``batchenum run palago --method transfer``: the count table by the transfer-matrix method.

One shard per bounding-box height H = 1..(N-1)//2 (solvers/palago/transfer.py sweeps every box of
that height and width >= H); a shard's spec is just (max_n, height).  The shards give fixed counts;
free counts and the stabiliser columns follow from them and the counts of symmetric creatures
by Burnside.  Those are shards too, run beside the heights rather than after them on the driver:
the creatures fixed by a reflection by a transfer matrix of their own on a half-plane
(solvers/palago/mirror.py), those fixed by a rotation (or by all of D3) by symmetric.py's search,
one shard per symmetry group (a rotation group's in pieces past n = 52: ``rotation_parts``).
There is no search tree, so the nodes column is 0.
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from batchenum.jobs.palago_counts import (
    CHECKPOINT_INTERVAL,
    CREATURES,
    INT64_MAX_N,
    WIDE_CREATURE_COUNTS,
    WIDE_PARTIAL_COUNTS,
    PalagoCountsJob,
    check_identities,
    stored_counts,
    summary_head,
    summed_counts,
)
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Column, Param, PlanContext, Shard, ShardContext, ShardResult, TableSpec
from batchenum.solvers.palago.symmetric import KINDS as SYMMETRIC_KINDS

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd

__all__ = [
    "PalagoTransferJob",
    "ShardCost",
    "TasksCost",
    "BucketIndex",
    "SplitSweep",
    "complete",
    "resumed_stats",
    "height_state_steps",
    "rotation_group_seconds",
    "rotation_parts",
    "sweep_height",
]

# The largest rotation group's search: its CPU seconds at n = 48 and growth per tile, measured once
# (docs/benchmarks.md#palago-symmetric-shards); rotation_parts cuts it into pieces of
# SYMMETRIC_PIECE_SECONDS.  These shape the plan: how many pieces ("parts", in the spec of every
# s-rotation-G-P shard) a rotation group gets at max_n.  They are constants, not parameters, since
# they cut the work and change no count; changing one recomputes the rotation shards whose parts
# change, and keeps every other (docs/design.md#constants-that-shape-a-plan).
ROTATION_GROUP_SECONDS_AT_48 = 4.0
ROTATION_GROUP_GROWTH = 1.73
SYMMETRIC_PIECE_SECONDS = 60.0

# What a shard is expected to cost, read only by the run's estimate of the time left
# (Job.shard_work; docs/palago_transfer.md, "What a shard is expected to cost"): a height's
# state-steps at n = 56 (results/transfer/palago/cost.md), and how that curve moves with n. Below its
# peak a height h at n costs what h - 0.2 (n - 56) cost at 56, above it h - 0.32 (n - 56), times
# 1.377 a tile: fitted on the heights of n = 36, 44 and 60 (h008-h014) of more than 1e5 state-steps,
# each height's cost within 0.9-1.1x at n = 44 and 60, the sums 0.97x (n = 44) and 1.22x (n = 36).
HEIGHT_STATE_STEPS_AT_56 = (
    28, 314, 1729, 7800, 33656, 144294, 618437, 2644888, 11239252, 47196185, 191216968, 659887227,
    1597966320, 2563481302, 2953634749, 2642593300, 1916249499, 1152786659, 585436364, 254950487,
    95467236, 30490022, 8622034, 2076122, 350348, 49877, 5488,
)  # fmt: skip
HEIGHT_SHIFT_PER_TILE = (0.20, 0.32)  # below the peak, above it
COST_GROWTH_PER_TILE = 1.377
STATE_STEP_SECONDS = 0.6e-6  # one process's sweep at n = 56 on the 2-core VM: 0.59 us a state-step
# A symmetric shard's CPU seconds at n = 60 (cost.md: the reflection's sweep, one rotation group's
# search summed over its pieces, one full group's) and its growth a tile from n = 56, which gives
# n = 56's figures back (47.0, 35.4, 0.044 s).  The rotation search grew 1.31 a tile from n = 48
# to 56 and 1.76 from 56 to 60: the last is the one to project with.
SYMMETRIC_SECONDS_AT_60 = {"reflection": (111.1, 1.24), "rotation": (342.1, 1.76), "full": (0.070, 1.12)}
_LOG_STEPS_AT_56 = np.log(np.array(HEIGHT_STATE_STEPS_AT_56, dtype=np.float64))
_PEAK_AT_56 = int(_LOG_STEPS_AT_56.argmax()) + 1

# From this size on the largest heights hold more than TASK_STATES states (2.35 million at n = 48,
# by the 1.335x a tile between n = 40 and 56): their shards split across Ray tasks, and must not
# run whole in the driver's threads (Job.splits_on_ray).
HEIGHTS_SPLIT_FROM_N = 48

SYMMETRIC_COUNTS = TableSpec(
    "symmetric_counts", tuple(Column(name, "int64") for name in ("n", *SYMMETRIC_KINDS)), sort=("n",)
)


class PalagoTransferJob(PalagoCountsJob):
    """Creature counts up to ``max_n`` by the transfer-matrix method: one shard per bounding-box
    height, counts only (no catalogue, no search nodes)."""

    method = Param(str, default="transfer", choices=("transfer",), help="the transfer-matrix method")
    shard_tables = ("partial_counts", "symmetric_counts")
    piece_states: int | None = None  # fewest states per such task; None: the solver's PIECE_STATES
    task_states: int | None = None  # most states per such task; None: the solver's TASK_STATES
    symmetric_piece_seconds = SYMMETRIC_PIECE_SECONDS  # CPU a piece of a rotation group's search gets

    def __init__(self, *args: Any, wide: bool = False, **params: Any):
        super().__init__(*args, **params)
        # a height's sweep is saved this often (ShardContext.checkpoint)
        self.checkpoint_interval = self.checkpoint_interval or CHECKPOINT_INTERVAL
        # exact decimal strings past INT64_MAX_N (jobs/palago_counts.py), int64 columns as before up to it
        self.wide = wide or self.max_n > INT64_MAX_N
        self.tables = (
            *((WIDE_PARTIAL_COUNTS, WIDE_CREATURE_COUNTS, CREATURES) if self.wide else self.tables),
            SYMMETRIC_COUNTS,
        )

    def extra_params(self) -> dict:
        return {"counts": "decimal strings"} if self.wide else {}

    def plan(self, context: PlanContext) -> list[Shard]:
        from batchenum.solvers.palago.symmetric import symmetric_parts
        from batchenum.solvers.palago.transfer import max_height

        # at least one height, so that n = 1, 2 (no creature, no height worth sweeping) still get rows
        run, wide = {"method": "transfer", "max_n": self.max_n}, {"wide": True} if self.wide else {}
        heights = [
            Shard(f"h{height:03d}", {**run, "height": height, **wide})
            for height in range(1, max(1, max_height(self.max_n)) + 1)
        ]
        # the reflection by the half-plane sweep (faster than its search), the rotations by the
        # search (docs/benchmarks.md#palago-symmetric-shards)
        mirror = [Shard("s-reflection", {**run, "symmetric": "reflection", "sweep": "half-plane", **wide})]
        pieces = symmetric_parts(1, rotation_parts(self.max_n, self.symmetric_piece_seconds))
        searched = [
            Shard(
                f"s-{piece.kind}-{piece.group}-{piece.part}",
                {
                    **run,
                    "symmetric": piece.kind,
                    "group": piece.group,
                    "part": piece.part,
                    "parts": piece.parts,
                    **wide,
                },
            )
            for piece in pieces
            if piece.kind != "reflection"
        ]
        return heights + mirror + searched

    def shard_work(self, shard: Shard) -> float:
        """Expected CPU seconds: a height's by its projected state-steps, a symmetric shard's by its
        kind's cost at n = 60 (a group's shared by its pieces)."""
        spec, max_n = shard.spec, shard.spec["max_n"]
        if "height" in spec:
            return height_state_steps(spec["height"], max_n) * STATE_STEP_SECONDS
        seconds, growth = SYMMETRIC_SECONDS_AT_60[spec["symmetric"]]
        return seconds * growth ** (max_n - 60) / spec.get("parts", 1)

    def splits_on_ray(self, shard: Shard) -> bool:
        return "height" in shard.spec and self.max_n >= HEIGHTS_SPLIT_FROM_N

    def run_shard(self, shard: Shard, context: ShardContext | None = None) -> ShardResult:
        """One height's sweep (resumed from its checkpoint's last save and saved as it goes; its
        large columns split over the context's tasks), or one piece of the symmetric counts."""
        if "symmetric" in shard.spec:
            return self._symmetric_shard(shard.spec)
        return self._height_shard(shard, context)

    def _symmetric_shard(self, spec: Mapping[str, Any]) -> ShardResult:
        from batchenum.solvers.palago.mirror import reflection_counts
        from batchenum.solvers.palago.symmetric import SymmetricPart, count_symmetric_part

        max_n = spec["max_n"]
        with ShardCost() as cost:
            if "sweep" in spec:
                counts = reflection_counts(max_n)
            else:
                counts, _ = count_symmetric_part(
                    max_n, SymmetricPart(spec["symmetric"], spec["group"], spec["part"], spec["parts"])
                )
        zeros = [0] * max_n
        symmetric = {
            "n": list(range(1, max_n + 1)),
            **{kind: counts[1:].tolist() if kind == spec["symmetric"] else zeros for kind in SYMMETRIC_KINDS},
        }
        return ShardResult({"symmetric_counts": symmetric}, stats=cost.stats())

    def _height_shard(self, shard: Shard, context: ShardContext | None) -> ShardResult:
        max_n = shard.spec["max_n"]
        options: dict = {}
        resumed = np.zeros(2, np.int64)
        if context is not None:  # called by hand: no checkpoint, nothing split
            tasks, checkpoint = context.tasks, context.checkpoint  # in this process tasks.cpus is 1: nothing is split
            resume = checkpoint.load()
            resumed = resumed_stats(resume) if resume is not None else resumed
            options = {
                "tasks": tasks,
                "parts": tasks.cpus,
                "piece_states": self.piece_states,
                "task_states": self.task_states,
                "resume": resume,
                "checkpoint": checkpoint,
                "save_every": self.checkpoint_interval,
            }
        sweep, tasks_cost = np.zeros(2, np.int64), TasksCost()
        with ShardCost() as cost:
            fixed = sweep_height(shard.spec["height"], max_n, stats=sweep, tasks_cost=tasks_cost, **options)[
                1:
            ].tolist()
        zeros = [0] * max_n
        if shard.spec.get("wide"):
            fixed, zeros = [str(x) for x in fixed], ["0"] * max_n  # type: ignore[list-item]  # wide: strings
        partial = {
            "n": list(range(1, max_n + 1)),
            "free": zeros,
            "fixed": fixed,
            **{f"free_stabiliser_{s}": zeros for s in (1, 2, 3, 6)},
            "stabiliser_sum": zeros,
            "nodes": zeros,
        }
        stats = {
            **cost.stats(),
            "cpu_ms": cost.cpu_ms + tasks_cost.cpu_ms,  # the shard's thread and its tasks, if split
            **tasks_cost.split_stats(),
            "peak_states": int(sweep[0]),
            "state_steps": int(sweep[1]),
            "state_steps_resumed": int(resumed[1]),
        }
        return ShardResult({"partial_counts": partial}, stats=stats)

    @classmethod
    def warm(cls, scratch: str) -> None:
        """The sweep's kernels, the symmetric searches', and those of a height split across tasks
        (merge, buckets), which run_shard uses only on Ray."""
        from batchenum.pipeline.tasks import InProcessTasks
        from batchenum.solvers.palago.symmetric import symmetric_counts

        job = cls(8)
        for shard in job.plan(PlanContext()):
            job.run_shard(shard)
        symmetric_counts(8)
        sweep_height(4, 12, tasks=InProcessTasks(), parts=2, piece_states=2)

    def finalize(self, tables: dict, out) -> dict:
        # free and stabilisers from fixed + symmetric, in Python ints
        partial, symmetric = tables["partial_counts"].to_pandas(), tables["symmetric_counts"].to_pandas()
        counts = complete(summed_counts(partial, exact=True), symmetric)
        check_identities(counts)
        return {"creature_counts": stored_counts(counts, self.wide)}

    def summary(self, tables: dict, totals: dict) -> str:
        return summary_head(tables["creature_counts"]) + "transfer-matrix method"


# ------------------------------------------------------------------- one height across tasks
#
# A height's sweep (solvers/palago/transfer.py) advances a generation of fewer than 2 piece_states
# states in the height's own process; a larger one runs as tasks, phase by phase, whose buckets
# stay with the tasks (on Ray: objects in the object store, spilled to disk past its memory) from
# phase to phase and across column ends.  The height's process holds only the handles, the bucket
# sizes and the completed creatures.  A checkpoint is saved bucket by bucket: the tasks of the
# first phase after a column end each write the part they merged (Checkpoint.save_part), and the
# height's process then writes the small index naming them (docs/palago_transfer.md, section 6).


def sweep_height(
    height: int,
    max_n: int,
    stats: np.ndarray | None = None,
    tasks: Any = None,
    parts: int = 1,
    piece_states: int | None = None,
    task_states: int | None = None,
    resume: bytes | None = None,
    checkpoint: Any = None,
    save_every: float = CHECKPOINT_INTERVAL,
    tasks_cost: TasksCost | None = None,
) -> np.ndarray:
    """count_height's counts (exact ints, sizes 0..max_n), with its large columns split across
    ``tasks`` (pipeline/tasks.py) when ``parts`` >= 2: a generation of at least 2 ``piece_states``
    states (default PIECE_STATES) runs as ``parts`` tasks a phase or more, each of at least
    ``piece_states`` states and at most ``task_states`` (default TASK_STATES) once there are more.  ``checkpoint`` (pipeline/checkpoint.py's Checkpoint) is saved every
    ``save_every`` seconds at a column's end, whole in this process or, split, bucket by bucket;
    ``resume``: what it last saved, either kind.  stats (int64[2]) as count_height's; split, stats[0]
    is an upper bound on the peak (the sum of the tasks' peaks); ``tasks_cost`` adds up what the
    split tasks cost their processes."""
    from batchenum.solvers.palago.transfer import (
        PIECE_STATES,
        TASK_STATES,
        Saver,
        SweepState,
        advance_column,
        exact_counts,
    )

    sweep = (height, max_n, True, 3)
    stats = np.zeros(2, np.int64) if stats is None else stats
    piece_states = PIECE_STATES if piece_states is None else piece_states
    task_states = TASK_STATES if task_states is None else task_states
    if piece_states < 1 or task_states < 1:
        raise ValueError(f"piece_states and task_states must be at least 1, not {piece_states}, {task_states}")
    saver = Saver(_whole_saver(checkpoint, sweep), save_every, sweep)
    sizes = TaskSizes(parts, piece_states, task_states)
    tasks_cost = TasksCost() if tasks_cost is None else tasks_cost
    split = (
        SplitSweep(sweep, tasks, sizes, checkpoint, saver, stats, tasks_cost)
        if tasks is not None and parts >= 2
        else None
    )
    if resume is not None and BucketIndex.holds(resume):
        index = BucketIndex.from_bytes(resume, sweep)
        stats[:2] += index.stats
        state = split.resume(index) if split is not None else index.gathered(checkpoint, sweep)
    else:
        state = SweepState.start(max_n) if resume is None else SweepState.from_bytes(resume, sweep)
        stats[:2] += state.stats
    spare: tuple | None = None
    while state.count > 0:
        if split is not None and sizes.tasks(state.count) >= 2:
            state = split.run(state)
            continue
        state, spare = advance_column(sweep, state, stats, spare)
        saver.maybe(state)
    return exact_counts(state.done_w, state.done_p, state.done_f)


def _whole_saver(checkpoint: Any, sweep: tuple):
    """Saves a generation held whole in this process; the parts of an earlier split save go."""
    if checkpoint is None:
        return None

    def save(data: bytes, progress: str) -> None:
        checkpoint.save(data, progress, share_done(sweep, int(resumed_stats(data)[1])))
        checkpoint.remove_parts()

    return save


def share_done(sweep: tuple, processed: int) -> float:
    """How far a height's sweep is, for the run's estimate: its state-steps processed over those
    the cost model expects, at most 0.99 (a shard is done only once committed)."""
    height, max_n = sweep[0], sweep[1]
    return min(0.99, processed / max(1.0, height_state_steps(height, max_n)))


def resumed_stats(data: bytes) -> np.ndarray:
    """The stats (peak states, states processed) a save holds, whole or split: the part of a
    resumed sweep's stats an earlier process computed."""
    from batchenum.solvers.palago.transfer import saved_stats

    return BucketIndex.from_bytes(data).stats if BucketIndex.holds(data) else saved_stats(data)


@dataclass
class BucketIndex:
    """A split save: the generation before column ``c`` in the parts ``names`` (each written by
    the task that merged it), cut by the signature of the phase of rows ``steps`` (so a task may
    take any of them together), ``rows`` states in all; and what the height's process holds, the
    completed creatures and the stats, as at that column's end."""

    c: int
    steps: tuple[int, int]
    names: tuple[str, ...]
    rows: int
    done_w: np.ndarray
    done_p: np.ndarray
    done_f: np.ndarray
    stats: np.ndarray

    @staticmethod
    def holds(data: bytes) -> bool:
        with np.load(io.BytesIO(data)) as saved:
            return "names" in saved.files

    def to_bytes(self, sweep: tuple) -> bytes:
        buffer = io.BytesIO()
        np.savez(
            buffer,
            sweep=np.array(sweep, np.int64),
            scalars=np.array([self.c, *self.steps, self.rows], np.int64),
            names=np.array(self.names),
            done_w=self.done_w,
            done_p=self.done_p,
            done_f=self.done_f,
            stats=self.stats,
        )
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, sweep: tuple | None = None) -> BucketIndex:
        with np.load(io.BytesIO(data)) as saved:
            if sweep is not None and tuple(saved["sweep"].tolist()) != sweep:
                raise ValueError(f"the saved sweep is of {tuple(saved['sweep'].tolist())}, not {sweep}")
            c, a, b, rows = saved["scalars"].tolist()
            return cls(
                c,
                (a, b),
                tuple(str(name) for name in saved["names"]),
                rows,
                **{name: saved[name].copy() for name in ("done_w", "done_p", "done_f", "stats")},
            )

    def gathered(self, checkpoint: Any, sweep: tuple):
        """The saved generation in this process, whole (a split save resumed where nothing splits)."""
        from batchenum.solvers.palago.transfer import SweepState, merge_generations

        live = merge_generations([_loaded_part(checkpoint, name) for name in self.names], sweep[1] + 1)
        return SweepState(
            (live.heads, live.pool), live.rows, self.c, self.done_w, self.done_p, self.done_f, self.stats.copy()
        )


def _loaded_part(checkpoint: Any, name: str):
    from batchenum.solvers.palago.transfer import Generation

    return Generation.read(checkpoint.load_part(name))


def advance_saving(checkpoint: Any, name: str, sweep: tuple, c: int, rows, following, buckets: int, *pieces):
    """A task of the first phase after a column end that saves: merge ``pieces``, commit the
    merged generation as the checkpoint's part ``name``, then advance it as advance_piece does."""
    from batchenum.solvers.palago.transfer import advance_generation, merge_generations

    merged = [merge_generations(list(pieces), sweep[1] + 1)]  # handed over: freed once swept
    checkpoint.save_part(name, merged[0].write, f"column {c}, {merged[0].rows:,} states")
    return advance_generation(sweep, c, rows, following, buckets, merged)


def advance_loaded(checkpoint: Any, names: list[str], sweep: tuple, c: int, rows, following, buckets: int):
    """A task of the first phase of a resumed split save: its parts read here, merged, advanced."""
    from batchenum.solvers.palago.transfer import advance_generation, merged_rows

    pieces = [_loaded_part(checkpoint, name) for name in names]
    merged = pieces if len(pieces) == 1 else [merged_rows(pieces, sweep[1] + 1)]  # handed over: freed once swept
    del pieces
    return advance_generation(sweep, c, rows, following, buckets, merged)


def costed(fn, *args) -> tuple:
    """``fn(*args)`` (a summary and buckets), with what it cost this process after the summary."""
    with ShardCost() as cost:
        summary, *buckets = fn(*args)
    return (summary, cost.stats(), *buckets)


@dataclass
class TasksCost:
    """What the tasks of a split height cost: their CPU, their number, the largest peak resident
    memory of a process while it ran one (its VmHWM, reset as each starts)."""

    tasks: int = 0
    cpu_ms: int = 0
    peak_rss_bytes: int = 0

    def add(self, costs: list[dict]) -> None:
        self.tasks += len(costs)
        self.cpu_ms += sum(cost["cpu_ms"] for cost in costs)
        self.peak_rss_bytes = max([self.peak_rss_bytes, *(cost.get("peak_rss_bytes", 0) for cost in costs)])

    def split_stats(self) -> dict[str, int]:
        """A split shard's stats: its tasks' number and peak (none if it was not split)."""
        return {"split_tasks": self.tasks, "task_peak_rss_bytes": self.peak_rss_bytes} if self.tasks else {}


@dataclass
class _PendingSave:
    """A split save under way: its parts are written by the next phase's tasks; the index, from
    what the height held at the column's end, once they all have."""

    index: BucketIndex
    started: float


@dataclass(frozen=True)
class TaskSizes:
    """How a split height sizes its tasks: one per CPU (``parts``) once each gets ``piece_states``
    states, more once one would get more than ``task_states``."""

    parts: int
    piece_states: int
    task_states: int

    def tasks(self, states: int) -> int:
        from batchenum.solvers.palago.transfer import tasks_for

        return tasks_for(states, self.parts, self.piece_states, self.task_states)

    def buckets(self, tasks: int, states: int) -> int:
        """Buckets each of ``tasks`` tasks cuts its output of a phase of ``states`` states into:
        room for the next phase to use twice the tasks (twice those the states alone need)."""
        return max(min(self.parts, 2 * tasks), 2 * -(-states // self.task_states))


class SplitSweep:
    """The columns of one height advanced as tasks while the generation keeps at least 2
    piece_states states at a column's end; this process holds handles, never a generation."""

    def __init__(self, sweep, tasks, sizes: TaskSizes, checkpoint, saver, stats: np.ndarray, cost: TasksCost):
        self.sweep, self.tasks, self.sizes, self.cost = sweep, tasks, sizes, cost
        self.checkpoint, self.saver, self.stats = checkpoint, saver, stats

    def run(self, state):
        """Split ``state``'s generation (held here, small: it just passed 2 piece_states states)
        and advance it as tasks; returns the sweep gathered back (or finished)."""
        from batchenum.solvers.palago.transfer import next_phase, split_generation

        height = self.sweep[0]
        live = state.generation_rows()
        k = self.sizes.tasks(live.rows)
        steps = next_phase(height, height, live.rows, k)
        groups = [[piece] for piece in split_generation(live, k, height, steps)]
        return self._phases(state.without_rows(), steps, groups, live.rows)

    def resume(self, index: BucketIndex):
        """Continue a split save: the first phase's tasks read its parts, a few each if there are
        more parts than CPUs now (any union of them is exact: the parts are cut by signature)."""
        from batchenum.solvers.palago.transfer import SweepState, merge_generations

        k = max(1, min(max(self.sizes.parts, self.sizes.tasks(index.rows)), len(index.names)))
        groups = [[name for i, name in enumerate(index.names) if i * k // len(index.names) == t] for t in range(k)]
        nothing = merge_generations([], self.sweep[1] + 1)
        state = SweepState(
            (nothing.heads, nothing.pool), 0, index.c, index.done_w, index.done_p, index.done_f, index.stats.copy()
        )
        return self._phases(state, index.steps, groups, index.rows, loading=True)

    def _phases(self, state, steps, groups: list[list], rows: int, loading: bool = False):
        from batchenum.solvers.palago.transfer import next_phase

        height = self.sweep[0]
        saving: _PendingSave | None = None
        while True:
            following = next_phase(height, steps[1], rows, len(groups))
            buckets = self.sizes.buckets(len(groups), rows)
            outputs = self._submit(state.c, steps, following, buckets, groups, loading, saving)
            loading = False
            summaries = self._finished(outputs, groups)
            if saving is not None:
                self._commit(saving)  # every part is written: the index last
                saving = None
            self._count(state, summaries)
            column_end = steps[1] == height
            state.c += column_end
            rows = sum(sum(piece.bucket_rows) for piece in summaries)
            k = max(1, min(buckets, self.sizes.tasks(rows)))  # a task per bucket at most
            if rows == 0 or (column_end and k < 2):
                return self._gathered(state, [output[2 + b] for b in range(buckets) for output in outputs])
            # task t of the next phase merges buckets b with b * k // buckets == t of every task
            groups = [
                [output[2 + b] for b in range(buckets) if b * k // buckets == t for output in outputs] for t in range(k)
            ]
            steps = following
            if column_end and self.saver.due():
                saving = self._pending(state, steps, k, rows)

    def _submit(self, c, steps, following, buckets, groups, loading: bool, saving: _PendingSave | None) -> list:
        from batchenum.solvers.palago.transfer import advance_piece

        phase = f"h{self.sweep[0]:03d} column {c} rows {steps[0]}-{steps[1] - 1}"
        outputs = []
        for t, group in enumerate(groups):
            name = f"{phase} part {t + 1}/{len(groups)}"
            common = (self.sweep, c, steps, following, buckets)
            if loading:
                call: tuple = (advance_loaded, self.checkpoint, group, *common)
            elif saving is not None:
                call = (advance_saving, self.checkpoint, saving.index.names[t], *common, *group)
            else:
                call = (advance_piece, *common, *group)
            outputs.append(self.tasks.submit(costed, *call, returns=buckets + 2, name=name))
        return outputs

    def _finished(self, outputs: list, groups: list[list]) -> list:
        """The phase's summaries, its tasks waited for in turn; each task's input buckets are let go
        once it is done (``groups[t]`` emptied), so the object store holds the inputs not yet swept
        and the outputs so far, about one generation, rather than the phase's inputs and outputs
        whole together."""
        summaries = []
        for t, output in enumerate(outputs):
            summary, cost = self.tasks.get(output[:2])
            groups[t] = []
            summaries.append(summary)
            self.cost.add([cost])
        return summaries

    def _count(self, state, summaries) -> None:
        """Add the phase's completed creatures and stats to the height's."""
        for piece in summaries:
            state.add_done(piece)
        peak, processed = sum(int(p.stats[0]) for p in summaries), sum(int(p.stats[1]) for p in summaries)
        self.stats[0], self.stats[1] = max(self.stats[0], peak), self.stats[1] + processed
        state.stats = np.array([max(state.stats[0], peak), state.stats[1] + processed], np.int64)

    def _pending(self, state, steps, k: int, rows: int) -> _PendingSave:
        """The save of the generation before column state.c, as the next phase's k tasks hold it."""
        names = tuple(f"c{state.c:04d}-{t + 1:04d}-of-{k:04d}" for t in range(k))
        done = (state.done_w.copy(), state.done_p.copy(), state.done_f.copy())
        index = BucketIndex(state.c, steps, names, rows, *done, state.stats.copy())
        return _PendingSave(index, time.monotonic())

    def _commit(self, saving: _PendingSave) -> None:
        index = saving.index
        progress = (
            f"column {index.c}, {index.rows:,} states in {len(index.names)} parts, {int(index.stats[1]):,} processed"
        )
        self.checkpoint.save(index.to_bytes(self.sweep), progress, share_done(self.sweep, int(index.stats[1])))
        self.checkpoint.remove_parts(keep=frozenset(index.names))
        self.saver.saved(saving.started)

    def _gathered(self, state, buckets: list):
        """The split generation (``buckets``: bucket 0 of every task, then bucket 1, ...), small now,
        merged here."""
        from batchenum.solvers.palago.transfer import SweepState, merge_generations

        live = merge_generations(self.tasks.get(buckets), self.sweep[1] + 1)
        return SweepState(
            (live.heads, live.pool), live.rows, state.c, state.done_w, state.done_p, state.done_f, state.stats
        )


class ShardCost:
    """What computing one shard cost this process, measured around it (``with ShardCost() as
    cost``): ``cpu_ms``, the CPU time of the calling thread (the sweep runs in it; the tasks a split
    height starts measure their own, TasksCost), ``peak_rss_bytes``, the process's
    resident high-water mark during the shard, and ``start_rss_bytes``, what it held resident when
    the shard started (the interpreter, numba, pyarrow: the peak minus it is the shard's own). The
    mark (VmHWM) is reset at the start by writing 5 to /proc/self/clear_refs, so it is this shard's
    peak, not the process's since it started; where the reset is refused (not Linux, or not
    allowed) no memory is recorded. Several shards computed at once in one process's threads
    share the mark."""

    def __enter__(self) -> ShardCost:
        self.start_rss = _status_bytes("VmRSS") if _reset_peak_rss() else None
        self.cpu_started = time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu_ms = round(1000 * (time.thread_time() - self.cpu_started))
        self.peak_rss: int | None = None
        if self.start_rss is not None:
            # The kernel's resident counters are per-CPU approximations and the mark is updated
            # lazily, so VmHWM can read a little below a VmRSS read before it (by 184 KiB on CI);
            # the shard's peak is at least what it held at its start.
            self.peak_rss = max(_status_bytes("VmHWM") or 0, self.start_rss)

    def stats(self) -> dict[str, int]:
        stats = {"cpu_ms": self.cpu_ms}
        if self.peak_rss is None or self.start_rss is None:
            return stats
        return {**stats, "peak_rss_bytes": self.peak_rss, "start_rss_bytes": self.start_rss}


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return _status_bytes("VmHWM") is not None
    except OSError:
        return False


def _status_bytes(field: str) -> int | None:
    """A memory field of /proc/self/status (VmHWM, VmRSS) in bytes, or None if there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def height_state_steps(height: int, max_n: int) -> float:
    """The state-steps of ``height``'s sweep at ``max_n`` projected from n = 56's (the constants above)."""
    rising, falling = HEIGHT_SHIFT_PER_TILE
    at_56 = height - rising * (max_n - 56)
    if at_56 > _PEAK_AT_56:
        at_56 = max(_PEAK_AT_56, height - falling * (max_n - 56))
    heights = np.arange(1, len(_LOG_STEPS_AT_56) + 1)
    return float(np.exp(np.interp(at_56, heights, _LOG_STEPS_AT_56)) * COST_GROWTH_PER_TILE ** (max_n - 56))


def rotation_group_seconds(max_n: int) -> float:
    """Projected CPU seconds of the largest rotation group's search at ``max_n``."""
    return ROTATION_GROUP_SECONDS_AT_48 * ROTATION_GROUP_GROWTH ** (max_n - 48)


def rotation_parts(max_n: int, piece_seconds: float = SYMMETRIC_PIECE_SECONDS) -> int:
    """Pieces of each rotation group's search: about ``piece_seconds`` of CPU each (by default a
    minute: 1 piece up to n = 52), so that on a cluster no symmetric piece outlasts the heights
    (docs/benchmarks.md#palago-symmetric-shards) and a killed run loses little."""
    return max(1, math.ceil(rotation_group_seconds(max_n) / piece_seconds))


def complete(counts: pd.DataFrame, symmetric: pd.DataFrame) -> pd.DataFrame:
    """Fill the free and stabiliser columns of a table holding summed fixed counts, from the
    symmetric shards' rows (n, reflection, rotation, full; summed per n here)."""
    from batchenum.solvers.palago.symmetric import SymmetricCounts, stabiliser_columns

    max_n = int(counts.n.max())
    n = counts.n.to_numpy()
    fixed = np.zeros(max_n + 1, dtype=object)
    fixed[n] = [int(x) for x in counts.fixed]
    summed = symmetric.groupby("n").sum().reindex(range(max_n + 1), fill_value=0)
    reflection, rotation, full = (summed[kind].to_numpy(dtype=np.int64) for kind in SYMMETRIC_KINDS)
    sym = SymmetricCounts(reflection, rotation, full, nodes=0)
    try:
        columns = stabiliser_columns(fixed, sym)
    except ValueError as error:
        raise PipelineError(f"internal error: {error}") from None
    counts = counts.copy()
    for name, column in columns.items():
        counts[name] = column[n]
    counts["stabiliser_sum"] = 6 * counts["free"]
    return counts
