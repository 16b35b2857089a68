"""What a person watching a run sees: a first line at once, a line when numba compiles and how long
it took, shard lines no more often than ``log_every`` off a terminal, a bar at a terminal that
output forwarded from Ray's workers never breaks, and a bar in a real Jupyter kernel."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
import textwrap
import time

import pytest
from helpers import REPO, wait_until
from toy_job import ToyJob

from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.progress import Progress


class TimedLines:
    """A stream (not a terminal) that keeps each line with the moment it was written."""

    def __init__(self):
        self.lines: list[tuple[float, str]] = []
        self.started = time.monotonic()

    def write(self, text: str) -> None:
        self.lines += [(time.monotonic() - self.started, line) for line in text.splitlines() if line]

    def flush(self) -> None:
        pass


def test_off_a_terminal_a_first_line_at_once_then_shard_lines_at_most_every_log_every(tmp_path):
    stream = TimedLines()
    run_job(
        ToyJob(shards=12, seconds=0.25),
        RunOptions(out=str(tmp_path), serial=True),
        Progress("toy", stream=stream, log_every=1.0),
    )
    shard_lines = [(moment, line) for moment, line in stream.lines if re.match(r"toy: \d+/12 shards", line)]
    assert shard_lines[0][1].startswith("toy: 0/12 shards") and shard_lines[-1][1].startswith("toy: 12/12 shards")
    between = [b[0] - a[0] for a, b in zip(shard_lines[1:-1], shard_lines[2:-1])]
    assert all(gap >= 0.9 for gap in between), shard_lines  # a line a second at most, not one per shard


def test_while_no_shard_finishes_lines_come_less_often_and_stop_blaming_the_start_up(monkeypatch):
    # An hour-long shard: its log should show the run alive without a line every few seconds, and
    # stop saying that Ray or the compiler may be why nothing has finished.
    from batchenum.pipeline import progress as module

    monkeypatch.setattr(module, "TICK", 0.02)
    monkeypatch.setattr(module, "FIRST_SHARD_HINT", 0.05)
    monkeypatch.setattr(module, "START_UP", 0.6)
    monkeypatch.setattr(module, "LONGEST_GAP", 0.3)
    stream = TimedLines()
    progress = Progress("long", stream=stream, log_every=0.1)
    progress.start_shards(total=2, reused=0)
    time.sleep(6.0)  # the gap would reach 0.6 s without its cap
    progress.shard_done()
    time.sleep(0.3)
    progress.finish_shards()
    lines = [(moment, line) for moment, line in stream.lines if line.startswith("long: 0/2 shards")]
    gaps = [b[0] - a[0] for a, b in zip(lines, lines[1:])]
    assert min(gaps[:3]) < 0.2 and min(gaps[-3:]) > 0.25 and max(gaps) < 0.5, gaps
    hints = [line for _, line in lines if "(" in line]
    assert "Ray starting" in hints[0] and "long shards; `batchenum status` shows their checkpoints" in hints[-1]
    assert stream.lines[-1][1].startswith("long: 1/2 shards")  # within log_every of a finished shard
    assert " left" not in stream.lines[-1][1]  # no estimate from one shard (issue 48)


def test_an_estimate_comes_from_three_shards_and_leaves_the_first_ones_start_up_out():
    """A first shard that waited for Ray and the compiles once made a 94 s run say
    ``~16m12s left (from 2 shards)``; now no estimate before three shards, and then one made from
    the shards after the first."""
    stream = TimedLines()
    progress = Progress("est", stream=stream, log_every=0.0)
    progress.start_shards(total=6, reused=0)
    time.sleep(2.0)  # the start-up: Ray, kernels
    for _ in range(3):
        progress.shard_done()
        time.sleep(0.2)
    progress.finish_shards()
    lines = [line for _, line in stream.lines if line.startswith("est: ")]
    assert not any(" left" in line for line in lines[:3]), lines
    left = re.search(r"~(\d+\.\d)s left", next(line for line in lines if line.startswith("est: 3/6")))
    assert left and float(left[1]) < 1.5, lines  # 3 more at 0.2 s each, not 3 more at (2.2 s / 3) each


class SavingToyJob(ToyJob):
    """Each shard saves its checkpoint twice, a moment apart, before it returns."""

    def run_shard(self, shard, context=None):
        for step in (1, 2):
            context.checkpoint.save(b"state", f"step {step} of {shard.id}")
            time.sleep(0.6)
        return super().run_shard(shard, context)


def test_saves_made_in_ray_workers_are_each_said_once_by_the_run(tmp_path, monkeypatch, ray_session):
    # An hour-long height saved in a Ray worker said nothing in the run's log but "still running";
    # the run now looks at the job folder's checkpoints and says each save once.
    from batchenum.pipeline import progress as module

    monkeypatch.setattr(module, "SAVES_EVERY", 0.1)
    monkeypatch.setattr(module, "TICK", 0.05)
    stream = TimedLines()
    options = RunOptions(out=str(tmp_path), serial=False, head_start=False, window=2)
    run_job(SavingToyJob(shards=3), options, Progress("toy", stream=stream))
    said = [re.search(r"toy: (s\d+) saved at step (\d) of (s\d+) \[", line) for _, line in stream.lines]
    said = [found.groups() for found in said if found]
    assert len(said) == len(set(said)), said  # each save once
    assert {shard for shard, _, _ in said} == {"s000", "s001", "s002"} and all(s == t for s, _, t in said), said
    assert not list((tmp_path / "toy" / "_checkpoints").glob("*.ckpt"))  # each removed at its commit


def test_a_save_watch_gives_this_runs_saves_once_each_and_skips_removed_files(tmp_path):
    from batchenum.pipeline.checkpoint import Checkpoint, SaveWatch
    from batchenum.pipeline.job import Shard
    from batchenum.pipeline.storage import Storage

    folder = Storage.at(str(tmp_path))
    watch = SaveWatch(folder, since=0.0)
    assert watch.new_saves() == []  # no checkpoint folder yet
    old, new = (Checkpoint(folder, Shard(name), {"code": "1"}) for name in ("h001", "h002"))
    old.save(b"state", "column 1", done=0.4)
    watch = SaveWatch(folder, since=time.time() + 0.01)  # a save before the run is not the run's
    time.sleep(0.02)
    new.save(b"state", "column 2", done=0.25)
    assert [(s["shard"], s["progress"], s["done"]) for s in watch.new_saves()] == [("h002", "column 2", 0.25)]
    assert watch.done_before == {"h001": 0.4}  # what an earlier run did of a shard this one resumes
    assert watch.new_saves() == []  # said once
    new.save(b"states", "column 3")
    assert [(s["shard"], s["progress"]) for s in watch.new_saves()] == [("h002", "column 3")]
    new.clear()
    old.clear()
    assert watch.new_saves() == []


def test_a_resumed_attempts_saves_say_how_far_the_save_it_resumed_was(tmp_path):
    from batchenum.pipeline.checkpoint import Checkpoint, saved_checkpoints
    from batchenum.pipeline.job import Shard
    from batchenum.pipeline.storage import Storage

    folder = Storage.at(str(tmp_path))
    Checkpoint(folder, Shard("h001"), {"code": "1"}).save(b"state", "column 1", done=0.4)
    assert [(c["done"], c["done_before"]) for c in saved_checkpoints(folder)] == [(0.4, 0.0)]
    resumed = Checkpoint(folder, Shard("h001"), {"code": "1"})
    assert resumed.load() == b"state"
    resumed.save(b"states", "column 2", done=0.55)
    assert [(c["done"], c["done_before"]) for c in saved_checkpoints(folder)] == [(0.55, 0.4)]
    resumed.save(b"more", "column 3")  # a job that does not say how far: neither
    assert [(c["done"], c["done_before"]) for c in saved_checkpoints(folder)] == [(None, None)]


def test_a_retry_within_a_run_counts_its_first_attempts_work_as_the_runs(tmp_path):
    from batchenum.pipeline.checkpoint import Checkpoint, done_before_run, saved_checkpoints
    from batchenum.pipeline.job import Shard
    from batchenum.pipeline.storage import Storage

    folder = Storage.at(str(tmp_path))

    def attempt(done: float) -> None:
        """An attempt that resumes from the last save, if any, and saves once."""
        checkpoint = Checkpoint(folder, Shard("h001"), {"code": "1"})
        checkpoint.load()
        checkpoint.save(b"state", f"at {done}", done=done)
        time.sleep(0.01)

    attempt(0.2)  # an earlier run's
    started = time.time()  # this run's start
    time.sleep(0.01)  # saves record their time to the millisecond
    attempt(0.5)  # its first attempt, resumed from 0.2, then killed
    attempt(0.7)  # its retry, resumed from 0.5
    [saved] = saved_checkpoints(folder)
    assert (saved["done"], saved["done_before"]) == (0.7, 0.5)  # the attempt's own start
    assert done_before_run(saved, started) == 0.2  # the run's: it did 0.5 of the shard
    assert done_before_run(saved, 0.0) == 0.0  # a run before any save did it all
    assert done_before_run(saved, time.time()) == 0.5  # a later run finds the retry's start
    older = {k: v for k, v in saved.items() if k != "resumed"}  # a save by code that kept no history
    assert done_before_run(older, started) == 0.5


def test_saves_that_say_how_far_their_shard_is_count_in_the_estimate(monkeypatch):
    # a long shard's saves move the estimate before it is done (the n = 60 count's heights take up
    # to an hour): h2 expects 90 of the 100 units, 20 of them done by an earlier run (resumed)
    from batchenum.pipeline import progress as module

    monkeypatch.setattr(module, "SAVES_EVERY", 0.0)
    progress = Progress("far", stream=TimedLines(), log_every=0.0)
    looks = iter(
        [
            [{"shard": "h2", "progress": "column 5", "work_done": 40.0, "work_before": 20.0}],
            [{"shard": "h2", "progress": "column 9", "work_done": 60.0, "work_before": 20.0}],  # after its commit
        ]
    )
    progress.watch_saves(lambda: next(looks))
    progress.start_shards(total=2, reused=0, work=100.0)
    assert "left" not in progress._shard_line()  # nothing done yet: no estimate
    progress._say_saves()
    assert progress._work_so_far() == (40.0, 40.0)  # 100 - 40 this run - 20 before
    assert progress._shard_line().endswith(" left (by expected work)")  # no shard done, yet an estimate
    progress.shard_done(seconds=1.0, work=90.0, shard="h2", work_before=20.0)
    assert progress._work_so_far() == (70.0, 10.0)  # its 20 from before are not this run's rate
    progress._say_saves()
    assert progress._work_so_far() == (70.0, 10.0)  # a save seen after the commit counts no more
    progress.finish_shards()


def test_a_look_at_the_saves_that_fails_is_said_once_and_the_run_goes_on(monkeypatch):
    from batchenum.pipeline import progress as module

    monkeypatch.setattr(module, "SAVES_EVERY", 0.0)
    stream = TimedLines()
    progress = Progress("look", stream=stream)
    looks = iter([OSError("the bucket is unreachable"), OSError("still"), [{"shard": "h003", "progress": "column 4"}]])

    def new_saves():
        look = next(looks)
        if isinstance(look, Exception):
            raise look
        return look

    progress.watch_saves(new_saves)
    progress.start_shards(total=1, reused=0)
    for _ in range(3):
        progress._say_saves()
    progress.finish_shards()
    lines = [line for _, line in stream.lines]
    failed = [line for line in lines if "could not look at the shards' checkpoints" in line]
    assert len(failed) == 1 and "OSError: the bucket is unreachable" in failed[0], lines
    assert any(line.startswith("look: h003 saved at column 4 [") for line in lines), lines


def test_an_estimate_weighs_the_shards_left_by_their_expected_work():
    # three shards of work 1 done in about 0.3 s, 27 units left: about 2.7 s, where the count (1
    # shard left) would say 0.1 s; a handed-back shard of unknown work makes it count shards again
    stream = TimedLines()
    progress = Progress("work", stream=stream, log_every=0.0)
    progress.start_shards(total=4, reused=0, work=30.0)
    for _ in range(3):
        time.sleep(0.1)
        progress.shard_done(seconds=0.1, work=1.0)
    progress.add_shards(1, work=None)
    progress.shard_done(seconds=0.1)
    progress.finish_shards()
    lines = [line for _, line in stream.lines]
    weighed = next(line for line in lines if line.startswith("work: 3/4 shards"))
    left = re.search(r"~(\d+\.\d)s left \(by expected work\)$", weighed)
    assert left and 1.5 < float(left[1]) < 15.0, weighed
    counted = next(line for line in lines if line.startswith("work: 4/5 shards"))
    assert counted.endswith(" left") and "expected work" not in counted, counted


def test_a_weighed_estimate_counts_down_between_two_reports_of_the_work():
    from batchenum.pipeline.progress import counted_down

    # a tenth done in the 100 s to the last report: 900 s left then, 870 s 30 s later
    assert counted_down(0.0, 100.0, 130.0, done=10.0, left=90.0) == pytest.approx(870.0)
    # 1,000 s later the count-down ran out: the work is behind its pace, so the rate up to now
    assert counted_down(0.0, 100.0, 1100.0, done=10.0, left=90.0) == pytest.approx(9900.0)
    assert counted_down(0.0, 100.0, 130.0, done=1.0, left=99.0) is None  # 1% done: too early to say
    # and so does the run's line: no shard finishing, and the estimate still falls
    progress = Progress("down", stream=TimedLines(), log_every=0.0)
    progress.start_shards(total=3, reused=0, work=10.0)
    time.sleep(1.0)  # half the work in a second or more: a second or more left, counted down from there
    progress.shard_done(seconds=1.0, work=5.0)
    first = float(re.search(r"~(\d+\.\d)s left", progress._estimate())[1])
    time.sleep(0.1)
    assert float(re.search(r"~(\d+\.\d)s left", progress._estimate())[1]) < first
    progress.finish_shards()


def test_a_weighed_estimate_waits_for_five_percent_of_the_expected_work():
    # small first shards are mostly fixed costs (the n = 60 count read "~9715h54m left" 29 s in)
    stream = TimedLines()
    progress = Progress("work", stream=stream, log_every=0.0)
    progress.start_shards(total=12, reused=0, work=100.0)
    for _ in range(4):
        progress.shard_done(seconds=0.1, work=1.0)
    progress.shard_done(seconds=0.1, work=2.0)
    progress.finish_shards()
    lines = [line for _, line in stream.lines if "/12 shards" in line]
    assert lines[3].endswith(", 3.0% of the expected work done") and "left" not in lines[3], lines
    assert lines[4].endswith(", 4.0% of the expected work done"), lines
    assert lines[5].endswith(" left (by expected work)"), lines  # 6 of 100: an estimate


def test_a_transfer_run_estimates_by_its_heights_expected_work(tmp_path):
    from batchenum.jobs.palago_transfer import PalagoTransferJob

    stream = TimedLines()
    run_job(
        PalagoTransferJob(30),
        RunOptions(out=str(tmp_path), serial=True),
        Progress("palago", stream=stream, log_every=0.0),
    )
    estimates = [line for _, line in stream.lines if re.match(r"palago: \d+/\d+ shards, .* left", line)]
    assert estimates and all(line.endswith(" left (by expected work)") for line in estimates), estimates


@pytest.mark.parametrize(
    "seconds, note",
    [
        ((0.5, 0.5, 3000.0), " (but shards took 0.5s to 50m00s each)"),  # a long height among short ones
        ((70.0, 80.0, 700.0), ""),  # under ten times the median
        ((0.5, 0.5, 50.0), ""),  # all short: an estimate of seconds needs no warning
    ],
)
def test_an_estimate_from_uneven_shards_says_how_long_they_took(seconds, note):
    stream = TimedLines()
    progress = Progress("uneven", stream=stream, log_every=0.0)
    progress.start_shards(total=6, reused=0)
    for took in seconds:
        progress.shard_done(seconds=took)
    progress.finish_shards()
    line = next(line for _, line in stream.lines if line.startswith("uneven: 3/6 shards"))
    assert re.search(r" left" + re.escape(note) + "$", line), line


@pytest.mark.parametrize(
    "ray, kernels, says",
    [
        (True, True, "no shard done yet: Ray starting or kernels compiling in the workers)"),
        (True, False, "no shard done yet: Ray starting)"),
        (False, True, "no shard done yet: kernels compiling)"),
        (False, False, "no shard done yet: the first shards are long)"),
    ],
)
def test_the_waiting_hint_names_only_what_the_run_has(monkeypatch, ray, kernels, says):
    from batchenum.pipeline import progress as module

    monkeypatch.setattr(module, "FIRST_SHARD_HINT", 0.05)
    monkeypatch.setattr(module, "TICK", 0.02)
    stream = TimedLines()
    progress = Progress("hint", stream=stream, log_every=0.05)
    progress.ray, progress.kernels = ray, kernels
    progress.start_shards(total=2, reused=0)
    wait_until(lambda: any("no shard done yet" in text for _, text in stream.lines), "a hint", 10)
    progress.finish_shards()
    assert any(text.endswith(says) for _, text in stream.lines), stream.lines


def test_a_run_tells_progress_whether_it_uses_ray_and_has_kernels(tmp_path):
    progress = Progress("toy", stream=TimedLines())
    run_job(ToyJob(shards=2, seconds=0.0), RunOptions(out=str(tmp_path), serial=True), progress)
    assert (progress.ray, progress.kernels) == (False, False)  # the toy job warms no kernel


def test_a_first_line_comes_after_a_second_of_silence_and_never_after_an_early_line():
    """So an error in the first second stays the only line on standard error (the CLI's contract)."""
    silent, early = TimedLines(), TimedLines()
    slow = Progress("slow", stream=silent)  # noqa: F841  (held: a progress dropped says nothing)
    quick = Progress("quick", stream=early)
    quick.stage("planned")
    wait_until(lambda: silent.lines, "the silent progress said something", 30)
    [(moment, line)] = silent.lines
    assert line.startswith("slow: started [") and moment >= 1.0
    time.sleep(0.5)
    assert [line for _, line in early.lines] == [early.lines[0][1]] and early.lines[0][1].startswith("quick: planned [")


def test_a_compile_in_this_process_is_said_with_its_duration():
    import numba

    stream = TimedLines()
    progress = Progress("job", stream=stream)

    @numba.njit(cache=False)
    def kernel(n):  # a new function: numba compiles it on the first call
        total = 0
        for k in range(n):
            total += k * k
        return total

    progress.stage("first stage")  # before the compile: no "started" line then
    assert kernel(10) == 285
    progress.stage("next stage")
    said = [line for _, line in stream.lines]
    assert said[1].startswith("job: compiling kernels (numba")
    assert re.match(r"job: kernels compiled in \d+\.\ds \[", said[2]) and said[3].startswith("job: next stage")
    kernel(11)  # compiled already: nothing more is said
    progress.stage("done")
    assert len(stream.lines) == 5 and stream.lines[-1][1].startswith("job: done [")


def test_compiles_a_moment_apart_are_one_phase_said_once():
    """A dungeon shard compiled its parser, parsed, then compiled its solver: a tick between the
    two said "kernels compiled" and "compiling kernels" again (issue 48).  Compiles closer than
    COMPILE_SETTLE are one phase, said once, with their seconds summed; a settled phase is said by
    the ticker, with no stage to wait for."""
    import numba

    from batchenum.pipeline.progress import COMPILE_SETTLE, TICK

    @numba.njit(cache=False)
    def first(n):
        return n * 2

    @numba.njit(cache=False)
    def second(n):
        return n + 3

    @numba.njit(cache=False)
    def third(n):
        return n - 1

    stream = TimedLines()
    progress = Progress("job", stream=stream)
    progress.stage("first stage")
    assert first(1) == 2
    time.sleep(2.5 * TICK)  # ticks pass between the two compiles
    assert second(1) == 4
    progress.stage("next stage")
    said = [line for _, line in stream.lines]
    assert [line.split(" [")[0] for line in said[1:3]] == [
        "job: compiling kernels (numba; once per machine, then cached)"
    ] + [said[2].split(" [")[0]]
    assert re.match(r"job: kernels compiled in \d+\.\ds \[", said[2]) and said[3].startswith("job: next stage")
    assert sum("compil" in line for line in said) == 2, said
    assert third(1) == 0  # a phase of its own, after a stage: said by the ticker once it settles
    wait_until(lambda: "kernels compiled" in stream.lines[-1][1], "the settled phase was not said", COMPILE_SETTLE + 10)
    assert [line for _, line in stream.lines][4].startswith("job: compiling kernels")
    assert stream.lines[-1][0] - stream.lines[4][0] >= COMPILE_SETTLE - 0.1, stream.lines


TERMINAL_RUN = """
import sys, time
from ray import cloudpickle
sys.path.insert(0, {tests!r})
import toy_job
cloudpickle.register_pickle_by_value(toy_job)  # Ray's workers cannot import the tests

class Chatty(toy_job.ToyJob):
    def run_shard(self, shard, context=None):
        print("hello from", shard.id, flush=True)  # forwarded by Ray to this terminal
        return super().run_shard(shard, context)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.progress import Progress
run_job(Chatty(shards=6, seconds=1.0), RunOptions(out={out!r}, workers=1, head_start=False), Progress("toy"))
"""


@pytest.mark.slow
def test_at_a_terminal_output_forwarded_from_workers_stays_above_the_bar(tmp_path):
    """A real pty and a real local Ray: every worker line Ray forwards is a line of its own, and the
    bar ends complete."""
    script = tmp_path / "run.py"
    script.write_text(TERMINAL_RUN.format(tests=str(REPO / "tests"), out=str(tmp_path / "out")))
    primary, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal's size
    os.set_inheritable(secondary, True)
    driver = subprocess.Popen(
        [sys.executable, str(script)], stdin=secondary, stdout=secondary, stderr=secondary, close_fds=True
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the pty closed: the driver and every process holding it ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    assert driver.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))  # Ray's colours
    screen = [
        line.split("\r")[-1] if line.split("\r")[-1].strip() else line  # what stays visible of each line
        for line in text.replace("\r\n", "\n").split("\n")
    ]
    hellos = [line for line in screen if "hello from" in line]
    assert len(hellos) == 6, screen
    assert all(re.fullmatch(r"\(.*pid=\d+.*\) hello from s00\d", line.strip()) for line in hellos), hellos
    assert any(re.match(r"toy: 6/6 shards \|", line) for line in screen), screen


def test_in_a_jupyter_kernel_a_bar_and_the_stage_lines():
    """A real IPython kernel (nbclient): standard error is no terminal there, yet it gets the bar."""
    import nbformat
    from nbclient import NotebookClient

    code = textwrap.dedent("""
        from batchenum.pipeline.progress import Progress
        progress = Progress("toy")
        print(progress.notebook, progress.interactive)
        progress.start_shards(3, 0)
        for _ in range(3):
            progress.shard_done(10)
        progress.finish_shards()
        progress.stage("wrote it")
        """)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    outputs = notebook.cells[0].outputs
    stdout = "".join(out.get("text", "") for out in outputs if out.get("name") == "stdout")
    stderr = "".join(out.get("text", "") for out in outputs if out.get("name") == "stderr")
    widgets = [out for out in outputs if out.get("output_type") == "display_data"]
    assert stdout == "True True\n"
    assert "toy: wrote it [" in stderr
    assert "toy: 3/3 shards |" in stderr or widgets, outputs  # text bar, or a widget with ipywidgets
    assert "30 records" in stderr or widgets


class _Terminal(TimedLines):
    """A stream that says it is a terminal: Progress draws its tqdm bar there."""

    def isatty(self) -> bool:
        return True


def test_the_bar_shows_its_estimate_only_from_three_computed_shards():
    progress = Progress("bar", stream=_Terminal())
    progress.start_shards(total=10, reused=2)
    assert "{remaining}" not in progress._bar.bar_format
    for _ in range(3):
        progress.shard_done()
    assert "{remaining}" in progress._bar.bar_format
    progress.finish_shards()


def test_a_bar_weighed_by_expected_work_shows_that_estimate_not_tqdms_count():
    progress = Progress("bar", stream=_Terminal())
    progress.start_shards(total=10, reused=0, work=50.0)
    for _ in range(3):
        progress.shard_done(work=1.0)
    assert "{remaining}" not in progress._bar.bar_format  # tqdm counts shards: 7 left of 10
    assert re.search(r"~\S+ left \(by expected work\)", progress._bar.postfix or ""), progress._bar.postfix
    progress.finish_shards()
