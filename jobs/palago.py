"""Palago creature counts (and catalogue) as a pipeline job.

The search tree is cut at a fixed depth and its prefixes are packed into shards by estimated work:
the nodes below each prefix in the tree of a smaller N (``ESTIMATE_DROP`` fewer tiles, a few hundred
times cheaper than the real search), heaviest first onto the lightest shard.  A shard's spec is
(max_n, depth, k, K) and the indices of its prefixes: workers recompute the frontier themselves,
which takes milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from typing import TYPE_CHECKING

import pyarrow as pa

from batchenum.jobs import CODE_PACKAGES
from batchenum.pipeline.cli import Command, JobCommand, positive_int
from batchenum.pipeline.errors import PipelineError, UsageError
from batchenum.pipeline.job import Column, Job, PlanContext, Shard, ShardResult, TableSpec
from batchenum.pipeline.storage import Storage

if TYPE_CHECKING:  # pandas is for the driver's tables; workers need not pay its import
    import pandas as pd

__all__ = ["PalagoCountsJob", "PalagoJob", "palago_job", "bfile", "exact_column", "BFILE_COLUMNS", "COMMAND",
           "COMMANDS", "INT64_MAX_N", "stored_counts", "summed_counts"]

# (depth, prefixes at that depth for n >= 24): deeper cuts for more shards.  A shard recomputes the
# frontier itself: 0.03 s at depth 10, 0.3 s at 12, 1 s at 14.
SPLIT_DEPTHS = ((10, 3_820), (12, 28_984), (14, 219_877))
# Work is estimated in the tree of max_n - ESTIMATE_DROP: at n = 24 its node counts correlate
# 0.92 (log scale) with the real ones and cost 0.1 s against 14 s.
ESTIMATE_DROP = 6
STABILISER_ORDERS = (1, 2, 3, 6)
METHODS = ("direct", "transfer")
BFILE_COLUMNS = ("free", "fixed", *(f"free_stabiliser_{s}" for s in STABILISER_ORDERS))
# Seconds of work between saves of a transfer-matrix height's sweep (--checkpoint-interval)
CHECKPOINT_INTERVAL = 300.0

# Count columns are int64 up to --max-n INT64_MAX_N (every table written before the transfer
# matrix had exact wide arithmetic: byte-identical since), exact decimal strings beyond, where
# fixed(n) passes 2^63 (near n = 49): ``pd.read_parquet(path).fixed.map(int)`` gives Python ints.
INT64_MAX_N = 44
COUNT_NAMES = ("free", "fixed", *(f"free_stabiliser_{s}" for s in STABILISER_ORDERS), "stabiliser_sum", "nodes")


def _count_columns(count_type: str) -> tuple[Column, ...]:
    return (Column("n", "int64"), *(Column(name, count_type) for name in COUNT_NAMES))


_COUNT_COLUMNS = _count_columns("int64")
PARTIAL_COUNTS = TableSpec("partial_counts", _COUNT_COLUMNS, sort=("n",))
CREATURE_COUNTS = TableSpec("creature_counts", _COUNT_COLUMNS, key=("n",), sort=("n",))
WIDE_PARTIAL_COUNTS = TableSpec("partial_counts", _count_columns("string"), sort=("n",))
WIDE_CREATURE_COUNTS = TableSpec("creature_counts", _count_columns("string"), key=("n",), sort=("n",))
CREATURES = TableSpec(
    "creatures",
    (Column("n", "int64"), Column("key", "string", distinct=True), Column("stabiliser", "int64"),
     Column("tiles", "string", distinct=True), Column("sum", "string", distinct=True)),
    key=("key",),
    sort=("n", "key"),
    partition="n",
)


class PalagoCountsJob(Job):
    """What both ways of counting creatures share: the tables, the parameters recorded with them,
    the Burnside checks and the published Markdown table and plot.  ``PalagoJob`` counts by the
    anchored search (and can catalogue); ``PalagoTransferJob`` (jobs/palago_transfer.py) by the
    transfer-matrix method."""

    name = "palago"
    version = "2"
    tables = (PARTIAL_COUNTS, CREATURE_COUNTS, CREATURES)
    code_packages = CODE_PACKAGES
    method = ""

    def __init__(self, max_n: int, catalogue_max_n: int = 0):
        self.max_n = max_n
        self.catalogue_max_n = catalogue_max_n

    def params(self) -> dict:
        params = {"max_n": self.max_n, "catalogue_max_n": self.catalogue_max_n}
        return {**params, "method": self.method} if self.method != "direct" else params

    def side_files(self, tables: dict, out) -> dict[str, str]:
        """The count table's Markdown rendering and growth plot, committed with it."""
        counts = tables["creature_counts"]
        return {"creature_counts.md": _markdown(counts, out, self.method), "creature_counts.svg": _plot(counts)}


class PalagoJob(PalagoCountsJob):
    """Creature counts up to ``max_n`` by the anchored search, cut into ``shards`` shards of search-
    tree prefixes, and the catalogue of every free creature up to ``catalogue_max_n``."""

    method = "direct"

    def __init__(self, max_n: int, catalogue_max_n: int = 0, shards: int | None = None):
        from batchenum.solvers.palago.search import MAX_N  # plain constant; the kernel is not compiled here

        _check_sizes(max_n, catalogue_max_n, MAX_N)
        super().__init__(max_n, catalogue_max_n)
        self.shards = shards  # None: cut by the CPUs the run will have (plan)
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
        return [
            Shard(f"s{index:04d}", {"max_n": self.max_n, "depth": depth, "index": index, "count": count,
                                    "catalogue_max_n": self.catalogue_max_n, "prefixes": prefixes})
            for index, prefixes in enumerate(packed_prefixes(self.max_n, depth, count))
        ]

    def run_shard(self, shard: Shard) -> ShardResult:
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
            partial = tables["partial_counts"]
            expected = int(partial.loc[partial.n <= self.catalogue_max_n, "free"].sum())
            if len(tables["creatures"]) != expected:
                raise PipelineError(f"catalogue holds {len(tables['creatures'])} creatures, the counts say {expected}")

    def finalize(self, tables: dict, out) -> dict:
        counts = summed_counts(tables["partial_counts"])
        _check_identities(counts)
        _check_symmetric(counts)
        return {"creature_counts": counts}

    def summary(self, tables: dict, totals: dict) -> str:
        counts = tables["creature_counts"]
        line = _summary_head(counts) + f"{int(counts.nodes.sum()):,} search nodes"
        if "creatures" in tables:
            line += f"; catalogue of {len(tables['creatures'])} creatures up to n = {self.catalogue_max_n}"
        return line


def palago_job(max_n: int, catalogue_max_n: int = 0, shards: int | None = None,
               method: str = "direct", checkpoint_interval: float | None = None,
               force: bool = False) -> PalagoCountsJob:
    """The job that ``batchenum run palago`` runs: ``PalagoJob``, or ``PalagoTransferJob`` for
    ``method="transfer"`` (counts only), whose heights save their sweep every
    ``checkpoint_interval`` seconds (default ``CHECKPOINT_INTERVAL``).  A direct search projected
    to take more than a day on this machine is refused unless ``force``."""
    if method not in METHODS:
        raise UsageError(f"--method must be one of {', '.join(METHODS)}, not {method}")
    if checkpoint_interval is not None and method != "transfer":
        raise UsageError("--checkpoint-interval applies to --method transfer (the direct search's shards are short)")
    if checkpoint_interval is not None and not checkpoint_interval > 0:
        raise UsageError(f"--checkpoint-interval must be a number of seconds above 0, not {checkpoint_interval!r}")
    if method == "direct":
        job = PalagoJob(max_n, catalogue_max_n, shards)
        _check_direct_time(max_n, force)
        return job
    from batchenum.jobs.palago_transfer import PalagoTransferJob
    from batchenum.solvers.palago.transfer import MAX_N  # plain constant; the kernel is not compiled here

    _check_sizes(max_n, catalogue_max_n, MAX_N)
    if catalogue_max_n or shards:
        raise UsageError("--method transfer counts only: no --catalogue-max-n, no --shards (one shard per height)")
    job = PalagoTransferJob(max_n)
    if checkpoint_interval is not None:
        job.checkpoint_interval = checkpoint_interval
    return job


# The direct search's cost, measured (docs/palago.md): n = 28 took 33 minutes on 2 cores, and each
# tile more costs about 2.8 times as much.  A run projected past a day on this machine is refused.
DIRECT_MEASURED = (28, 33 * 60 * 2)  # (n, CPU-seconds)
DIRECT_GROWTH = 2.8
_DAY = 86_400.0


def direct_seconds(max_n: int, cpus: int) -> float:
    """Projected wall seconds of the direct search to ``max_n`` on ``cpus`` CPUs (``DIRECT_MEASURED``
    grown by ``DIRECT_GROWTH`` per tile); rough, and an overestimate for small n."""
    n, cpu_seconds = DIRECT_MEASURED
    return cpu_seconds * DIRECT_GROWTH ** (max_n - n) / max(1, cpus)


def _check_direct_time(max_n: int, force: bool) -> None:
    """UsageError, at once, for a direct run projected to take more than a day on this machine's
    CPUs, unless ``force`` (a larger cluster, say)."""
    cpus = os.cpu_count() or 1
    seconds = direct_seconds(max_n, cpus)
    if seconds > _DAY and not force:
        raise UsageError(f"--max-n {max_n} by the direct search would take about {_duration(seconds)} on this "
                         f"machine's {cpus} CPUs (n = {DIRECT_MEASURED[0]} takes {DIRECT_MEASURED[1] / 3600:.1f} "
                         f"CPU-hours, about {DIRECT_GROWTH}x more per tile: docs/palago.md). Use --method transfer "
                         "(n = 40 in minutes), or give --force to run the direct search anyway (on a larger cluster)")


def _duration(seconds: float) -> str:
    for unit, size in (("years", 365 * _DAY), ("days", _DAY), ("hours", 3600.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds / 3600:.1f} hours"


def _check_sizes(max_n: int, catalogue_max_n: int, limit: int) -> None:
    if not 1 <= max_n <= limit:
        raise UsageError(f"--max-n must be between 1 and {limit}, not {max_n}")
    if not 0 <= catalogue_max_n <= max_n:
        raise UsageError(f"--catalogue-max-n must be between 0 and --max-n ({max_n}), not {catalogue_max_n}")


def summed_counts(partial: pd.DataFrame, exact: bool = False) -> pd.DataFrame:
    """The shards' partial counts summed per n, in the table's column order: int64 columns, or with
    ``exact`` columns of Python ints (from int64 or decimal-string partial counts)."""
    if not exact:
        counts = partial.groupby("n", as_index=False, sort=True).sum()
        return counts[[c.name for c in _COUNT_COLUMNS]].astype("int64")
    as_ints = partial.astype({name: object for name in COUNT_NAMES})
    for name in COUNT_NAMES:
        as_ints[name] = [int(x) for x in partial[name]]
    counts = as_ints.groupby("n", as_index=False, sort=True).agg({name: lambda s: sum(s, 0) for name in COUNT_NAMES})
    return counts[[c.name for c in _COUNT_COLUMNS]]


def stored_counts(counts: pd.DataFrame, wide: bool) -> pd.DataFrame:
    """A table of Python-int counts in the column types it is stored with: int64, or decimal
    strings when ``wide``."""
    if not wide:
        return counts.astype({name: "int64" for name in COUNT_NAMES})
    counts = counts.copy()
    for name in COUNT_NAMES:
        counts[name] = [str(int(x)) for x in counts[name]]
    return counts


def _summary_head(counts: pd.DataFrame) -> str:
    last = counts.iloc[-1]
    return (f"palago: n = 1..{int(last.n)}, free({int(last.n)}) = {int(last.free)}, "
            f"fixed({int(last.n)}) = {int(last.fixed)}, ")


def packed_prefixes(max_n: int, depth: int, count: int) -> list[list[int]]:
    """The frontier of the tree cut at ``depth``, dealt into ``count`` shards by estimated work:
    longest-processing-time-first (heaviest prefix onto the least loaded shard, ties to the lower
    index), so shard k's list of prefix indices is the same on every run and every node.  The
    estimate is ``estimated_work``; at n = 24 it brings the heaviest shard from 1.14x the mean
    (every K-th prefix) to 1.05x with 32 shards, and from 1.20x to 1.06x with 64."""
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


def _check_identities(counts: pd.DataFrame) -> None:
    """Burnside and orbit-stabiliser, row by row: a failure means a bug, never bad luck."""
    by_stab = counts[[f"free_stabiliser_{s}" for s in STABILISER_ORDERS]]
    orbit_sum = sum(counts[f"free_stabiliser_{s}"] * (6 // s) for s in STABILISER_ORDERS)
    bad = counts[(counts.stabiliser_sum != 6 * counts.free) | (orbit_sum != counts.fixed)
                 | (by_stab.sum(axis=1) != counts.free)]
    if len(bad):
        raise PipelineError(f"internal error: Burnside identities fail for n = {bad.n.tolist()}")


def _check_symmetric(counts: pd.DataFrame) -> None:
    """Every row's stabiliser columns against an independent count of symmetric creatures (an
    orbit-closed search, solvers/palago/symmetric.py; under a second at n = 28, 4 s at n = 36,
    32 s at n = 40)."""
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


def _markdown(counts: pd.DataFrame, out, method: str = "direct") -> str:
    header = ["n", "free", "fixed", "stab 1", "stab 2", "stab 3", "stab 6", "search nodes"]
    lines = [
        "# Palago creatures",
        "",
        "Free: up to translation, rotation and reflection; fixed: up to translation. `stab s` counts",
        "the free creatures whose symmetry group has order s. Regenerate with",
        f"`batchenum run palago --max-n {int(counts.n.max())}{_out_option(out)}"
        + (" --method transfer` (transfer-matrix method: no search nodes)." if method == "transfer" else "`."),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" for _ in header) + "|",
    ]
    for row in counts.itertuples(index=False):
        cells = [row.n, row.free, row.fixed, *(getattr(row, f"free_stabiliser_{s}") for s in STABILISER_ORDERS), row.nodes]
        lines.append("| " + " | ".join(f"{int(c):,}" if i else str(int(c)) for i, c in enumerate(cells)) + " |")
    return "\n".join(lines) + "\n"


def _out_option(out) -> str:
    """The --out option that writes into ``out`` (the DIR/palago folder), empty for the default."""
    where = out.display_root.rstrip("/")
    parent = where.rsplit("/", 1)[0] if not out.local else os.path.dirname(where)
    if not out.local:
        return f" --out {parent}"
    relative = os.path.relpath(parent)
    if relative == "results":
        return ""
    return f" --out {parent if relative.startswith('..') else relative}"


def _plot(counts: pd.DataFrame) -> str:
    """The growth plot (free and fixed by n, log scale) that goes next to the Markdown table."""
    from batchenum.solvers.palago.render import growth_plot_svg

    return growth_plot_svg(counts[["n", "free", "fixed"]].itertuples(index=False)) + "\n"


# ---------------------------------------------------------------------------------------- CLI


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-n", type=positive_int, default=24, metavar="N",
                        help="count creatures of every size 1..N (default: 24)")
    parser.add_argument("--catalogue-max-n", type=int, default=0, metavar="M",
                        help="also write every free creature of size <= M to DIR/palago/creatures/ (default: 0, none)")
    parser.add_argument("--shards", type=positive_int, default=None, metavar="K",
                        help="number of shards (default: for N >= 18, 4 per CPU of the run and at least 32; "
                             "else 4)")
    parser.add_argument("--method", choices=METHODS, default="direct",
                        help="direct: the anchored search; transfer: the transfer-matrix method, one shard per "
                             "bounding-box height (docs/palago_transfer.md) (default: direct)")
    parser.add_argument("--checkpoint-interval", type=_positive_seconds, default=None, metavar="SECONDS",
                        help="--method transfer: save each height's sweep this often, so that a killed run "
                             f"resumes from the last save (default: {CHECKPOINT_INTERVAL:g})")
    parser.add_argument("--force", action="store_true",
                        help="run a direct search projected to take more than a day on this machine's CPUs "
                             "(refused otherwise, pointing to --method transfer)")


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"give a number of seconds above 0, not {text!r}")
    return seconds


def _build(args: argparse.Namespace) -> PalagoCountsJob:
    return palago_job(args.max_n, args.catalogue_max_n, args.shards, args.method, args.checkpoint_interval,
                      args.force)


def _add_table_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="results", metavar="DIR",
                        help="the folder or URI a palago run wrote to (default: results)")
    parser.add_argument("--format", choices=("text", "bfile"), default="text",
                        help="text: the whole table; bfile: OEIS b-file lines 'n value' for one column (default: text)")
    parser.add_argument("--column", choices=BFILE_COLUMNS, default="free",
                        help="the column a b-file lists: " + ", ".join(BFILE_COLUMNS) + " (default: free)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object on standard output: the table's location and its rows (docs/cli.md)")


def _print_table(args: argparse.Namespace) -> int:
    folder = Storage.at(args.out).child("palago")
    path = folder.join("creature_counts.parquet")
    if not folder.is_file(path):
        raise PipelineError(f"no count table at {folder.uri(path)}: run `batchenum run palago --out {args.out}` first")
    import pandas as pd

    table = _read_counts(folder, path, args.out)
    if args.format == "bfile":
        print(bfile(table, args.column), end="")
        return 0
    counts = table.to_pandas()
    if args.json:
        rows = [{name: int(value) for name, value in row.items()} for row in counts.to_dict("records")]
        print(json.dumps({"table": "creature_counts", "location": folder.uri(path), "rows": rows}, indent=2))
        return 0
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(counts.to_string(index=False))
    return 0


def _read_counts(folder: Storage, path: str, out: str) -> pa.Table:
    """The count table, verified (pipeline.store.read_verified: page checksums, footer, columns) and
    checked for what its footer's unprotected parts could still get wrong: it holds n = 1..max_n, in
    order, for the max_n its parameters record.  A damaged table is one error naming it, never
    other numbers."""
    from batchenum.pipeline.store import DamagedFileError, read_verified, recorded_metadata

    where = folder.uri(path)
    rebuild = (f"; no number from it is shown. Run the `batchenum run palago ... --out {out}` command that "
               "wrote it again: it reuses the committed shards and rebuilds the table")
    try:
        with folder.open_input(path) as handle:
            table = read_verified(handle, where=where)  # pages and footer; the columns below
    except DamagedFileError as error:
        raise PipelineError(f"{error}{rebuild}") from None
    except OSError as error:
        raise PipelineError(f"cannot read {where}: {error}") from None
    meta = recorded_metadata(table.schema)
    params = None  # none recorded: written by another tool (pandas, say), checked for what it holds
    if meta:
        try:
            params = json.loads(meta["params"])
            max_n = int(params["max_n"])
        except (KeyError, TypeError, ValueError):
            raise PipelineError(f"{where} is damaged (its recorded parameters are unreadable){rebuild}") from None
    problem = _count_columns_problem(table.schema, params)
    if problem:
        raise PipelineError(f"{where} is damaged ({problem}){rebuild}")
    if params is None:
        return table
    if meta.get("table") != CREATURE_COUNTS.name or table.column("n").to_pylist() != list(range(1, max_n + 1)):
        raise PipelineError(f"{where} is damaged (it does not hold n = 1..{max_n} as its parameters say){rebuild}")
    return table.replace_schema_metadata(None)


def _count_columns_problem(schema: pa.Schema, params: dict | None) -> str | None:
    """The count table has int64 columns, or decimal strings where its run counted past int64
    (params ``"counts": "decimal strings"``); a table without provenance may be either."""
    from batchenum.pipeline.store import columns_problem, table_schema

    if params is None:
        wide = "fixed" in schema.names and pa.types.is_string(schema.field("fixed").type)
    else:
        wide = params.get("counts") == "decimal strings"
    return columns_problem(schema, table_schema(WIDE_CREATURE_COUNTS if wide else CREATURE_COUNTS))


def bfile(table: pa.Table, column: str = "free") -> str:
    """OEIS b-file text for one column of the count table: one line 'n value' per row, n ascending,
    no header; values exact however the table stores them (``exact_column``)."""
    if column not in BFILE_COLUMNS:
        raise UsageError(f"a b-file lists one of {', '.join(BFILE_COLUMNS)}, not {column}")
    rows = sorted(zip(exact_column(table, "n"), exact_column(table, column)))
    return "".join(f"{n} {value}\n" for n, value in rows)


def exact_column(table: pa.Table, column: str) -> list[int]:
    """A count column as Python integers, exactly: from integer columns, and from the wider forms a
    count table may hold past int64 (decimal columns of scale 0, decimal strings).  Anything else,
    a null or a fraction is an error naming the column and the row, never a rounded number."""
    import decimal

    values = table.column(column).to_pylist()
    exact = []
    for row, value in enumerate(values):
        try:
            if isinstance(value, bool) or value is None or isinstance(value, float):
                raise ValueError
            number = int(value)
            if isinstance(value, decimal.Decimal) and number != value:
                raise ValueError
        except (ValueError, TypeError, ArithmeticError):
            raise PipelineError(f"the count table's {column} column holds {value!r} in row {row + 1}, not a whole "
                                "number: rebuild the table with `batchenum run palago`") from None
        exact.append(number)
    return exact


COMMAND = JobCommand("palago", "count Palago creatures of every size up to N", _add_run_arguments, _build)
COMMANDS = [Command(("table",), "print the Palago creature count table", _add_table_arguments, _print_table)]
