"""What both ways of counting Palago creatures share: the tables, the parameters (declared once,
for ``batchenum run palago`` and ``batchenum.run("palago", ...)``), the provenance, the Burnside
identities and the published Markdown table and plot.  jobs/palago.py counts by the anchored search
(and catalogues), jobs/palago_transfer.py by the transfer-matrix method; neither imports the other's
internals.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from batchenum.jobs import CODE_PACKAGES
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Column, Job, Param, TableSpec
from batchenum.pipeline.params import ParamError

if TYPE_CHECKING:  # pandas is for the driver's tables; workers need not pay its import
    import pandas as pd

__all__ = [
    "PalagoCountsJob",
    "PARTIAL_COUNTS",
    "CREATURE_COUNTS",
    "WIDE_PARTIAL_COUNTS",
    "WIDE_CREATURE_COUNTS",
    "CREATURES",
    "COUNT_NAMES",
    "BFILE_COLUMNS",
    "STABILISER_ORDERS",
    "CHECKPOINT_INTERVAL",
    "INT64_MAX_N",
    "METHODS",
    "summed_counts",
    "stored_counts",
    "summary_head",
    "check_identities",
]

METHODS = ("direct", "transfer")

STABILISER_ORDERS = (1, 2, 3, 6)
BFILE_COLUMNS = ("free", "fixed", *(f"free_stabiliser_{s}" for s in STABILISER_ORDERS))
# Seconds of work between saves of a transfer-matrix height's sweep (--checkpoint-interval)
CHECKPOINT_INTERVAL = 300.0
# The direct search's cost, measured once (CPU-seconds at n = 28) and its growth per tile
# (docs/benchmarks.md#palago-direct-search-plan): a run projected past a day is refused.
DIRECT_MEASURED = (28, 33 * 60 * 2)  # (n, CPU-seconds)
DIRECT_GROWTH = 2.8
_DAY = 86_400.0

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
    (
        Column("n", "int64"),
        Column("key", "string", distinct=True),
        Column("stabiliser", "int64"),
        Column("tiles", "string", distinct=True),
        Column("sum", "string", distinct=True),
    ),
    key=("key",),
    sort=("n", "key"),
    partition="n",
)


class PalagoCountsJob(Job):
    """Count Palago creatures of every size up to N.

    The parameters of ``batchenum run palago``; ``PalagoJob`` (jobs/palago.py) counts by the
    anchored search (and can catalogue), ``PalagoTransferJob`` (jobs/palago_transfer.py) by the
    transfer-matrix method.
    """

    name = "palago"
    version = "2"
    tables: tuple[TableSpec, ...] = (PARTIAL_COUNTS, CREATURE_COUNTS, CREATURES)
    code_packages = CODE_PACKAGES

    max_n = Param(int, default=24, low=1, metavar="N", help="count creatures of every size 1..N")
    catalogue_max_n = Param(
        int,
        default=0,
        low=0,
        high="max_n",
        metavar="M",
        help="also write every free creature of size <= M to DIR/palago/creatures/ (default: 0, none)",
    )
    shards: Param[int | None] = Param(
        int,
        default=None,
        low=1,
        recorded=False,
        metavar="K",
        help="number of shards (default: for N >= 18, 4 per CPU of the run and at least 32; else 4)",
    )
    method = Param(
        str,
        default="direct",
        choices=METHODS,
        omit_default=True,  # the direct search's tables were published before the transfer method came
        help="direct: the anchored search; transfer: the transfer-matrix method, one shard per "
        "bounding-box height (docs/palago_transfer.md)",
    )
    checkpoint_interval: Param[float | None] = Param(
        float,
        default=None,
        above=0,
        recorded=False,
        metavar="SECONDS",
        help="--method transfer: save each height's sweep this often, so that a killed "
        f"run resumes from the last save (default: {CHECKPOINT_INTERVAL:g})",
    )
    force = Param(
        bool,
        default=False,
        recorded=False,
        help="run a direct search projected to take more than a day on this machine's CPUs "
        "(refused otherwise, pointing to the transfer method; checked before the run connects to "
        "a cluster, so a run on a larger cluster needs it)",
    )

    @classmethod
    def check_params(cls, values: dict[str, Any]) -> None:
        """Each method's size limit; the transfer method counts only, and only it checkpoints."""
        from batchenum.solvers.palago.search import MAX_N as SEARCH_MAX_N  # plain constants: nothing compiled
        from batchenum.solvers.palago.transfer import MAX_N as TRANSFER_MAX_N

        transfer = values["method"] == "transfer"
        limit = TRANSFER_MAX_N if transfer else SEARCH_MAX_N
        if not 1 <= values["max_n"] <= limit:
            raise ParamError(f"{{max_n}} must be between 1 and {limit}, not {values['max_n']}")
        if values["checkpoint_interval"] is not None and not transfer:
            raise ParamError(
                "{checkpoint_interval} applies to {method} transfer (the direct search's shards are short)"
            )
        if transfer and (values["catalogue_max_n"] or values["shards"]):
            raise ParamError("{method} transfer counts only: no {catalogue_max_n}, no {shards} (one shard per height)")
        if not transfer and not values["force"]:
            _check_direct_time(values["max_n"])

    def side_files(self, tables: dict, out) -> dict[str, str]:
        """The count table's Markdown rendering and growth plot, committed with it."""
        counts = tables["creature_counts"]
        return {"creature_counts.md": _markdown(counts, out, self.method), "creature_counts.svg": _plot(counts)}


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


def summary_head(counts: pd.DataFrame) -> str:
    last = counts.iloc[-1]
    return (
        f"palago: n = 1..{int(last.n)}, free({int(last.n)}) = {int(last.free)}, "
        f"fixed({int(last.n)}) = {int(last.fixed)}, "
    )


def check_identities(counts: pd.DataFrame) -> None:
    """Burnside and orbit-stabiliser, row by row: a failure means a bug, never bad luck."""
    by_stab = counts[[f"free_stabiliser_{s}" for s in STABILISER_ORDERS]]
    orbit_sum = sum(counts[f"free_stabiliser_{s}"] * (6 // s) for s in STABILISER_ORDERS)
    bad = counts[
        (counts.stabiliser_sum != 6 * counts.free) | (orbit_sum != counts.fixed) | (by_stab.sum(axis=1) != counts.free)
    ]
    if len(bad):
        raise PipelineError(f"internal error: Burnside identities fail for n = {bad.n.tolist()}")


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
        cells = [
            row.n,
            row.free,
            row.fixed,
            *(getattr(row, f"free_stabiliser_{s}") for s in STABILISER_ORDERS),
            row.nodes,
        ]
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


def direct_seconds(max_n: int, cpus: int) -> float:
    """Projected wall seconds of the direct search to ``max_n`` on ``cpus`` CPUs (``DIRECT_MEASURED``
    grown by ``DIRECT_GROWTH`` per tile); rough, and an overestimate for small n."""
    n, cpu_seconds = DIRECT_MEASURED
    return cpu_seconds * DIRECT_GROWTH ** (max_n - n) / max(1, cpus)


def _check_direct_time(max_n: int) -> None:
    """ParamError, at once, for a direct run projected to take more than a day on this machine's
    CPUs (``force`` lifts it: a larger cluster, say).  The parameters are checked when the job is
    made, before the run knows where it will run: a cluster's CPUs are known only once the run has
    connected, after the job folder is leased, and a refusal there would come late and leave a
    job folder behind, so the projection counts this machine's CPUs and says so."""
    cpus = os.cpu_count() or 1
    seconds = direct_seconds(max_n, cpus)
    if seconds > _DAY:
        raise ParamError(
            f"{{max_n}} {max_n} by the direct search would take about {_duration(seconds)} on this "
            f"machine's {cpus} CPUs (n = {DIRECT_MEASURED[0]} takes {DIRECT_MEASURED[1] / 3600:.1f} "
            f"CPU-hours, about {DIRECT_GROWTH}x more per tile: docs/palago.md). Use {{method}} transfer "
            "(n = 40 in minutes), or give {force} to run the direct search anyway (on a larger cluster: "
            "this check counts this machine's CPUs, before the run connects to any cluster)"
        )


def _duration(seconds: float) -> str:
    for unit, size in (("years", 365 * _DAY), ("days", _DAY), ("hours", 3600.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds / 3600:.1f} hours"
