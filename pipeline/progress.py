"""Progress for long runs: a redrawn status line on a terminal, ``logging`` records otherwise.

Off a terminal, progress goes to the ``batchenum`` logger (INFO) once logging is configured, so an
application's own logging configuration decides where it goes and how it looks; the ``batchenum``
command configures timestamped lines on standard error when nothing else has, and without any
configuration the lines go to standard error as they are.  The terminal line is written by hand:
it is one line redrawn with ``\r``, which a dependency (tqdm, rich) would not make shorter.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

__all__ = ["Progress", "LOGGER"]

LOGGER = logging.getLogger("batchenum")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Reports a job's stages and its shards as they finish.

    On a terminal the shard count, elapsed time, rate and an estimate of the time left are redrawn
    in place (at most a few times a second); otherwise each stage is one line, and shard progress
    is reported at most every ``log_every`` seconds so that logs stay short.

    stream: where the lines go; by default standard error when it is a terminal, else the
            ``batchenum`` logger when logging is configured (plain lines on standard error when it
            is not, so that nothing is lost).
    """

    def __init__(self, label: str, stream: TextIO | None = None, quiet: bool = False, log_every: float = 30.0):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self.logged = stream is None and not self.interactive
        self.log_every = log_every
        self.started = time.monotonic()
        self._total = 0
        self._done = 0
        self._computed = 0
        self._records = 0
        self._compute_started = self.started
        self._last_draw = 0.0

    def stage(self, message: str) -> None:
        """One line for a stage of the run."""
        self._clear_line()
        self._write(f"{self.label}: {message} [{_duration(time.monotonic() - self.started)}]\n")

    def start_shards(self, total: int, reused: int) -> None:
        self._total = total
        self._done = reused
        self._computed = 0
        self._compute_started = time.monotonic()
        self._draw(force=True)

    def shard_done(self, records: int | None = None) -> None:
        """One more shard done; ``records``: how many input records it read, when it reads any."""
        self._done += 1
        self._computed += 1
        self._records += records or 0
        self._draw(force=self._done == self._total)

    def finish_shards(self) -> None:
        self._clear_line()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        interval = 0.2 if self.interactive else self.log_every
        if not force and now - self._last_draw < interval:
            return
        self._last_draw = now
        elapsed = now - self._compute_started
        line = f"{self.label}: {self._done}/{self._total} shards, {_duration(elapsed)} elapsed"
        remaining = self._total - self._done
        if self._computed and remaining:
            line += f", ~{_duration(elapsed / self._computed * remaining)} left"
        if self._records and elapsed > 0:
            line += f", {self._records / elapsed:,.0f} records/s"
        if self.interactive:
            self._write("\r\033[K" + line)
        elif not force or self._done == self._total:
            self._write(line + "\n")

    def _clear_line(self) -> None:
        if self.interactive:
            self._write("\r\033[K")

    def _write(self, text: str) -> None:
        if self.quiet:
            return
        if self.logged and LOGGER.hasHandlers():
            if text.strip():
                LOGGER.info(text.strip())
            return
        self.stream.write(text)
        self.stream.flush()
