"""Rough edges a newcomer meets: Ray's token advice, ~/.ray written as a side effect, a small batch
waiting for a Ray it does not need, published tables clobbered by a casual run."""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers import assert_exit, cli, cli_command


@pytest.mark.integration  # a private local Ray
def test_private_local_ray_is_quiet_and_leaves_home_alone(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}  # as on a fresh machine
    done = subprocess.run(
        cli_command("run", "palago", "--max-n", "9", "--out", str(tmp_path / "out"), "--workers", "2", "--quiet"),
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "HOME": str(home)},
    )
    assert_exit(done, 0)
    assert "Token authentication is enabled" not in done.stderr and "RAY_AUTH_MODE=disabled" not in done.stderr
    assert not (home / ".ray").exists()


def test_one_shard_does_not_wait_for_ray(tmp_path):
    batch = tmp_path / "d.jsonl"
    cli("generate", "dungeons", "--count", "50", "--height", "6", "--width", "6", "--seed", "1", "--out", str(batch))
    done = cli("run", "dungeons", "--input", str(batch), "--out", str(tmp_path / "out"))
    assert "one shard to compute: computing it here, without starting Ray" in done.stderr
    assert "local Ray" not in done.stderr


def test_a_casual_run_does_not_clobber_published_tables(tmp_path):
    cli("run", "palago", "--max-n", "10", "--serial", "--quiet", "--out", str(tmp_path))
    before = (tmp_path / "palago" / "creature_counts.parquet").read_bytes()
    casual = cli(
        "run", "palago", "--max-n", "10", "--catalogue-max-n", "8", "--serial", "--out", str(tmp_path), expect=1
    )
    assert "holds the tables of another run" in casual.stderr and "--overwrite" in casual.stderr
    assert (tmp_path / "palago" / "creature_counts.parquet").read_bytes() == before
