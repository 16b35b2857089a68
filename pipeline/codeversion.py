"""The code version recorded with every shard: the job's declared version, a hash of every source
file of the installed packages that compute it and of the versions of the libraries its results
depend on, and, for a job whose code is not installed (a script, a notebook cell, a module on the
driver's sys.path), a hash of that code's source.

    <version>+<installed: 16 hex digits>[+<not installed: 16 hex digits>]

The installed part is computed again wherever a shard runs, so a node with other code installed
cannot commit shards under the driver's name.  Code that is not installed travels with the job,
pickled by value (``user_modules`` names the modules to ship), so it is hashed once, on the
driver: workers never need its files.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import linecache
import os
import sys
import types

__all__ = ["code_version", "installed_part", "user_modules", "code_change", "LIBRARIES"]

LIBRARIES = ("numba", "numpy", "pyarrow")  # their versions are part of the code version


def code_version(job) -> str:
    """``<declared version>+<16 hex digits>[+<16 hex digits>]`` for a job object (on the driver)."""
    modules = user_modules(type(job))
    installed = installed_part(job)
    return f"{installed}+{_source_digest(type(job), modules)}" if modules else installed


def installed_part(job) -> str:
    """``<declared version>+<16 hex digits>`` of a job object or class, or of a recorded code version."""
    if isinstance(job, str):
        return "+".join(job.split("+")[:2])
    job_class = job if isinstance(job, type) else type(job)
    packages = job.code_packages or _default_packages(job_class.__module__)
    return f"{job.version}+{_digest(tuple(sorted(set(packages))))}"


def code_change(found: str | None, expected: str) -> str:
    """Which part of a code version differs, in words a person reads after "... changed": the
    job's declared version, the installed code (its packages' source, or numba's, numpy's or
    pyarrow's version), or the code that is not installed (the job's file, or a module it imports)."""
    old, new = (found or "").split("+"), expected.split("+")
    if old[0] != new[0]:
        return f"the job's declared version ({old[0] or 'none'} -> {new[0]})"
    if old[1:2] != new[1:2]:
        return "the installed code it runs (its package's source, or numba, numpy or pyarrow)"
    if old[2:] != new[2:]:
        return "the job's file or a module it imports"
    return "the job's code"


def _default_packages(module: str) -> tuple[str, ...]:
    """The job module's package when it is installed (``batchenum.<folder>`` for ours), and pipeline."""
    parts = module.split(".")
    if _is_installed(parts[0]):
        return (".".join(parts[:2]) if parts[0] == "batchenum" and len(parts) > 2 else parts[0], "batchenum.pipeline")
    return ("batchenum.pipeline",)


@functools.cache
def _distributions_top_levels() -> frozenset[str]:
    return frozenset(importlib.metadata.packages_distributions())


def _is_installed(top_level: str) -> bool:
    """Whether a top-level module comes with an installed distribution (or the standard library,
    or batchenum itself, which a checkout may provide): then every node must have it installed.
    A module this process cannot import is not installed here (a job's module pickled by value, in
    a worker), which spares reading every distribution's metadata: 0.07-0.13 s a process."""
    if top_level in sys.stdlib_module_names or top_level in sys.builtin_module_names or top_level == "batchenum":
        return True
    if top_level not in sys.modules and importlib.util.find_spec(top_level) is None:
        return False
    return top_level in _distributions_top_levels()


def user_modules(job_class: type) -> list[types.ModuleType]:
    """The job's module and the modules it uses, transitively, that are not installed, in a fixed
    order: their source is part of the code version, and they are pickled by value to workers."""
    found: dict[str, types.ModuleType] = {}
    pending = [sys.modules.get(job_class.__module__)]
    while pending:
        module = pending.pop()
        if (
            module is None
            or module.__name__ in found
            or _is_installed(module.__name__.split(".")[0])
            and module.__name__ != "__main__"
        ):
            continue
        found[module.__name__] = module
        for value in list(vars(module).values()):
            used = _module_of(value)
            if used is not None and used.__name__ not in found:
                pending.append(used)
    return [found[name] for name in sorted(found)]


def _module_of(value: object) -> types.ModuleType | None:
    """The module a global of a user's module is, or comes from (a class, a function), if loaded."""
    if isinstance(value, types.ModuleType):
        return value
    try:
        name = getattr(value, "__module__", None)
    except Exception:  # a proxy that refuses attribute access
        return None
    return sys.modules.get(name) if isinstance(name, str) else None


def _source_digest(job_class: type, modules: list[types.ModuleType]) -> str:
    digest = hashlib.sha256()
    for module in modules:
        digest.update(module.__name__.encode() + b"\0" + _source(module, job_class) + b"\0")
    return digest.hexdigest()[:16]


def _source(module: types.ModuleType, job_class: type) -> bytes:
    """A module's source: its file, or (a notebook's ``__main__``, which has none) the source of
    every class and function defined in it, as IPython keeps each cell's."""
    path = getattr(module, "__file__", None)
    if path and os.path.isfile(path):
        with open(path, "rb") as handle:
            return handle.read()
    parts = []
    if job_class.__module__ == module.__name__:
        parts.append(_definition_source(job_class))
        if not parts[0]:
            raise ValueError(
                f"the source of {job_class.__qualname__} cannot be found, so the code version cannot "
                "cover it: define the job in a file, a module or a notebook cell"
            )
    for name, value in sorted(vars(module).items()):
        if (
            (inspect.isclass(value) or inspect.isfunction(value))
            and value.__module__ == module.__name__
            and value is not job_class
        ):
            parts.append(_definition_source(value) or name)  # made by exec, say: no source but its name
    return "\n".join(parts).encode()


def _definition_source(value: type | types.FunctionType) -> str:
    """The source of a class or function, or "" when there is none.  A class of a notebook has no
    file that ``inspect`` can find, but its methods know their cell, whose text IPython keeps in
    ``linecache``: the whole cell is the source then."""
    try:
        return inspect.getsource(value)
    except (OSError, TypeError):
        pass
    cells = sorted(
        {member.__code__.co_filename for member in vars(value).values() if inspect.isfunction(member)}
        if inspect.isclass(value)
        else ()
    )
    return "".join("".join(linecache.getlines(cell)) for cell in cells)


@functools.cache
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
        assert spec.origin is not None  # checked above: a module without locations has an origin
        return [(os.path.basename(spec.origin), spec.origin)]
    files = []
    for root in spec.submodule_search_locations:
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [
                (os.path.relpath(os.path.join(folder, n), root), os.path.join(folder, n))
                for n in names
                if n.endswith(".py")
            ]
    return sorted(files)
