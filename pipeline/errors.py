"""The pipeline's exceptions: one root, specific subclasses."""

from __future__ import annotations

__all__ = ["PipelineError", "InputError", "UsageError", "RunStoppedError"]


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
