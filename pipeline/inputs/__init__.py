"""Record input: split a batch of JSONL or Parquet files into slices (``plan_slices``), read one
slice as ``Records`` (``read_records``).

A record is one JSON object per line (JSONL) or one row (Parquet) with an ``id`` and a payload
field.  Nothing here knows what a payload means: a job names the payload's Arrow type and may give
a ``check`` that turns a raw payload into one (or rejects it, with its reason).  Every record read
is either accepted, with its id, position and payload, or rejected with a plain reason.

    dataset.py  which files a batch is: files, folders, globs, several values (``resolve_inputs``)
    plan.py     slices: planning, cutting a JSONL slice out of its byte range, fingerprints
    jsonl.py    a JSONL slice: the fast readers and the line-by-line reference (jsonl_strict.py)
    parquet.py  a Parquet slice: Arrow columns as they are, or row by row
    records.py  ``Records``, the one type both formats and every reader return

    >>> specs = plan_slices("batch.jsonl", "grid", records_per_slice=25_000)          # doctest: +SKIP
    >>> records = read_records(specs[0], "grid", pa.list_(pa.string()))               # doctest: +SKIP
"""

from __future__ import annotations

import pyarrow as pa

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.frames import frame_neutral
from batchenum.pipeline.inputs.dataset import resolve_inputs
from batchenum.pipeline.inputs.parquet import read_parquet
from batchenum.pipeline.inputs.plan import (
    describe_input,
    input_storage,
    load_slice,
    plan_slices,
    slice_fingerprint,
    slice_identity,
)
from batchenum.pipeline.inputs.records import Check, Records, accounting_summary
from batchenum.pipeline.storage import Storage

__all__ = [
    "plan_slices",
    "read_records",
    "resolve_inputs",
    "Records",
    "slice_fingerprint",
    "slice_identity",
    "describe_input",
    "input_storage",
    "accounting_summary",
]


def read_records(
    spec: dict, field: str, payload_type: pa.DataType, *, check: Check | None = None, source: Storage | None = None
) -> Records:
    """The records of one slice planned by ``plan_slices``, read from the input once, with the
    fingerprint of the bytes read (``Records.fingerprint``).

    spec:         one slice spec from ``plan_slices``.
    field:        the payload field.
    payload_type: the Arrow type of ``Records.payloads``.  Slices of list<string> payloads are read
                  by fast readers when they read them exactly as the reference readers do; other
                  slices, and payloads of any other type, by the reference readers (``json.loads``
                  per line, Parquet row by row).
    check:        for the reference readers: the job's ``check(raw payload)`` returns the payload as
                  a value of ``payload_type`` or raises ValueError, whose text is the reason the
                  record is rejected for.  It must leave a list of strings unchanged, as the fast
                  readers hand those over without it.  None: a payload must have exactly the payload
                  type, JSON type for JSON type (``records.py``).
    source:       the input's Storage (carries object-store credentials to workers); default: the
                  one ``spec["path"]`` names, reached with this process's environment.

    Every non-blank line (JSONL) or row (Parquet) is one record; blank lines are skipped but keep
    their numbers.  ``Records.file`` is the slice's file (``spec["path"]``; a frame's, without its
    content's hash: ``frames.frame_neutral``).  Raises InputError if
    the file changed since it was planned, or a compressed file does not decompress.
    """
    source = source or input_storage(spec["path"])
    loaded = load_slice(spec, source)
    if spec["format"] == "parquet":
        records = read_parquet(spec, source, field, payload_type, check, loaded.fingerprint)
    elif loaded.data is not None:
        # imported here: its kernels import numba, which a job that reads no JSONL (a TreeJob, and
        # every module that imports the skeletons) need not pay for, 0.1-0.3 s a process
        from batchenum.pipeline.inputs.jsonl import read_jsonl

        records = read_jsonl(
            loaded.data, spec["first_line"], field, payload_type, check, loaded.fingerprint, loaded.oversized
        )
    else:  # load_slice reads a JSONL slice's bytes
        raise PipelineError(f"internal error: the JSONL slice of {spec['path']} was loaded without its bytes")
    records.file = frame_neutral(spec["path"])  # a frame's rows keep their file across its versions
    return records
