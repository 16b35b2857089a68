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

import math
import time
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

__all__ = ["PalagoTransferJob", "ShardCost", "complete", "rotation_group_seconds", "rotation_parts"]

# The largest rotation group's search: its CPU seconds at n = 48 and growth per tile, measured once
# (docs/benchmarks.md#palago-symmetric-shards); rotation_parts cuts it into pieces of
# SYMMETRIC_PIECE_SECONDS.  These shape the plan: how many pieces ("parts", in the spec of every
# s-rotation-G-P shard) a rotation group gets at max_n.  They are constants, not parameters, since
# they cut the work and change no count; changing one recomputes the rotation shards whose parts
# change, and keeps every other (docs/design.md#constants-that-shape-a-plan).
ROTATION_GROUP_SECONDS_AT_48 = 4.0
ROTATION_GROUP_GROWTH = 1.73
SYMMETRIC_PIECE_SECONDS = 60.0

SYMMETRIC_COUNTS = TableSpec(
    "symmetric_counts", tuple(Column(name, "int64") for name in ("n", *SYMMETRIC_KINDS)), sort=("n",)
)


class PalagoTransferJob(PalagoCountsJob):
    """Creature counts up to ``max_n`` by the transfer-matrix method: one shard per bounding-box
    height, counts only (no catalogue, no search nodes)."""

    method = Param(str, default="transfer", choices=("transfer",), recorded=False, help="the transfer-matrix method")
    shard_tables = ("partial_counts", "symmetric_counts")
    piece_states: int | None = None  # fewest states per such task; None: the solver's PIECE_STATES
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

    def params(self) -> dict:
        return {**super().params(), "counts": "decimal strings"} if self.wide else super().params()

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
        from batchenum.solvers.palago.transfer import count_height, saved_stats

        max_n = shard.spec["max_n"]
        options: dict = {}
        resumed = np.zeros(2, np.int64)
        if context is not None:  # called by hand: no checkpoint, nothing split
            tasks, checkpoint = context.tasks, context.checkpoint  # in this process tasks.cpus is 1: nothing is split
            resume = checkpoint.load()
            resumed = saved_stats(resume) if resume is not None else resumed
            options = {
                "tasks": tasks,
                "parts": tasks.cpus,
                "piece_states": self.piece_states,
                "resume": resume,
                "save": checkpoint.save,
                "save_every": self.checkpoint_interval,
            }
        sweep = np.zeros(2, np.int64)
        with ShardCost() as cost:
            fixed = count_height(shard.spec["height"], max_n, stats=sweep, **options)[1:].tolist()  # exact ints
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
        from batchenum.solvers.palago.transfer import count_height

        job = cls(8)
        for shard in job.plan(PlanContext()):
            job.run_shard(shard)
        symmetric_counts(8)
        count_height(4, 12, tasks=InProcessTasks(), parts=2, piece_states=2)

    def finalize(self, tables: dict, out) -> dict:
        # free and stabilisers from fixed + symmetric, in Python ints
        partial, symmetric = tables["partial_counts"].to_pandas(), tables["symmetric_counts"].to_pandas()
        counts = complete(summed_counts(partial, exact=True), symmetric)
        check_identities(counts)
        return {"creature_counts": stored_counts(counts, self.wide)}

    def summary(self, tables: dict, totals: dict) -> str:
        return summary_head(tables["creature_counts"]) + "transfer-matrix method"


class ShardCost:
    """What computing one shard cost this process, measured around it (``with ShardCost() as
    cost``): ``cpu_ms``, the CPU time of the calling thread (the sweep runs in it; tasks a split
    height starts run in other processes and are not counted), ``peak_rss_bytes``, the process's
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
        self.peak_rss = _status_bytes("VmHWM") if self.start_rss is not None else None

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
