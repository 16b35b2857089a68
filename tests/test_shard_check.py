"""One answer to "is this shard current?": the store's (shard_store.inspect_shard), which a run asks
before reusing a shard and `batchenum status` asks before counting one."""

from __future__ import annotations

import json
import shutil

from helpers import cli, palago_args

from batchenum.jobs.palago import PalagoJob
from batchenum.pipeline.codeversion import code_version
from batchenum.pipeline.job import PlanContext
from batchenum.pipeline.parquet_format import Provenance
from batchenum.pipeline.shard_store import ShardProblemKind, ShardStore
from batchenum.pipeline.storage import Storage


def shard_counts(out) -> dict:
    (job,) = json.loads(cli("status", "--out", str(out), "--json").stdout)["jobs"]
    return job["shards"]


def test_a_shards_files_under_another_shards_name_are_stale_for_the_run_and_for_status(tmp_path):
    cli(*palago_args(tmp_path, 12, 4, "--serial"))
    shards = tmp_path / "palago" / "_shards"
    tables = sorted(folder.name for folder in shards.iterdir())
    first, second = sorted(path.name for path in (shards / tables[0]).iterdir())[:2]
    for table in tables:  # the second shard's files, whole and committed together, under the first's name
        shutil.copyfile(shards / table / second, shards / table / first)

    job = PalagoJob(max_n=12, shards=4)
    store = ShardStore(Storage.at(str(tmp_path)), job, Provenance(job.name, code_version(job), job.params()))
    (shard,) = [shard for shard in job.plan(PlanContext()) if f"{shard.id}.parquet" == first]
    problem = store.check_shard(shard, tables)
    assert problem is not None and problem.kind is ShardProblemKind.STALE and problem.field == "shard"
    assert str(problem).endswith(f"provenance does not match (shard: found {second[:-8]!r}, expected {shard.id!r})")
    assert shard_counts(tmp_path) == {"planned": 4, "committed": 3, "stale": 1, "damaged": 0}

    rerun = cli(*palago_args(tmp_path, 12, 4, "--serial"))
    assert f"shard {shard.id} will be recomputed: " in rerun.stderr + rerun.stdout
    assert store.check_shard(shard, tables) is None
    assert shard_counts(tmp_path) == {"planned": 4, "committed": 4, "stale": 0, "damaged": 0}
