"""Palago creature counts (and catalogue) as a pipeline job.

The search tree is cut at a fixed depth and its prefixes are packed into shards by estimated work:
the nodes below each prefix in the tree of a smaller N (``ESTIMATE_DROP`` fewer tiles, a few hundred
times cheaper than the real search), heaviest first onto the lightest shard.  A shard's spec is
(max_n, depth, k, K) and the indices of its prefixes: workers recompute the frontier themselves,
which takes milliseconds.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from batchenum.jobs.palago_counts import (
    BFILE_COLUMNS,
    CHECKPOINT_INTERVAL,
    CREATURES,
    INT64_MAX_N,
    STABILISER_ORDERS,
    WIDE_CREATURE_COUNTS,
    PalagoCountsJob,
    check_identities,
    stored_counts,
    summary_head,
    summed_counts,
)
from batchenum.jobs.palago_transfer import PalagoTransferJob
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import PlanContext, Shard, ShardContext, ShardResult
from batchenum.pipeline.params import resolve_params

if TYPE_CHECKING:  # pandas is for the driver's tables; workers need not pay its import
    import pandas as pd

__all__ = [
    "PalagoJob",
    "JOB",
    "BFILE_COLUMNS",
    "CHECKPOINT_INTERVAL",
    "CREATURES",
    "INT64_MAX_N",
    "WIDE_CREATURE_COUNTS",
    "stored_counts",
    "summed_counts",
]

# (depth, prefixes at that depth for n >= 24): deeper cuts for more shards.  A shard recomputes the
# frontier itself, which costs more the deeper the cut (docs/benchmarks.md#palago-direct-search-plan).
SPLIT_DEPTHS = ((10, 3_820), (12, 28_984), (14, 219_877))
# Work is estimated in the tree of max_n - ESTIMATE_DROP: close enough to the real node counts for a
# small part of their cost (docs/benchmarks.md#palago-direct-search-plan).
# Both shape the plan's shards (their prefixes): docs/design.md#constants-that-shape-a-plan.
ESTIMATE_DROP = 6


class PalagoJob(PalagoCountsJob):
    """Count Palago creatures of every size up to N.

    By the anchored search: creature counts up to ``max_n``, cut into ``shards`` shards of search-
    tree prefixes (None: by the CPUs the run will have), and the catalogue of every free creature up
    to ``catalogue_max_n``.  ``batchenum run palago --method transfer`` runs ``PalagoTransferJob``
    instead (``create``).
    """

    def __new__(cls, *args: Any, **params: Any) -> Any:
        """``PalagoJob(..., method="transfer")`` is the transfer-matrix job (``PalagoTransferJob``),
        so every declared parameter works from the constructor as from the command line."""
        if args or params:
            values = resolve_params(cls, args, params, cls.check_params)
            if values["method"] == "transfer":
                return PalagoTransferJob(**values)
        return super().__new__(cls)

    def __init__(self, *args: Any, **params: Any):
        super().__init__(*args, **params)
        catalogue_max_n = self.catalogue_max_n
        self.shard_tables = ("partial_counts", "creatures") if catalogue_max_n else ("partial_counts",)
        # the catalogue is written one n at a time, never all in the driver's memory
        self.streamed_tables = ("creatures",) if catalogue_max_n else ()

    def shard_count(self, cpus: int | None) -> int:
        """--shards, else 4 for small N, else at least 4 per CPU of the run (and at least 32)."""
        if self.shards:
            return self.shards
        return 4 if self.max_n < 18 else max(32, 4 * (cpus or 1))

    def plan(self, context: PlanContext) -> list[Shard]:
        """Shards of prefixes of the tree cut at a depth that leaves about 20 prefixes or more per
        shard, packed by estimated work (``packed_prefixes``)."""
        count = self.shard_count(context.cpus)
        depth = next((d for d, prefixes in SPLIT_DEPTHS if prefixes >= 20 * count), SPLIT_DEPTHS[-1][0])
        shards = [
            Shard(
                f"s{index:04d}",
                {
                    "max_n": self.max_n,
                    "depth": depth,
                    "index": index,
                    "count": count,
                    "catalogue_max_n": self.catalogue_max_n,
                    "prefixes": prefixes,
                },
            )
            for index, prefixes in enumerate(packed_prefixes(self.max_n, depth, count))
        ]
        _compile_the_merges_kernels()  # with the planning's, in one phase: none during the merge
        return shards

    @classmethod
    def create(cls, **params: Any) -> PalagoCountsJob:
        """The job ``batchenum run palago`` runs: this one, or ``PalagoTransferJob`` for
        ``method="transfer"`` (counts only; its heights save their sweep every
        ``checkpoint_interval`` seconds, default ``CHECKPOINT_INTERVAL``)."""
        return cls(**params)

    @classmethod
    def warm(cls, scratch: str) -> None:
        """The search's kernels (with the catalogue), the merge's (in ``plan``), and the transfer
        method's."""
        job = cls(10, catalogue_max_n=10, shards=1)
        for shard in job.plan(PlanContext()):
            job.run_shard(shard)
        PalagoTransferJob.warm(scratch)

    def run_shard(self, shard: Shard, context: ShardContext | None = None) -> ShardResult:
        from batchenum.solvers.palago import SearchCounts, count_creatures, frontier
        from batchenum.solvers.palago.catalogue import catalogue_text

        spec = shard.spec
        trunk = SearchCounts.zeros(spec["max_n"])
        cut = frontier(spec["max_n"], spec["depth"], trunk)
        prefixes = [cut[k] for k in spec["prefixes"]]
        counts, catalogue = count_creatures(spec["max_n"], prefixes, spec["catalogue_max_n"])
        if spec["index"] == 0:
            counts += trunk  # the nodes above the cut, once, so the nodes column is the whole search's
        sizes = range(1, spec["max_n"] + 1)
        partial = {
            "n": list(sizes),
            "free": counts.free[1:].tolist(),
            "fixed": counts.fixed[1:].tolist(),
            **{f"free_stabiliser_{s}": counts.by_stabiliser[1:, k].tolist() for k, s in enumerate(STABILISER_ORDERS)},
            "stabiliser_sum": counts.stabiliser_sum[1:].tolist(),
            "nodes": counts.nodes[1:].tolist(),
        }
        outputs = {"partial_counts": partial}
        if spec["catalogue_max_n"]:
            # key, tiles and sum text come packed from compiled code: no Python object per creature
            text = catalogue_text(catalogue)
            outputs["creatures"] = {
                "n": catalogue.sizes,
                "key": _string_array(text.key_data, text.key_offsets),
                "stabiliser": catalogue.stabilisers,
                "tiles": _string_array(text.tiles_data, text.tiles_offsets),
                "sum": _string_array(text.sum_data, text.sum_offsets),
            }
        return ShardResult(outputs)

    def check_totals(self, tables: dict, totals: dict) -> None:
        """The catalogue holds exactly the free creatures the counts say (checked before writing)."""
        if self.catalogue_max_n:
            partial = tables["partial_counts"].to_pandas()  # a few rows per shard
            expected = int(partial.loc[partial.n <= self.catalogue_max_n, "free"].sum())
            if len(tables["creatures"]) != expected:
                raise PipelineError(f"catalogue holds {len(tables['creatures'])} creatures, the counts say {expected}")

    def finalize(self, tables: dict, out) -> dict:
        counts = summed_counts(tables["partial_counts"].to_pandas())
        check_identities(counts)
        _check_symmetric(counts)
        return {"creature_counts": counts}

    def summary(self, tables: dict, totals: dict) -> str:
        counts = tables["creature_counts"]
        line = summary_head(counts) + f"{int(counts.nodes.sum()):,} search nodes"
        if "creatures" in tables:
            line += f"; catalogue of {len(tables['creatures'])} creatures up to n = {self.catalogue_max_n}"
        return line


def packed_prefixes(max_n: int, depth: int, count: int) -> list[list[int]]:
    """The frontier of the tree cut at ``depth``, dealt into ``count`` shards by estimated work:
    longest-processing-time-first (heaviest prefix onto the least loaded shard, ties to the lower
    index), so shard k's list of prefix indices is the same on every run and every node.  The
    estimate is ``estimated_work``; it brings the heaviest shard close to the mean
    (docs/benchmarks.md#palago-direct-search-plan)."""
    import heapq

    from batchenum.solvers.palago import frontier

    work = estimated_work(max_n, frontier(max_n, depth), depth)
    loads = [(0, k) for k in range(count)]
    shards: list[list[int]] = [[] for _ in range(count)]
    for prefix in sorted(range(len(work)), key=lambda k: (-work[k], k)):
        load, k = heapq.heappop(loads)
        shards[k].append(prefix)
        heapq.heappush(loads, (load + work[prefix], k))
    return [sorted(prefixes) for prefixes in shards]


def estimated_work(max_n: int, prefixes: list[tuple[int, ...]], depth: int) -> list[int]:
    """1 + the search nodes below each prefix in the tree of max_n - ESTIMATE_DROP tiles (a prefix
    that tree does not reach, having already too many tiles around it, has little below it)."""
    from batchenum.solvers.palago import frontier, prefix_nodes

    smaller = max(max_n - ESTIMATE_DROP, 1)
    cut = frontier(smaller, depth)
    nodes = dict(zip(cut, _interruptible(prefix_nodes, smaller, cut).tolist()))
    return [1 + nodes.get(prefix, 0) for prefix in prefixes]


def _interruptible(work, *args):
    """``work(*args)`` in a thread of its own, waited for a tenth of a second at a time: a compiled
    kernel call can last minutes (one prefix at a large N), and Python runs a signal's handler
    (SIGTERM, Ctrl-C) only between bytecodes of the main thread, so the run stops at once rather
    than when the call returns.  The kernel releases the GIL; an abandoned thread ends with the
    process (a daemon)."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = work(*args)
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="palago-plan", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _string_array(data, offsets) -> pa.Array:
    """An Arrow string array over packed UTF-8 ``data``: row k is data[offsets[k]:offsets[k + 1]]."""
    if offsets[-1] >= 2**31:
        raise PipelineError(f"a shard's catalogue text is too large ({int(offsets[-1]):,} bytes): use more --shards")
    return pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets.astype("int32")), pa.py_buffer(data))


def _compile_the_merges_kernels() -> None:
    """Compile (or load from the cache) the kernels ``_check_symmetric`` calls at the merge, on the
    smallest input: a run then compiles once, while it plans, not again as it writes its tables
    (issue 48 measured 9.8 s of compiling in a Palago merge on a loaded machine)."""
    from batchenum.solvers.palago.symmetric import symmetric_counts

    symmetric_counts(6)  # (the smallest n whose search reaches every kernel: below 3 none runs)


def _check_symmetric(counts: pd.DataFrame) -> None:
    """Every row's stabiliser columns against an independent count of symmetric creatures (an
    orbit-closed search, solvers/palago/symmetric.py, whose cost grows with n:
    docs/benchmarks.md#palago-symmetric-shards)."""
    import numpy as np

    from batchenum.solvers.palago.symmetric import stabiliser_columns, symmetric_counts

    max_n = int(counts.n.max())
    fixed = np.zeros(max_n + 1, dtype=np.int64)
    fixed[counts.n.to_numpy()] = counts.fixed.to_numpy()
    try:
        expected = stabiliser_columns(fixed, symmetric_counts(max_n))
    except ValueError as error:
        raise PipelineError(f"internal error: {error}") from None
    for name, column in expected.items():
        if (column[counts.n.to_numpy()] != counts[name].to_numpy()).any():
            raise PipelineError(f"internal error: {name} disagrees with the count of symmetric creatures")


JOB = PalagoJob
