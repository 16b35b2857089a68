"""The rule for the names a job declares: its own (its folder under ``--out``), its tables' (a file
or folder in the job folder) and their columns'.  Checked where each is declared (``Column``,
``TableSpec``, a ``Job`` subclass, the registry and the start of a run), so that a bad name fails
with one line before anything is written, never after shards were committed (docs/jobs.md, "Names").

    >>> plain_name_problem("creature_counts") is None
    True
    >>> plain_name_problem("../x")
    "'../x' is not a plain name (letters, digits, _, - and ., not leading ., at most 100 characters)"
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from batchenum.pipeline.errors import UsageError

__all__ = [
    "RULE",
    "TMP_MARK",
    "GUARD_NAME",
    "BadNameError",
    "plain_name_problem",
    "file_name_problem",
    "check_plain_name",
    "check_file_name",
    "check_unique",
    "check_job_class",
    "check_job_names",
]

RULE = "letters, digits, _, - and ., not leading ., at most 100 characters"
# No "/" (nothing below or above the folder), no leading "." (".", ".." and hidden files), nothing
# a shell or a terminal would read otherwise (a newline, a space).
_PLAIN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")
# In the name of every temporary file or folder of the store (storage.py): a table named so would be
# taken for a leftover and removed.
TMP_MARK = ".tmp-"
# The file that makes a read of a whole job folder fail (table_commit.GUARD_FILE is this .parquet).
GUARD_NAME = "NOT_A_TABLE"


class BadNameError(UsageError, ValueError):
    """A declared name that breaks the rule; a ValueError too, as a bad ``Column`` type is."""


def plain_name_problem(name: Any) -> str | None:
    """Why ``name`` is not a plain name, or None."""
    if isinstance(name, str) and _PLAIN.fullmatch(name):
        return None
    return f"{name!r} is not a plain name ({RULE})"


def file_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a job folder, a table or a shard, which batchenum makes files and
    folders of beside its own (``_shards``, ``_staged``, ``_manifest.json``, ``_inputs``), or None."""
    plain = plain_name_problem(name)
    if plain is not None:
        return plain
    if name.startswith("_"):
        return f"{name!r} starts with _, which batchenum keeps for its own files (_shards, _manifest.json, _inputs...)"
    if TMP_MARK in name:
        return f"{name!r} holds {TMP_MARK}, which marks batchenum's temporary files"
    if name.casefold() == GUARD_NAME.casefold():
        return f"{name!r} is the name of the file that keeps a job folder from being read as one table"
    return None


def check_plain_name(name: Any, where: str) -> None:
    """BadNameError ``where: <why>`` unless ``name`` is plain (a column's)."""
    problem = plain_name_problem(name)
    if problem is not None:
        raise BadNameError(f"{where} {problem}")


def check_file_name(name: Any, where: str) -> None:
    """BadNameError ``where: <why>`` unless ``name`` can name a folder or file (a job's, a table's)."""
    problem = file_name_problem(name)
    if problem is not None:
        raise BadNameError(f"{where} {problem}")


def check_unique(names: Iterable[str], where: str, what: str, fold_case: bool = False) -> None:
    """BadNameError naming the first name given twice; ``fold_case`` for names of files, which a
    disk that ignores case (macOS, Windows) would make one."""
    seen: dict[str, str] = {}
    for name in names:
        key = name.casefold() if fold_case else name
        if key in seen:
            same = f"{seen[key]!r} and {name!r}" if seen[key] != name else f"{name!r}"
            raise BadNameError(f"{where}: two {what} named {same}; each needs its own name")
        seen[key] = name


def check_job_class(cls: type) -> None:
    """The name and tables a job class sets itself (a class without a name, ``""``, is a base that
    its subclasses name): ``Job.__init_subclass__`` calls this at the class's definition."""
    where = f"job class {cls.__qualname__}"
    if cls.__dict__.get("name", "") != "":
        check_file_name(cls.__dict__["name"], f"{where}: name")
    if "tables" in cls.__dict__:
        _check_tables(cls.__dict__["tables"], where)


def check_job_names(job: Any) -> None:
    """A job class's or object's name and tables as a run will use them (set after its definition,
    or on the object itself): the registry and the start of every run call this."""
    cls = job if isinstance(job, type) else type(job)
    where = f"job class {cls.__qualname__}"
    check_file_name(job.name, f"{where}: name")
    _check_tables(job.tables, where)


def _check_tables(tables: Any, where: str) -> None:
    """Each table's name is checked by its TableSpec; two of one name would share a file."""
    names = [getattr(spec, "name", None) for spec in tables]
    for name in names:
        check_file_name(name, f"{where}: table")
    check_unique([str(name) for name in names], where, "tables", fold_case=True)
