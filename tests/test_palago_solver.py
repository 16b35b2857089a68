"""The Palago search against published counts, a literal brute force, and its own identities."""

from __future__ import annotations

import json
import random

import numpy as np
import palago_oracle as oracle
import pytest

from batchenum.solvers.palago import (
    SearchCounts,
    Tile,
    canonical_tiles,
    count_creatures,
    decode_codes,
    frontier,
    images,
    key_of,
    tiles_from_key,
)

# OEIS A325936 (free Palago creatures), n = 13..20.
OEIS_A325936 = {13: 205, 14: 512, 15: 1335, 16: 3404, 17: 8922, 18: 23592, 19: 62630, 20: 167622}


@pytest.fixture(scope="module")
def counts20():
    counts, _ = count_creatures(20)
    return counts


def test_published_counts_1_to_12(cases_dir, counts20):
    published = [json.loads(line) for line in (cases_dir / "palago_seed.jsonl").read_text().splitlines()]
    assert len(published) == 12
    for row in published:
        assert counts20.free[row["n"]] == row["free"], f"n = {row['n']}"


def test_oeis_counts_13_to_20(counts20):
    for n, free in OEIS_A325936.items():
        assert counts20.free[n] == free, f"n = {n}"


def test_burnside_identities(counts20):
    n = np.arange(len(counts20.free))
    # every fixed creature's stabiliser, summed, is 6 per free class (Burnside)
    assert (counts20.stabiliser_sum == 6 * counts20.free).all()
    # each free class with stabiliser s has 6 / s fixed members (orbit-stabiliser)
    orbit_sizes = np.array([6, 3, 2, 1])
    assert (counts20.by_stabiliser @ orbit_sizes == counts20.fixed).all()
    assert (counts20.by_stabiliser.sum(axis=1) == counts20.free).all()
    assert counts20.fixed[n > 0].sum() > 0


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_small_sizes_against_brute_force(n):
    _check_against_brute_force(n)


@pytest.mark.slow
def test_size_6_against_brute_force():
    _check_against_brute_force(6)


def _check_against_brute_force(n):
    fixed = oracle.fixed_creatures(n)
    orbits = oracle.free_classes(fixed)
    counts, catalogue = count_creatures(n, catalogue_max_n=n)
    assert counts.fixed[n] == len(fixed)
    assert counts.free[n] == len(orbits)
    # the same creatures, not just as many: compare canonical keys class by class
    oracle_keys = set()
    for orbit in orbits:
        member = next(iter(orbit))
        tiles = _tiles_of_oracle_creature(member)
        canonical, stabiliser = canonical_tiles(tiles)
        assert stabiliser == 6 // len(orbit)
        oracle_keys.add(key_of(canonical))
    solver_keys = {
        key_of(decode_codes(catalogue.tile_codes(k))) for k in range(len(catalogue)) if catalogue.sizes[k] == n
    }
    assert solver_keys == oracle_keys


def _tiles_of_oracle_creature(creature) -> list[Tile]:
    regions: dict = {}
    for (q, r), t, kind in creature:
        bit = 1 if kind == "tip" else 2
        regions[(q, r, t)] = regions.get((q, r, t), 0) | bit
    return [Tile(q, r, t, bits) for (q, r, t), bits in regions.items()]


@pytest.mark.parametrize("max_n,depth", [(12, 1), (14, 3), (16, 6), (17, 9)])
def test_shards_add_up_to_the_whole(max_n, depth):
    whole, _ = count_creatures(max_n)
    trunk = SearchCounts.zeros(max_n)
    prefixes = frontier(max_n, depth, trunk)
    assert len(set(prefixes)) == len(prefixes)
    # split the prefixes among shards in a shuffled order: the sum must not depend on how
    shuffled = prefixes[:]
    random.Random(depth).shuffle(shuffled)
    for shard_count in (1, 3, 7):
        total = SearchCounts.zeros(max_n)
        total += trunk  # the nodes above the cut
        for index in range(shard_count):
            part, _ = count_creatures(max_n, shuffled[index::shard_count])
            total += part
        assert (total.fixed == whole.fixed).all()
        assert (total.free == whole.free).all()
        assert (total.by_stabiliser == whole.by_stabiliser).all()
        assert (total.nodes == whole.nodes).all()


def test_frontier_at_depth_zero_is_the_root():
    assert frontier(10, 0) == [()]


def test_catalogue_is_canonical_and_unique():
    counts, catalogue = count_creatures(13, catalogue_max_n=13)
    keys = [key_of(decode_codes(catalogue.tile_codes(k))) for k in range(len(catalogue))]
    assert len(keys) == len(set(keys)) == counts.free.sum()
    sample = random.Random(7).sample(range(len(catalogue)), 60)
    for k in sample:
        tiles = decode_codes(catalogue.tile_codes(k))
        assert len(tiles) == catalogue.sizes[k]
        assert tiles_from_key(keys[k]) == tiles
        # every image of the creature leads back to the same canonical key and stabiliser
        for image in images(tiles):
            canonical, stabiliser = canonical_tiles(image)
            assert key_of(canonical) == keys[k]
            assert stabiliser == catalogue.stabilisers[k]


def test_both_regions_of_one_tile_first_appear_at_8():
    _, catalogue = count_creatures(9, catalogue_max_n=9)
    sizes_with_both = {
        int(catalogue.sizes[k])
        for k in range(len(catalogue))
        if any(tile.regions == 3 for tile in decode_codes(catalogue.tile_codes(k)))
    }
    assert min(sizes_with_both) == 8


@pytest.mark.parametrize("bad", [0, -3, 41])
def test_max_n_out_of_range_is_rejected(bad):
    with pytest.raises(ValueError, match="max_n must be between 1 and 40"):
        count_creatures(bad)


def test_bad_key_names_the_tile():
    with pytest.raises(ValueError, match="'1,2,x,1'"):
        tiles_from_key("0,0,1,1 1,2,x,1")
