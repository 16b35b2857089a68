"""The code version recorded with every shard: the job's declared version plus a hash of every
source file of the packages that compute it and of the versions of the libraries its results
depend on.  Computed wherever a shard runs, so a node with other code installed cannot commit
shards under the driver's name."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os

__all__ = ["code_version", "LIBRARIES"]

LIBRARIES = ("numba", "numpy", "pyarrow")  # their versions are part of the code version


def code_version(job) -> str:
    """``<declared version>+<16 hex digits>`` for a job object."""
    packages = job.code_packages or (_package_of(type(job).__module__), "batchenum.pipeline")
    return f"{job.version}+{_digest(tuple(sorted(set(packages))))}"


def _package_of(module: str) -> str:
    """The package a job's module belongs to: its top level, or ``batchenum.<folder>`` for ours."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "batchenum" and len(parts) > 2 else parts[0]


@functools.lru_cache(maxsize=None)
def _digest(packages: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for package in packages:
        for relative, path in _source_files(package):
            with open(path, "rb") as handle:
                digest.update(f"{package}/{relative}".encode() + b"\0" + handle.read() + b"\0")
    for library in LIBRARIES:
        digest.update(f"{library}=={importlib.metadata.version(library)}\0".encode())
    return digest.hexdigest()[:16]


def _source_files(package: str) -> list[tuple[str, str]]:
    """(path relative to the package, absolute path) of every .py file of an installed package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not (spec.submodule_search_locations or spec.origin):
        raise ValueError(f"code package {package!r} not found")
    if not spec.submodule_search_locations:  # a plain module
        return [(os.path.basename(spec.origin), spec.origin)]
    files = []
    for root in spec.submodule_search_locations:
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [(os.path.relpath(os.path.join(folder, n), root), os.path.join(folder, n))
                      for n in names if n.endswith(".py")]
    return sorted(files)
