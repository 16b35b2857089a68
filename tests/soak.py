"""The soak: one batch on S3 (through tests/fault_proxy.py) interrupted by random whole-group SIGKILLs
of the driver and by storage outages, then run to the end; shared by tests/test_soak.py and
benchmarks/faults_soak.py.

Each interrupted run is killed after a random number (2-8) of new shard commits, so that every
resume makes progress, and never more than its share of the shards left (a fast machine commits a
few more between the count and the kill, and the last kill must still find work); some of them meet
an outage (refused connections, a stall, cut transfers, in turn) of a few seconds first, which they
must wait out.  With ``window`` seconds, every killed run's writer pauses that long between a
shard's answers and its errors (faults.py), so that most kills land between the two: the figures
count those (``window_kills``).  ``on_kill(k)`` runs after kill ``k`` (a test changes the input
there, so that committed shards are rewritten under later kills).  Returns the figures the
benchmark prints; the caller compares the tables with a clean serial run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from fault_proxy import FaultProxy
from helpers import wait_until

OUTAGE_KINDS = ("refuse", "stall", "cut")


@dataclass
class SoakFigures:
    kills: int = 0  # whole-group SIGKILLs survived
    outages: int = 0  # storage outages survived
    outage_seconds: float = 0.0  # time the store was out while a run waited for it
    commits_between_kills: list[int] = field(default_factory=list)
    window_kills: int = 0  # kills that left a shard with its answers written and its errors not
    final_seconds: float = 0.0  # the last, undisturbed run
    final_reused: int = 0
    total_seconds: float = 0.0


def shards(fs: pafs.S3FileSystem, prefix: str) -> int:
    return len(shard_files(fs, prefix))


def shard_files(fs: pafs.S3FileSystem, prefix: str) -> dict[str, int]:
    """{shard file name: modification time in ns} of the committed files under ``prefix``."""
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return {
        info.base_name: info.mtime_ns or 0
        for info in infos
        if info.type == pafs.FileType.File and info.path.endswith(".parquet")
    }


def _in_window(fs: pafs.S3FileSystem, answers: str) -> bool:
    """Whether some shard has an answers file newer than its errors file (or none): a kill landed
    between the two."""
    written, errors = shard_files(fs, answers), shard_files(fs, answers.rsplit("/", 1)[0] + "/errors")
    return any(name not in errors or errors[name] < stamp for name, stamp in written.items())


def soak(
    command: list[str],
    env: dict,
    proxy: FaultProxy,
    fs: pafs.S3FileSystem,
    shard_prefix: str,
    total: int,
    kills: int = 10,
    outages: int = 3,
    seed: int = 1,
    outage: float = 4.0,
    window: float = 0.0,
    on_kill: Callable[[int], None] | None = None,
) -> SoakFigures:
    """Run ``command`` (a batchenum run through ``proxy``) ``kills`` times, each killed with its whole
    process group after 2-8 new commits, ``outages`` of them meeting a storage outage first; then
    once to the end (it must exit 0).  ``shard_prefix``: where one of its shard tables is listed;
    ``total``: how many shards the run has."""
    chosen = random.Random(seed)
    with_outage = set(chosen.sample(range(kills), outages))
    figures = SoakFigures()
    started = time.monotonic()
    for k in range(kills):
        before = shards(fs, shard_prefix)
        paused = {**env, "BATCHENUM_TEST_PAUSE_BETWEEN_SHARD_TABLES": str(window)} if window else env
        driver = subprocess.Popen(
            command, env=paused, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            target = min(chosen.randint(2, 8), max(2, (total - before) // (2 * (kills - k))))
            if k in with_outage:
                _wait_for(fs, shard_prefix, before + 1, driver)
                proxy.fault(OUTAGE_KINDS[figures.outages % len(OUTAGE_KINDS)], outage)
                wait_until(lambda: proxy.current() is None, "the outage was over", timeout=outage + 60)
                figures.outages += 1
                figures.outage_seconds += outage
            _wait_for(fs, shard_prefix, before + target, driver)
        finally:
            _kill_group(driver)
        figures.kills += 1
        figures.commits_between_kills.append(shards(fs, shard_prefix) - before)
        figures.window_kills += window > 0 and _in_window(fs, shard_prefix)
        if on_kill is not None:
            on_kill(k)
    last = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise AssertionError(f"the run to the end failed:\n{result.stderr}")
    figures.final_seconds = time.monotonic() - last
    figures.final_reused = int(result.stdout.rsplit("(", 1)[1].split(" reused")[0])
    figures.total_seconds = time.monotonic() - started
    return figures


def _wait_for(fs: pafs.S3FileSystem, prefix: str, count: int, driver: subprocess.Popen, timeout: float = 600) -> None:
    try:  # a listing every 0.25 s: one costs the S3 server CPU that the run needs
        wait_until(lambda: shards(fs, prefix) >= count, f"{count} shards were committed", timeout, driver, 0.25)
    except AssertionError as error:
        if driver.poll() is None:
            raise
        raise AssertionError(f"{error}:\n{driver.stderr.read().decode(errors='replace')[-3000:]}") from None


def _kill_group(driver: subprocess.Popen) -> None:
    """SIGKILL the driver and everything in its process group (its private Ray included)."""
    try:
        os.killpg(driver.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    driver.wait(timeout=60)
    driver.stderr.close()
