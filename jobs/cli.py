"""The ``batchenum`` command: every job and command of this package, handed to pipeline.cli."""

from __future__ import annotations

import gc
import sys

from batchenum.jobs import __version__, dungeons, nonary, palago, palago_growth, palago_views, warm
from batchenum.pipeline import cli

JOBS = [palago.COMMAND, dungeons.COMMAND, nonary.COMMAND]
COMMANDS = [*palago.COMMANDS, *palago_views.COMMANDS, *palago_growth.COMMANDS, *dungeons.COMMANDS, *nonary.COMMANDS, *warm.COMMANDS]


def main(argv: list[str] | None = None) -> int:
    return cli.main(sys.argv[1:] if argv is None else argv, JOBS, COMMANDS, version=__version__)


def console() -> None:
    """The ``batchenum`` process: ``main``, then exit.  The collector is frozen first, so that the
    interpreter's teardown does not visit the objects numba and pandas leave (about 0.3 s of every
    run, measured); atexit handlers still run and files are flushed as usual."""
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    console()
