"""A job's parameters, declared once: ``Param`` fields on the job class.

Each declaration (type, default, bounds or choices, help) is the single source of the CLI option
(``--max-n``), its ``--help`` line, the keyword of ``batchenum.run`` and the job's constructor, the
validation and its messages, and (for parameters that change results) the provenance a job records:

    class Queens(Job):
        n = Param(int, default=8, low=1, high=16, help="board size")

Messages name a parameter as the caller wrote it: ``max_n must be between 1 and 40, not 99`` from
Python, ``--max-n must be between 1 and 40, not 99`` from the command line.  Nothing here imports
argparse: pipeline/cli.py turns declarations into options.
"""

from __future__ import annotations

import builtins
import math
import numbers
import operator
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from batchenum.pipeline.errors import SpokenError, UsageError, literal, spelled

__all__ = [
    "Param",
    "ParamError",
    "SpokenError",
    "REQUIRED",
    "INPUTS",
    "declared_params",
    "keep_for_fast_reads",
    "recorded_params",
    "resolve_params",
    "spelled",
    "literal",
]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # a parameter without a default must be given
INPUTS = "inputs"  # the type of a record batch's input: files, folders, globs, URIs (a list of them)


class ParamError(SpokenError, UsageError, ValueError):
    """A parameter value the job refuses (a ValueError too, as Python callers expect)."""


T = TypeVar("T")


@dataclass(frozen=True)
class Param(Generic[T]):
    """One parameter of a job.

    type:     int, float, str, bool, or ``INPUTS`` (one or more paths, globs or URIs).
    default:  its value when not given; ``REQUIRED`` when it must be given; None for "automatic"
              (the job decides; ``help`` says how).
    low/high: inclusive bounds for numbers; ``high`` may name another parameter ("max_n").
    above:    an exclusive lower bound (a number of seconds above 0).
    choices:  the values a string may take.
    help:     one line for ``--help`` and docs; ``{job.attr}`` is filled from the job class.
    recorded: the parameter changes results, so its value is part of the provenance (``params()``)
              and a change recomputes every shard.  False for parameters that only change how
              the work is done (shard counts, time budgets, checkpoint intervals).
    recorded_as: ``recorded_as(job, value)`` is what the provenance records for the value (an
              input's paths made absolute, "auto" for None); default: the value itself.
    omit_default: recorded only when it differs from its default: for a parameter added to a job
              whose tables were published before it existed, the default being what the job did
              then, so those tables keep their identity (and bytes).
    metavar:  how ``--help`` shows its value.
    """

    type: builtins.type[T] | str  # a Python type, or INPUTS
    default: Any = REQUIRED
    low: float | None = None
    high: float | str | None = None
    above: float | None = None
    choices: tuple = ()
    help: str = ""
    recorded: bool = True
    recorded_as: Callable[[Any, Any], Any] | None = None
    omit_default: bool = False
    metavar: str | None = None
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.type not in (int, float, str, bool, INPUTS):
            raise TypeError(f"Param type must be int, float, str, bool or INPUTS, not {self.type!r}")

    def __set_name__(self, owner: builtins.type, name: str) -> None:
        object.__setattr__(self, "name", name)

    @overload
    def __get__(self, instance: None, owner: builtins.type | None = None) -> Param[T]: ...

    @overload
    def __get__(self, instance: object, owner: builtins.type | None = None) -> T: ...

    def __get__(self, instance: object, owner: builtins.type | None = None) -> Any:
        """On the class, the declaration itself; on a job, typed as the value it declares (``T``),
        which the job's constructor sets as the instance's own attribute (which this non-data
        descriptor never shadows, so this is reached on the class alone).  A job class keeps its
        declarations wrapped (``keep_for_fast_reads``); this typing still holds for them."""
        return self

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def help_for(self, job_class: builtins.type) -> str:
        return self.help.format(job=job_class)

    def coerce(self, value: Any) -> Any:
        """``value`` as this parameter's type (command-line text parsed, numpy scalars made plain);
        raises ParamError naming the parameter."""
        if value is None and self.default is None:
            return None
        if self.type is INPUTS:
            return _inputs(self.name, value)
        if self.type is bool:
            return _boolean(self.name, value)
        if self.type is int:
            return _whole(self.name, value)
        if self.type is float:
            return _number(self.name, value)
        if self.type is str:
            if not isinstance(value, str):
                raise ParamError(f"{{{self.name}}} must be a string, not {value!r}")
            return value
        raise AssertionError(f"unchecked parameter type {self.type!r}")  # __post_init__ refuses others

    def check(self, value: Any, values: Mapping[str, Any]) -> None:
        """Raise ParamError when ``value`` is out of bounds or not one of the choices."""
        if value is None:
            return
        name = self.name
        if self.choices and value not in self.choices:
            raise ParamError(f"{{{name}}} must be one of {', '.join(map(str, self.choices))}, not {value}")
        high = values[self.high] if isinstance(self.high, str) else self.high
        shown_high = f"{{{self.high}}} ({high})" if isinstance(self.high, str) else _shown(high)
        if self.low is not None and high is not None and not self.low <= value <= high:
            raise ParamError(f"{{{name}}} must be between {_shown(self.low)} and {shown_high}, not {_shown(value)}")
        if self.low is not None and high is None and value < self.low:
            raise ParamError(f"{{{name}}} must be at least {_shown(self.low)}, not {_shown(value)}")
        if self.above is not None and not value > self.above:
            raise ParamError(f"{{{name}}} must be above {_shown(self.above)}, not {_shown(value)}")


def _shown(number: Any) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def _whole(name: str, value: Any) -> int:
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise ParamError(f"{{{name}}} must be a whole number, not {value!r}") from None
    if isinstance(value, bool):
        raise ParamError(f"{{{name}}} must be a whole number, not {value!r}")
    try:
        return operator.index(value)  # int and numpy integers, not floats
    except TypeError:
        raise ParamError(f"{{{name}}} must be a whole number, not {value!r}") from None


def _number(name: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ParamError(f"{{{name}}} must be a number, not {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ParamError(f"{{{name}}} must be a number, not {value!r}")
    return float(value)


def _boolean(name: str, value: Any) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    if isinstance(value, (bool, numbers.Integral)) and value in (0, 1):
        return bool(value)
    raise ParamError(f"{{{name}}} must be true or false, not {value!r}")


def _inputs(name: str, value: Any) -> Any:
    """A path or URI, or a list of them (a ``pipeline.storage.Storage`` of a file is kept as it is)."""

    def one(v: Any) -> Any:
        return os.fspath(v) if isinstance(v, (str, os.PathLike)) else v

    def is_one(v: Any) -> bool:
        return isinstance(v, (str, os.PathLike)) or hasattr(v, "display_root")

    if is_one(value):
        return one(value)
    if isinstance(value, (list, tuple)) and value and all(map(is_one, value)):
        return [one(v) for v in value]
    raise ParamError(
        f"{{{name}}} must be a path, a URI, a pandas DataFrame or an Arrow table, or a list of "
        f"paths and URIs (files, folders, globs), not {type(value).__name__}"
        + (" holding other things" if isinstance(value, (list, tuple)) else "")
    )


def recorded_params(job: object) -> dict[str, Any]:
    """What ``job``'s provenance records of its declared parameters: every one declared with
    ``recorded=True`` (as ``recorded_as`` gives it), but those ``omit_default`` at their default."""
    recorded = {}
    for name, param in declared_params(type(job)).items():
        value = getattr(job, name)
        if not param.recorded or (param.omit_default and value == param.default):
            continue
        recorded[name] = value if param.recorded_as is None else param.recorded_as(job, value)
    return recorded


def declared_params(job_class: type) -> dict[str, Param]:
    """The job class's parameters by name, in declaration order (a base class's first; a subclass
    may declare one again to change it)."""
    found: dict[str, Param] = {}
    for klass in reversed(job_class.__mro__):
        for name, value in vars(klass).items():
            declared = value.__func__ if isinstance(value, staticmethod) else value
            if isinstance(declared, Param):
                found.pop(name, None)
                found[name] = declared
    return found


def keep_for_fast_reads(job_class: type) -> None:
    """Keep each parameter ``job_class`` declares in its namespace wrapped in a ``staticmethod``:
    ``job_class.name`` is still the declaration, and a job's value (its own attribute) is read as
    fast as any attribute.  Python 3.11 does not specialize the read of an instance attribute that
    shadows an object of a class defined in Python: about 10 ns more a read, 2% of the SAW example's
    walk, which reads a parameter at every node (docs/benchmarks.md, issue 46's fourth pass)."""
    for name, value in list(vars(job_class).items()):
        if isinstance(value, Param):
            setattr(job_class, name, staticmethod(value))  # type: ignore[arg-type]  # any object is wrapped


def resolve_params(
    job_class: type, args: tuple, values: Mapping[str, Any], check: Callable[[dict], None] | None = None
) -> dict[str, Any]:
    """Every declared parameter's value: positional ``args`` in declaration order, then keywords,
    then defaults; coerced and checked, then ``check(values)`` for rules between parameters.
    Raises ParamError (spoken in Python's words) for the first bad one."""
    params = declared_params(job_class)
    job = getattr(job_class, "name", "") or job_class.__name__
    if len(args) > len(params):
        raise ParamError(f"{job} takes {len(params)} parameters ({', '.join(params) or 'none'}), not {len(args)}")
    given = dict(zip(params, args))
    for name, value in values.items():
        if name not in params:
            raise ParamError(f"{job} has no parameter {name!r}: its parameters are {', '.join(params) or 'none'}")
        if name in given:
            raise ParamError(f"{job}: {{{name}}} given twice")
        given[name] = value
    resolved = {}
    for name, param in params.items():
        if name not in given:
            if param.required:
                raise ParamError(f"{job} needs {{{name}}}" + (f" ({param.help_for(job_class)})" if param.help else ""))
            resolved[name] = param.default
            continue
        resolved[name] = param.coerce(given[name])
    for name, param in params.items():
        param.check(resolved[name], resolved)
    if check is not None:
        check(resolved)
    return resolved
