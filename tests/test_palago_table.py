"""The committed transfer-matrix table (results/transfer/palago) and the command that publishes it
from a store with its partial counts and cost statement (jobs/palago_publish.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import REPO

from batchenum.jobs.palago_publish import recombined

COMMITTED = REPO / "results" / "transfer" / "palago"

# The terms n = 45..50 as first committed (checked then against the int64 table n <= 44, every
# Burnside division exact), n = 51, 52 as the n <= 52 table first gave them, and n = 53..56 as the
# n <= 56 table did: free, fixed.
FIRST_COMMITTED = {
    45: (22_994_487_871_219_157, 137_966_927_106_711_808),
    46: (65_646_945_396_280_077, 393_881_672_251_283_067),
    47: (187_613_761_310_374_109, 1_125_682_567_532_301_555),
    48: (536_730_557_427_260_344, 3_220_383_344_212_471_837),
    49: (1_536_993_616_716_270_173, 9_221_961_699_389_484_156),
    50: (4_405_479_642_588_093_190, 26_432_877_854_558_583_438),
    51: (12_638_818_893_669_024_294, 75_832_913_359_502_402_545),
    52: (36_290_612_165_738_591_656, 217_743_672_991_737_432_675),
    53: (104_290_529_703_951_481_683, 625_743_178_216_756_835_361),
    54: (299_945_831_538_150_338_166, 1_799_674_989_221_376_184_535),
    55: (863_331_181_456_293_076_518, 5_179_987_088_718_442_658_316),
    56: (2_486_767_154_489_309_241_984, 14_920_602_926_914_872_763_740),
}
COUNT_COLUMNS = ["free", "fixed", *(f"free_stabiliser_{s}" for s in (1, 2, 3, 6))]


def committed_counts() -> pd.DataFrame:
    return pd.read_parquet(COMMITTED / "creature_counts.parquet").set_index("n").map(int)


def test_committed_partial_counts_recombine_to_the_committed_table():
    counts = committed_counts()
    columns = recombined(pq.read_table(COMMITTED / "partial_counts.parquet"))  # Burnside divisions exact
    for name in COUNT_COLUMNS:
        assert [columns[name][n] for n in counts.index] == counts[name].tolist(), name
    assert counts.index.max() == 60
    assert counts.loc[60, "free"] == 172_380_469_300_124_994_539_207
    assert counts.loc[60, "fixed"] == 1_034_282_815_800_584_829_908_027


def test_committed_table_keeps_the_verified_rows():
    # n <= 28 against the direct search's table (an independent algorithm), n = 45..56 against the
    # tables as first committed: a longer run changes no row it shares with a shorter one.
    counts = committed_counts()
    direct = pd.read_parquet(REPO / "results" / "extended" / "palago" / "creature_counts.parquet").set_index("n")
    for name in COUNT_COLUMNS:
        assert counts.loc[direct.index, name].tolist() == [int(x) for x in direct[name]], name
    for n, (free, fixed) in FIRST_COMMITTED.items():
        assert (counts.loc[n, "free"], counts.loc[n, "fixed"]) == (free, fixed), n


def test_committed_cost_statement_says_what_it_does_not_record():
    cost = pd.read_parquet(COMMITTED / "cost.parquet")
    partial = pd.read_parquet(COMMITTED / "partial_counts.parquet")
    assert set(cost.shard) == set(partial.shard)
    assert (cost.wall_seconds >= 0).all()
    text = (COMMITTED / "cost.md").read_text()
    if cost.cpu_seconds.isna().any():
        assert "**Not recorded**" in text and "`cpu_ms`" in text
    assert "CPUs" in text and "RAM" in text


def test_publish_copies_a_store_with_partial_counts_and_costs(tmp_path):
    import batchenum

    store, out = tmp_path / "store", tmp_path / "out"
    batchenum.run("palago", max_n=14, method="transfer", out=str(store), serial=True)
    published = subprocess.run(
        [sys.executable, "-m", "batchenum.jobs.palago_publish", str(store), str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert published.returncode == 0, published.stderr
    folder = out / "palago"
    assert (folder / "creature_counts.parquet").read_bytes() == (
        store / "palago" / "creature_counts.parquet"
    ).read_bytes()
    assert f"--max-n 14 --out {out}" in (folder / "creature_counts.md").read_text()
    counts = pd.read_parquet(folder / "creature_counts.parquet").set_index("n").astype(object).map(int)
    columns = recombined(pq.read_table(folder / "partial_counts.parquet"))
    assert [columns["free"][n] for n in counts.index] == counts.free.tolist()
    # this code records each height's cost: every column filled for the heights
    cost = pd.read_parquet(folder / "cost.parquet").set_index("shard")
    heights = cost.loc[[s for s in cost.index if s.startswith("h")]]
    assert heights[["cpu_seconds", "peak_rss_bytes", "peak_states", "state_steps"]].notna().all().all()
    assert (
        heights.loc["h006", "peak_states"] > 0
        and heights.loc["h006", "state_steps"] > heights.loc["h006", "peak_states"]
    )
    assert "CPU-hours" in (folder / "cost.md").read_text()
    # the side tables name the run they belong to, as the count table does
    table_meta = pq.read_schema(folder / "creature_counts.parquet").metadata
    for name in ("partial_counts", "cost"):
        meta = pq.read_schema(folder / f"{name}.parquet").metadata
        assert meta[b"batchenum.table"] == name.encode()
        assert meta[b"batchenum.params"] == table_meta[b"batchenum.params"]


def test_publish_refuses_a_store_whose_shards_disagree_with_its_table(tmp_path):
    import batchenum

    store = tmp_path / "store"
    batchenum.run("palago", max_n=12, method="transfer", out=str(store), serial=True)
    shard = store / "palago" / "_shards" / "partial_counts" / "h003.parquet"
    table = pq.read_table(shard)
    meta = dict(table.schema.metadata)
    meta[b"batchenum.code"] = b"2+0000000000000000"
    pq.write_table(table.replace_schema_metadata(meta), shard)
    published = subprocess.run(
        [sys.executable, "-m", "batchenum.jobs.palago_publish", str(store), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert published.returncode == 1
    assert "h003.parquet was computed by code 2+0000000000000000" in published.stderr
    assert not (tmp_path / "out").exists()


def test_publish_names_a_folder_that_holds_no_run(tmp_path):
    from batchenum.jobs.palago_publish import publish
    from batchenum.pipeline.errors import PipelineError

    (tmp_path / "palago").mkdir()
    with pytest.raises(PipelineError, match="no committed run"):
        publish(tmp_path, tmp_path / "out", "a machine")
    shutil.rmtree(tmp_path / "palago")
    (tmp_path / "palago").mkdir()
    (tmp_path / "palago" / "_manifest.json").write_text(json.dumps({"state": "committed", "job": "dungeons"}))
    with pytest.raises(PipelineError, match="not a committed `batchenum run palago --method transfer`"):
        publish(tmp_path, tmp_path / "out", "a machine")


def test_the_recipe_in_partial_counts_md_gives_the_free_column(monkeypatch):
    text = (COMMITTED / "partial_counts.md").read_text()
    recipe = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(COMMITTED)
    scope: dict = {}
    exec(recipe, scope)  # the committed file's own example, as a reader would run it
    assert [int(x) for x in scope["free"]] == committed_counts().free.tolist()


def test_the_cost_statement_estimates_what_a_resumed_shard_did_before_its_resume():
    # A shard resumed from a checkpoint records the CPU time of the invocation that finished it; its
    # state-steps say how much an earlier one did, and the statement estimates that part's CPU.
    from batchenum.jobs.palago_publish import ShardRecord, _cost_markdown

    stats = {"seconds": 1647.6, "cpu_ms": 1_528_728, "state_steps": 2_642_593_300}
    records = [
        ShardRecord("h015", {"height": 15}, {}, {**stats, "state_steps_resumed": 0}),
        ShardRecord("h016", {"height": 16}, {}, {**stats, "state_steps_resumed": 314_167_765}),
    ]
    text = _cost_markdown(records, {"params": {"max_n": 56}, "code_version": "2+0"}, "a machine")
    assert "h016: 314,167,765 of its 2,642,593,300 state-steps (11.9%) came from an earlier invocation" in text
    assert "that part took about 206 CPU seconds" in text and "h015:" not in text
    assert "about 3,264 CPU seconds (0.907 CPU-hours) in all" in text  # 2 x 1,528.7 + 206.3
