"""The ``batchenum`` command: the registry's jobs and commands (jobs/__init__.py), handed to pipeline.cli."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import NoReturn

from batchenum.console import stop_on_signals
from batchenum.jobs import REGISTRY, __version__


def main(argv: list[str] | None = None) -> int:
    from batchenum.pipeline import cli  # here, not above: console() first handles signals

    return cli.main(sys.argv[1:] if argv is None else argv, REGISTRY, version=__version__)


def console(received: list[int] | None = None) -> NoReturn:
    """The ``batchenum`` process: ``main``, then exit without the interpreter's teardown.  A Ctrl-C
    or SIGTERM before ``cli.main`` installs its handlers ends it with the line a later one gives;
    ``received`` collects the signals (batchenum/console.py, which installs the first handlers
    before this module imports anything)."""
    received = stop_on_signals() if received is None else received
    try:
        status = main()
    except KeyboardInterrupt:
        from batchenum.pipeline.interrupts import interrupted

        status = interrupted("batchenum", received[-1] if received else signal.SIGINT)
    _exit_now(status)


def _exit_now(status: int) -> NoReturn:
    """End the process as the interpreter would, then skip its teardown.

    Our threads are joined and the atexit handlers run (Ray's shutdown, logging's flush), standard
    output and error are flushed, and then os._exit leaves without destroying modules or running
    the C++ static destructors.  That teardown is where pyarrow's and the AWS SDK's native threads
    met their destructors still running: CI saw `batchenum status --out s3://...` abort with
    "terminate called without an active exception" (exit -6) after its output was written, twice,
    the second time with pyarrow's S3 finalizer already called first (apache/arrow issues 34314
    and 39862).  Every file we write is closed before ``main`` returns, so nothing is lost; skipping
    the teardown also saves time on every run (docs/benchmarks.md#leaving-the-process)."""
    threading._shutdown()  # type: ignore[attr-defined]  # private: what the interpreter's exit does first, join non-daemon threads
    _skip_s3_finalizer()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, or a stream closed by a handler
            pass
    os._exit(status)


def _skip_s3_finalizer() -> None:
    """pyarrow's exit hook shuts the AWS SDK down, joining its threads; the first abort above may
    have come from there.  Every S3 request of ours completed before ``main`` returned, and
    os._exit ends the SDK's threads with the process, so the hook has nothing left to do."""
    filesystems = sys.modules.get("pyarrow.fs")
    if filesystems is not None:
        atexit.unregister(filesystems.ensure_s3_finalized)


if __name__ == "__main__":
    console()
