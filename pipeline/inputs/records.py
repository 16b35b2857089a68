"""``Records``: the one batch type every reader returns, and the rules a record's id follows.

A slice's records come in two parts: the **accepted** ones, as Arrow and numpy columns (an id, a
position, a payload of the job's payload type), and the **rejected** ones, each with its position,
its name (its id, or "line N" / "row N" when it has none) and a plain reason.  Both readers of a
format (the fast one and the reference one) return this same type, so a job answers a slice one way,
whichever reader read it.

How a raw payload becomes an Arrow payload (``read_records``'s ``check``): the reference readers
hand each readable record's payload, as ``json.loads`` or Parquet gives it, to the job's ``check``,
which returns it as a value of the payload type or raises ``ValueError`` whose text is the reason.
A job's parser thereby sees the original JSON types (``9.0``, ``"9"`` and ``true`` are not ``9``),
and its reasons read exactly as they always did.  Without a ``check`` a payload must already have
exactly the payload type, JSON type for JSON type (an integer for int64, never a float or a string).

Why a job's check rather than the package validating payloads against the Arrow type: which
payloads are acceptable, and the words of a rejection, are the job's.  A dungeon grid may also be
one string of rows; a door list is rejected for its first bad door, a wrong type or a wrong number,
in door order; rooms may be integers no Arrow type holds.  The package could only reject such
payloads with reasons of its own, so it hands the raw value to the job's own checks instead, at
the one place where raw values exist (the reference readers), and keeps one Arrow-backed type.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import numpy as np
import pyarrow as pa

from batchenum.pipeline.arrow import from_numpy
from batchenum.pipeline.errors import PipelineError

__all__ = ["Records", "Rejected", "Check", "plain_reason", "accounting_summary", "constant_strings", "FAST_TYPE"]

# The payload type the fast readers take (a JSONL slice's kernels, a Parquet slice read as it is);
# any other is read record by record
FAST_TYPE = pa.list_(pa.string())

_REASON_CHARS = 300  # reasons longer than this are cut (they never echo a whole record)

# A job's payload check: the raw payload -> the payload as a value of the payload type; raises
# ValueError (its text is the reason) for a payload the job rejects.
Check = Callable[[Any], Any]


@dataclass
class Rejected:
    """The records of a slice that were not accepted, in input order.

    positions: int64, the 1-based line (JSONL) or row (Parquet) of each.
    names:     the record's id, or its position ("line 7") when it has none: every error row is named.
    reasons:   a plain reason that starts with the position ("line 7: no 'id'"), at most 300 characters.
    """

    positions: np.ndarray = dataclass_field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    names: list[str] = dataclass_field(default_factory=list)
    reasons: list[str] = dataclass_field(default_factory=list)

    def __len__(self) -> int:
        return len(self.positions)


@dataclass
class Records:
    """The records of one slice, read once (``read_records``).

    ids:            the accepted records' ids, a pyarrow string Array (integer ids converted).
    positions:      int64, the 1-based line (JSONL) or row (Parquet) of each accepted record.
    payloads:       the accepted records' payloads, one pyarrow Array of the payload type, no nulls.
    position_label: "line" or "row".
    rejected:       every other record of the slice, with its reason (``Rejected``).
    fingerprint:    the checksum of the bytes read (``slice_fingerprint``), from the same read.
    file:           the input file the slice is part of (its path or URI): with ``positions``, each
                    record's identity in a batch of several files.

    Accepted records are in input order, and so are rejected ones; ``read`` counts both.
    """

    ids: pa.Array
    positions: np.ndarray
    payloads: pa.Array
    position_label: str
    rejected: Rejected
    fingerprint: str
    file: str = ""

    def __len__(self) -> int:
        """The accepted records."""
        return len(self.positions)

    @property
    def read(self) -> int:
        """Every record of the slice: accepted and rejected."""
        return len(self.positions) + len(self.rejected)

    def files(self, count: int) -> pa.Array:
        """A string column holding ``file`` ``count`` times (built from buffers: no pandas import)."""
        return constant_strings(self.file, count)

    def error_rows(self, rejected, reasons: list[str], *, read_errors: bool = True) -> dict[str, list]:
        """The rows of an errors table {id, error, file, line} in input order: the records the reader
        rejected (unless ``read_errors`` is False), and the accepted records at indices ``rejected``
        that the job rejects, for ``reasons`` (without their position, which is prefixed here)."""
        picks = np.asarray(rejected, dtype=np.int64)
        lines = self.positions[picks].tolist()
        # (no take when nothing is rejected: it imports pyarrow.compute; docs/benchmarks.md#record-batches-and-first-shards)
        names = self.ids.take(from_numpy(picks)).to_pylist() if len(picks) else []
        reasons = [plain_reason(f"{self.position_label} {line}: {reason}") for line, reason in zip(lines, reasons)]
        if read_errors and len(self.rejected):
            lines = self.rejected.positions.tolist() + lines
            order = sorted(range(len(lines)), key=lines.__getitem__)
            names, reasons = self.rejected.names + names, self.rejected.reasons + reasons
            names, reasons, lines = ([column[k] for k in order] for column in (names, reasons, lines))
        return {"id": names, "error": reasons, "file": [self.file] * len(lines), "line": lines}


class RecordsBuilder:
    """Records of a slice read one at a time by a reference reader (JSONL lines, Parquet rows)."""

    def __init__(self, field: str, payload_type: pa.DataType, check: Check | None, position_label: str):
        self.field, self.payload_type, self.check, self.position_label = field, payload_type, check, position_label
        self.ids: list[str] = []
        self.positions: list[int] = []
        self.payloads: list[Any] = []
        self.rejected: tuple[list[int], list[str], list[str]] = ([], [], [])  # positions, names, reasons

    def add(self, position: int, id_: str | None, value: Any, error: str | None) -> None:
        """One record: its id (None: it has none), its raw payload and, if it is unreadable, the
        reason (with its position).  A readable payload goes through the check."""
        if error is None:
            try:
                value = self.check(value) if self.check is not None else _exactly(value, self.payload_type, self.field)
            except ValueError as exc:
                error = f"{self.position_label} {position}: {exc}"
        if error is not None:
            self.rejected[0].append(position)
            self.rejected[1].append(id_ if id_ is not None else f"{self.position_label} {position}")
            self.rejected[2].append(plain_reason(error))
        elif id_ is None:
            raise PipelineError(
                f"internal error: {self.position_label} {position} has no id and no reason to reject it"
            )
        else:
            self.ids.append(id_)
            self.positions.append(position)
            self.payloads.append(value)

    def records(self, fingerprint: str) -> Records:
        positions, names, reasons = self.rejected
        return Records(
            ids=pa.array(self.ids, type=pa.string()),
            positions=np.asarray(self.positions, dtype=np.int64),
            payloads=pa.array(self.payloads, type=self.payload_type),
            position_label=self.position_label,
            rejected=Rejected(np.asarray(positions, dtype=np.int64), names, reasons),
            fingerprint=fingerprint,
        )


def constant_strings(value: str, count: int) -> pa.Array:
    """A pyarrow string array of ``value`` repeated ``count`` times, from buffers (``pa.array``
    would import pandas: pipeline/arrow.py)."""
    data = value.encode()
    if len(data) * count >= 1 << 31:  # past int32 offsets: the slow way, which says what is wrong
        return pa.array([value] * count, type=pa.string())
    offsets = np.arange(count + 1, dtype=np.int32) * np.int32(len(data))
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data * count)])


def _exactly(value: Any, arrow_type: pa.DataType, field: str) -> Any:
    """``value`` when it has exactly ``arrow_type`` as JSON reads it, with no null anywhere (an
    integer for an integer type, never ``9.0``, ``"9"`` or ``true``); else ValueError."""
    if not _conforms(value, arrow_type):
        raise ValueError(f"{field!r} is not of type {arrow_type} ({json_type_name(value)})")
    return value


def _conforms(value: Any, arrow_type: pa.DataType) -> bool:
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return isinstance(value, list) and all(_conforms(item, arrow_type.value_type) for item in value)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return isinstance(value, str)
    if pa.types.is_integer(arrow_type):
        return isinstance(value, int) and not isinstance(value, bool) and _fits(value, arrow_type)
    if pa.types.is_floating(arrow_type):
        return isinstance(value, float)
    if pa.types.is_boolean(arrow_type):
        return isinstance(value, bool)
    raise TypeError(f"no JSON reading of the payload type {arrow_type}: give read_records a check")


def _fits(value: int, arrow_type: pa.DataType) -> bool:
    bits = arrow_type.bit_width
    low = 0 if pa.types.is_unsigned_integer(arrow_type) else -(1 << (bits - 1))
    return low <= value < low + (1 << bits)


def record_id(value: Any, present: bool, where: str) -> tuple[str | None, str | None]:
    """(id string, error) for an id value; integer ids become strings."""
    if not present or value is None:
        return None, f"{where}: no 'id'"
    if isinstance(value, str):
        return value, None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    return None, f"{where}: 'id' must be a string or an integer, not {json_type_name(value)}"


def json_type_name(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    for kind, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "an array"),
        (dict, "an object"),
        ((bytes, bytearray), "binary data"),
        (decimal.Decimal, "a decimal number"),
    ):
        if isinstance(value, kind):
            return name
    return "null" if value is None else f"a value of type {type(value).__name__}"


def plain_reason(reason: str) -> str:
    """A reason as written to an errors table: at most a few hundred characters (a reason names
    the record and the problem, it never echoes a whole record)."""
    if len(reason) <= _REASON_CHARS:
        return reason
    return reason[: _REASON_CHARS - 30].rstrip() + f"... ({len(reason):,} characters in all)"


def accounting_summary(job: str, answered: int, rejected: int) -> str:
    """The summary line of a record batch: every record read was answered or rejected."""
    return f"{job}: read {answered + rejected}, answered {answered}, rejected {rejected}"
