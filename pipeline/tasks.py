"""Tasks a shard starts from inside its own run (``ShardContext.tasks``): a job whose shard is too
large for one task cuts it further while it runs, and the pieces run where the shard does.

A shard's ``context.tasks`` is an object with:

- ``cpus``: the CPUs the pieces may spread over (the cluster's; 1 in this process);
- ``submit(fn, *args, returns=1, name="")``: start ``fn(*args)`` (a module-level function) and
  return ``returns`` handles to its results (``fn`` returns a tuple of that many values when
  ``returns`` > 1).  A handle may be passed as an argument to a later ``submit``: on Ray it is an
  object reference, so the value goes from task to task without passing through the shard;
- ``get(handles)``: the values, in order (on Ray the shard's task releases its CPU while it waits).

On Ray (pipeline/runner.py) every call is a Ray task of one CPU, retried like a shard when its
worker dies; in this process (``--serial``, the driver's threads) it runs at once, here.  Nothing
here knows about any puzzle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["ShardTasks", "InProcessTasks"]


class ShardTasks(Protocol):
    cpus: int

    def submit(self, fn: Callable, *args: Any, returns: int = 1, name: str = "") -> list: ...

    def get(self, handles: list) -> list: ...


class _Done:
    """A result computed at once (the handle of an in-process task)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class InProcessTasks:
    """Every task run at once in this process.  ``cpus`` (default 1) is what a job is told it may
    spread over: 1 tells it that cutting the work finer gains nothing here."""

    def __init__(self, cpus: int = 1):
        if cpus < 1:
            raise ValueError(f"cpus must be at least 1, not {cpus}")
        self.cpus = cpus
        self.submitted = 0

    def submit(self, fn: Callable, *args: Any, returns: int = 1, name: str = "") -> list:
        if returns < 1:
            raise ValueError(f"returns must be at least 1, not {returns}")
        self.submitted += 1
        result = fn(*(arg.value if isinstance(arg, _Done) else arg for arg in args))
        if returns == 1:
            return [_Done(result)]
        if len(result) != returns:
            raise ValueError(f"{fn.__name__} returned {len(result)} values, not the {returns} asked for")
        return [_Done(value) for value in result]

    def get(self, handles: list) -> list:
        return [handle.value for handle in handles]
