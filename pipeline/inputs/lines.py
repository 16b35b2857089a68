"""Cutting a JSONL slice out of a stream of bytes with a bounded cost per line.

A slice is read in chunks of ``CHUNK`` bytes, never as one piece, so a single huge line cannot make
a worker hold it: a line of more than ``MAX_LINE_BYTES`` bytes (its newline not counted) is dropped
as soon as it grows past the limit, kept as a blank line so later lines keep their numbers, and
reported (``Cut.oversized``) for the reader to reject with its length.  A slice therefore costs at
most about ``MAX_LINE_BYTES + CHUNK`` bytes beyond its accepted lines.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Cut", "cut_lines", "MAX_LINE_BYTES", "CHUNK"]

MAX_LINE_BYTES = 32 << 20  # 32 MiB: room for a 2,000 x 2,000 dungeon as JSON (docs/benchmarks.md)
CHUNK = 16 << 20


@dataclass
class Cut:
    """A slice cut from its stream.

    data:      the slice's bytes, each over-long line replaced by an empty one.
    oversized: {offset of the line within the slice (0 for its first line): its length in bytes}.
    complete:  whether the stream held the newlines asked for (False: it ended first).
    digest:    SHA-256 of the slice's bytes as they are in the stream (over-long lines included).
    """

    data: bytes
    oversized: dict[int, int]
    complete: bool
    digest: str


@dataclass
class _Collector:
    """The lines taken so far: complete ones in ``parts``, the unfinished one in ``pending``, or
    only counted (``dropped``) once it is over the limit."""

    limit: int
    parts: list = field(default_factory=list)
    pending: list = field(default_factory=list)
    pending_bytes: int = 0
    dropped: bool = False
    line: int = 0
    oversized: dict = field(default_factory=dict)

    def extend(self, piece: memoryview) -> None:
        """Add bytes to the unfinished line."""
        self.pending_bytes += len(piece)
        if self.dropped:
            return
        self.pending.append(piece)
        if self.pending_bytes > self.limit + 1:  # over the limit even with a newline at its end
            self.pending, self.dropped = [], True

    def end_line(self, terminated: bool) -> None:
        """The unfinished line is complete (``terminated``: it ends with a newline, already added)."""
        length = self.pending_bytes - terminated
        if self.dropped or length > self.limit:
            self.oversized[self.line] = length
            self.parts.append(b"\n" if terminated else b"")
        else:
            self.parts.extend(self.pending)
        self.pending, self.pending_bytes, self.dropped = [], 0, False
        self.line += 1

    def whole_lines(self, piece: memoryview, newlines: np.ndarray, base: int) -> None:
        """Add complete lines: ``piece`` is exactly those lines, ``newlines - base`` their newlines'
        offsets in it.  Only a piece longer than the limit can hold a line over it: no array per
        line is made otherwise (a chunk of blank lines costs no more than its newlines' offsets)."""
        if len(piece) > self.limit and (np.diff(newlines, prepend=base - 1) - 1).max() > self.limit:
            start = 0
            for end in newlines - base:
                self.extend(piece[start : end + 1])
                self.end_line(True)
                start = end + 1
            return
        self.parts.append(piece)
        self.line += len(newlines)


def cut_lines(chunks: Iterable[bytes], skip: int = 0, lines: int | None = None, limit: int = MAX_LINE_BYTES) -> Cut:
    """The slice of a stream that starts after its ``skip``-th newline and holds ``lines`` lines
    (None: to the end of the stream), with over-long lines dropped (see the module's docstring)."""
    collector, digest = _Collector(limit), hashlib.sha256()
    to_skip, wanted, taken = skip, lines, 0
    for chunk in chunks:
        view = memoryview(chunk)
        newlines = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 0x0A)
        if to_skip:
            if len(newlines) < to_skip:
                to_skip -= len(newlines)
                continue
            start = int(newlines[to_skip - 1]) + 1
            newlines, to_skip = newlines[to_skip:], 0
            view = view[start:]
            newlines = newlines - start
        if wanted is not None and len(newlines) >= wanted - taken:
            newlines = newlines[: wanted - taken]
            view = view[: int(newlines[-1]) + 1] if len(newlines) else view[:0]
        _take(collector, view, newlines)
        digest.update(view)
        taken += len(newlines)
        if wanted is not None and taken == wanted:
            break
    if collector.pending_bytes:
        collector.end_line(False)
    complete = not to_skip and (wanted is None or taken == wanted)
    return Cut(b"".join(collector.parts), collector.oversized, complete, digest.hexdigest()[:32])


def _take(collector: _Collector, view: memoryview, newlines: np.ndarray) -> None:
    """Add one chunk's piece of the slice: the end of the unfinished line, whole lines, and the
    start of the next unfinished one."""
    if not len(newlines):
        if len(view):
            collector.extend(view)
        return
    first, last = int(newlines[0]), int(newlines[-1])
    collector.extend(view[: first + 1])
    collector.end_line(True)
    if len(newlines) > 1:
        collector.whole_lines(view[first + 1 : last + 1], newlines[1:], first + 1)
    if last + 1 < len(view):
        collector.extend(view[last + 1 :])
