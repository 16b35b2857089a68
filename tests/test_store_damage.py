"""Tables and store files as damaged input: a table the project wrote is never served with one bit
wrong (page checksums, and checks of what no checksum covers), and a damaged or foreign
``_lease.json``, ``_plan.json`` or shard file is one message, never a traceback or wrong numbers."""

from __future__ import annotations

import contextlib
import io
import shutil

from helpers import assert_exit, cli


def in_process(*args: str) -> tuple[int, str, str]:
    """The same command line called in this process (the whole of jobs.cli.main, nothing replaced):
    for sweeps too long to start a process per case."""
    from batchenum.jobs.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


def copy_of(run, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(run, out)
    return out


def flip(path, position: int, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------------------------- item 1


def test_a_bit_flipped_anywhere_in_the_count_table_is_never_served(palago_run, tmp_path):
    """Single-bit flips across the whole file (every 7th byte, each bit in turn, so every byte
    offset class and every bit is hit): the table command prints exactly the right table or fails
    with exit 1 naming the file; never other numbers with exit 0.  An exhaustive sweep of all 30,824
    flips of this file gave 11,570 unchanged outputs, 19,254 caught and none wrong."""
    out = copy_of(palago_run, tmp_path)
    table = out / "palago" / "creature_counts.parquet"
    good = table.read_bytes()
    code, expected, _ = in_process("table", "--out", str(out))
    assert code == 0 and " 9     9     38" in expected
    outcomes = {"same": 0, "caught": 0}
    for position in range(0, len(good), 7):
        table.write_bytes(good)
        flip(table, position, position % 8)
        code, printed, error = in_process("table", "--out", str(out))
        if code == 0 and printed == expected:
            outcomes["same"] += 1
        else:
            assert (code, printed) == (1, ""), f"byte {position} bit {position % 8}: exit {code}\n{printed}"
            assert str(table) in error and "is damaged" in error and "again" in error, error
            outcomes["caught"] += 1
    assert outcomes["caught"] > 100 and outcomes["same"] > 50, outcomes


def test_a_damaged_count_table_is_one_message_through_the_real_cli_and_a_rerun_rebuilds_it(palago_run, tmp_path):
    out = copy_of(palago_run, tmp_path)
    table = out / "palago" / "creature_counts.parquet"
    good = table.read_bytes()
    for position, bit in ((200, 3), (len(good) - 400, 2)):  # a data page; the footer's Arrow schema
        table.write_bytes(good)
        flip(table, position, bit)
        for args in (("table",), ("table", "--format", "bfile"), ("table", "--json")):
            shown = cli(*args, "--out", str(out), expect=None)
            assert (shown.returncode, shown.stdout) == (1, ""), (position, args, shown.stdout, shown.stderr[-2000:])
            assert shown.stderr.count("\n") == 1 and str(table) in shown.stderr
            assert "Traceback" not in shown.stderr
    status = cli("status", "--out", str(out), expect=None)
    assert "creature_counts.parquet: damaged" in status.stdout and "9 rows" not in status.stdout
    rerun = cli("run", "palago", "--max-n", "9", "--serial", "--out", str(out))
    assert "(4 reused)" in rerun.stdout
    assert table.read_bytes() == good


def test_a_damaged_shard_is_recomputed_not_merged(palago_run, tmp_path):
    out = copy_of(palago_run, tmp_path)
    shard = out / "palago" / "_shards" / "partial_counts" / "s0001.parquet"
    flip(shard, 150, 5)
    rerun = cli("run", "palago", "--max-n", "9", "--serial", "--out", str(out))
    assert "shard s0001 will be recomputed" in rerun.stderr and "(3 reused, 1 recomputed" in rerun.stdout
    assert (out / "palago" / "creature_counts.parquet").read_bytes() == (
        palago_run / "palago" / "creature_counts.parquet"
    ).read_bytes()


def test_a_damaged_catalogue_is_never_shown_in_a_gallery(tmp_path):
    out = tmp_path / "out"
    cli("run", "palago", "--max-n", "9", "--catalogue-max-n", "9", "--serial", "--out", str(out))
    part = out / "palago" / "creatures" / "part-00000.parquet"
    good = part.read_bytes()
    shown = cli("palago", "gallery", "--n", "9", "--from", str(out), "--out", str(tmp_path / "g"))
    assert "9 of 9 creatures" in shown.stdout
    for position, bit in ((250, 1), (len(good) - 300, 4)):
        part.write_bytes(good)
        flip(part, position, bit)
        shown = cli("palago", "gallery", "--n", "9", "--from", str(out), "--out", str(tmp_path / "g"), expect=None)
        if shown.returncode == 0:  # a flip no reader needs: the same creatures
            assert "9 of 9 creatures" in shown.stdout
            continue
        assert_exit(shown, 1)
        assert str(part) in shown.stderr and "Traceback" not in shown.stderr, shown.stderr
