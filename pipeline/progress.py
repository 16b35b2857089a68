"""Progress for long runs: a tqdm bar at a terminal and in a notebook, ``logging`` records elsewhere.

At a terminal (standard error is a tty) and in a Jupyter kernel the shards are a tqdm bar (a widget
when ipywidgets is installed, else text the notebook redraws) with shards and records done, rates
and an estimate of the time left; stage lines and whatever Ray forwards from its workers are written
above the bar (the bar cleared, the line written, the bar drawn again), never across it.  Elsewhere
(a log file, a pipe, an orchestrator) progress goes to the ``batchenum`` logger (INFO) when logging
is configured, else as plain lines on standard error, with a shard line at most every ``log_every``
seconds.  A line says when numba starts compiling kernels in this process and how long it took (a
worker's compiles are not seen from here: the bar keeps counting the seconds meanwhile)."""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # tqdm itself is imported when the first bar is drawn
    from collections.abc import Callable

    from tqdm import tqdm

__all__ = ["Progress", "LOGGER"]

LOGGER = logging.getLogger("batchenum")
FIRST_LINE = 1.0  # seconds of silence at the start before a line says the run started
TICK = 1.0  # seconds between two redraws of the bar, or two looks at whether a log line is due
FIRST_SHARD_HINT = 10.0  # seconds without a finished shard before the line says why that may be
START_UP = 180.0  # past this, a run with no finished shard is not starting: its shards are long
# A shard's first call of each kernel compiles it: a dungeon shard compiled its parser, parsed, then
# compiled its solver, and the run said "kernels compiled" twice (issue 48).  Compiles less than
# this many seconds apart, no shard finishing and no stage between them, are one phase, said once.
COMPILE_SETTLE = 5.0
# Off a terminal, while no shard finishes, a line comes every log_every seconds at first, then less
# often as the wait grows (a tenth of it), at most this far apart: an hour-long shard's log shows the
# run is alive without 720 identical lines an hour.
LONGEST_GAP = 60.0
# While shards run, the job folder's checkpoints are looked at this often, and each new save is said
# in a line: a save made in a Ray worker or on another node is otherwise said nowhere the person
# watching sees, and an hour-long height's log showed only that the run was alive.
SAVES_EVERY = 15.0


# An estimate of the time left is given once this many shards were computed in this run: it is
# made from those finished after the first (whose time holds Ray's start and the compiles), and one
# or two shards said little (a 94 s run once read "~16m12s left (from 2 shards)").
ESTIMATE_SHARDS = 3
# The longest computed shard over the median past which the estimate comes with the range the
# shards took: the n = 60 count's log read "14/177 shards, 1h54m elapsed, ~23h49m left", a rate
# of shards, while its heights had taken 0 s to 52 minutes each.
UNEVEN = 10
UNEVEN_FROM_SECONDS = 60.0  # shards shorter than this are never called uneven
# An estimate weighed by expected work waits until the computed shards hold this share of the work:
# the first shards are small and fixed costs (Ray's start, compiles, tasks' starts) outweigh them.
# The n = 60 count read "~9715h54m left (by expected work)" 29 s in, and ~39h46m at 3 minutes, with
# about 4 hours to go: its first 11 heights hold 0.5% of its expected work, the 13th takes it to 7%.
WEIGHED_FROM = 0.05
# The bar at a terminal: tqdm's estimate of the time left is shown from ESTIMATE_SHARDS shards on.
_BAR = "{desc}: {n_fmt}/{total_fmt} shards |{bar}| [{elapsed}, {rate_fmt}{postfix}]"
_BAR_WITH_ESTIMATE = "{desc}: {n_fmt}/{total_fmt} shards |{bar}| [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def _waiting_hint(elapsed: float, ray: bool = True, kernels: bool = True) -> str:
    """Why no shard has finished after ``elapsed`` seconds of this run's shards: what the run may
    be waiting for (Ray starting, when it uses Ray; kernels compiling, when the job has any)."""
    if elapsed > START_UP:
        return "no shard finished in this run yet: long shards; `batchenum status` shows their checkpoints"
    causes = (["Ray starting"] if ray else []) + (
        [f"kernels compiling{' in the workers' if ray else ''}"] if kernels else []
    )
    return "no shard done yet: " + (" or ".join(causes) if causes else "the first shards are long")


def uneven(seconds: list[float]) -> tuple[float, float] | None:
    """(shortest, longest) of the shards' durations when they differ too much for a rate of shards
    to say how long the rest take, else None."""
    took = sorted(seconds)
    if len(took) < ESTIMATE_SHARDS or took[-1] < UNEVEN_FROM_SECONDS or took[-1] < UNEVEN * took[len(took) // 2]:
        return None
    return took[0], took[-1]


def work_share_done(done: float, left: float) -> float:
    """The share of the expected work done, of ``done`` + ``left``."""
    left = max(0.0, left)
    return done / (done + left) if done + left > 0 else 1.0


def weighed_time_left(elapsed: float, done: float, left: float) -> float | None:
    """``elapsed`` x ``left`` / ``done`` (work done in ``elapsed`` seconds, work left) once the work
    done is WEIGHED_FROM of the whole or more; None before (see WEIGHED_FROM)."""
    if done <= 0 or work_share_done(done, left) < WEIGHED_FROM:
        return None
    return elapsed * max(0.0, left) / done


def counted_down(started: float, reported: float, now: float, done: float, left: float) -> float | None:
    """The time left at the rate the work went from ``started`` to its last report (``reported``:
    a shard done, a save), less the time since: the work goes on between two reports, and an
    estimate that grew until the next one would swing by the gap times left / done (45 minutes
    every 5 at a tenth done).  Once that has run out (the work is behind its pace), the rate up to
    ``now``."""
    at_report = weighed_time_left(reported - started, done, left)
    if at_report is None:
        return None
    since = at_report - (now - reported)
    return since if since > 0 else weighed_time_left(now - started, done, left)


def _heartbeat_gap(log_every: float, waited: float) -> float:
    """Seconds between two unchanged shard lines after ``waited`` seconds without a finished shard."""
    return max(log_every, min(LONGEST_GAP, waited / 10))


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (where standard error is no tty, yet redraws)."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _bar_class(notebook: bool) -> type[tqdm]:
    if notebook:
        with warnings.catch_warnings():  # without ipywidgets tqdm says so and draws text: fine in a notebook
            warnings.simplefilter("ignore")
            from tqdm.autonotebook import tqdm
        return tqdm
    from tqdm import tqdm

    return tqdm


class Progress:
    """Reports a job's stages, the kernels numba compiles, and its shards as they finish.

    stream: where the lines go; by default standard error.  A terminal or a notebook gets a bar;
            otherwise, when no stream is given, the ``batchenum`` logger once logging is configured
            (plain lines on standard error when it is not, so that nothing is lost).
    quiet:  nothing at all.
    log_every: off a terminal, seconds between two shard lines (stage lines always go out).
    """

    def __init__(self, label: str, stream: TextIO | None = None, quiet: bool = False, log_every: float = 5.0):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.notebook = stream is None and _in_notebook()
        self.interactive = self.notebook or bool(getattr(self.stream, "isatty", lambda: False)())
        self.logged = stream is None and not self.interactive
        self.log_every = log_every
        self.ray = True  # whether the run may start or use Ray, and whether the job has kernels to
        self.kernels = True  # compile (the run says so before its shards): the waiting hint names only those
        self.started = time.monotonic()
        self._first_done: float | None = None  # when the first shard computed in this run finished
        self._lock = threading.RLock()
        self._bar: Any = None
        self._redirected: tuple[Any, Any] | None = None
        self._clock: Any = None  # a bar with no total, counting the seconds of a compile
        self._running = False  # between start_shards and finish_shards
        self._total = 0
        self._done = 0
        self._reused = 0
        self._records = 0
        self._seconds: list[float] = []  # how long each shard computed in this run took
        # the expected work (Job.shard_work) of the shards not done yet, and of those done in this
        # run; None when the job gives none: the estimate then counts shards
        self._work_left: float | None = None
        self._work_done = 0.0
        # shards in flight whose saves said how far they are: {shard id: (work this run did of it,
        # work earlier runs did of it)}; and the shards done, whose late saves count no more
        self._in_flight: dict[str, tuple[float, float]] = {}
        self._finished: set[str] = set()
        self._shards_started = self.started
        self._reported = self.started  # when a shard or a save last said how much work was done
        self._last_line = 0.0
        self._last_change = self.started  # when a shard last finished (or the shards started)
        self._compiling: float | None = None  # when the outermost compile in progress started
        self._compiled = 0.0  # seconds of compiling not reported yet
        self._phase: float | None = None  # when the first compile of the phase not reported yet started
        self._compile_ended = 0.0  # when the last compile ended
        self._ticker: threading.Event | None = None
        self._new_saves: Callable[[], list[dict]] | None = None
        self._saves_looked = 0.0  # when the job folder's checkpoints were last looked at
        self._look_failed = False
        self._said_started = _say_started_unless_said(self)
        _CompileWatch.follow(self)

    # ----------------------------------------------------------------------------- the job's calls

    def stage(self, message: str) -> None:
        """One line for a stage of the run."""
        with self._lock:
            self._report_compiled()
            self._line(f"{self.label}: {message} [{_duration(time.monotonic() - self.started)}]")

    def watch_saves(self, new_saves: Callable[[], list[dict]]) -> None:
        """While shards run, say each checkpoint save ``new_saves`` gives (``{"shard", "progress"}``,
        pipeline.checkpoint.SaveWatch), looking every SAVES_EVERY seconds.  A save that also gives
        ``work_done`` and ``work_before`` (the expected work of its shard that this run, and earlier
        runs, did) counts in the estimate of the time left until its shard is done."""
        self._new_saves = new_saves

    def start_shards(self, total: int, reused: int, work: float | None = None) -> None:
        """``total`` shards, ``reused`` of them committed already; ``work``: the expected work of
        those to compute (Job.shard_work), or None."""
        with self._lock:
            self._report_compiled()
            if self._clock is not None:  # the shard bar takes over
                self._clock.close()
                self._clock = None
            self._running = True
            self._total, self._done, self._reused, self._records = total, reused, reused, 0
            self._seconds = []
            self._work_left, self._work_done = work, 0.0
            self._in_flight, self._finished = {}, set()
            self._first_done = None
            self._shards_started = self._last_line = self._last_change = self._reported = time.monotonic()
            if self.interactive and not self.quiet:
                self._bar = _bar_class(self.notebook)(
                    total=total,
                    initial=reused,
                    desc=self.label,
                    unit="shard",
                    file=self.stream,
                    dynamic_ncols=True,
                    mininterval=0.2,
                    smoothing=0.1,
                    bar_format=_BAR if reused + ESTIMATE_SHARDS <= total or work is not None else _BAR_WITH_ESTIMATE,
                )
                self._redirected = _write_above(self._bar)
            else:
                self._line(self._shard_line())
            if self._ticker is None and not self.quiet:
                self._ticker = _start_ticker(self)

    def add_shards(self, count: int, work: float | None = None) -> None:
        """``count`` more shards to compute, handed back by a shard that finished; ``work``: their
        expected work (None: unknown, and the estimate counts shards from now on)."""
        with self._lock:
            self._total += count
            self._work_left = None if self._work_left is None or work is None else self._work_left + work
            if self._bar is not None:
                self._bar.total = self._total
                self._bar.refresh()

    def shard_done(
        self,
        records: int | None = None,
        seconds: float | None = None,
        work: float | None = None,
        shard: str | None = None,
        work_before: float = 0.0,
    ) -> None:
        """One more shard done; ``records``: how many input records it read, when it reads any;
        ``seconds``: how long it computed, when it was not reused; ``work``: its expected work, of
        which ``work_before`` was done by earlier runs (a resumed shard's saves); ``shard``: its id."""
        with self._lock:
            self._done += 1
            self._records += records or 0
            if seconds is not None:
                self._seconds.append(seconds)
            if shard is not None:
                self._in_flight.pop(shard, None)
                self._finished.add(shard)
            self._last_change = time.monotonic()
            if self._work_left is not None and work is not None:
                self._work_left -= work
                self._work_done += max(0.0, work - work_before)
                self._reported = self._last_change
            self._report_compiled()  # a shard computed: its kernels are compiled
            if self._first_done is None:
                self._first_done = self._last_change
            if self._bar is not None:
                if self._done - self._reused == ESTIMATE_SHARDS and self._work_left is None:
                    self._bar.bar_format = _BAR_WITH_ESTIMATE  # tqdm's estimate (by count) now means something
                self._bar.set_postfix_str(self._bar_postfix(), refresh=False)
                self._bar.update(1)
            elif self._done == self._total or self._due():
                self._line(self._shard_line())

    def finish_shards(self) -> None:
        with self._lock:
            self._running = False
            if self._ticker is not None:
                self._ticker.set()
                self._ticker = None
            if self._bar is not None:
                _restore(self._redirected)
                self._bar.close()
                self._bar = None
            self._report_compiled()

    # ----------------------------------------------------------------------------- what is written

    def _tick(self) -> None:
        """Every ``TICK`` seconds while shards run: the bar's clock moves, and off a terminal a line
        comes at least every ``log_every`` seconds even while no shard finishes."""
        with self._lock:
            self._report_compiled(settled=True)
            if self._clock is not None:
                self._clock.refresh()
            elif self._phase is not None and not self.interactive and self._due():
                self._line(
                    f"{self.label}: still compiling kernels, {_duration(time.monotonic() - self._phase)} "
                    f"so far [{_duration(time.monotonic() - self.started)}]"
                )
            if self._bar is not None:
                waited = time.monotonic() - self._shards_started
                if self._done == self._reused and waited > FIRST_SHARD_HINT:
                    self._bar.set_postfix_str(
                        self._records_text() or _waiting_hint(waited, self.ray, self.kernels), refresh=False
                    )
                self._bar.refresh()
            elif self._running and not self.interactive and self._heartbeat_due():
                self._line(self._shard_line())

    def _say_saves(self) -> None:
        """The ticker's look at the checkpoints, outside the lock: a look may wait on its storage."""
        now = time.monotonic()
        if self._new_saves is None or not self._running or now - self._saves_looked < SAVES_EVERY:
            return
        self._saves_looked = now
        try:
            saves = self._new_saves()
        except Exception as error:  # a look that fails costs its line once, never the run
            if not self._look_failed:
                self._look_failed = True
                self.stage(f"could not look at the shards' checkpoints ({type(error).__name__}: {error}); trying again")
            return
        for save in saves:
            self.stage(f"{save['shard']} saved at {save.get('progress') or '?'}")
            if save.get("work_done") is not None:
                with self._lock:
                    if save["shard"] not in self._finished:
                        self._in_flight[save["shard"]] = (save["work_done"], save.get("work_before") or 0.0)
                        self._reported = time.monotonic()
                    if self._bar is not None:
                        self._bar.set_postfix_str(self._bar_postfix(), refresh=False)

    def _due(self) -> bool:
        """Off a terminal: whether ``log_every`` seconds passed since the last line."""
        return time.monotonic() - self._last_line >= self.log_every

    def _heartbeat_due(self) -> bool:
        """Off a terminal, no shard finishing: whether the run has been quiet long enough for a line."""
        now = time.monotonic()
        return now - self._last_line >= _heartbeat_gap(self.log_every, now - self._last_change)

    def _shard_line(self) -> str:
        elapsed = time.monotonic() - self._shards_started
        computed = self._done - self._reused
        line = f"{self.label}: {self._done}/{self._total} shards, {_duration(elapsed)} elapsed"
        remaining = self._total - self._done
        if remaining and (self._weighed() or (computed >= ESTIMATE_SHARDS and self._first_done is not None)):
            line += ", " + self._estimate()
        if self._records and elapsed > 0:
            line += f", {self._records:,} records, {self._records / elapsed:,.0f} records/s"
        elif not computed and remaining and elapsed > FIRST_SHARD_HINT:
            line += f" ({_waiting_hint(elapsed, self.ray, self.kernels)})"
        return line

    def _estimate(self) -> str:
        """'~5h12m left (by expected work)' from the job's expected work of the shards ('0.5% of the
        expected work done' until that means something), else from their count: '~23h49m left',
        with the range they took when it is wide."""
        if self._weighed():
            done, left_work = self._work_so_far()
            left = counted_down(self._shards_started, self._reported, time.monotonic(), done, left_work)
            if left is None:
                return f"{work_share_done(done, left_work):.1%} of the expected work done"
            return f"~{_duration(left)} left (by expected work)"
        since_first = time.monotonic() - (self._first_done or self._shards_started)
        took = self._took_text()
        left = since_first / (self._done - self._reused - 1) * (self._total - self._done)
        return f"~{_duration(left)} left" + (f" (but {took})" if took else "")

    def _weighed(self) -> bool:
        """Whether the estimate weighs by expected work, and some was done in this run."""
        return self._work_left is not None and self._work_so_far()[0] > 0

    def _work_so_far(self) -> tuple[float, float]:
        """(expected work done in this run, left): the shards in flight as far as their saves say."""
        this_run = sum(done for done, _ in self._in_flight.values())
        earlier = sum(before for _, before in self._in_flight.values())
        return self._work_done + this_run, (self._work_left or 0.0) - this_run - earlier

    def _took_text(self) -> str:
        """'shards took 0.0s to 52m12s each' when the computed shards are uneven, else ''."""
        took = uneven(self._seconds)
        return f"shards took {_duration(took[0])} to {_duration(took[1])} each" if took else ""

    def _bar_postfix(self) -> str:
        """Beside the bar: the records, and an estimate tqdm's own (by count) would get wrong."""
        note = ""
        if self._weighed():
            note = self._estimate()
        elif self._work_left is None:
            note = self._took_text()
        return ", ".join(text for text in (self._records_text(), note) if text)

    def _records_text(self) -> str:
        elapsed = time.monotonic() - self._shards_started
        if not self._records or elapsed <= 0:
            return ""
        return f"{self._records:,} records, {self._records / elapsed:,.0f} records/s"

    def _line(self, text: str) -> None:
        if self.quiet:
            return
        self._said_started.cancel()
        self._last_line = time.monotonic()
        if self.logged and LOGGER.hasHandlers():
            LOGGER.info(text)
        elif self.interactive:  # above the bars being drawn
            _bar_class(self.notebook).write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    # ------------------------------------------------------------------------------- compiling

    def compile_started(self) -> None:
        with self._lock:
            if self._compiling is not None:
                return
            if self._phase is None:
                self._line(
                    f"{self.label}: compiling kernels (numba; once per machine, then cached) "
                    f"[{_duration(time.monotonic() - self.started)}]"
                )
            self._compiling = time.monotonic()
            self._phase = self._phase or self._compiling
            if self.interactive and not self.quiet and self._bar is None and self._clock is None:
                self._clock = _bar_class(self.notebook)(
                    desc=f"{self.label}: compiling", file=self.stream, bar_format="{desc} {elapsed}", leave=False
                )
            if self._ticker is None and not self.quiet:
                self._ticker = _start_ticker(self)

    def compile_ended(self) -> None:
        with self._lock:
            if self._compiling is None:
                return
            self._compile_ended = time.monotonic()
            self._compiled += self._compile_ended - self._compiling
            self._compiling = None

    def _report_compiled(self, settled: bool = False) -> None:
        """Say the phase's compiles are done, with their seconds: at a stage, a finished shard or
        the shards' end; ``settled``, only once ``COMPILE_SETTLE`` seconds passed without one."""
        if self._phase is None or self._compiling is not None:
            return
        if settled and time.monotonic() - self._compile_ended < COMPILE_SETTLE:
            return
        self._line(
            f"{self.label}: kernels compiled in {_duration(self._compiled)} "
            f"[{_duration(time.monotonic() - self.started)}]"
        )
        self._compiled, self._phase = 0.0, None
        if self._clock is not None:
            self._clock.close()
            self._clock = None
        if not self._running and self._ticker is not None:  # no shards running: nothing to tick for
            self._ticker.set()
            self._ticker = None


def _say_started_unless_said(progress: Progress) -> threading.Timer:
    """A first line ``FIRST_LINE`` seconds after the start when nothing was said by then (imports,
    planning); an error before that stays the only line on standard error."""
    target = weakref.ref(progress)

    def say() -> None:
        alive = target()
        if alive is not None:
            alive.stage("started")

    timer = threading.Timer(FIRST_LINE, say)
    timer.daemon = True
    if not progress.quiet:
        timer.start()
    return timer


def _write_above(bar: Any) -> tuple[Any, Any] | None:
    """While the bar is drawn, what is printed to ``sys.stdout`` or ``sys.stderr`` (Ray forwards its
    workers' output so) goes above it, line by line; returns the streams to put back."""
    if isinstance(sys.stdout, _AboveBar) or isinstance(sys.stderr, _AboveBar):
        return None  # another bar of ours redirects already
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _AboveBar(sys.stdout, bar), _AboveBar(sys.stderr, bar)
    return saved


class _AboveBar:
    """A text stream whose complete lines are written with the bar cleared first and redrawn after
    (tqdm's ``external_write_mode``); every other attribute is the wrapped stream's."""

    def __init__(self, wrapped: TextIO, bar: Any):
        self._wrapped = wrapped
        self._bar = bar
        self._pending = ""

    def write(self, text: str) -> int:
        lines, newline, self._pending = (self._pending + text).rpartition("\n")
        if newline:
            with type(self._bar).external_write_mode(file=self._bar.fp):
                self._wrapped.write(lines + "\n")
                self._wrapped.flush()
        return len(text)

    def flush(self) -> None:
        self._wrapped.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


def _restore(saved: tuple[Any, Any] | None) -> None:
    if saved is None:
        return
    for above in (sys.stdout, sys.stderr):
        if isinstance(above, _AboveBar) and above._pending:  # a last line without its newline
            above._wrapped.write(above._pending)
    sys.stdout, sys.stderr = saved


def _start_ticker(progress: Progress) -> threading.Event:
    """A daemon thread calling ``progress._tick`` until the returned event is set (it holds the
    progress only weakly: a progress dropped without ``finish_shards`` ends it too)."""
    stop = threading.Event()
    target = weakref.ref(progress)

    def tick() -> None:
        while not stop.wait(TICK):
            alive = target()
            if alive is None:
                return
            alive._tick()
            alive._say_saves()
            del alive

    threading.Thread(target=tick, name="batchenum-progress", daemon=True).start()
    return stop


def watch_numba_compiles() -> None:
    """Have this process's numba compiles told to the run's progress; called by every module of
    ours with kernels (through batchenum/numba_cache.py) as it loads."""
    _CompileWatch.install()


class _CompileWatch:
    """One numba listener per process, telling the latest ``Progress`` when this process compiles
    (``numba:compile`` fires on a cache miss only; nested compiles count once).  Installed once
    numba is loaded: at a run's start when the job's code loaded it, or later by a kernel module of
    ours (``watch_numba_compiles``), so that a run that compiles nothing never imports numba, which
    costs 0.1-0.3 s a process."""

    _current: weakref.ReferenceType | None = None
    _depth = 0
    _installed = False

    @classmethod
    def follow(cls, progress: Progress) -> None:
        cls._current = weakref.ref(progress)
        if "numba" in sys.modules:
            cls.install()

    @classmethod
    def install(cls) -> None:
        if cls._installed:
            return
        from numba.core import event

        class Listener(event.Listener):
            def on_start(self, _event) -> None:
                cls._depth += 1
                if cls._depth == 1:
                    cls._tell("compile_started")

            def on_end(self, _event) -> None:
                cls._depth -= 1
                if cls._depth == 0:
                    cls._tell("compile_ended")

        event.register("numba:compile", Listener())
        cls._installed = True

    @classmethod
    def _tell(cls, what: str) -> None:
        progress = cls._current() if cls._current else None
        if progress is not None:
            getattr(progress, what)()
