"""The search-tree skeleton (pipeline/skeletons.py ``TreeJob``): shards named by their place in the
tree, whatever the cluster; a budget that hands unexplored subtrees back as shards, with the same
counts and leaves whatever its value; a walk that keeps no leaf it need not; the compiled hook; and
a run killed half way, finished with another CPU count or on a three-node cluster, reusing every
committed shard; and ``batchenum status`` counting the shards handed back while a run goes on."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc

import clusters
import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import REPO, assert_exit, wait_until

from batchenum.pipeline.job import Param, PlanContext
from batchenum.pipeline.skeletons import TreeJob, path_id
from batchenum.pipeline.storage import TMP_MARK

sys.path.insert(0, str(REPO / "examples"))
from compiled_walks import CompiledWalks  # noqa: E402
from queens import Queens  # noqa: E402
from walks import Walks  # noqa: E402

# OEIS A001411, self-avoiding walks of n steps on the square lattice
A001411 = [1, 4, 12, 36, 100, 284, 780, 2172, 5916, 16268, 44100, 120292, 324932, 881500]


def saw_brute_force(n: int) -> int:
    """n-step self-avoiding walks, by a plain recursion written apart from the examples."""

    def extend(x: int, y: int, seen: set, left: int) -> int:
        if not left:
            return 1
        total = 0
        for p in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if p not in seen:
                seen.add(p)
                total += extend(*p, seen, left - 1)
                seen.discard(p)
        return total

    return extend(0, 0, {(0, 0)}, n)


def run_in_process(job: TreeJob) -> tuple[int, int, set[str], list[str]]:
    """Every shard of the plan and every shard handed back, run here: leaves, nodes, the leaf keys
    and the shard ids."""
    todo = collections.deque(job.plan(PlanContext()))
    leaves = nodes = 0
    keys: set[str] = set()
    ids = []
    while todo:
        shard = todo.popleft()
        result = job.run_shard(shard)
        ids.append(shard.id)
        leaves += result.tables["partial"]["leaves"][0]
        nodes += result.tables["partial"]["nodes"][0]
        keys |= set(result.tables.get("leaves", {}).get("key", []))
        todo.extend(result.children)
    return leaves, nodes, keys, ids


def test_the_brute_force_agrees_with_oeis():
    assert [saw_brute_force(n) for n in range(10)] == A001411[:10]


def test_ids_sort_in_the_trees_preorder():
    rng = random.Random(46)
    paths = {tuple(rng.randrange(rng.choice((3, 12, 150, 2000))) for _ in range(rng.randrange(6))) for _ in range(3000)}
    by_id = sorted(paths, key=path_id)
    assert by_id == sorted(paths)  # tuples compare as preorder: a parent before its subtree
    assert path_id(()) == "t" and path_id((0, 3, 12)) == "t-a0-a3-b12"


@pytest.mark.parametrize("budget", [0, 1, 2, 7, 100, 10**6])
def test_every_budget_gives_the_same_counts_and_leaves(budget):
    leaves, nodes, keys, ids = run_in_process(Queens(n=8, budget=budget))
    assert (leaves, len(keys)) == (92, 12)  # OEIS A000170 and A002562
    assert nodes == 2057 and len(ids) == len(set(ids))
    for n in (1, 5, 9):
        assert run_in_process(Walks(n=n, budget=budget))[0] == A001411[n]


class _RandomTree(TreeJob):
    """An irregular tree: each node (a seed) has 0 to 5 children, fewer as it goes deeper; a leaf
    is a node without children (the default is_leaf)."""

    name = "random_tree"
    seed = Param(int, default=0)

    def root(self):
        return (self.seed, 0)

    def children(self, node):
        seed, depth = node
        rng = random.Random(seed)
        return [(rng.getrandbits(32), depth + 1) for _ in range(rng.randrange(6) if depth < 9 else 0)]


@pytest.mark.parametrize("seed", range(6))
def test_an_irregular_tree_gives_the_same_counts_whatever_the_budget_and_the_cut(seed):
    plain = _RandomTree(seed=seed)
    stack, leaves, nodes = [plain.root()], 0, 0
    while stack:
        node = stack.pop()
        nodes += 1
        below = plain.children(node)
        leaves += not below
        stack.extend(below)
    rng = random.Random(seed)
    for budget in (0, 1, *rng.sample(range(2, 400), 4)):
        for split_depth in (None, 0, rng.randrange(1, 6)):
            found = run_in_process(_RandomTree(seed=seed, budget=budget, split_depth=split_depth))
            assert found[:2] == (leaves, nodes), (budget, split_depth)
            assert len(found[3]) == len(set(found[3]))


def test_a_small_budget_splits_the_work_into_shards_of_about_that_many_nodes():
    """A shard stops at the first node with children it meets past its budget: past it by at most
    the leaves met before that node, the children of the nodes on one path (4 a node, 9 deep)."""
    job = Walks(n=9, budget=50)
    todo = collections.deque(job.plan(PlanContext()))
    handed_back = 0
    while todo:
        shard = todo.popleft()
        result = job.run_shard(shard)
        nodes = result.tables["partial"]["nodes"][0]
        assert nodes <= 50 + 4 * 9 or "above" in shard.spec
        assert nodes >= 50 or not result.children
        assert all(child.id.startswith(shard.id + "-") for child in result.children)  # below it in the tree
        handed_back += len(result.children)
        todo.extend(result.children)
    assert handed_back > 100


def test_the_plan_is_the_same_whatever_the_cluster():
    plans = [[(s.id, dict(s.spec)) for s in Walks(n=12).plan(PlanContext(cpus))] for cpus in (None, 1, 2, 16, 1024)]
    assert all(plan == plans[0] for plan in plans)
    ids = [shard_id for shard_id, _ in plans[0]]
    assert ids == sorted(ids) and ids[0] == "t" and len(ids) >= TreeJob.PLAN_SUBTREES


def test_split_depth_cuts_at_that_depth():
    shards = Walks(n=8, split_depth=3).plan(PlanContext())
    assert shards[0].spec == {"path": [], "above": 3}
    assert len(shards) == 1 + A001411[3] and all(len(s.spec["path"]) == 3 for s in shards[1:])


NUMBA_FREE = """
import sys
sys.path.insert(0, {examples!r})
import batchenum
from walks import Walks
result = batchenum.run(Walks, n=6, out={out!r}, serial=True, quiet=True)
print(result.summary, "numba" in sys.modules, "pyarrow.compute" in sys.modules)
"""


def test_a_pure_python_tree_job_never_imports_numba_nor_arrow_compute(tmp_path):
    """numba's import costs 0.1-0.3 s in each process of a run that compiles nothing;
    pyarrow.compute's 0.1 s and 6 MiB in a run whose tables are a few rows."""
    code = NUMBA_FREE.format(examples=str(REPO / "examples"), out=str(tmp_path / "out"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert_exit(done, 0)
    assert done.stdout.split("\n")[-2] == f"walks: {A001411[6]} leaves, 1217 nodes False False"


def test_a_count_only_walk_holds_no_leaf():
    """44100 leaves counted in a few KB: the walk keeps O(depth) lists of children."""
    job = Walks(n=10, budget=0, split_depth=0)
    [shard] = job.plan(PlanContext())
    tracemalloc.start()
    try:
        result = job.run_shard(shard)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.tables["partial"]["leaves"] == [A001411[10]]
    assert peak < 64 * 1024, f"{peak} bytes"


def test_the_compiled_hook_counts_as_the_walk_does():
    for n in (1, 3, 4, 5, 9, 11):
        expected = run_in_process(Walks(n=n, budget=0))[:2]
        assert run_in_process(CompiledWalks(n=n, budget=0))[:2] == expected
        assert run_in_process(CompiledWalks(n=n, budget=3))[:2] == expected
    assert expected[0] == A001411[11]


def test_a_catalogue_with_a_subtree_counter_is_refused():
    with pytest.raises(TypeError, match="count_subtree counts without cataloguing"):

        class Both(TreeJob):  # noqa: F841
            name = "both"
            n = Param(int, default=3)

            def key(self, leaf):
                return str(leaf)

            def count_subtree(self, node):
                return None


def _tables(folder) -> dict[str, pd.DataFrame]:
    return {
        name: pd.read_parquet(folder / place) for name, place in (("counts", "counts.parquet"), ("leaves", "leaves"))
    }


def test_a_run_with_a_budget_writes_the_tables_a_run_without_writes(tmp_path):
    import batchenum

    unsplit = batchenum.run(Queens, n=8, budget=0, out=str(tmp_path / "a"), serial=True)
    split = batchenum.run(Queens, n=8, budget=5, out=str(tmp_path / "b"), serial=True)
    assert split.shards > 3 * unsplit.shards
    for name, frame in _tables(tmp_path / "a" / "queens").items():
        pd.testing.assert_frame_equal(frame, _tables(tmp_path / "b" / "queens")[name])
    again = batchenum.run(Queens, n=8, budget=5, out=str(tmp_path / "b"), serial=True)
    assert again.reused == again.shards == split.shards  # the handed-back shards found from their parents


KILLED_RUN = """
import os, sys
sys.path.insert(0, {examples!r})
import batchenum
from walks import Walks

result = batchenum.run(Walks, n={n}, budget={budget}, out={out!r}, head_start=False, {where})
print(result.summary, result.shards, result.reused)
"""
KILLED_N, KILLED_BUDGET = 13, 20_000


def _committed(folder) -> set[str]:
    return {
        name.removesuffix(".parquet") for name in os.listdir(folder / "_shards" / "partial") if TMP_MARK not in name
    }


def _walks_run(out, where: str) -> list[str]:
    """The command of a Walks run into ``out`` on a private Ray (``workers=W``) or a cluster."""
    code = KILLED_RUN.format(
        examples=str(REPO / "examples"), n=KILLED_N, budget=KILLED_BUDGET, out=str(out), where=where
    )
    return [sys.executable, "-c", code]


def _killed_half_way(out) -> set[str]:
    """Start a Walks run on a private Ray of 2 CPUs, SIGKILL its whole process group once 60 shards
    are committed, and return the ids of the shards committed once its Ray is gone too."""
    ray_tmpdir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths
    first = subprocess.Popen(
        _walks_run(out, "workers=2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "RAY_TMPDIR": ray_tmpdir},
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and first.poll() is None:
            if (out / "walks" / "_shards" / "partial").is_dir() and len(_committed(out / "walks")) >= 60:
                break
            time.sleep(0.2)
        assert first.poll() is None, "the first run ended before it was killed"
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its process group
    finally:
        first.wait(60)
    # the private Ray leads a session of its own: its watchdog kills its workers (one may commit a
    # shard meanwhile), then removes its folder
    wait_until(lambda: not os.listdir(ray_tmpdir), "the killed run's Ray was gone", 60)
    os.rmdir(ray_tmpdir)
    return _committed(out / "walks")


def _check_finished(finished, out, committed: set[str], serial) -> None:
    """The finishing run reused every shard committed before the kill, and wrote a serial run's tables."""
    assert_exit(finished, 0)
    summary, shards, reused = finished.stdout.strip().splitlines()[-1].rsplit(" ", 2)
    assert summary == f"walks: {A001411[KILLED_N]} leaves, {run_in_process(Walks(n=KILLED_N, budget=0))[1]} nodes"
    assert int(reused) == len(committed)  # one file a shard, committed by a rename: none half written
    plan = json.loads((out / "walks" / "_plan.json").read_text())
    assert len(plan["shards"]) == int(shards) and committed <= set(plan["shards"])
    import batchenum

    batchenum.run(Walks, n=KILLED_N, budget=KILLED_BUDGET, out=str(serial), serial=True)
    for name in ("counts.parquet", "partial"):  # partial: a folder of parts
        pd.testing.assert_frame_equal(pd.read_parquet(out / "walks" / name), pd.read_parquet(serial / "walks" / name))


@pytest.mark.slow
def test_a_run_killed_half_way_is_finished_with_another_cpu_count_reusing_every_committed_shard(tmp_path):
    out = tmp_path / "out"
    committed = _killed_half_way(out)
    finished = subprocess.run(_walks_run(out, "workers=3"), capture_output=True, text=True, timeout=900)
    _check_finished(finished, out, committed, tmp_path / "serial")


@pytest.mark.slow
def test_a_run_killed_half_way_is_finished_on_a_three_node_cluster_reusing_every_committed_shard(tmp_path):
    """Three `ray start` nodes of one CPU each (a head and two joining it) on this machine."""
    out = tmp_path / "out"
    committed = _killed_half_way(out)
    temp_dir, env = f"/tmp/bt{os.getpid()}", clusters.token_env()
    try:
        address = clusters.start_head(temp_dir, env, "--num-cpus", "1", "--include-dashboard", "false")
        for _ in range(2):
            clusters.join_node(address, env)
        clusters.wait_for_nodes(address, env, 3)
        where = f"address={address!r}"
        finished = subprocess.run(_walks_run(out, where), capture_output=True, text=True, timeout=900, env=env)
    finally:
        clusters.stop(temp_dir)
    _check_finished(finished, out, committed, tmp_path / "serial")
    ran_on = {
        json.loads(
            pq.read_schema(out / "walks" / "_shards" / "partial" / f"{shard}.parquet").metadata[b"batchenum.stats"]
        )["node"]
        for shard in _committed(out / "walks") - committed
    }
    assert len(ran_on) == 3, ran_on


def handed_back_by(job: TreeJob) -> dict[str, list[str]]:
    """{shard id: the ids of the shards it hands back} over the whole tree, every shard run here."""
    todo = collections.deque(job.plan(PlanContext()))
    children = {}
    while todo:
        shard = todo.popleft()
        handed_back = job.run_shard(shard).children
        children[shard.id] = [child.id for child in handed_back]
        todo.extend(handed_back)
    return children


STATUS_RUN = """
import sys
sys.path.insert(0, {examples!r})
import batchenum
from walks import Walks

batchenum.run(Walks, n={n}, budget={budget}, out={out!r}, serial=True)
"""


def test_status_counts_the_shards_handed_back_while_a_run_goes_on_and_after_it_is_killed(tmp_path):
    """The plan a run records names the shards of its cut; the shards they hand back are planned from
    their parent's commit on (its footer names them), so status never calls them unplanned."""
    from batchenum.pipeline.status import job_statuses, render

    n, budget, out = 11, 300, tmp_path / "out"
    code = STATUS_RUN.format(examples=str(REPO / "examples"), n=n, budget=budget, out=str(out))
    children = handed_back_by(Walks(n=n, budget=budget))
    cut = {shard.id for shard in Walks(n=n, budget=budget).plan(PlanContext())}
    run = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, start_new_session=True)
    try:
        while_running = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and run.poll() is None and while_running is None:
            if (out / "walks" / "_shards" / "partial").is_dir() and len(_committed(out / "walks")) >= 100:
                before = _committed(out / "walks")
                while_running = job_statuses(str(out))[0]
            time.sleep(0.05)
        assert run.poll() is None and while_running is not None, "the run ended before status was read"
        os.killpg(run.pid, signal.SIGKILL)
    finally:
        run.wait(60)
    assert while_running.lease is not None and not while_running.unplanned
    assert before <= set(while_running.committed) and set(while_running.handed_back) - cut
    assert while_running.planned == len(cut | set(while_running.handed_back)) > len(while_running.committed)
    stopped = job_statuses(str(out))[0]
    committed = _committed(out / "walks")
    assert set(stopped.committed) == committed and not stopped.unplanned
    named = cut.union(*(children[shard_id] for shard_id in committed))
    assert cut | set(stopped.handed_back) == named and stopped.planned == len(named)
    text = render([stopped])
    assert "not in the plan" not in text and f"{len(stopped.handed_back)} of them handed back" in text, text
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert_exit(finished, 0)
    done = job_statuses(str(out))[0]
    assert len(done.committed) == done.planned == len(children) and not done.handed_back and not done.unplanned


NO_PANDAS_RUN = """
import sys
sys.path.insert(0, {examples!r})
import batchenum
from queens import Queens
from walks import Walks

for job, out in ((Walks, "walks"), (Queens, "queens")):
    print(batchenum.run(job, n=8, budget=40, out={out!r} + out, serial=True).summary)
print(sorted(name for name in sys.modules if name.split(".")[0] in ("pandas", "ray")))
"""


def test_a_serial_run_imports_neither_pandas_nor_ray(tmp_path):
    """pandas alone is about 50 MiB of a serial count's peak RSS (docs/benchmarks.md): the shards, the
    merge (with its dedup of the catalogue's keys) and ``counts`` are built without it."""
    code = NO_PANDAS_RUN.format(examples=str(REPO / "examples"), out=str(tmp_path) + "/")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert_exit(done, 0)
    walks, queens, imported = done.stdout.strip().splitlines()[-3:]
    assert walks.startswith(f"walks: {A001411[8]} leaves") and queens.startswith("queens: 92 leaves")
    assert imported == "[]"


class _Pids(Walks):
    """Walks that note the process computing each shard."""

    name = "pids"

    def run_shard(self, shard, context=None):
        with open(os.path.join(os.environ["PIDS_FOLDER"], "pids"), "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return super().run_shard(shard, context)


def test_the_head_start_computes_a_pure_python_job_in_processes_of_its_own(tmp_path, monkeypatch):
    """Threads would share one core under the GIL (TreeJob.holds_gil)."""
    import batchenum

    monkeypatch.setenv("PIDS_FOLDER", str(tmp_path))
    result = batchenum.run(_Pids, n=9, budget=2000, out=str(tmp_path / "out"), workers=2)
    assert result.summary.startswith(f"pids: {A001411[9]} leaves")
    pids = set((tmp_path / "pids").read_text().split())
    assert len(pids) == 2 and str(os.getpid()) not in pids


def test_the_defaults_docs_jobs_md_states_are_the_codes():
    from batchenum.pipeline.skeletons import DEFAULT_BUDGET

    text = " ".join((REPO / "docs" / "jobs.md").read_text().split())
    assert f"cuts at the first level with at least {TreeJob.PLAN_SUBTREES} nodes" in text
    assert f"(`--budget NODES`, default {DEFAULT_BUDGET:,})" in text
