"""``python -m jobs`` is the same as the ``batchenum`` command."""

import sys

from jobs.cli import main

sys.exit(main())
