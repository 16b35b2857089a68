"""``batchenum warm``: compile every numba kernel the jobs use, here or on every node of a cluster.

numba compiles a kernel on its first call in a process and keeps the machine code in its cache
(per user, by source: batchenum/numba_cache.py; or ``NUMBA_CACHE_DIR``), so a node's first run pays
the compiles once.  ``warm`` pays them before a run: every registered job's ``warm`` (pipeline/job.py)
runs its shard code on a few tiny records in a scratch folder, which calls every kernel a real
shard calls.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time

from batchenum.pipeline.cli import Command

__all__ = ["warm_kernels", "COMMANDS"]


def warm_kernels() -> tuple[str, dict[str, float]]:
    """Compile (or load from the cache) every kernel the registered jobs use in this process;
    returns this host's name and the seconds each job's kernels took."""
    from batchenum.jobs import REGISTRY

    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="batchenum-warm-") as folder:
        for name, job_class in REGISTRY.jobs.items():
            started = time.perf_counter()
            job_class.warm(folder)
            seconds[name] = round(time.perf_counter() - started, 2)
    return socket.gethostname(), seconds


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address",
        metavar="A",
        help="warm every node of this Ray cluster (default: $RAY_ADDRESS; neither: this machine)",
    )


def _warm(args: argparse.Namespace) -> int:
    address = args.address or os.environ.get("RAY_ADDRESS")
    if not address:
        host, seconds = warm_kernels()
        print(_line(host, seconds))
        return 0
    from batchenum.pipeline.runner import RaySession

    session = RaySession(address, None)
    try:
        for host, seconds in session.on_every_node(warm_kernels):
            print(_line(host, seconds))
    finally:
        session.close()
    return 0


def _line(host: str, seconds: dict[str, float]) -> str:
    return f"warm: {host}: " + ", ".join(f"{name} {value:.1f} s" for name, value in seconds.items())


COMMANDS = [
    Command(
        ("warm",),
        "compile every kernel the jobs use (numba), here or on every node of --address",
        _add_arguments,
        _warm,
    )
]
