"""Every docstring example in the package runs, so the examples stay true (``python -m doctest``
semantics, one test per module)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import batchenum


def _modules() -> list[str]:
    names = ["batchenum"]
    for info in pkgutil.walk_packages(batchenum.__path__, "batchenum."):
        names.append(info.name)
    return sorted(set(names))


def _with_examples() -> list[str]:
    """Modules whose source holds an example (some only skipped ones: ``# doctest: +SKIP``), found
    without importing everything first."""
    found = []
    for name in _modules():
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".py"):
            with open(spec.origin, encoding="utf-8") as handle:
                if ">>> " in handle.read():
                    found.append(name)
    return found


def test_examples_are_found():
    found = _with_examples()
    assert len(found) >= 15  # guards the discovery itself: a broken walk finds nothing
    assert {"batchenum", "batchenum.api"} <= set(found)  # the Python API's examples run here


@pytest.mark.parametrize("name", _with_examples())
def test_docstring_examples(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (output above)"
