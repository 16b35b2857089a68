"""A job's parameters are typed as the values they declare (``Param[T]``), for mypy and IDEs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

SNIPPET = """
from batchenum.pipeline.job import Job, Param


class Sized(Job):
    name = "sized"
    n = Param(int, default=3)
    rate = Param(float, default=0.5)
    shards: Param[int | None] = Param(int, default=None)

    def show(self) -> None:
        reveal_type(self.n)
        reveal_type(self.rate)
        reveal_type(self.shards)
        reveal_type(Sized.n)
"""


@pytest.mark.slow
def test_mypy_sees_a_parameter_as_its_declared_type(tmp_path):
    (tmp_path / "sized.py").write_text(SNIPPET)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--follow-imports=silent", "sized.py"],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(REPO)},  # the editable install's finder is not for mypy
        capture_output=True,
        text=True,
        timeout=600,
    )
    revealed = [line.split("Revealed type is ")[1] for line in done.stdout.splitlines() if "Revealed type" in line]
    assert revealed == ['"int"', '"float"', '"int | None"', '"batchenum.pipeline.params.Param[int]"'], done.stdout
