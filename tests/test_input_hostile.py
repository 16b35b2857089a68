"""Hostile input is bounded (issue 35 item 5): symlink loops, files reached twice, names that are
not UTF-8, gzip bombs, blank-line floods and maximal records, each run for real (real links, real
gzip streams, the real CLI in a child process) within a time limit, and its peak resident memory
(``os.wait4``) held under the bound docs/batch_input.md gives."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from batchenum.pipeline.errors import InputError
from batchenum.pipeline.inputs import resolve_inputs

MB = 1 << 20
# Peak resident memory of the CLI refusing an input, or reading a small batch: well below what the
# hostile inputs cost before (2.6 GB and more); a bare `batchenum run --serial` takes about 200 MB.
REFUSAL_PEAK = 600 * MB


def measured(*args: str, timeout: float = 120) -> tuple[int, str, int]:
    """(exit status, standard error, peak resident bytes) of ``batchenum ARGS`` in a child process,
    killed (its whole group) if it outlives ``timeout`` seconds."""
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen([sys.executable, "-m", "batchenum", *args], stdout=subprocess.DEVNULL, stderr=stderr,
                                 start_new_session=True)
        timer = threading.Timer(timeout, os.killpg, (child.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        return child.returncode, stderr.read().decode(errors="replace"), usage.ru_maxrss * 1024


def records(count: int, prefix: str = "r") -> str:
    return "".join(json.dumps({"id": f"{prefix}{k}", "grid": ["@.$"]}) + "\n" for k in range(count))


# ------------------------------------------------------------------------------ links and names


def test_a_symlink_loop_stops_at_once_naming_the_link(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text(records(497))
    (batch / "self").symlink_to(".")
    (batch / "again").symlink_to(".")  # two loops: 2^k paths at depth k, where pyarrow listed for ever
    with pytest.raises(InputError) as caught:
        resolve_inputs(str(batch))
    message = str(caught.value)
    assert f"{batch}/again (the same as {batch})" in message and f"{batch}/self (the same as {batch})" in message
    assert "Every file is read once: remove those links" in message
    status, stderr, peak = measured("run", "dungeons", "--input", str(batch), "--out", str(tmp_path / "out"),
                                    "--serial", "--quiet", timeout=60)
    assert status == 1 and "a second time, through links" in stderr and "Traceback" not in stderr
    assert peak < REFUSAL_PEAK, f"{peak / MB:.0f} MB"
    assert not (tmp_path / "out" / "dungeons" / "answers").exists()


def test_a_file_reached_twice_is_named_with_the_path_it_repeats(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text(records(5))
    (batch / "b.jsonl").symlink_to("a.jsonl")
    os.link(batch / "a.jsonl", batch / "c.jsonl")  # a hard link is the same file too
    with pytest.raises(InputError, match="reaches 2 files or folders a second time") as caught:
        resolve_inputs(str(batch))
    assert f"{batch}/b.jsonl (the same as {batch}/a.jsonl)" in str(caught.value)
    assert f"{batch}/c.jsonl (the same as {batch}/a.jsonl)" in str(caught.value)
    # The same file named by two values under two paths
    (tmp_path / "elsewhere.jsonl").symlink_to(batch / "a.jsonl")
    with pytest.raises(InputError, match=f"{tmp_path}/elsewhere.jsonl \\(the same as {batch}/a.jsonl\\)"):
        resolve_inputs([str(batch / "a.jsonl"), str(tmp_path / "elsewhere.jsonl")])


def test_two_links_to_one_folder_are_refused_and_a_link_to_another_file_is_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.jsonl").write_text(records(3, "x"))
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text(records(2))
    (batch / "x.jsonl").symlink_to(outside / "x.jsonl")  # a file elsewhere, reached once: read
    assert [source.display_root for source in resolve_inputs(str(batch))] == [f"{batch}/a.jsonl", f"{batch}/x.jsonl"]
    (batch / "one").symlink_to(outside)
    (batch / "two").symlink_to(outside)
    with pytest.raises(InputError, match=f"{batch}/two \\(the same as {batch}/one\\)"):
        resolve_inputs(str(batch))


def test_a_glob_refuses_a_loop_it_could_enter_and_ignores_one_it_cannot(tmp_path):
    base = tmp_path / "base"
    (base / "parts").mkdir(parents=True)
    (base / "parts" / "p1.jsonl").write_text(records(2))
    (base / "parts" / "self").symlink_to(".")
    with pytest.raises(InputError, match=f"{base}/parts/self \\(the same as {base}/parts\\)"):
        resolve_inputs(str(base / "**" / "*.jsonl"))
    (base / "loop").symlink_to(".")
    assert [s.display_root for s in resolve_inputs(str(base / "parts" / "p*.jsonl"))] == [f"{base}/parts/p1.jsonl"]
    assert [s.display_root for s in resolve_inputs(str(base / "par*" / "p*.jsonl"))] == [f"{base}/parts/p1.jsonl"]


def test_a_name_that_is_not_utf8_is_named_by_its_bytes(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text(records(2))
    bad = os.path.join(os.fsencode(batch), b"caf\xe9.jsonl")
    with open(bad, "wb") as handle:
        handle.write(records(1).encode())
    expected = repr(bad)  # b'/tmp/.../batch/caf\xe9.jsonl'
    with pytest.raises(InputError) as caught:
        resolve_inputs(str(batch))
    assert expected in str(caught.value) and "is a name that is not UTF-8; rename it" in str(caught.value)
    with pytest.raises(InputError, match="is a name that is not UTF-8"):
        resolve_inputs(os.fsdecode(bad))  # named on its own, as a shell passes it
    status, stderr, _ = measured("run", "dungeons", "--input", str(batch), "--out", str(tmp_path / "out"),
                                 "--serial", "--quiet", timeout=60)
    assert status == 1 and expected in stderr and "codec can't" not in stderr
    os.remove(bad)
    os.makedirs(os.path.join(os.fsencode(batch), b"_hidden\xe9"))  # skipped names are never read: no error
    assert len(resolve_inputs(str(batch))) == 1
