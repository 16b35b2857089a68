"""The pipeline's exceptions: one root, specific subclasses."""

from __future__ import annotations

__all__ = ["PipelineError", "InputError"]


class PipelineError(Exception):
    """Root of every error the pipeline raises on purpose."""


class InputError(PipelineError):
    """An input file that cannot be planned or read at all (missing, unreadable, unknown format).

    A single bad record is not an InputError: it is reported as that record's error.
    """
