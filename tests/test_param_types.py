"""A job's parameters are typed as the values they declare (``Param[T]``), for mypy and IDEs, and read
as fast as plain attributes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

from batchenum.pipeline.job import Job, Param

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


def test_a_job_class_keeps_its_declarations_and_its_jobs_read_their_values_as_plain_attributes():
    from batchenum.pipeline.job import Job, Param

    class Sized(Job):
        name = "sized"
        n = Param(int, default=3)
        rate = Param(float, default=0.5)

    class Larger(Sized):
        name = "larger"
        n = Param(int, default=9)

    assert Sized.n.default == 3 and Larger.n.default == 9  # the declarations, on the classes
    # in the namespace, no object of a class defined in Python: Python 3.11 specializes the read of
    # a job's own value only then (pipeline/params.py, keep_for_fast_reads)
    assert type(vars(Sized)["n"]) is staticmethod and type(vars(Larger)["n"]) is staticmethod
    assert list(Larger.declared_params()) == ["rate", "n"]
    assert (Sized(n=4).n, Sized().rate, Larger().n) == (4, 0.5, 9)


class Pickled(Job):
    name = "pickled"
    n = Param(int, default=3)
    rate = Param(float, default=0.5)


def test_an_unpickled_job_has_the_attributes_the_pickled_one_had():
    """A job reaches each Ray task pickled; ``Job.__setstate__`` sets its attributes one by one (so
    that Python 3.11 reads them as fast as a constructed job's)."""
    import pickle

    job = Pickled(n=7)
    job.extra = ["any", "attribute"]
    copy = pickle.loads(pickle.dumps(job))
    assert type(copy) is Pickled and (copy.n, copy.rate, copy.extra) == (7, 0.5, ["any", "attribute"])
    assert copy.params() == job.params()
