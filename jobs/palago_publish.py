"""Publish a transfer-matrix count table from the store that computed it, with its partial counts
and its cost statement:

    python -m batchenum.jobs.palago_publish STORE OUT

STORE is the ``--out`` folder of a committed ``batchenum run palago --method transfer`` (its
``palago`` folder holds the table and the shards); OUT gets ``palago/`` with

- ``creature_counts.parquet``: the store's committed table, copied as it is, and its ``.md`` and
  ``.svg`` as the run writes them (the .md's command naming OUT as ``--out``);
- ``partial_counts.parquet`` and ``partial_counts.md``: every shard's counts (one row per shard and
  size: each height's fixed counts, each symmetry class's symmetric counts), from which anyone can
  recompute the table (the .md says how);
- ``cost.parquet`` and ``cost.md``: per shard what its footer recorded (wall seconds always; CPU
  seconds, peak resident memory, states at the largest generation and state-steps where the code
  that computed it recorded them), totals in CPU-hours, and the machine.

Every shard file is read verified (page checksums) and must carry the committed table's job,
parameters and code version; the partial counts are recombined here and must give the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.parquet_format import read_verified, recorded_metadata

__all__ = ["publish", "recombined", "main"]

TABLE = "creature_counts.parquet"
SYMMETRIC_KINDS = ("reflection", "rotation", "full")
COST_FIELDS = ("cpu_ms", "peak_rss_bytes", "start_rss_bytes", "peak_states", "state_steps", "state_steps_resumed")
SPLIT_FIELDS = ("split_tasks", "task_peak_rss_bytes")  # recorded by a height split across tasks only

PARTIAL_COUNTS = pa.schema(
    [
        ("shard", pa.string()),
        ("kind", pa.string()),  # height, reflection, rotation or full
        ("height", pa.int64()),  # a height shard's box height, null otherwise
        ("n", pa.int64()),
        ("count", pa.string()),  # exact decimal
    ]
)
COST = pa.schema(
    [
        ("shard", pa.string()),
        ("wall_seconds", pa.float64()),
        ("cpu_seconds", pa.float64()),
        ("peak_rss_bytes", pa.int64()),
        ("start_rss_bytes", pa.int64()),
        ("peak_states", pa.int64()),
        ("state_steps", pa.int64()),
        ("state_steps_resumed", pa.int64()),
        ("split_tasks", pa.int64()),  # a height split across tasks: their number (cpu_seconds counts theirs)
        ("task_peak_rss_bytes", pa.int64()),  # and the largest peak of a process while it ran one
        ("node", pa.string()),
    ]
)


@dataclass
class ShardRecord:
    """One committed shard: its id, its counts by size (kind -> {n: count}) and its footer stats."""

    shard: str
    spec: dict
    counts: dict[str, dict[int, int]]
    stats: dict


def publish(store: Path, out: Path, machine: str) -> list[Path]:
    """Write the table, its partial counts and its cost statement from ``store`` into
    ``out / "palago"``; returns the files written."""
    job_folder = store / "palago"
    manifest = _committed_manifest(job_folder)
    records = [_shard_record(job_folder, shard, manifest) for shard in _planned_shards(job_folder)]
    partial = _partial_counts(records)
    with open(job_folder / TABLE, "rb") as handle:
        table = read_verified(handle, where=str(job_folder / TABLE))
    _check_recombined(partial, table)
    target = out / "palago"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(job_folder / TABLE, target / TABLE)
    written = [target / TABLE]
    for name, text in _side_files(table, manifest, target).items():
        (target / name).write_text(text)
        written.append(target / name)
    cost = _cost_table(records)
    pq.write_table(_with_provenance(partial, table, "partial_counts"), target / "partial_counts.parquet")
    pq.write_table(_with_provenance(cost, table, "cost"), target / "cost.parquet")
    (target / "partial_counts.md").write_text(_partial_counts_markdown(manifest, len(records)))
    (target / "cost.md").write_text(_cost_markdown(records, manifest, machine))
    return [
        *written,
        *(target / name for name in ("partial_counts.parquet", "partial_counts.md", "cost.parquet", "cost.md")),
    ]


def _with_provenance(side: pa.Table, table: pa.Table, name: str) -> pa.Table:
    """``side`` carrying the count table's job, version and parameters under its own table name,
    so that `batchenum status` says which run it belongs to."""
    meta = {**(table.schema.metadata or {}), b"batchenum.table": name.encode()}
    return side.replace_schema_metadata(meta)


def _side_files(table: pa.Table, manifest: dict, target: Path) -> dict[str, str]:
    """The table's Markdown and plot as the job writes them, its command naming ``target``'s
    parent as --out (not the store the table came from)."""
    from batchenum.jobs.palago_transfer import PalagoTransferJob

    job = PalagoTransferJob(manifest["params"]["max_n"])
    where = SimpleNamespace(display_root=str(target.absolute()), local=True)  # what _out_option reads
    return job.side_files({"creature_counts": table.to_pandas()}, where)


def _committed_manifest(job_folder: Path) -> dict:
    path = job_folder / "_manifest.json"
    if not path.is_file():
        raise PipelineError(f"{job_folder} holds no committed run (no _manifest.json): give the --out folder of a run")
    manifest = json.loads(path.read_text())
    params = manifest.get("params", {})
    if manifest.get("state") != "committed" or manifest.get("job") != "palago" or params.get("method") != "transfer":
        raise PipelineError(
            f"{path} is not a committed `batchenum run palago --method transfer`: rerun that command on this folder"
        )
    return manifest


def _planned_shards(job_folder: Path) -> list[str]:
    path = job_folder / "_plan.json"
    if not path.is_file():
        raise PipelineError(f"{job_folder} keeps no plan ({path}): its shards were removed; rerun the run's command")
    return list(json.loads(path.read_text())["shards"])


def _shard_record(job_folder: Path, shard: str, manifest: dict) -> ShardRecord:
    """A shard's counts (from the table it writes: partial_counts for a height, symmetric_counts
    for a symmetric piece) and stats, after checking it belongs to the committed run."""
    table_name = "symmetric_counts" if shard.startswith("s-") else "partial_counts"
    path = job_folder / "_shards" / table_name / f"{shard}.parquet"
    if not path.is_file():
        raise PipelineError(f"shard {shard} has no file {path}: rerun the run's command to recompute it")
    with open(path, "rb") as handle:
        table = read_verified(handle, where=str(path))
    meta = recorded_metadata(table.schema)
    recorded = (meta.get("code"), json.loads(meta.get("params", "null")))
    if recorded != (manifest["code_version"], manifest["params"]):
        raise PipelineError(
            f"{path} was computed by code {recorded[0]} with parameters {recorded[1]}, not by the committed "
            f"table's ({manifest['code_version']}, {manifest['params']}): rerun the run's command on this folder"
        )
    spec, columns = json.loads(meta["shard_spec"]), table.to_pydict()
    kinds = (spec["symmetric"],) if "symmetric" in spec else ("fixed",)
    counts = {kind: {n: int(x) for n, x in zip(columns["n"], columns[kind])} for kind in kinds}
    return ShardRecord(shard, spec, counts, json.loads(meta.get("stats", "{}")))


def _partial_counts(records: list[ShardRecord]) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in PARTIAL_COUNTS.names}
    for record in records:
        for kind, by_n in record.counts.items():
            for n, count in sorted(by_n.items()):
                rows["shard"].append(record.shard)
                rows["kind"].append("height" if kind == "fixed" else kind)
                rows["height"].append(record.spec.get("height"))
                rows["n"].append(n)
                rows["count"].append(str(count))
    return pa.Table.from_pydict(rows, schema=PARTIAL_COUNTS)


def recombined(partial: pa.Table) -> dict[str, dict[int, int]]:
    """The count table's columns (free, fixed, free_stabiliser_1/2/3/6) by size, recomputed from the
    partial counts as partial_counts.md says; ValueError when a Burnside division is not exact."""
    sums: dict[str, dict[int, int]] = {kind: {} for kind in ("height", *SYMMETRIC_KINDS)}
    columns = partial.to_pydict()
    for kind, n, count in zip(columns["kind"], columns["n"], columns["count"]):
        sums[kind][n] = sums[kind].get(n, 0) + int(count)
    table: dict[str, dict[int, int]] = {
        name: {} for name in ("free", "fixed", *(f"free_stabiliser_{s}" for s in (1, 2, 3, 6)))
    }
    for n in sorted(sums["height"]):
        fixed, ref, rot, full = (sums[kind].get(n, 0) for kind in ("height", *SYMMETRIC_KINDS))
        f6, f2 = full, ref - full
        f3, r3 = divmod(rot - full, 2)
        f1, r1 = divmod(fixed - 3 * f2 - 2 * f3 - f6, 6)
        free, r = divmod(fixed + 2 * rot + 3 * ref, 6)
        if r3 or r1 or r:
            raise ValueError(f"n = {n}: a Burnside division is not exact")
        for name, value in zip(table, (free, fixed, f1, f2, f3, f6)):
            table[name][n] = value
    return table


def _check_recombined(partial: pa.Table, table: pa.Table) -> None:
    try:
        columns = recombined(partial)
    except ValueError as error:
        raise PipelineError(f"the store's partial counts do not recombine: {error}") from None
    stored = table.to_pydict()
    for name, by_n in columns.items():
        if [int(x) for x in stored[name]] != [by_n[n] for n in stored["n"]]:
            raise PipelineError(f"the store's partial counts give another {name} column than its table: rerun the run")


def _cost_table(records: list[ShardRecord]) -> pa.Table:
    rows: dict[str, list] = {name: [] for name in COST.names}
    for record in records:
        stats = record.stats
        rows["shard"].append(record.shard)
        rows["wall_seconds"].append(float(stats.get("seconds", 0.0)))
        rows["cpu_seconds"].append(stats["cpu_ms"] / 1000 if "cpu_ms" in stats else None)
        for name in (*COST_FIELDS[1:], *SPLIT_FIELDS):
            rows[name].append(stats.get(name))
        rows["node"].append(stats.get("node"))
    return pa.Table.from_pydict(rows, schema=COST)


def _partial_counts_markdown(manifest: dict, shards: int) -> str:
    max_n = manifest["params"]["max_n"]
    return f"""# Partial counts of the Palago table, n <= {max_n}

`partial_counts.parquet` holds what each of the {shards} shards of the run that computed
`creature_counts.parquet` counted (code version `{manifest["code_version"]}`), one row per shard
and size n: `shard`, `kind`, `height`, `n`, `count` (an exact decimal string). The method is in
docs/palago_transfer.md.

- `kind = height`: the fixed creatures whose bounding box has height `height` and width W >= height,
  counted twice when W > height (the reflection in i = j swaps width and height). So
  **fixed(n) = the sum of `count` over the rows with `kind = height` and that n.**
- `kind = reflection`: A_ref(n), the fixed creatures mapped onto themselves by (i, j) -> (j, i).
- `kind = rotation`: creatures mapped onto themselves by the 120-degree rotation about one kind of
  centre (a vertex, an up- or a down-triangle: one shard per kind); A_rot(n) is their sum.
- `kind = full`: the same for all of D3; A_full(n) is their sum.

The table follows by Burnside's lemma over D3, every division exact:

    free = (fixed + 2 A_rot + 3 A_ref) / 6
    free_stabiliser_6 = A_full
    free_stabiliser_3 = (A_rot - A_full) / 2
    free_stabiliser_2 = A_ref - A_full
    free_stabiliser_1 = (fixed - 3 free_stabiliser_2 - 2 free_stabiliser_3 - free_stabiliser_6) / 6

In Python:

```python
import pandas as pd

p = pd.read_parquet("partial_counts.parquet")
p["count"] = p["count"].map(int)
s = p.groupby(["kind", "n"])["count"].sum()  # Python ints, exact
fixed, ref, rot = s["height"], s["reflection"], s["rotation"]
free = (fixed + 2 * rot.reindex(fixed.index, fill_value=0) + 3 * ref.reindex(fixed.index, fill_value=0)) // 6
```
"""


def _cost_markdown(records: list[ShardRecord], manifest: dict, machine: str) -> str:
    max_n = manifest["params"]["max_n"]
    recorded = {field for record in records for field in record.stats if field in COST_FIELDS}
    nodes = sorted({str(record.stats.get("node")) for record in records})
    lines = [
        f"# What the Palago table n <= {max_n} cost",
        "",
        f"Per shard, as its files record it (`cost.parquet` holds the same columns). The run: code version "
        f"`{manifest['code_version']}`, {len(records)} shards, on the node(s) {', '.join(nodes)}.",
        "",
        "| shard | wall s | CPU s | peak RSS MB (at its start) | states at the largest generation | state-steps |"
        " split: tasks, a task's peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [_cost_row(record) for record in records]
    wall = sum(float(record.stats.get("seconds", 0.0)) for record in records)
    heights = sum(float(r.stats.get("seconds", 0.0)) for r in records if "height" in r.spec)
    lines += [
        "",
        f"**Totals.** Wall seconds of the shards: {wall:,.0f} ({wall / 3600:.2f} hours; heights {heights:,.0f} s).",
    ]
    if "cpu_ms" in recorded:
        cpu = sum(record.stats.get("cpu_ms", 0) for record in records) / 1000
        cpu_heights = sum(r.stats.get("cpu_ms", 0) for r in records if "height" in r.spec) / 1000
        peak = max(max(r.stats.get("peak_rss_bytes", 0), r.stats.get("task_peak_rss_bytes", 0)) for r in records)
        lines.append(
            f"CPU seconds recorded: {cpu:,.0f} ({cpu / 3600:.3f} CPU-hours; heights {cpu_heights:,.0f} s, a split "
            f"height's with its tasks'); the largest peak resident memory of a process {peak / 2**20:,.0f} MB "
            "(a split task's counts the object store's pages it mapped)."
        )
        lines += _resumed_lines(records, cpu)
    missing = [field for field in COST_FIELDS if field not in recorded]
    if missing:
        lines += [
            "",
            "**Not recorded** by the code that computed these shards: "
            + ", ".join(f"`{field}`" for field in missing)
            + ". Its footers hold each shard's wall seconds only (time.monotonic around the shard: at least "
            "its CPU time, since a shard computes in one thread, more when the machine was shared); a "
            "shard resumed from a checkpoint records only the seconds of the invocation that finished "
            "it, and the first shard a process computes includes compiling the kernels.",
        ]
    lines += [
        "",
        "**The machine** (this command describes the machine it runs on; the shards name only their node):",
        "",
        machine,
        "",
    ]
    return "\n".join(lines)


def _resumed_lines(records: list[ShardRecord], recorded_cpu: float) -> list[str]:
    """What the CPU figures leave out: a shard resumed from a checkpoint records the CPU time of the
    invocation that finished it, not of the one that saved the checkpoint; its state-steps say how
    much that was, and its own rate what it cost, about.  ``recorded_cpu``: the CPU seconds all
    shards recorded."""
    resumed = [
        r for r in records if r.stats.get("state_steps_resumed") and r.stats.get("state_steps") and "cpu_ms" in r.stats
    ]
    if not resumed:
        return []
    lines = ["", "**Resumed from a checkpoint** (its CPU seconds above are the finishing invocation's only):", ""]
    estimated = 0.0
    for record in resumed:
        steps, before = int(record.stats["state_steps"]), int(record.stats["state_steps_resumed"])
        cpu = record.stats["cpu_ms"] / 1000
        earlier = cpu * before / (steps - before) if steps > before else 0.0
        estimated += earlier
        lines.append(
            f"- {record.shard}: {before:,} of its {steps:,} state-steps ({before / steps:.1%}) came from an "
            f"earlier invocation; at the rate of its row that part took about {earlier:,.0f} CPU seconds."
        )
    total = recorded_cpu + estimated
    lines.append(f"- With those parts, about {total:,.0f} CPU seconds ({total / 3600:.3f} CPU-hours) in all.")
    return lines


def _cost_row(record: ShardRecord) -> str:
    stats = record.stats
    cpu = f"{stats['cpu_ms'] / 1000:,.1f}" if "cpu_ms" in stats else "-"
    memory = "-"
    if "peak_rss_bytes" in stats:
        memory = f"{stats['peak_rss_bytes'] / 2**20:,.0f} ({stats.get('start_rss_bytes', 0) / 2**20:,.0f})"
    states = " | ".join(f"{stats[field]:,}" if field in stats else "-" for field in ("peak_states", "state_steps"))
    split = "-"
    if "split_tasks" in stats:
        split = f"{stats['split_tasks']:,}, {stats.get('task_peak_rss_bytes', 0) / 2**20:,.0f}"
    return f"| {record.shard} | {stats.get('seconds', 0):,.1f} | {cpu} | {memory} | {states} | {split} |"


def machine_description() -> str:
    """CPU model, logical CPUs and memory of this machine, from /proc (Linux) or platform."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as meminfo:
            kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
        memory = f", {kib / 2**20:.1f} GiB of RAM"
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} logical CPUs{memory} ({platform.system()})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchenum.jobs.palago_publish",
        description="Copy a committed transfer-matrix count table from its store into OUT/palago, with its "
        "partial counts (partial_counts.parquet, .md) and its cost statement (cost.parquet, .md).",
    )
    parser.add_argument("store", type=Path, help="the --out folder of `batchenum run palago --method transfer`")
    parser.add_argument("out", type=Path, help="where to write palago/ (the repository's results/transfer)")
    args = parser.parse_args(argv)
    try:
        written = publish(args.store, args.out, machine_description())
    except PipelineError as error:
        print(f"palago_publish: error: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
