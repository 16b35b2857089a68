"""``python -m batchenum`` is the same as the ``batchenum`` command."""

from batchenum.console import console

console()
