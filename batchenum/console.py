"""The ``batchenum`` command's entry point, kept free of any import beyond the standard library.

Ctrl-C or SIGTERM while the command still imports its jobs, pyarrow and numba (seconds on a busy
machine) ends it with the line and status a later one gives (``pipeline/interrupts.py``), not a
``KeyboardInterrupt`` traceback or a silent exit 143; ``pipeline/cli.py`` installs its own
handlers once the command line is parsed.
"""

from __future__ import annotations

import signal
from typing import NoReturn

__all__ = ["console", "stop_on_signals"]


def console() -> NoReturn:
    """The ``batchenum`` process (``batchenum.jobs.cli.console`` once it has imported)."""
    received = stop_on_signals()
    try:
        from batchenum.jobs.cli import console as run_command
    except KeyboardInterrupt:
        _stop(received)
    run_command(received)


def stop_on_signals() -> list[int]:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt from now on; the list returned collects the
    signals received, so that the line says which."""
    received: list[int] = []

    def handler(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return received


def _stop(received: list[int]) -> NoReturn:
    import os
    import sys

    from batchenum.pipeline.interrupts import interrupted

    status = interrupted("batchenum", received[-1] if received else signal.SIGINT)
    sys.stderr.flush()
    os._exit(status)
