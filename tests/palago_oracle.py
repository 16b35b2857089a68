"""A slow, literal reading of the Palago rules (docs/rules.md), independent of the solver's lattice model.

Every fixed polyhex of n cells, every assignment of the three rotations: join the blue regions
across shared edges (union-find over edge halves exactly as the rules' table says), keep the
components that never touch an edge facing empty space and pass through all n tiles.  Symmetries
act on directions (a 120 degree turn adds 2 to every direction, corner and edge; the reflection
maps direction k to 1 - k), so nothing here shares code with solvers/palago/model.py.
"""

from __future__ import annotations

import itertools

DIRECTIONS = ((1, -1), (1, 0), (0, 1), (-1, 1), (-1, 0), (0, -1))


def polyhexes(n: int) -> set[frozenset]:
    """All fixed polyhexes of n cells, translated so that min q and min r are 0."""
    shapes = {frozenset([(0, 0)])}
    for _ in range(n - 1):
        grown = set()
        for shape in shapes:
            for q, r in shape:
                for dq, dr in DIRECTIONS:
                    cell = (q + dq, r + dr)
                    if cell not in shape:
                        grown.add(_normalise(shape | {cell}))
        shapes = grown
    return shapes


def _normalise(cells) -> frozenset:
    mq = min(q for q, _ in cells)
    mr = min(r for _, r in cells)
    return frozenset((q - mq, r - mr) for q, r in cells)


def region_at_edge(t: int, edge: int) -> str:
    """The rules' table: blue tip touches edges c, c+1; body touches c+2..c+5 (c = 2t)."""
    c = 2 * t
    return "tip" if (edge - c) % 6 in (0, 1) else "body"


def creatures_on(cells: frozenset, rotation: dict) -> list[frozenset]:
    """Closed blue creatures passing through every cell, as sets of (cell, t, region)."""
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    open_regions = set()
    for cell in cells:
        t = rotation[cell]
        for edge, (dq, dr) in enumerate(DIRECTIONS):
            mine = (cell, region_at_edge(t, edge))
            find(mine)
            other = (cell[0] + dq, cell[1] + dr)
            if other in cells:
                theirs = (other, region_at_edge(rotation[other], (edge + 3) % 6))
                parent[find(mine)] = find(theirs)
            else:
                open_regions.add(mine)
    components: dict = {}
    for region in list(parent):
        components.setdefault(find(region), set()).add(region)
    found = []
    for regions in components.values():
        if regions & open_regions:
            continue
        if {cell for cell, _ in regions} != set(cells):
            continue
        found.append(frozenset((cell, rotation[cell], kind) for cell, kind in regions))
    return found


def fixed_creatures(n: int) -> set[frozenset]:
    result = set()
    for cells in polyhexes(n):
        order = sorted(cells)
        for rotations in itertools.product(range(3), repeat=n):
            result.update(creatures_on(cells, dict(zip(order, rotations))))
    return result


def _direction_map(images: tuple[int, int]):
    """The linear map on axial coordinates sending directions 0 and 1 to the given directions."""
    (a, c), (b, d) = DIRECTIONS[images[0]], DIRECTIONS[images[1]]
    # columns: images of d0 = (1, -1) and d1 = (1, 0); solve for images of the unit vectors
    # e_q = d1, e_r = d1 - d0
    eq = (b, d)
    er = (b - a, d - c)
    return lambda q, r: (q * eq[0] + r * er[0], q * eq[1] + r * er[1])


def symmetries():
    """The six colour-preserving symmetries as (map on cells, map on rotations)."""
    result = []
    for reflect in (False, True):
        for turns in range(3):

            def direction(k, reflect=reflect, turns=turns):
                k = (1 - k) % 6 if reflect else k
                return (k + 2 * turns) % 6

            cell_map = _direction_map((direction(0), direction(1)))

            # the tip corner 2t moves like a corner: reflection sends corner k to -k
            def rot_map(t, reflect=reflect, turns=turns):
                corner = (-2 * t) % 6 if reflect else 2 * t
                return ((corner + 2 * turns) % 6) // 2

            result.append((cell_map, rot_map))
    return result


def normalise_creature(creature: frozenset) -> frozenset:
    mq = min(cell[0] for cell, _, _ in creature)
    mr = min(cell[1] for cell, _, _ in creature)
    return frozenset(((q - mq, r - mr), t, kind) for (q, r), t, kind in creature)


def free_classes(creatures: set[frozenset]) -> set[frozenset]:
    """Orbits under D3, each as a frozenset of normalised creatures."""
    syms = symmetries()
    orbits = set()
    for creature in creatures:
        orbit = frozenset(
            normalise_creature(frozenset((cell_map(*cell), rot_map(t), kind) for cell, t, kind in creature))
            for cell_map, rot_map in syms
        )
        orbits.add(orbit)
    return orbits
