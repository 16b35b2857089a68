"""The Nonary Game: check door lists, find the most players who can escape, verify plans.

Pure Python: no Ray, no Arrow, no pipeline.  The rules: docs/rules.md section 3.
"""

from .generate import generate, random_graph
from .oracle import PlanError, brute_force, verify_plan
from .parse import (
    EXIT,
    DoorListError,
    DoorNumberError,
    DoorShapeError,
    DoorTypeError,
    ExitRuleError,
    NonaryError,
    RoomError,
    TooManyDoorsError,
    parse,
)
from .solve import SolveTimeout, solve, solve_parsed

__all__ = [
    "EXIT",
    "NonaryError",
    "DoorListError",
    "DoorShapeError",
    "DoorTypeError",
    "DoorNumberError",
    "RoomError",
    "ExitRuleError",
    "TooManyDoorsError",
    "PlanError",
    "SolveTimeout",
    "parse",
    "solve",
    "solve_parsed",
    "verify_plan",
    "brute_force",
    "generate",
    "random_graph",
]
