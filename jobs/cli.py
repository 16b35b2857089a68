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
    _finalize_object_storage()
    gc.freeze()
    sys.exit(status)


def _finalize_object_storage() -> None:
    """Shut pyarrow's S3 client down now, while the interpreter is whole, rather than in its exit
    hook: objects the frozen collector keeps alive can otherwise reach the AWS SDK's teardown with
    its threads still running, and the process aborts after its work is done ("terminate called
    without an active exception", exit -6: seen once, after `status --out s3://`; apache/arrow
    issues 34314 and 41087).  Idempotent, and nothing if S3 was never used."""
    filesystems = sys.modules.get("pyarrow.fs")
    if filesystems is not None:
        filesystems.ensure_s3_finalized()


if __name__ == "__main__":
    console()
