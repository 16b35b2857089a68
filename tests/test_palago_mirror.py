"""Creatures fixed by the reflection (i, j) -> (j, i): the half-plane transfer matrix against the
orbit-closed search (an independent algorithm) and the published tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import REPO

from batchenum.solvers.palago.mirror import MAX_N as MIRROR_MAX_N
from batchenum.solvers.palago.mirror import reflection_counts, reflection_counts_reference
from batchenum.solvers.palago.symmetric import symmetric_counts

MAX_N = 20


@pytest.fixture(scope="module")
def searched():
    return symmetric_counts(MAX_N).reflection


def test_reference_sweep_matches_the_search(searched):
    assert reflection_counts_reference(MAX_N).tolist() == searched.tolist()
    assert searched[MAX_N - 4 :].min() > 0  # not vacuous


def test_kernel_matches_the_search_at_every_max_n(searched):
    # every max_n, not only the largest: the pruning depends on it, the smallest sizes most
    for max_n in range(MAX_N + 1):
        assert reflection_counts(max_n).tolist() == searched[: max_n + 1].tolist(), max_n


def test_kernel_matches_the_reference_past_the_search():
    assert reflection_counts(26).tolist() == reflection_counts_reference(26).tolist()


def test_kernel_matches_the_published_stabilisers_to_50():
    # a class with a mirror symmetry has one member fixed by a given reflection: f_2 + f_6 of them
    table = pd.read_parquet(REPO / "results" / "transfer" / "palago" / "creature_counts.parquet")
    expected = [int(f2) + int(f6) for f2, f6 in zip(table.free_stabiliser_2, table.free_stabiliser_6)]
    max_n = 44  # 1.7 s; n = 50 (16 s) agrees too
    assert reflection_counts(max_n)[1:].tolist() == expected[:max_n]


def test_stats_report_the_states():
    stats = np.zeros(2, dtype=np.int64)
    reflection_counts(20, stats=stats)
    assert 0 < stats[0] < stats[1]


@pytest.mark.parametrize("max_n", [-1, MIRROR_MAX_N + 1])
def test_max_n_out_of_range_is_refused(max_n):
    with pytest.raises(ValueError, match="max_n must be between 0 and 61"):
        reflection_counts(max_n)
