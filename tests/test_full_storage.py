"""A full disk and a read-only mount, for real: a small tmpfs and a read-only bind mount, each in a
private mount namespace (``unshare -m``, root only) so that nothing outside the test sees them.  The
run stops with one message naming --out, the file it was writing and what to do; the table that
was there before stays whole; once there is room again, the rerun reuses the committed shards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_exit, assert_matches_published, reused, table_bytes

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="needs root and unshare for a private tmpfs or bind mount",
    ),
]

RUN = f'"{sys.executable}" -m batchenum run palago --serial --quiet --out "$OUT"'


def in_private_mounts(script: str, out: Path, logs: Path) -> None:
    """Run a shell ``script`` (with $OUT and $LOGS set) in its own mount namespace."""
    logs.mkdir(exist_ok=True)
    result = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-euc", script],
        env={**os.environ, "OUT": str(out), "LOGS": str(logs)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert_exit(result, 0)


def outcome(logs: Path, name: str) -> tuple[int, str]:
    return int((logs / f"{name}.rc").read_text()), (logs / f"{name}.err").read_text()


def test_a_full_disk_is_one_message_the_old_table_stays_whole_and_the_rerun_reuses(tmp_path):
    out, logs = tmp_path / "out", tmp_path / "logs"
    out.mkdir()
    in_private_mounts(
        f"""
        mount -t tmpfs -o size=4m tmpfs "$OUT"
        {RUN} --max-n 12 --shards 4 > /dev/null 2> "$LOGS/first.err"; echo $? > "$LOGS/first.rc"
        cp "$OUT/palago/creature_counts.parquet" "$LOGS/before.parquet"
        # room left for 12 blocks of 4 KiB: the lease, the plan and a few shards
        dd if=/dev/zero of="$OUT/filler" bs=4k count=$(( $(stat -f -c %a "$OUT") - 12 )) 2> /dev/null
        set +e
        {RUN} --max-n 16 --shards 24 --overwrite > /dev/null 2> "$LOGS/full.err"; echo $? > "$LOGS/full.rc"
        set -e
        find "$OUT/palago/_shards/partial_counts" -newer "$LOGS/before.parquet" -name '*.parquet' | wc -l > "$LOGS/kept"
        cmp "$OUT/palago/creature_counts.parquet" "$LOGS/before.parquet" && echo same > "$LOGS/table"
        rm "$OUT/filler"
        {RUN} --max-n 16 --shards 24 --overwrite > "$LOGS/rerun.out" 2> "$LOGS/rerun.err"; echo $? > "$LOGS/rerun.rc"
        mkdir "$LOGS/result" && cp -r "$OUT/palago" "$LOGS/result/"
    """,
        out,
        logs,
    )
    assert outcome(logs, "first")[0] == 0
    code, err = outcome(logs, "full")
    assert code == 1 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"batchenum: error: --out: {out}/palago takes no more (no space is left on its device), so {out}/palago/"
    ), last
    assert "could not be written" in last and "run the same command again" in last
    assert (logs / "table").read_text().strip() == "same"  # the former table, whole
    kept = int((logs / "kept").read_text())  # shards the full run committed
    code, err = outcome(logs, "rerun")
    assert code == 0, err
    assert kept >= 1 and reused(subprocess.CompletedProcess([], 0, (logs / "rerun.out").read_text())) >= kept
    assert_matches_published(logs / "result", 16)


def test_a_read_only_out_is_one_message_before_and_during_a_run(tmp_path):
    out, logs = tmp_path / "out", tmp_path / "logs"
    out.mkdir()
    in_private_mounts(
        f"""
        {RUN} --max-n 12 --shards 4 > /dev/null 2> "$LOGS/first.err"
        cp "$OUT/palago/creature_counts.parquet" "$LOGS/before.parquet"
        mount --bind "$OUT" "$OUT" && mount -o remount,ro,bind "$OUT"
        set +e
        {RUN} --max-n 13 --shards 4 --overwrite > /dev/null 2> "$LOGS/before_run.err"; echo $? > "$LOGS/before_run.rc"
        set -e
        mount -o remount,rw,bind "$OUT"
        {RUN} --max-n 21 --shards 24 --overwrite > /dev/null 2> "$LOGS/during.err" & run=$!
        until [ "$(ls "$OUT/palago/_shards/partial_counts" | wc -l)" -ge 6 ]; do sleep 0.05; done
        mount -o remount,ro,bind "$OUT"
        set +e
        wait $run; echo $? > "$LOGS/during.rc"
        set -e
        cmp "$OUT/palago/creature_counts.parquet" "$LOGS/before.parquet" && echo same > "$LOGS/table"
    """,
        out,
        logs,
    )
    code, err = outcome(logs, "before_run")
    assert code == 1 and "Traceback" not in err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(f"batchenum: error: --out: cannot write to {out}: its file system is read-only")
    ), err
    code, err = outcome(logs, "during")
    assert code == 1 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"batchenum: error: --out: {out}/palago takes no more (its file system is read-only), so {out}/palago/"
    ), last
    assert (logs / "table").read_text().strip() == "same"
    assert table_bytes(out) == (logs / "before.parquet").read_bytes()  # and outside the namespace too
