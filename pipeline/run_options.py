"""``run``'s own options, declared once: each a field of ``RunOptions`` carrying a ``Param``.

From this one declaration come the command line's options of ``batchenum run JOB`` (``--out``,
``--storage-timeout``...), the keywords of ``batchenum.run`` beside the job's parameters, their
checks and messages (``workers must be at least 1, not 0``, or ``--workers ...`` on the command
line), the names no job parameter may take, and the executor's settings.  ``where`` says which of
the two front doors take an option: the command line (``cli``), ``batchenum.run`` (``python``), or
neither (settings for tests and benchmarks only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batchenum.pipeline.params import Param, ParamError, resolve_params
from batchenum.pipeline.runner import RAY_AFTER_SECONDS, TASK_MAX_RETRIES, ExecutorOptions
from batchenum.pipeline.storage import STORAGE_TIMEOUT

__all__ = ["RunOptions", "run_params", "RUN_OPTION_NAMES"]

CLI, PYTHON = "cli", "python"


def _option(param: Param, *where: str, python_default: Any = None) -> Any:
    """A field of ``RunOptions``: its default is the declaration's (``python_default``, when given,
    is ``batchenum.run``'s instead)."""
    metadata = {"param": param, "where": frozenset(where), "python_default": python_default}
    return field(default=param.default, metadata=metadata)


@dataclass(frozen=True)
class RunOptions:
    """Where and how a job runs."""

    out: str = _option(
        Param(
            str,
            default="results",
            metavar="DIR",
            help="output folder or object-store URI (s3://bucket/prefix, gs://..., file://...); tables go to "
            "DIR/JOB/ (default: results). Rerunning into the same place reuses every committed shard with "
            "matching provenance",
        ),
        CLI,
        PYTHON,
    )
    workers: int | None = _option(
        Param(
            int,
            default=None,
            low=1,
            metavar="K",
            help="CPUs of the private local Ray (default: all cores); not with --address",
        ),
        CLI,
        PYTHON,
    )
    address: str | None = _option(
        Param(
            str, default=None, metavar="A", help="Ray cluster address (default: $RAY_ADDRESS, else a private local Ray)"
        ),
        CLI,
        PYTHON,
    )
    serial: bool = _option(
        Param(
            bool, default=False, help="run every shard in this process without Ray (debugging, profiling, small inputs)"
        ),
        CLI,
        PYTHON,
    )
    head_start: bool = _option(
        Param(
            bool,
            default=True,
            help="do not compute shards in this process while the local Ray starts in the background: every "
            "shard runs in a Ray worker (head_start=False in Python)",
        ),
        CLI,
        PYTHON,
    )
    retries: int = _option(
        Param(
            int,
            default=TASK_MAX_RETRIES,
            low=0,
            metavar="R",
            help="times a shard (or a planning task) is run again when its worker process or its node dies "
            f"(default {TASK_MAX_RETRIES}); an exception in the shard is never retried",
        ),
        CLI,
        PYTHON,
    )
    storage_timeout: float = _option(
        Param(
            float,
            default=STORAGE_TIMEOUT,
            above=0,
            metavar="SECONDS",
            help="how long the output store may stay unreachable (refused or dropped connections, timeouts, "
            "throttling, 5xx answers) before the run gives up; every operation is retried with backoff "
            f"meanwhile (default {STORAGE_TIMEOUT:g}). Committed shards are kept either way",
        ),
        CLI,
        PYTHON,
    )
    overwrite: bool = _option(
        Param(
            bool,
            default=False,
            help="replace tables that a run with other input or parameters left in DIR/JOB (without it such a "
            "run is refused, so nothing is replaced silently)",
        ),
        CLI,
        PYTHON,
    )
    quiet: bool = _option(
        Param(bool, default=False, help="no progress output, only the summary"), CLI, PYTHON, python_default=True
    )
    json: bool = _option(
        Param(bool, default=False, help="print the summary as one JSON object on standard output (docs/cli.md)"), CLI
    )
    window: int | None = _option(
        Param(
            int,
            default=None,
            low=1,
            metavar="K",
            help="shards in flight at most (default: twice the cluster's CPUs, at least 8); fewer bound what "
            "shards that start tasks of their own hold at once in Ray's object store and its spill folder",
        ),
        CLI,
        PYTHON,
    )
    # settings of tests and benchmarks, on neither front door
    ray_after: float = _option(
        Param(float, default=RAY_AFTER_SECONDS, low=0, help="the head start starts Ray only for more work left (s)")
    )

    def execution(self) -> ExecutorOptions:
        return ExecutorOptions(
            self.address, self.workers, self.serial, self.head_start, self.window, self.retries, self.ray_after
        )

    @classmethod
    def given(cls, values: Mapping[str, Any], where: str = PYTHON) -> RunOptions:
        """The options from ``values`` as a front door (``cli`` or ``python``) received them: each
        checked by its declaration, then the rules between them; raises ParamError naming them as
        ``{name}`` (spoken in the caller's words)."""
        params = run_params(where)
        holder = type("run", (), dict(params))
        checked = resolve_params(holder, (), values)
        if checked["serial"] and (checked["workers"] or checked["address"]):
            raise ParamError("{serial=True} runs without Ray: drop {workers}/{address}, or drop {serial=True}")
        return cls(**checked)


def run_params(where: str | None = None) -> dict[str, Param]:
    """The run's options by name, as ``Param``s named after their fields: those ``where`` takes
    (``cli`` or ``python``), or all of them."""
    found = {}
    for option in dataclasses.fields(RunOptions):
        if where is not None and where not in option.metadata["where"]:
            continue
        param = option.metadata["param"]
        if where == PYTHON and option.metadata["python_default"] is not None:
            param = dataclasses.replace(param, default=option.metadata["python_default"])
        found[option.name] = dataclasses.replace(param, name=option.name)
    return found


# no job parameter may take one of these names: it would be read as the run's option
RUN_OPTION_NAMES = tuple(run_params())
