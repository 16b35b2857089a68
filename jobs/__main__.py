"""``python -m jobs`` is the same as the ``batchenum`` command."""

from jobs.cli import console

console()
