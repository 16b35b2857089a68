"""Which jobs and commands exist: one registry, read by the CLI, ``batchenum.run``, ``warm`` and
the docs tests.

Three sources, no hand-kept list:

- the modules of a package (``batchenum.jobs``): a module that declares ``JOB = SomeJob`` adds
  that job under ``SomeJob.name``; one that declares ``COMMANDS = [...]`` adds commands;
- installed packages, through the entry-point group ``batchenum.jobs``
  (``[project.entry-points."batchenum.jobs"] queens = "mypkg.queens:Queens"`` in pyproject.toml):
  once installed, ``batchenum run queens`` works as for a built-in job;
- a job named by where it is: ``MODULE:CLASS`` (a module on sys.path) or ``path/to/file.py:CLASS``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys
import traceback
import warnings
from typing import Any

from batchenum.pipeline.errors import UsageError
from batchenum.pipeline.job import Job
from batchenum.pipeline.names import BadNameError, check_job_names

__all__ = ["JobRegistry", "PluginWarning", "ENTRY_POINT_GROUP", "is_job_path", "load_job_class"]

ENTRY_POINT_GROUP = "batchenum.jobs"
# modules of a jobs package that are not jobs' (the command line's entry, the registry itself)
_NOT_JOBS = ("cli", "registry")


class JobRegistry:
    """The jobs of ``package`` (its modules' ``JOB``) and of the entry-point group, and the commands
    of the package's modules (their ``COMMANDS``), found on first use."""

    def __init__(self, package: str, group: str = ENTRY_POINT_GROUP):
        self.package = package
        self.group = group
        self._unloadable: dict[str, str] = {}

    @functools.cached_property
    def _modules(self) -> list[Any]:
        package = importlib.import_module(self.package)
        names = sorted(
            info.name
            for info in pkgutil.iter_modules(package.__path__)
            if not info.name.startswith("_") and info.name not in _NOT_JOBS
        )
        return [importlib.import_module(f"{self.package}.{name}") for name in names]

    @functools.cached_property
    def jobs(self) -> dict[str, type[Job]]:
        """Every job by name: the package's, in module order, then the installed packages' that load
        (``unloadable`` holds the others, each named in one warning)."""
        found: dict[str, type[Job]] = {}
        for module in self._modules:
            job = getattr(module, "JOB", None)
            if job is not None:
                found[_checked(job, module.__name__).name] = job
        for name, entries in _entry_points_by_name(self.group).items():
            entry = _chosen(name, entries, found)
            if entry is None:
                continue
            try:
                found[name] = _named(_checked(entry.load(), entry.value), name)
            except Exception as error:  # one broken package must not take every other job with it
                self._unloadable[name] = (
                    f"the job {name!r} of the installed package {_distribution(entry)} ({entry.value}) "
                    f"cannot be loaded: {_one_line(error)}"
                )
                _warn(f"{self._unloadable[name]}; it is left out")
        return found

    @property
    def unloadable(self) -> dict[str, str]:
        """Installed jobs that could not be loaded, by name: why, in one line."""
        self.jobs  # noqa: B018 (the scan fills it)
        return self._unloadable

    def names(self) -> list[str]:
        return list(self.jobs)

    def commands(self) -> list[Any]:
        """The package's modules' ``COMMANDS`` and every job's ``commands()``, in module order."""
        found = [command for module in self._modules for command in getattr(module, "COMMANDS", ())]
        return found + [command for job in self.jobs.values() for command in job.commands()]

    def job_class(self, name: str) -> type[Job]:
        """A registered job by name, or one named by ``MODULE:CLASS`` or ``FILE.py:CLASS``."""
        if is_job_path(name):
            return load_job_class(name)
        own = self.own_module_job(name)
        if own is not None:
            return own
        if name in self.unloadable:
            raise UsageError(self.unloadable[name])
        if name not in self.jobs:
            raise UsageError(
                f"no job {name!r}: the jobs are {', '.join(self.jobs)} (or give MODULE:CLASS or path/to/file.py:CLASS)"
            )
        return self.jobs[name]

    def own_module_job(self, name: str) -> type[Job] | None:
        """The job ``name`` when the package's module of that name declares it (``dungeons`` in
        ``batchenum.jobs.dungeons``), imported alone; None otherwise.  A run of one job then imports
        no other job's module (and their compiled kernels), which every run would pay for."""
        if "jobs" in self.__dict__ or not name.isidentifier() or name.startswith("_") or name in _NOT_JOBS:
            return None  # the full scan is done already, or the name names no job module
        try:
            found = importlib.util.find_spec(f"{self.package}.{name}")
        except (ImportError, ValueError):
            return None
        if found is None:
            return None
        module = importlib.import_module(f"{self.package}.{name}")
        job = getattr(module, "JOB", None)
        return _checked(job, module.__name__) if getattr(job, "name", None) == name else None


def is_job_path(text: str) -> bool:
    """``MODULE:CLASS`` or ``FILE.py:CLASS`` (a name has no colon)."""
    return ":" in text and not text.startswith(":") and not text.endswith(":")


def load_job_class(text: str) -> type[Job]:
    """The job class ``MODULE:CLASS`` or ``path/to/file.py:CLASS`` names.  A file is imported as a
    module named after it, with its folder put first on sys.path (as ``python file.py`` does), so
    that its own imports work and it can be shipped to Ray workers."""
    where, _, attribute = text.rpartition(":")
    if where.endswith(".py") or os.sep in where or "/" in where:
        module = _import_file(where)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as error:
            raise UsageError(
                f"{text}: cannot import the module {where!r} ({error}): give a module on the "
                "Python path (PYTHONPATH) or a file path ending in .py"
            ) from None
    job = getattr(module, attribute, None)
    if job is None:
        raise UsageError(f"{text}: {where} has no {attribute!r}")
    return _checked(job, text)


def _import_file(path: str) -> Any:
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path} (give path/to/file.py:CLASS)")
    name = os.path.splitext(os.path.basename(path))[0]
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
        return loaded
    if not name.isidentifier():
        raise UsageError(f"{path}: the file name must be a Python module name (letters, digits, underscores)")
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BadNameError as error:  # a name in a class body fails before its class exists: say where
        del sys.modules[name]
        raise BadNameError(f"{_where_in(path, error)}: {error}") from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _where_in(path: str, error: BaseException) -> str:
    """``path, line N``: the line of ``path`` the error went through last (the file alone when it
    was raised in a module the file imports)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == path]
    return f"{path}, line {frames[-1].lineno}" if frames else path


class PluginWarning(UserWarning):
    """An installed package's job left out, or one of two jobs of one name: batchenum goes on."""


def _warn(message: str) -> None:
    warnings.warn(message, PluginWarning, stacklevel=2)


def _entry_points_by_name(group: str) -> dict[str, list[importlib.metadata.EntryPoint]]:
    """The group's entry points by job name, each name's in order of their distribution's name."""
    found: dict[str, list[importlib.metadata.EntryPoint]] = {}
    for entry in sorted(importlib.metadata.entry_points(group=group), key=lambda e: (e.name, _distribution(e))):
        found.setdefault(entry.name, []).append(entry)
    return found


def _chosen(
    name: str, entries: list[importlib.metadata.EntryPoint], built_in: dict[str, type[Job]]
) -> importlib.metadata.EntryPoint | None:
    """Which entry point gives the job ``name``: None when a built-in job has that name (a built-in
    is never shadowed), else the first by distribution name; one warning when several compete."""
    packages = ", ".join(f"{_distribution(entry)} ({entry.value})" for entry in entries)
    if name in built_in:
        where = built_in[name].__module__
        _warn(
            f"the installed package {packages} registers the job {name!r}, a built-in job's name ({where}): "
            "the built-in job is used"
        )
        return None
    if len(entries) > 1:
        _warn(
            f"the installed packages {packages} all register the job {name!r}: "
            f"{_distribution(entries[0])}'s is used, the first by distribution name"
        )
    return entries[0]


def _distribution(entry: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    return dist.name if dist is not None else "(unknown)"


def _one_line(error: BaseException) -> str:
    """An import error as one line: its type and its message's first line."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _named(job: type[Job], name: str) -> type[Job]:
    """An installed job under its own name: one registered as ``other`` but named ``dungeons``
    would write into a built-in job's folder."""
    if job.name != name:
        raise UsageError(f"its class {job.__qualname__} is named {job.name!r}: give the entry point its job's name")
    return job


def _checked(job: Any, where: str) -> type[Job]:
    """A job class with a name, and no parameter named as one of run's own options."""
    if not (isinstance(job, type) and issubclass(job, Job)):
        raise UsageError(f"{where} is not a job class (a subclass of batchenum.pipeline.job.Job): {job!r}")
    if not job.name:
        raise UsageError(f"{where}: the job class {job.__qualname__} has no name: set name = '...' on it")
    check_job_names(job)  # a name set after the class's definition
    from batchenum.pipeline.run_options import RUN_OPTION_NAMES  # the executor's too: imported when a job is

    clashes = sorted(set(job.declared_params()) & set(RUN_OPTION_NAMES))
    if clashes:
        raise UsageError(
            f"{where}: the job's parameter {clashes[0]!r} has the name of one of run's own options "
            f"({', '.join(RUN_OPTION_NAMES)}): rename it"
        )
    return job
