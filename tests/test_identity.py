"""A job's identity (what a committed shard must match to be reused) comes from its declarations:
no recorded parameter can be left out, and a change of any one recomputes every shard (issue 45)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import batchenum
from batchenum.jobs import REGISTRY
from batchenum.pipeline.errors import SpokenError
from batchenum.pipeline.job import Job
from batchenum.pipeline.params import Param
from batchenum.pipeline.shard_store import params_change
from batchenum.pipeline.skeletons import RecordJob, TreeJob

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CASES = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(EXAMPLES))

from collatz import Collatz  # noqa: E402
from queens import Queens  # noqa: E402


def _other_value(param: Param) -> object:
    """A value of ``param`` other than its default, within its bounds."""
    if param.choices:
        return next(choice for choice in param.choices if choice != param.default)
    if param.type is bool:
        return not param.default
    if param.type in (int, float):
        base = param.default if param.default is not None else (param.low or 1)
        return param.type(base - 1 if param.high is not None and not isinstance(param.high, str) else base + 1)
    return f"{param.default}-other"


def _job_classes() -> list[type[Job]]:
    return [*(REGISTRY.job_class(name) for name in REGISTRY.names()), Collatz, Queens]


@pytest.mark.parametrize("job_class", _job_classes(), ids=lambda c: c.name)
def test_every_recorded_parameter_is_in_params(job_class, tmp_path):
    """Each parameter declared with recorded=True is in params(), and params() changes with it."""
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"id": "a", "x": 1}\n')
    needed = {"input": str(batch)} if "input" in job_class.declared_params() else {}
    base = job_class.create(**needed).params()
    for name, param in job_class.declared_params().items():
        if not param.recorded or name == "input":
            continue
        changed = job_class.create(**{**needed, name: _other_value(param)}).params()
        assert changed != base, f"{job_class.name}: a change of {name} leaves params() as it was"


def test_params_cannot_be_overridden():
    with pytest.raises(TypeError, match="job class Forgetful: params\\(\\) is derived"):

        class Forgetful(Job):
            name = "forgetful"

            def params(self):
                return {}


def test_extra_params_add_but_cannot_rename_a_declared_one():
    class Extra(Job):
        name = "extra"
        size = Param(int, default=3)

        def extra_params(self):
            return {"flavour": "plain"}

    assert Extra().params() == {"size": 3, "flavour": "plain"}

    class Clash(Extra):
        def extra_params(self):
            return {"size": 0}

    with pytest.raises(TypeError, match="extra_params\\(\\) names declared parameters \\(size\\)"):
        Clash().params()


def test_a_record_job_parameter_recomputes_every_shard(tmp_path):
    """The issue's Collatz commands: a rerun with another --max-steps is never served old shards."""
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text('{"id": "a", "n": 27}\n{"id": "b", "n": 97}\n')
    out = str(tmp_path / "cz")
    first = batchenum.run(Collatz, input=str(numbers), out=out, serial=True, records_per_shard=1)
    assert first.summary == "collatz: read 2, answered 2, rejected 0"
    with pytest.raises(SpokenError, match="parameters max_steps 10000 -> 5"):
        batchenum.run(Collatz, input=str(numbers), out=out, serial=True, records_per_shard=1, max_steps=5)
    again = batchenum.run(
        Collatz, input=str(numbers), out=out, serial=True, records_per_shard=1, max_steps=5, overwrite=True
    )
    assert (again.reused, len(again.recomputed)) == (0, 2)
    assert again.summary == "collatz: read 2, answered 0, rejected 2"


@pytest.mark.parametrize(
    "job, params, changes",
    [
        (Queens, {"n": 6}, {"n": 7}),
        ("palago", {"max_n": 8}, {"max_n": 9, "catalogue_max_n": 4}),
        ("dungeons", {"input": str(CASES / "dungeon_seed.jsonl")}, {"max_cells": 50, "records_per_shard": 2}),
        ("nonary", {"input": str(CASES / "nonary_seed.jsonl")}, {"max_doors": 3, "records_per_shard": 2}),
    ],
    ids=["tree", "palago", "dungeons", "nonary"],
)
def test_each_recorded_parameter_recomputes_every_shard(job, params, changes, tmp_path):
    """Every built-in job and the tree skeleton: each recorded parameter changed in turn, and no shard
    is reused."""
    out = str(tmp_path / "out")
    batchenum.run(job, out=out, serial=True, **params)
    for name, value in changes.items():
        rerun = batchenum.run(job, out=out, serial=True, overwrite=True, **{**params, name: value})
        assert rerun.reused == 0, f"a change of {name} reused {rerun.reused} shards"
        assert rerun.recomputed, f"a change of {name} recomputed nothing"
        back = batchenum.run(job, out=out, serial=True, overwrite=True, **params)
        assert back.reused == 0 and len(back.recomputed) == back.shards


def test_params_change_names_what_changed():
    before = json.dumps({"input": "a", "max_steps": 10000})
    assert params_change(before, json.dumps({"input": "a", "max_steps": 5})) == "max_steps 10000 -> 5"
    assert params_change(json.dumps({"input": "a"}), before) == "max_steps not recorded -> 10000"
    assert params_change(before, json.dumps({"input": "b"})) == 'input "a" -> "b", max_steps 10000 -> not recorded'


def test_skeletons_record_their_declared_parameters():
    assert Queens(n=5).params() == {"n": 5}
    assert issubclass(Collatz, RecordJob) and issubclass(Queens, TreeJob)
    assert Collatz(input="x.jsonl", max_steps=7).params()["max_steps"] == 7
