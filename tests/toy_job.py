"""A small job that exercises every pipeline feature without any puzzle: shards of integers,
a table with duplicate keys to drop, a partitioned table, and an aggregate made in finalize."""

from __future__ import annotations

import os
import time

from batchenum.pipeline.job import Column, Job, PlanContext, Shard, ShardResult, TableSpec

ITEMS = TableSpec(
    "items",
    (Column("value", "int64"), Column("square", "int64"), Column("parity", "int64"), Column("label", "string")),
    key=("value",),
    sort=("value",),
    partition="parity",
)
TOTALS = TableSpec(
    "totals", (Column("parity", "int64"), Column("count", "int64"), Column("sum", "int64")), sort=("parity",)
)


class ToyJob(Job):
    """Shard k covers values [k*width, (k+2)*width): neighbouring shards overlap, so the merge
    must deduplicate."""

    name = "toy"
    version = "1"
    tables = (ITEMS, TOTALS)
    shard_tables = ("items",)

    def __init__(
        self,
        shards: int = 6,
        width: int = 5,
        fail_on: str | None = None,
        seconds: float = 0.0,
        seconds_elsewhere: float | None = None,
    ):
        self.shards = shards
        self.width = width
        self.fail_on = fail_on
        self.seconds = seconds  # each shard takes at least this long (without using a CPU)
        # in another process (a Ray worker), if given: a hand-over test then ends once Ray is up
        self.seconds_elsewhere = seconds if seconds_elsewhere is None else seconds_elsewhere
        self.made_in = os.getpid()

    def extra_params(self) -> dict:
        return {"shards": self.shards, "width": self.width}

    def plan(self, context: PlanContext) -> list[Shard]:
        return [Shard(f"s{k:03d}", {"start": k * self.width, "stop": (k + 2) * self.width}) for k in range(self.shards)]

    def run_shard(self, shard: Shard, context=None) -> ShardResult:
        if shard.id == self.fail_on:
            raise ValueError(f"bad input in {shard.id}")
        time.sleep(self.seconds if os.getpid() == self.made_in else self.seconds_elsewhere)
        values = list(range(shard.spec["start"], shard.spec["stop"]))
        return ShardResult(
            {
                "items": {
                    "value": values,
                    "square": [v * v for v in values],
                    "parity": [v % 2 for v in values],
                    "label": [f"v{v}" for v in values],
                }
            }
        )

    def finalize(self, tables: dict, out) -> dict:
        items = tables["items"]  # published as merged; a small table read whole for the totals
        frame = items.to_pandas()
        totals = frame.groupby("parity", as_index=False).agg(count=("value", "size"), sum=("value", "sum"))
        return {"items": items, "totals": totals.astype("int64")}
