"""Where numba keeps the machine code of this package's kernels: one cache per user, shared by
every run, checkout and virtual environment, keyed by the kernel's source.

numba keeps a ``cache=True`` kernel next to its module (``__pycache__``), or under
``NUMBA_CACHE_DIR`` in a folder named after the module's path: a second clone, a second virtual
environment or a read-only install compiled every kernel again (minutes on a busy machine, issue
48).  Here a kernel of this package is cached under ``~/.cache/batchenum/numba`` (or
``$XDG_CACHE_HOME/batchenum/numba``), in a folder named after its module and a hash of the
module's source, so the same source finds the same machine code wherever it is installed; numba
itself checks the rest (its version, the Python version, the CPU, the source again).  A
``NUMBA_CACHE_DIR`` that the user sets wins, as numba documents; other code's kernels are left to
numba's own rules.

Importing this module registers the rule (it must come before the kernels' decorators run: each
kernel module imports it), and has the run's progress told when a kernel compiles.
"""

from __future__ import annotations

import hashlib
import os

import numba
from numba.core import caching, config

from batchenum.pipeline.progress import watch_numba_compiles

__all__ = ["cache_root", "SharedCacheLocator"]

_PACKAGE = "batchenum."


def cache_root() -> str:
    """This user's folder for the package's compiled kernels."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "batchenum", "numba", f"numba-{numba.__version__}")


class SharedCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """numba's cache locator for this package's kernels: ``cache_root()/<module>-<source hash>``."""

    def __init__(self, py_func, py_file: str):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        with open(py_file, "rb") as source:
            digest = hashlib.sha256(source.read()).hexdigest()[:16]
        self._cache_path = os.path.join(cache_root(), f"{py_func.__module__}-{digest}")

    def get_cache_path(self) -> str:
        return self._cache_path

    @classmethod
    def from_function(cls, py_func, py_file: str):
        if getattr(config, "CACHE_DIR", "") or not getattr(py_func, "__module__", "").startswith(_PACKAGE):
            return None  # the user's NUMBA_CACHE_DIR, or not our kernel: numba's own rules
        return super().from_function(py_func, py_file)


def _register() -> None:
    locators = getattr(getattr(caching, "CacheImpl", None), "_locator_classes", None)  # numba's own list
    if isinstance(locators, list) and SharedCacheLocator not in locators:
        locators.insert(0, SharedCacheLocator)


_register()
watch_numba_compiles()
