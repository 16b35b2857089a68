"""The Palago count table read back: verified, as exact integers, as an OEIS b-file, and the
``batchenum table`` command that prints it."""

from __future__ import annotations

import argparse
import json

import pyarrow as pa

from batchenum.jobs.palago_counts import BFILE_COLUMNS, CREATURE_COUNTS, WIDE_CREATURE_COUNTS
from batchenum.pipeline.cli import Command
from batchenum.pipeline.errors import PipelineError, UsageError
from batchenum.pipeline.storage import Storage

__all__ = ["COMMANDS", "bfile", "exact_column"]


def _add_table_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", default="results", metavar="DIR", help="the folder or URI a palago run wrote to (default: results)"
    )
    parser.add_argument(
        "--format",
        choices=("text", "bfile"),
        default="text",
        help="text: the whole table; bfile: OEIS b-file lines 'n value' for one column (default: text)",
    )
    parser.add_argument(
        "--column",
        choices=BFILE_COLUMNS,
        default="free",
        help="the column a b-file lists: " + ", ".join(BFILE_COLUMNS) + " (default: free)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object on standard output: the table's location and its rows (docs/cli.md)",
    )


def _print_table(args: argparse.Namespace) -> int:
    folder = Storage.at(args.out).child("palago")
    path = folder.join("creature_counts.parquet")
    if not folder.is_file(path):
        raise PipelineError(f"no count table at {folder.uri(path)}: run `batchenum run palago --out {args.out}` first")
    import pandas as pd

    table = _read_counts(folder, path, args.out)
    if args.format == "bfile":
        print(bfile(table, args.column), end="")
        return 0
    counts = table.to_pandas()
    if args.json:
        rows = [{name: int(value) for name, value in row.items()} for row in counts.to_dict("records")]
        print(json.dumps({"table": "creature_counts", "location": folder.uri(path), "rows": rows}, indent=2))
        return 0
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(counts.to_string(index=False))
    return 0


def _read_counts(folder: Storage, path: str, out: str) -> pa.Table:
    """The count table, verified (pipeline.parquet_format.read_verified: page checksums, footer, columns) and
    checked for what its footer's unprotected parts could still get wrong: it holds n = 1..max_n, in
    order, for the max_n its parameters record.  A damaged table is one error naming it, never
    other numbers."""
    from batchenum.pipeline.parquet_format import DamagedFileError, read_verified, recorded_metadata

    where = folder.uri(path)
    rebuild = (
        f"; no number from it is shown. Run the `batchenum run palago ... --out {out}` command that "
        "wrote it again: it reuses the committed shards and rebuilds the table"
    )
    try:
        with folder.open_input(path) as handle:
            table = read_verified(handle, where=where)  # pages and footer; the columns below
    except DamagedFileError as error:
        raise PipelineError(f"{error}{rebuild}") from None
    except OSError as error:
        raise PipelineError(f"cannot read {where}: {error}") from None
    meta = recorded_metadata(table.schema)
    params = None  # none recorded: written by another tool (pandas, say), checked for what it holds
    if meta:
        try:
            params = json.loads(meta["params"])
            max_n = int(params["max_n"])
        except (KeyError, TypeError, ValueError):
            raise PipelineError(f"{where} is damaged (its recorded parameters are unreadable){rebuild}") from None
    problem = _count_columns_problem(table.schema, params)
    if problem:
        raise PipelineError(f"{where} is damaged ({problem}){rebuild}")
    if params is None:
        return table
    if meta.get("table") != CREATURE_COUNTS.name or table.column("n").to_pylist() != list(range(1, max_n + 1)):
        raise PipelineError(f"{where} is damaged (it does not hold n = 1..{max_n} as its parameters say){rebuild}")
    return table.replace_schema_metadata(None)


def _count_columns_problem(schema: pa.Schema, params: dict | None) -> str | None:
    """The count table has int64 columns, or decimal strings where its run counted past int64
    (params ``"counts": "decimal strings"``); a table without provenance may be either."""
    from batchenum.pipeline.parquet_format import columns_problem, table_schema

    if params is None:
        wide = "fixed" in schema.names and pa.types.is_string(schema.field("fixed").type)
    else:
        wide = params.get("counts") == "decimal strings"
    return columns_problem(schema, table_schema(WIDE_CREATURE_COUNTS if wide else CREATURE_COUNTS))


def bfile(table: pa.Table, column: str = "free") -> str:
    """OEIS b-file text for one column of the count table: one line 'n value' per row, n ascending,
    no header; values exact however the table stores them (``exact_column``)."""
    if column not in BFILE_COLUMNS:
        raise UsageError(f"a b-file lists one of {', '.join(BFILE_COLUMNS)}, not {column}")
    rows = sorted(zip(exact_column(table, "n"), exact_column(table, column)))
    return "".join(f"{n} {value}\n" for n, value in rows)


def exact_column(table: pa.Table, column: str) -> list[int]:
    """A count column as Python integers, exactly: from integer columns, and from the wider forms a
    count table may hold past int64 (decimal columns of scale 0, decimal strings).  Anything else,
    a null or a fraction is an error naming the column and the row, never a rounded number."""
    import decimal

    values = table.column(column).to_pylist()
    exact = []
    for row, value in enumerate(values):
        try:
            if isinstance(value, bool) or value is None or isinstance(value, float):
                raise ValueError
            number = int(value)
            if isinstance(value, decimal.Decimal) and number != value:
                raise ValueError
        except (ValueError, TypeError, ArithmeticError):
            raise PipelineError(
                f"the count table's {column} column holds {value!r} in row {row + 1}, not a whole "
                "number: rebuild the table with `batchenum run palago`"
            ) from None
        exact.append(number)
    return exact


COMMANDS = [Command(("table",), "print the Palago creature count table", _add_table_arguments, _print_table)]
