"""The ``batchenum`` command: every job and command of this package, handed to pipeline.cli."""

from __future__ import annotations

import sys

from jobs import dungeons, nonary, palago, palago_views
from pipeline import cli

JOBS = [palago.COMMAND, dungeons.COMMAND, nonary.COMMAND]
COMMANDS = [*palago.COMMANDS, *palago_views.COMMANDS, *dungeons.COMMANDS, *nonary.COMMANDS]


def main(argv: list[str] | None = None) -> int:
    return cli.main(sys.argv[1:] if argv is None else argv, JOBS, COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
