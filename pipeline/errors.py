"""The pipeline's exceptions: one root, specific subclasses."""

from __future__ import annotations

import re

__all__ = [
    "PipelineError",
    "InputError",
    "MissingInputError",
    "UsageError",
    "RunStoppedError",
    "SpokenError",
    "spelled",
    "literal",
]


class PipelineError(Exception):
    """Root of every error the pipeline raises on purpose."""


class RunStoppedError(PipelineError):
    """Not one shard's failure: the run as a whole cannot go on (its store stayed unreachable, it
    lost its folder to another run).  Reported as it is, not as the failure of the shard that met it."""


class InputError(PipelineError):
    """An input file that cannot be planned or read at all (missing, unreadable, unknown format).

    A single bad record is not an InputError: it is reported as that record's error.
    """


class UsageError(PipelineError):
    """Options that are out of range or cannot go together: the command exits with status 2, as for
    any other usage error, with one line saying what to change."""


class MissingInputError(InputError, UsageError):
    """An input value that names no file (a path that does not exist, a glob or folder that
    matches none): a mistake in the command, so the command line exits 2 for it, as for any other."""


class SpokenError(PipelineError):
    """An error whose ``template`` names parameters and options as ``{name}`` (or ``{name=value}``),
    so that the message can speak Python (``max_n``, ``overwrite=True``) or the command line
    (``--max-n``, ``--overwrite``): Python's words by default; the CLI asks for its own with
    ``spoken(cli=True)``."""

    def __init__(self, template: str, cli: bool = False):
        self.template = template
        self.cli = cli
        super().__init__(_render(template, cli))

    def spoken(self, cli: bool) -> SpokenError:
        again = type(self)(self.template, cli)
        again.__dict__.update({**self.__dict__, "cli": cli})
        return again

    def __reduce__(self):  # pickled from a worker with its template, not only its rendered words
        return type(self), (self.template, self.cli), self.__dict__


def spelled(name: str, cli: bool) -> str:
    """``max_n`` as Python names it, ``--max-n`` as the command line does; with a value,
    ``overwrite=True`` is ``--overwrite`` and ``out="runs"`` is ``--out "runs"`` (an empty value,
    ``out=``, leaves the command line's option bare)."""
    name, equals, value = name.partition("=")
    if not cli:
        return f"{name}{equals}{value}"
    option = "--" + name.replace("_", "-")
    return option if value in ("", "True") else f"{option} {value}"


_TOKEN = re.compile(r"([{}])\1|\{([^{}]*)\}")  # a doubled brace, or a name in braces


def _render(template: str, cli: bool) -> str:
    """The template with each ``{name}`` spelled; ``{{`` and ``}}`` are literal braces."""
    return _TOKEN.sub(lambda found: found[1] if found[1] else spelled(found[2], cli), template)


def literal(text: str) -> str:
    """``text`` as a literal part of a SpokenError template (its braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")
