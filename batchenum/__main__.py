"""``python -m batchenum`` is the same as the ``batchenum`` command."""

from batchenum.jobs.cli import console

console()
