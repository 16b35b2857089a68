"""The transfer-matrix method against the direct search (an independent algorithm)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from helpers import REPO

from batchenum.solvers.palago import count_creatures
from batchenum.solvers.palago.transfer import (
    MAX_N as TRANSFER_MAX_N,
)
from batchenum.solvers.palago.transfer import (
    count_height,
    count_height_reference,
    exact_counts,
    fixed_counts,
    fixed_counts_reference,
    max_height,
)

MAX_N = 16


@pytest.fixture(scope="module")
def direct():
    counts, _ = count_creatures(MAX_N)
    return counts


def test_reference_sweep_matches_the_direct_search(direct):
    assert fixed_counts_reference(MAX_N).tolist() == direct.fixed.tolist()


def test_kernel_matches_the_reference_height_by_height():
    for height in range(1, max_height(MAX_N) + 1):
        assert count_height(height, MAX_N).tolist() == count_height_reference(height, MAX_N).tolist()


def test_heights_beyond_max_height_hold_nothing():
    # a creature of height H needs at least 2 (H - 1) + 3 hexes (and W >= H)
    assert not count_height(max_height(MAX_N) + 1, MAX_N).any()
    assert not count_height_reference(max_height(MAX_N) + 1, MAX_N).any()


def test_every_box_swept_without_the_reflection_gives_the_same_counts(direct):
    # Tall boxes swept along their long side instead of counted as the mirror of wide ones: other
    # states, other widths, the same total.
    assert fixed_counts(MAX_N, halved=False).tolist() == direct.fixed.tolist()
    unhalved = sum(count_height_reference(h, 14, weights=False) for h in range(1, max_height(14) + 1))
    assert unhalved.tolist() == direct.fixed[:15].tolist()


def test_unweighted_sweep_counts_boxes_of_one_height(direct):
    # Height 1 without the W >= H weights: the straight lines along i; k vertices make 2 k + 1
    # hexes, one fixed creature each (k = 1 is the eye).
    line = count_height_reference(1, MAX_N, weights=False)
    assert [n for n in range(MAX_N + 1) if line[n]] == list(range(3, MAX_N + 1, 2))
    assert set(line[line > 0].tolist()) == {1}


def test_job_writes_the_direct_table(tmp_path):
    out_transfer, out_direct = tmp_path / "transfer", tmp_path / "direct"
    for method, out in (("transfer", out_transfer), ("direct", out_direct)):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "batchenum",
                "run",
                "palago",
                "--max-n",
                str(MAX_N),
                "--serial",
                "--method",
                method,
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
    transfer = pd.read_parquet(out_transfer / "palago" / "creature_counts.parquet")
    by_search = pd.read_parquet(out_direct / "palago" / "creature_counts.parquet")
    assert transfer.drop(columns="nodes").equals(by_search.drop(columns="nodes"))
    assert (transfer.nodes == 0).all() and len(transfer) == MAX_N
    assert "--method transfer" in (out_transfer / "palago" / "creature_counts.md").read_text()


def test_transfer_refuses_a_catalogue(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchenum",
            "run",
            "palago",
            "--max-n",
            "10",
            "--method",
            "transfer",
            "--catalogue-max-n",
            "5",
            "--serial",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 2 and "--method transfer counts only" in result.stderr


def test_the_lower_bound_never_cuts_a_creature():
    # Knuth's check of Jensen's pruning: rerun with the bound weakened (1: columns only) and
    # switched off (states then die only when their size alone exceeds max_n) and compare.
    strongest = fixed_counts(MAX_N).tolist()
    assert fixed_counts(MAX_N, bound=2).tolist() == strongest
    assert fixed_counts(MAX_N, bound=1).tolist() == strongest
    assert fixed_counts(MAX_N, bound=False).tolist() == strongest


def test_the_stronger_bound_prunes_states():
    processed = {}
    for level in (0, 1, 2, 3):
        stats = np.zeros(2, dtype=np.int64)
        count_height(6, MAX_N, stats=stats, bound=level)
        processed[level] = int(stats[1])
    assert processed[0] > processed[1] > processed[2] > processed[3] > 0


def test_kernel_matches_the_direct_search(direct):
    assert fixed_counts(MAX_N).tolist() == direct.fixed.tolist()


def test_kernel_matches_the_published_table_to_24():
    table = pd.read_parquet(REPO / "results" / "palago" / "creature_counts.parquet")
    assert fixed_counts(int(table.n.max()))[1:].tolist() == table.fixed.tolist()


def test_smallest_tables(tmp_path):
    for max_n in (1, 2):
        out = tmp_path / str(max_n)
        result = subprocess.run(_transfer_run(out, max_n=max_n), capture_output=True, text=True, cwd=REPO, timeout=120)
        assert result.returncode == 0, result.stderr
        counts = pd.read_parquet(out / "palago" / "creature_counts.parquet")
        assert counts.n.tolist() == list(range(1, max_n + 1)) and not counts.drop(columns="n").any().any()


P = 2**61 - 1


def test_exact_counts_rebuild_integers_past_int64_by_crt():
    values = [0, 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 3**70, 2**64 * P - 1]
    rebuilt = exact_counts(
        np.array([v % 2**64 for v in values], dtype=np.uint64),
        np.array([v % P for v in values], dtype=np.int64),
        np.array([float(v) for v in values]),
    )
    assert rebuilt.tolist() == values and all(type(v) is int for v in rebuilt)


@pytest.mark.parametrize("value", [2**64 * P, 2**64 * P + 12345, 5 * 2**64 * P + 2**70])
def test_exact_counts_refuse_counts_past_the_crt_range(value):
    # The residues alone would give value mod 2^64 P: the float64 channel exposes it.
    with pytest.raises(ArithmeticError, match="does not fit"):
        exact_counts(
            np.array([value % 2**64], dtype=np.uint64), np.array([value % P], dtype=np.int64), np.array([float(value)])
        )


def test_kernel_counts_are_python_ints():
    counts = count_height(3, MAX_N)
    assert counts.dtype == object and all(type(v) is int for v in counts)


def test_max_n_cap_follows_the_state_key():
    from batchenum.jobs.palago import PalagoJob
    from batchenum.pipeline.errors import UsageError

    assert max_height(TRANSFER_MAX_N) == 30 and PalagoJob.create(max_n=TRANSFER_MAX_N, method="transfer").wide
    with pytest.raises(UsageError, match=f"max_n must be between 1 and {TRANSFER_MAX_N}"):
        PalagoJob.create(max_n=TRANSFER_MAX_N + 1, method="transfer")
    with pytest.raises(ValueError, match="height must be between 1 and 30"):
        count_height(31, 70)


def test_heights_split_on_ray_from_the_size_where_they_outgrow_a_task():
    # below HEIGHTS_SPLIT_FROM_N a height fits a task and the head start may compute it whole
    from batchenum.jobs.palago import PalagoJob
    from batchenum.jobs.palago_transfer import HEIGHTS_SPLIT_FROM_N
    from batchenum.pipeline.job import PlanContext

    for max_n, splits in ((HEIGHTS_SPLIT_FROM_N - 1, False), (HEIGHTS_SPLIT_FROM_N, True)):
        job = PalagoJob.create(max_n=max_n, method="transfer")
        shards = job.plan(PlanContext())
        assert {job.splits_on_ray(s) for s in shards if s.id.startswith("h")} == {splits}
        assert not any(job.splits_on_ray(s) for s in shards if s.id.startswith("s-"))


def test_wide_table_holds_the_same_counts_as_decimal_strings(tmp_path):
    # Past --max-n 44 the count columns are decimal strings; force them at n = 16 and compare with
    # the int64 table of the same run.
    import batchenum
    from batchenum.jobs.palago_transfer import PalagoTransferJob

    narrow = batchenum.run("palago", max_n=MAX_N, method="transfer", out=str(tmp_path / "narrow"), serial=True)
    wide = batchenum.run(PalagoTransferJob(MAX_N, wide=True), out=str(tmp_path / "wide"), serial=True)
    narrow_counts = narrow.tables["creature_counts"].to_pandas()
    wide_counts = wide.tables["creature_counts"].to_pandas()
    assert (narrow_counts.dtypes.drop("n") == "int64").all()
    assert all(isinstance(v, str) for v in wide_counts.fixed)
    as_ints = wide_counts.drop(columns="n").map(int)  # one line from the stored strings
    assert as_ints.equals(narrow_counts.drop(columns="n").astype(object).map(int))
    assert as_ints.fixed.sum() > 0


def test_the_api_takes_the_checkpoint_interval_as_the_cli_does(tmp_path):
    import batchenum
    from batchenum.jobs.palago import CHECKPOINT_INTERVAL, PalagoJob
    from batchenum.pipeline.errors import UsageError

    assert PalagoJob.create(max_n=30, method="transfer", checkpoint_interval=15).checkpoint_interval == 15
    assert PalagoJob.create(max_n=30, method="transfer").checkpoint_interval == CHECKPOINT_INTERVAL
    with pytest.raises(UsageError, match="checkpoint_interval applies to method transfer"):
        batchenum.run("palago", max_n=8, checkpoint_interval=15, out=str(tmp_path))
    with pytest.raises(UsageError, match="above 0, not 0"):
        batchenum.run("palago", max_n=8, method="transfer", checkpoint_interval=0, out=str(tmp_path))
    saved = batchenum.run(
        "palago", max_n=MAX_N, method="transfer", checkpoint_interval=1e-6, serial=True, out=str(tmp_path / "saved")
    )
    plain = batchenum.run("palago", max_n=MAX_N, method="transfer", serial=True, out=str(tmp_path / "plain"))
    assert saved.tables["creature_counts"].to_pandas().equals(plain.tables["creature_counts"].to_pandas())


CHECKPOINT_N = 34  # its largest heights sweep for about a second each: saved every 0.2 s, they leave saves to find


def _transfer_run(out, *extra, max_n=CHECKPOINT_N) -> list[str]:
    return [
        sys.executable,
        "-m",
        "batchenum",
        "run",
        "palago",
        "--max-n",
        str(max_n),
        "--method",
        "transfer",
        "--serial",
        "--out",
        str(out),
        *extra,
    ]


def test_a_killed_run_resumes_from_its_checkpoints(tmp_path):
    # The driver is frozen as soon as a height's sweep has been saved (so the save cannot be
    # committed away before the kill), then killed; the rerun resumes that height from its save,
    # says so, and writes the clean run's table.  (How much time that saves is a benchmark's
    # figure, not a test's: docs/palago_transfer.md, "Checkpoints".)
    import os
    import signal
    import time

    subprocess.run(_transfer_run(tmp_path / "clean"), check=True, capture_output=True, cwd=REPO, timeout=1200)
    out = tmp_path / "killed"
    saves = out / "palago" / "_checkpoints"
    run = subprocess.Popen(
        _transfer_run(out, "--checkpoint-interval", "0.2"),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 1200
    saved = []
    while not saved:
        while not list(saves.glob("*.ckpt")):
            assert run.poll() is None, "the run finished before any height was saved"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(run.pid, signal.SIGSTOP)
        saved = sorted(path.stem for path in saves.glob("*.ckpt"))
        if not saved:  # its height committed between the look and the stop: wait for another save
            os.kill(run.pid, signal.SIGCONT)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    status = subprocess.run(
        [sys.executable, "-m", "batchenum", "status", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    for shard in saved:
        assert f"checkpoint:  {shard}: column " in status.stdout, status.stdout

    rerun = subprocess.run(
        _transfer_run(out, "--checkpoint-interval", "0.2"), capture_output=True, text=True, cwd=REPO, timeout=1200
    )
    assert rerun.returncode == 0, rerun.stderr
    for shard in saved:
        assert re.search(rf"{shard}\.ckpt: resuming from the save at column \d+", rerun.stderr), rerun.stderr
    table = "palago/creature_counts.parquet"
    assert pd.read_parquet(out / table).equals(pd.read_parquet(tmp_path / "clean" / table))
    assert not list(saves.glob("*.ckpt"))  # each removed once its height committed


def test_a_checkpoint_of_other_parameters_is_not_resumed(tmp_path):
    from batchenum.pipeline.checkpoint import Checkpoint
    from batchenum.pipeline.job import Shard
    from batchenum.pipeline.storage import Storage

    storage = Storage.at(str(tmp_path))
    shard = Shard("h005", {"height": 5})
    Checkpoint(storage, shard, {"params": "a"}).save(b"state", "column 3")
    assert Checkpoint(storage, shard, {"params": "a"}).load() == b"state"
    assert Checkpoint(storage, shard, {"params": "b"}).load() is None


def test_a_sweep_resumed_from_any_save_gives_the_same_counts():
    # save_every=0: a save at the end of every column once the last save's time has passed nine
    # times over (how many depends on the machine's speed, at least one)
    from batchenum.solvers.palago.transfer import saved_stats

    saved, stats_whole = [], np.zeros(2, dtype=np.int64)
    whole = count_height(7, 24, save=lambda data, progress: saved.append(data), save_every=0.0, stats=stats_whole)
    assert saved
    for data in saved:
        stats = np.zeros(2, dtype=np.int64)
        assert count_height(7, 24, resume=data, stats=stats).tolist() == whole.tolist()
        # the resumed sweep's stats: the save's, then its own, adding up to the whole sweep's
        assert stats.tolist() == stats_whole.tolist()
        assert 0 < saved_stats(data)[1] < stats_whole[1]
    with pytest.raises(ValueError, match="saved sweep"):
        count_height(6, 24, resume=saved[0])


def test_a_save_holds_each_state_over_its_own_range_only():
    # The pooled layout (docs/palago_transfer.md, "Rows as long as their ranges"): a saved
    # generation's pool is exactly its rows' ranges, one exact word a coefficient while the counts
    # are small (narrow rows), no holes, and a resumed sweep reads it back to the same counts.
    from batchenum.solvers.palago.transfer import _SweepState

    saved = []
    whole = count_height(9, 26, save=lambda data, progress: saved.append(data), save_every=0.0)
    largest = max(
        (_SweepState.from_bytes(data, (9, 26, True, 3)).generation_rows() for data in saved),
        key=lambda generation: generation.rows,
    )
    widths = largest.hi - largest.lo + 1
    assert not largest.wide.any()
    assert largest.pool.size == widths.sum() < 27 * largest.rows / 2
    assert largest.heads[:, -1].tolist() == (np.cumsum(widths) - widths).tolist()
    pw, pp, pf = largest.channels(27)
    assert (pf[np.arange(largest.rows), largest.lo] > 0).all()  # coefficient lo is nonzero
    assert count_height(9, 26, resume=saved[-1]).tolist() == whole.tolist()


def scaled_save(data: bytes, sweep: tuple, factor: int) -> tuple[bytes, np.ndarray]:
    """A save of count_height whose every live polynomial is multiplied by ``factor``, its completed
    creatures cleared; and those creatures, as exact ints."""
    from batchenum.solvers.palago.transfer import Generation, _SweepState, exact_counts

    state = _SweepState.from_bytes(data, sweep)
    live = state.generation_rows()
    n1 = sweep[1] + 1
    pw, pp, pf = (channel.astype(object) * factor for channel in live.channels(n1))
    scaled = Generation.pack(
        live.keys,
        (pw % 2**64).astype(np.uint64),
        (pp % P).astype(np.int64),
        pf.astype(np.float64),
        live.lo,
        live.hi,
    )
    done = exact_counts(state.done_w, state.done_p, state.done_f)
    state.data, state.count = (scaled.heads, scaled.pool), scaled.rows
    state.done_w, state.done_p, state.done_f = np.zeros(n1, np.uint64), np.zeros(n1, np.int64), np.zeros(n1)
    return state.to_bytes(sweep), done


@pytest.mark.parametrize("factor", [2**50 + 1, 3 * 2**51 - 1])
def test_a_sweep_of_counts_past_2_53_turns_rows_wide_and_stays_exact(factor):
    # The sweep is linear in the polynomials: every live polynomial times ``factor`` completes
    # ``factor`` times the creatures still to come.  Scaled so, most coefficients start below 2^53
    # in narrow rows and reach it in sums (a row turns wide there), some start wide; the counts
    # must come out exact, past 2^64 (the Chinese remainder of both channels).
    sweep = (9, 26, True, 3)
    saved: list[bytes] = []
    whole = count_height(9, 26)
    from batchenum.solvers.palago.transfer import SweepState, _SweepState, advance_column

    # a save at every column's end (count_height's own saves follow the clock: how many varies)
    state, stats, spare = SweepState.start(26), np.zeros(2, np.int64), None
    while state.count > 0:
        state, spare = advance_column(sweep, state, stats, spare)
        if state.count:
            saved.append(state.to_bytes(sweep))
    data, done = scaled_save(saved[len(saved) // 2], sweep, factor)
    start = _SweepState.from_bytes(data, sweep).generation_rows()
    assert 0 < start.wide.sum() < start.rows  # both widths at the start
    rest = count_height(9, 26, resume=data)
    assert rest.tolist() == [(total - early) * factor for total, early in zip(whole.tolist(), done.tolist())]
    assert max(rest.tolist()) > 2**64


def test_a_save_of_an_older_layout_is_refused_with_what_to_do(tmp_path):
    import io

    for layout in (
        {"data": np.zeros((1, 8), np.int64)},  # rows as wide as the widest range
        {"heads": np.zeros((1, 6), np.int64), "pool": np.zeros(3, np.int64)},  # three channels everywhere
    ):
        buffer = io.BytesIO()
        np.savez(
            buffer,
            sweep=np.array((7, 24, 1, 3), np.int64),
            scalars=np.array([1, 3], np.int64),
            done_w=np.zeros(25, np.uint64),
            done_p=np.zeros(25, np.int64),
            done_f=np.zeros(25),
            stats=np.zeros(2, np.int64),
            **layout,
        )
        with pytest.raises(ValueError, match="delete the checkpoint"):
            count_height(7, 24, resume=buffer.getvalue())


def test_height_shards_record_their_cost(tmp_path):
    # Each height's shard files record its sweep's peak states and state-steps (the same figures
    # count_height reports), the CPU time and, on Linux, the peak resident memory of the shard;
    # the symmetric shards record their CPU time and memory.
    import json

    import pyarrow.parquet as pq

    import batchenum

    batchenum.run("palago", max_n=MAX_N, method="transfer", out=str(tmp_path), serial=True)
    for height in range(1, max_height(MAX_N) + 1):
        footer = pq.ParquetFile(tmp_path / "palago" / "_shards" / "partial_counts" / f"h{height:03d}.parquet")
        stats = json.loads(footer.schema_arrow.metadata[b"batchenum.stats"])
        sweep = np.zeros(2, dtype=np.int64)
        count_height(height, MAX_N, stats=sweep)
        assert (stats["peak_states"], stats["state_steps"]) == (int(sweep[0]), int(sweep[1])), height
        assert stats["state_steps_resumed"] == 0
        assert stats["cpu_ms"] >= 0 and stats["cpu_ms"] <= 1000 * stats["seconds"] + 1000
        assert stats["peak_rss_bytes"] >= stats["start_rss_bytes"] > 10**6  # Python with numpy: tens of MB
    for symmetric in ("s-reflection", "s-rotation-0-0"):
        footer = pq.ParquetFile(tmp_path / "palago" / "_shards" / "symmetric_counts" / f"{symmetric}.parquet")
        stats = json.loads(footer.schema_arrow.metadata[b"batchenum.stats"])
        assert stats["cpu_ms"] >= 0 and stats["peak_rss_bytes"] >= stats["start_rss_bytes"]


def test_shard_cost_measures_the_peak_during_the_shard_not_before():
    from batchenum.jobs.palago_transfer import ShardCost

    before = np.ones(40_000_000)  # 320 MB resident, then freed: the process's high-water mark
    del before
    with ShardCost() as cost:
        during = np.ones(5_000_000)  # 40 MB
        del during
    stats = cost.stats()
    assert stats["cpu_ms"] >= 0
    # without the reset the mark would stay at least 320 MB above the start; the process's own size
    # before the test (other tests ran in it) does not matter
    assert 30_000_000 < stats["peak_rss_bytes"] - stats["start_rss_bytes"] < 100_000_000


def test_expected_work_follows_the_committed_cost_statement():
    # the estimate of the time left weighs each shard by PalagoTransferJob.shard_work: against the
    # longest committed run's cost statement, every height of 100 CPU s or more (the smaller ones
    # cost less a state-step, h001 holds the compiles), the heights together and the symmetric
    # shards together within a factor 2 (the model was fitted at n = 36, 44, 56 and 60's first heights).
    # A resumed height records the CPU of the invocation that finished it: scaled to all its
    # state-steps here, at that invocation's cost a step
    from batchenum.jobs.palago_transfer import PalagoTransferJob
    from batchenum.pipeline.job import PlanContext

    cost = pd.read_parquet(REPO / "results" / "transfer" / "palago" / "cost.parquet").set_index("shard")
    resumed = cost.state_steps_resumed.fillna(0) / cost.state_steps.where(cost.state_steps > 0)
    cost["cpu_seconds"] /= 1 - resumed.fillna(0)
    max_n = pd.read_parquet(REPO / "results" / "transfer" / "palago" / "creature_counts.parquet").n.max()
    job = PalagoTransferJob(int(max_n))
    expected = {shard.id: job.shard_work(shard) for shard in job.plan(PlanContext())}
    assert all(work > 0 for work in expected.values()) and set(expected) == set(cost.index)
    for shard, seconds in cost.cpu_seconds.items():
        if shard.startswith("h") and seconds >= 100:
            assert 0.5 < expected[shard] / seconds < 2, (shard, expected[shard], seconds)
    for kind in ("h", "s-"):
        shards = [shard for shard in cost.index if shard.startswith(kind)]
        ratio = sum(expected[shard] for shard in shards) / cost.cpu_seconds[shards].sum()
        assert 0.5 < ratio < 2, (kind, ratio)
