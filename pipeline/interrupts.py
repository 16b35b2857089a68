"""The one line a command stopped by Ctrl-C or SIGTERM ends with.

Kept free of any import beyond the standard library: the command installs its first handlers
before it imports pyarrow, Ray or numba (seconds on a busy machine), and a signal during those
imports ends with this same line and status as one later does, not with a traceback.
"""

from __future__ import annotations

import signal
import sys

__all__ = ["interrupted"]


def interrupted(prog: str, signum: int = signal.SIGINT, committed: int | None = None) -> int:
    """One line, and exit status 128 + the signal, as a shell reports a process the signal ended: 130
    for Ctrl-C, 143 for SIGTERM.  ``committed``: the shards the job folder holds, when known."""
    how = "stopped (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    if committed is None:
        kept = "committed shards are kept, a rerun reuses them"
    elif committed == 1:
        kept = "1 shard committed is kept, a rerun reuses it"
    else:
        kept = f"{committed} shards committed are kept, a rerun reuses them"
    print(f"\n{prog}: {how}; {kept}", file=sys.stderr)
    return 128 + int(signum)
