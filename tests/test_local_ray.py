"""The default local run: shards computed in the driver while a private Ray starts in the background
(``ray start`` in a child process).  Ray must take over when it comes up in time, never be waited for
when it does not, and leave no process or folder behind, even when the driver is killed."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import assert_exit, assert_matches_published, cli_command, wait_until

from batchenum.pipeline.local_ray import LocalRay, LocalRayError, private_folder, process_tree
from batchenum.pipeline.runner import _private_token

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "local_toy.py"


pytestmark = pytest.mark.integration  # every test here starts a private local Ray


@pytest.fixture
def ray_tmpdir():
    """A short private RAY_TMPDIR (Ray's socket paths must stay under about 107 bytes)."""
    folder = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    yield folder
    os.rmdir(folder)  # fails the test if the run left Ray's folder behind


def toy_command(out: Path, shards: int, seconds: float, workers: int) -> list[str]:
    return [sys.executable, str(SCENARIO), str(out), str(shards), str(seconds), str(workers)]


# The hand-over: one thread computes here, so Ray starts on the other core, and these shards give it
# 450 s. Started in the background, Ray runs at nice 19 in an autogroup of its own, so it yields to
# every busy test beside it: 5 to 7 s on a quiet machine, about 40 s in the suite, once over 120 s
# beside three test workers. On Ray a shard takes no time (local_toy.py's SECONDS_ON_RAY, after
# RAY_AFTER 0), so the run ends soon after Ray is up.
HAND_OVER_SHARDS = 300


def hand_over_command(out: Path) -> list[str]:
    return [*toy_command(out, HAND_OVER_SHARDS, 1.5, 1), "0", "0"]


def run_toy(command: list[str], ray_tmpdir: str) -> tuple[dict, str]:
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RAY_TMPDIR": ray_tmpdir},
    )
    assert_exit(done, 0)
    report = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(report[len("RESULT ") :]), done.stderr


def processes_naming(text: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def test_ray_takes_shards_from_the_front_once_it_is_up(tmp_path, ray_tmpdir):
    # tests/test_executor.py checks the same hand-over deterministically, with a fake Ray
    report, log = run_toy(hand_over_command(tmp_path), ray_tmpdir)
    assert "computing on a local Ray with 1 CPUs" in log, log
    ran = report["ran"]
    assert len(ran) == HAND_OVER_SHARDS and set(ran.values()) == {"ray", "driver"}
    on_ray = [shard for shard, where in ran.items() if where == "ray"]
    assert on_ray == sorted(ran)[: len(on_ray)]  # the front of the plan; the driver took the end
    assert report["values"] == list(range(1505))
    assert os.listdir(ray_tmpdir) == [] and processes_naming(ray_tmpdir) == []


def test_a_run_finished_before_ray_is_up_never_connects(tmp_path, ray_tmpdir):
    started = time.monotonic()
    report, log = run_toy(toy_command(tmp_path, 4, 0.0, 2), ray_tmpdir)  # RAY_AFTER 0: Ray starts at once
    assert "the local Ray is not needed: every shard was taken here before it was up" in log
    assert "computing on a local Ray" not in log
    assert set(report["ran"].values()) == {"driver"} and report["values"] == list(range(25))
    assert os.listdir(ray_tmpdir) == [] and processes_naming(ray_tmpdir) == []
    assert time.monotonic() - started < 60  # generous: it must not wait for Ray's start (seconds)


# What `ray start` says when its raylet has not registered within Ray's fixed 30 s (seen under load)
TIMED_OUT = (
    "Exception: The current node timed out during startup. This could happen because some of the "
    "raylet failed to startup or the GCS has become overloaded."
)


def ray_start_that_times_out(hook: Path, times: int) -> dict[str, str]:
    """An environment in which the first ``times`` runs of ``ray start --head`` fail as Ray's own
    timeout does (a sitecustomize on PYTHONPATH; the watchdog runs isolated, so only ray start
    and Ray's own Python processes read it, and only ray start has --head)."""
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys\n"
        f"count = {str(hook / 'starts')!r}\n"
        "if '--head' in sys.argv:\n"
        "    starts = len(open(count).read()) if os.path.exists(count) else 0\n"
        "    open(count, 'a').write('x')\n"
        f"    if starts < {times}:\n"
        f"        sys.stderr.write({TIMED_OUT!r} + '\\n')\n"
        "        sys.stderr.flush()\n"
        "        os._exit(1)\n"
    )
    return {"PYTHONPATH": str(hook)}


def failure_to_start(timeout: float, nice: int = 0) -> tuple[str, LocalRay]:
    """The LocalRayError's message of a private Ray of 1 CPU (at priority ``nice``) that does not
    start, and the LocalRay (stopped)."""
    ray = LocalRay(1, nice)
    ray.start()
    try:
        with pytest.raises(LocalRayError) as raised:
            ray.wait(timeout)
    finally:
        ray.stop()
    return str(raised.value), ray


def test_a_ray_start_that_timed_out_is_started_once_more(tmp_path, ray_tmpdir):
    env = ray_start_that_times_out(tmp_path / "hook", times=1)
    done = subprocess.run(
        hand_over_command(tmp_path / "out"),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RAY_TMPDIR": ray_tmpdir, **env},
    )
    assert_exit(done, 0)
    said = f"computing on a local Ray with 1 CPUs (started again: the first start said {TIMED_OUT})"
    assert said in done.stderr, done.stderr
    assert (tmp_path / "hook" / "starts").read_text().startswith("xx")  # (Ray starts more with --head)
    assert os.listdir(ray_tmpdir) == [] and processes_naming(ray_tmpdir) == []  # the first one's folder too


@pytest.mark.parametrize("nice, yielding", [(0, ""), (19, ", and this Ray ran at nice 19 to yield to the work here")])
def test_a_ray_start_that_times_out_twice_says_so(tmp_path, monkeypatch, nice, yielding):
    root = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", root)
    for name, value in ray_start_that_times_out(tmp_path / "hook", times=2).items():
        monkeypatch.setenv(name, value)
    message, ray = failure_to_start(120, nice)
    assert message.startswith(f"`ray start` exited with status 1: {TIMED_OUT} (its output: ")
    assert ray.retried == TIMED_OUT and (tmp_path / "hook" / "starts").read_text() == "xx"
    busy = rf"; its raylet missed Ray's 30 s to register twice, as on a busy machine: the load average was \d+\.\d over the last minute on {os.cpu_count()} CPUs{yielding}$"
    assert re.search(busy, message), message
    kept = re.search(r"\(its output: (\S+)\);", message)
    os.remove(kept[1])
    os.rmdir(root)


def test_a_killed_driver_leaves_no_ray_process(tmp_path, ray_tmpdir):
    driver = subprocess.Popen(
        toy_command(tmp_path, 100, 1.0, 1),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "RAY_TMPDIR": ray_tmpdir},
    )
    try:
        wait_until(
            lambda: any("raylet" in _command_line(pid) for pid in processes_naming(ray_tmpdir)),
            "the run's Ray started",
            120,
            driver,
        )
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    with contextlib.suppress(AssertionError):  # the test asserts on what is left
        wait_until(lambda: not (processes_naming(ray_tmpdir) or os.listdir(ray_tmpdir)), "the run's Ray was gone", 30)
    left = processes_naming(ray_tmpdir)
    assert left == [], [_command_line(pid) for pid in left]
    assert os.listdir(ray_tmpdir) == []  # the watchdog removed the folder the killed driver could not


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_local_ray_that_cannot_start_leaves_the_work_to_the_driver(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    done = subprocess.run(
        toy_command(tmp_path / "out", 6, 0.2, 2),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_TMPDIR": str(not_a_folder)},
    )
    assert_exit(done, 0)
    assert "the local Ray did not start, so every shard is computed here: NotADirectoryError" in done.stderr
    assert '"values": ' + json.dumps(list(range(35))) in done.stdout


# ------------------------------------------------------------------------- on a shared machine

OTHER_USER = "batchenum-other"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to act as a second user (useradd, runuser)"
)


@pytest.fixture(scope="module")
def other_user() -> str:
    """A second, unprivileged Unix user on this machine."""
    if subprocess.run(["id", OTHER_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", OTHER_USER], check=True)
    return OTHER_USER


def as_user(user: str, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", "sh", "-c", script], capture_output=True, text=True, timeout=60)


def listening_addresses(pids: set[int]) -> list[str]:
    """The local addresses on which the processes ``pids`` listen (TCP)."""
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    found = []
    for line in lines:
        owners = {int(pid) for pid in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            found.append(line.split()[3])
    return found


@needs_root
def test_another_user_can_neither_enter_the_private_ray_nor_reach_it_off_loopback(other_user, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)  # a run's own token, as the runner makes one
    _private_token()  # (conftest asks for tokens; without this the test passed only after a run)
    local = LocalRay(1)
    local.start()
    try:
        address = local.wait(180)
        folder = local._folder
        found = os.lstat(folder)
        assert stat.S_IMODE(found.st_mode) == 0o700 and found.st_uid == os.geteuid()
        assert stat.S_IMODE(os.lstat(os.path.join(folder, "ray")).st_mode) == 0o700  # Ray made it 0777
        # what the attacker did: plant an address where the driver would read it
        attack = as_user(
            other_user,
            f"ls {folder}/ray; echo 192.0.2.66:6379 > {folder}/ray/ray_current_cluster; "
            f"touch {folder}/planted; ls {folder}/ray/session_latest/sockets",
        )
        assert attack.returncode != 0, attack.stdout + attack.stderr
        assert attack.stderr.count("Permission denied") == 4, attack.stderr
        assert not os.path.exists(os.path.join(folder, "planted"))
        assert address.startswith("127.0.0.1:")
        listening = listening_addresses(process_tree([local._process.pid]))
        assert len(listening) >= 4, listening  # the GCS, the raylet, the agents
        assert all(re.fullmatch(r"(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]):\d+", where) for where in listening), listening
    finally:
        local.stop()
    assert not os.path.exists(folder)


@needs_root
def test_a_temporary_folder_anyone_may_replace_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all, no sticky bit
    with pytest.raises(
        LocalRayError,
        match=f"the temporary folder {shared} is writable by every user and has no "
        "sticky bit.*set RAY_TMPDIR to a folder of your own",
    ):
        private_folder(str(shared))


HOLD = """
import sys, time
from batchenum.pipeline.local_ray import private_folder
folder, lock = private_folder(sys.argv[1])
print(folder, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a PID namespace")
def test_a_live_runs_folder_survives_a_sweep_from_another_pid_namespace_and_a_dead_ones_does_not(tmp_path, other_user):
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o1777)  # as /tmp
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        live = holder.stdout.readline().strip()
        dead = [sys.executable, "-c", HOLD, str(root)]
        killed = subprocess.Popen(dead, stdout=subprocess.PIPE, text=True)
        dead_folder = killed.stdout.readline().strip()
        killed.kill()
        killed.wait()
        link = root / "batchenum-ray-aaaaaaaa"
        link.symlink_to(live)  # named like a folder of ours: a link is never followed
        foreign = root / "batchenum-ray-bbbbbbbb"  # another user's, with no lock anyone holds
        (foreign / "ray").mkdir(parents=True)
        (foreign / "lock").touch()
        user = pwd.getpwnam(other_user)
        for path in (foreign, foreign / "ray", foreign / "lock"):
            os.chown(path, user.pw_uid, user.pw_gid)
        sweep = (
            "import sys; from batchenum.pipeline.local_ray import remove_dead_folders; "
            "print(remove_dead_folders(sys.argv[1]))"
        )
        swept = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", sweep, str(root)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert swept.stdout.strip() == repr([dead_folder])
        assert os.path.isdir(live) and not os.path.exists(dead_folder)
        assert link.is_symlink() and (foreign / "ray").is_dir()
    finally:
        holder.kill()
        holder.wait()


def test_runs_in_two_threads_share_one_private_ray_and_the_last_stops_it(tmp_path):
    scenario = SCENARIO.with_name("threads.py")
    done = subprocess.run(
        [sys.executable, str(scenario), str(tmp_path), "22", "0"], capture_output=True, text=True, timeout=600
    )
    assert_exit(done, 0)
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])
    assert report["runs"]["a"]["ok"] and report["runs"]["b"]["ok"], report
    assert report["ray_initialised"] is False  # stopped by the last run to finish
    for name in ("a", "b"):
        assert_matches_published(tmp_path / name, 22)


def test_a_spill_folder_that_does_not_exist_yet_is_made(tmp_path, ray_tmpdir, monkeypatch):
    spill_root = tmp_path / "not" / "there"  # as a script that clears its spill folder before a run leaves it
    monkeypatch.setenv("RAY_TMPDIR", ray_tmpdir)
    monkeypatch.setenv("BATCHENUM_RAY_SPILL_DIR", str(spill_root))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    _private_token()  # as the runner does before it starts Ray
    ray = LocalRay(1)
    ray.start()
    try:
        assert ray.wait(120)
        (private,) = os.listdir(spill_root)  # the run's own folder, Ray's spill folder inside it
        assert os.listdir(spill_root / private) != []
    finally:
        ray.stop()
    assert os.listdir(spill_root) == [] and os.listdir(ray_tmpdir) == []


# ------------------------------------------------------------------- a Ray that cannot start (issue 48)


def test_a_long_ray_tmpdir_is_refused_up_front_in_one_line(tmp_path):
    long_root = tmp_path / ("r" * 40)  # with pytest's own folder: far past Ray's 107-byte socket paths
    long_root.mkdir()
    started = time.monotonic()
    done = subprocess.run(
        cli_command("run", "palago", "--max-n", "9", "--no-head-start", "--out", str(tmp_path / "out")),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_TMPDIR": str(long_root)},
    )
    assert_exit(done, 1)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"batchenum: error: could not start a local Ray: RAY_TMPDIR={long_root} is too long")
    assert "a Unix socket's path may take 107; set RAY_TMPDIR to a folder of yours of at most" in last
    assert "Traceback" not in done.stderr and time.monotonic() - started < 60  # Ray was never started
    assert os.listdir(long_root) == []


def test_a_ray_that_cannot_start_says_why_in_one_line_with_its_logs_path(tmp_path, monkeypatch):
    """``ray start`` failing with colour codes in its output (a sitecustomize makes every Python it
    starts fail so): the reason without them, and a copy of the output that outlives the folder."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys\nsys.stderr.write('noise\\n\\x1b[31mRuntimeError: the raylet could not bind\\x1b[0m\\nmore\\n')\n"
        "sys.stderr.flush()\nos._exit(1)\n"
    )
    root = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", root)
    monkeypatch.setenv("PYTHONPATH", str(hook))
    message, _ = failure_to_start(60)
    kept = re.search(r"\(its output: (\S+)\)$", message)
    assert message.startswith("`ray start` exited with status 1: RuntimeError: the raylet could not bind (its output: ")
    assert "\n" not in message and "\x1b" not in message and kept
    assert "the raylet could not bind" in Path(kept[1]).read_text()
    os.remove(kept[1])
    os.rmdir(root)


@pytest.mark.parametrize("token_file", [True, False])
def test_ray_start_turns_token_auth_on_by_itself_when_it_finds_a_token_file(tmp_path, monkeypatch, token_file):
    """docs/cluster.md, Authentication: with RAY_AUTH_MODE unset, a plain ``ray start --head``
    requires a token exactly when ``~/.ray/auth_token`` exists (issue 48: the README said it never
    did, and nodes without the token failed)."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    if token_file:
        (home / ".ray" / "auth_token").write_text("0123456789abcdef0123456789abcdef")
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    root = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", root)
    ray = LocalRay(1)
    ray.start()
    try:
        ray.wait(300)
        (log,) = Path(root).glob("batchenum-ray-*/ray-start.log")
        said = log.read_text()
    finally:
        ray.stop()
        os.rmdir(root)
    assert f"Token authentication is {'enabled' if token_file else 'disabled'} for this Ray cluster" in said


FORWARDED = """
import sys, time
import ray
from ray._private.worker import global_worker_stdstream_dispatcher as dispatcher
from batchenum.pipeline.runner import RaySession

session = RaySession(None, 1)
session.connect()
base = {"ip": "127.0.0.1", "localhost": "127.0.0.1", "is_err": True, "job": "", "task_name": "", "actor_name": ""}
# what Ray's log monitor forwards from the GCS's and the raylet's .err files, as measured in issue 48
dispatcher.emit({**base, "pid": "gcs_server", "lines": [
    "[2026-12-04 10:00:00,000 E 1 1] gcs_server.cc:1361: Failed to establish connection to the "
    "event+metrics exporter agent. Events and metrics will not be exported."]})
dispatcher.emit({**base, "pid": "raylet", "lines": ["[2026-12-04 10:00:00,000 E 1 1] main.cc:1108: raylet noise"]})
dispatcher.emit({**base, "pid": "4242", "lines": ["\\x1b[31ma worker's own line\\x1b[0m", "[state-dump] NodeManager:"]})

@ray.remote
def speak():
    print("a task's print", file=sys.stderr)

ray.get(speak.remote())
time.sleep(3)  # the log monitor forwards a task's output within a second or so
session.close()
"""


def test_the_private_ray_forwards_what_the_work_prints_and_none_of_rays_own_lines(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", FORWARDED],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_TMPDIR": tempfile.mkdtemp(prefix="rt", dir="/tmp")},
    )
    assert_exit(done, 0)
    assert "a worker's own line" in done.stderr and "a task's print" in done.stderr
    assert "\x1b" not in done.stderr  # off a terminal: no colour codes, Ray's own prefixes' included
    for noise in ("gcs_server", "raylet", "main.cc", "[state-dump]", "exporter agent"):
        assert noise not in done.stderr, done.stderr
