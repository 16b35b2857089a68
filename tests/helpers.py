"""What the tests share: the command line run one way (one timeout, one environment rule, its
stderr shown when an exit code is wrong), waiting on observations instead of the clock, and the
common job arguments.  Fixtures live in conftest.py; this module holds plain functions."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow.fs as pafs
import pytest

from batchenum.pipeline.job import PlanContext, Shard

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "data"  # the seed reference cases (docs/rules.md explains them)
PUBLISHED = pd.read_parquet(REPO / "results" / "palago" / "creature_counts.parquet")
COUNT_COLUMNS = [
    "n",
    "free",
    "fixed",
    "free_stabiliser_1",
    "free_stabiliser_2",
    "free_stabiliser_3",
    "free_stabiliser_6",
    "stabiliser_sum",
]

# Every process a test's run starts (its private Ray's included) inherits this variable, set to a
# fresh value, so that ``marked_processes`` finds them wherever they run: in the run's group, in
# Ray's own session, or reparented.
MARK = "BATCHENUM_TEST_RUN_MARK"

# The integration tier (conftest.py marks it): tests that use these fixtures (a real Ray, a real S3
# server) or whose module imports these helper modules (Ray clusters, the fault proxy, the soak).
INTEGRATION_FIXTURES = frozenset({"ray_session", "s3_server", "new_bucket"})
INTEGRATION_MODULES = frozenset({"clusters", "fault_proxy", "soak"})
# ... or whose own code kills or stops a process (by a signal, or through a fault hook with which a
# run kills itself), or starts or joins a Ray (a CLI run with --workers or without the head start).
INTEGRATION_CODE = re.compile(
    r"SIGKILL|SIGSTOP|SIGTERM|SIGINT|\.kill\(|\bkill\w*\(|send_signal|KILL_|ray\.init|ray start|"
    r"ray\.scripts|cluster_utils|--address|--workers|--no-head-start"
)

# Long enough for the slowest command the suite runs on a loaded 2-core machine; a hung command
# still fails the test instead of the whole run.
CLI_TIMEOUT = 900


def cli_command(*args: str) -> list[str]:
    """The command line a user types, run by this interpreter (so this checkout's install)."""
    return [sys.executable, "-m", "batchenum", *args]


def cli_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The one environment rule: the test's own environment, with ``env`` added on top."""
    return {**os.environ, **(env or {})}


def cli(
    *args: str,
    expect: int | None = 0,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """Run ``batchenum *args`` to its end.  ``expect`` is the exit code it must end with (its stderr
    is in the failure's message); None accepts any, for a test that looks at the code itself."""
    result = subprocess.run(
        cli_command(*args),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        env=cli_env(env),
        cwd=cwd,
        input=input,
    )
    if expect is not None:
        assert_exit(result, expect)
    return result


def assert_exit(process: subprocess.CompletedProcess | subprocess.Popen, code: int, stderr: str | None = None) -> None:
    """Assert that ``process`` exited with ``code``; the message carries the tails of its stderr
    (``stderr`` for a Popen whose output the test already read) and of its captured stdout."""
    if process.returncode == code:
        return
    command = process.args if isinstance(process.args, str) else " ".join(map(str, process.args))
    message = f"{command} exited {process.returncode}, not {code}"
    for name, text in (("stderr", stderr if stderr is not None else process.stderr), ("stdout", process.stdout)):
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        if isinstance(text, str) and text:
            message += f"\n--- its {name} ends:\n{text[-3000:]}"
    raise AssertionError(message)


def wait_until(
    condition: Callable[[], object],
    what: str,
    timeout: float = 300,
    process: subprocess.Popen | None = None,
    interval: float = 0.05,
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds, or as
    soon as ``process`` (the run the condition waits on) has ended without it."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            if condition():
                return
            raise AssertionError(f"the run ended (exit {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout} s")
        time.sleep(interval)


def palago_args(out: Path, max_n: int, shards: int, *extra: str) -> tuple[str, ...]:
    return ("run", "palago", "--max-n", str(max_n), "--shards", str(shards), "--out", str(out), *extra)


def table_bytes(out: Path) -> bytes:
    return (out / "palago" / "creature_counts.parquet").read_bytes()


def assert_matches_published(out: Path, max_n: int) -> None:
    counts = pd.read_parquet(out / "palago" / "creature_counts.parquet")
    expected = PUBLISHED[PUBLISHED.n <= max_n][COUNT_COLUMNS].reset_index(drop=True)
    pd.testing.assert_frame_equal(counts[COUNT_COLUMNS], expected)


def reused(result: subprocess.CompletedProcess) -> int:
    found = re.search(r"\((\d+) reused", result.stdout)
    assert found, f"no reuse count in the run's output:\n{result.stdout[-2000:]}"
    return int(found.group(1))


def committed(out: Path) -> int:
    """Palago shards committed under ``out`` (their files are the record of finished work)."""
    return len(list((out / "palago" / "_shards" / "partial_counts").glob("*.parquet")))


def wait_for_commits(out: Path, count: int, process: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until ``count`` Palago shards are committed under ``out`` while ``process`` runs."""
    deadline = time.monotonic() + timeout
    while committed(out) < count:
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, f"{count} shards were not committed within {timeout} s"
        time.sleep(0.05)


# ------------------------------------------------------------------ the test S3 server


def s3_fs(s3_server: dict) -> pafs.S3FileSystem:
    """The test S3 server (conftest.py's ``s3_server``) as a pyarrow file system."""
    return pafs.S3FileSystem(
        endpoint_override=s3_server["AWS_ENDPOINT_URL"],
        region="us-east-1",
        access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"],
    )


def cli_s3(s3_server: dict, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess:
    """``batchenum *args`` with the test S3 server's credentials; none may reach its output."""
    result = cli(*args, env=s3_server, expect=expect)
    secret = s3_server["AWS_SECRET_ACCESS_KEY"]
    assert secret not in result.stdout and secret not in result.stderr, "a credential reached the output"
    return result


def read_s3(s3_server: dict, uri: str, **kwargs) -> pd.DataFrame:
    """pandas' read of ``uri`` on the test S3 server."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_server.items():
            patch.setenv(name, value)
        return pd.read_parquet(uri, **kwargs)


def objects(s3_server: dict, prefix: str) -> list[str]:
    """The files below ``prefix`` on the test S3 server, sorted."""
    infos = s3_fs(s3_server).get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(info.path for info in infos if info.type == pafs.FileType.File)


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: all sockets stay open until every port is chosen, so the
    system cannot hand out the same port twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# Command lines of the services the fast tier must not start: a Ray (`ray start`, which a CLI run's
# private Ray runs too, and its raylet) and the test S3 server.
_SERVICES = {"ray start": "ray.scripts.scripts start", "a raylet": "/raylet ", "an S3 server": "moto_server"}


class ServiceWatch:
    """Watch this process's descendants, while the ``with`` block runs, for a Ray or an S3 server
    starting (``services``: name: a piece of its command line); ``seen`` names those that did.
    Reads /proc (Linux); elsewhere it sees nothing."""

    def __init__(self, interval: float = 0.2, services: dict[str, str] | None = None):
        import threading

        self.interval = interval
        self.services = _SERVICES if services is None else services
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="service-watch", daemon=True)

    def __enter__(self) -> ServiceWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._look()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self._look()

    def _look(self) -> None:
        for command in _descendant_commands(os.getpid()):
            self.seen.update(name for name, pattern in self.services.items() if pattern in command)


def _descendant_commands(root: int) -> list[str]:
    """The command lines (arguments joined by spaces) of every descendant of ``root``."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        parents[int(stat.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, ()))
        try:
            found.append(
                (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
            )
        except OSError:
            continue
    return found


def lease_record(out: Path, job: str = "palago") -> dict | None:
    """The lease in ``out``'s job folder as its run wrote it (None while there is none)."""
    try:
        return json.loads((out / job / "_lease.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def wait_until_stale(out: Path, job: str = "palago", timeout: float = 120) -> None:
    """Wait until the lease in ``out``'s job folder is stale by its own record: no heartbeat
    recorded for its ``stale_after`` seconds (a run that still renews it keeps it fresh)."""
    from batchenum.pipeline.lease import stale_after

    def stale() -> bool:
        lease = lease_record(out, job)
        return lease is not None and time.time() > lease["heartbeat_at"] + stale_after(lease)

    wait_until(stale, f"the lease in {out / job} was stale", timeout=timeout)


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used so far (Linux /proc)."""
    fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------ shards run in this process


def plain_columns(columns: dict) -> dict[str, list]:
    """A shard output's columns (lists, numpy or Arrow arrays) as Python lists."""
    return {
        name: values.to_pylist() if hasattr(values, "to_pylist") else list(values) for name, values in columns.items()
    }


def run_dungeon_shards(job) -> dict[str, dict[str, list]]:
    """Every shard of the job, outputs concatenated in shard order."""
    out = {"answers": {}, "errors": {}}
    for shard in job.plan(PlanContext()):
        shard = Shard(shard.id, json.loads(json.dumps(dict(shard.spec))))  # specs must survive JSON
        result = job.run_shard(shard)
        outputs, stats = result.tables, result.stats
        for table, columns in outputs.items():
            for name, values in plain_columns(columns).items():
                out[table].setdefault(name, []).extend(values)
        # the worker's own count of records read is what the accounting is checked against
        assert stats["records"] == len(outputs["answers"]["id"]) + len(outputs["errors"]["id"])
    return out


# ------------------------------------------------------------------------ Markdown pages


def markdown_prose(path: Path):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def markdown_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def markdown_anchors(path: Path) -> set[str]:
    return {markdown_anchor(m.group(1)) for _, line in markdown_prose(path) if (m := re.match(r"#{1,6}\s+(.*)", line))}


def marked_processes(mark: str) -> list[int]:
    """The live processes whose environment carries ``mark``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if f"{MARK}={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                        found.append(int(entry.name))
            except OSError:
                continue
    return found
