"""A canonical form for door graphs: the same for any two door lists that differ only in the order
of their doors and the names of their rooms (room 0 and the exit -1 keep their names).

Rooms are labelled by colour refinement (a room's colour is refined by the numbers and colours at
the other end of its doors until it stops splitting), and where rooms stay alike, by trying each
in turn first (individualisation) and keeping the smallest encoding.  A graph so symmetric that
this would try more than ``max_leaves`` labellings gets a weaker key that only ignores door order;
such a graph is still solved correctly, only possibly more than once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .parse import EXIT, Door
from .solve import SolveTimeout

__all__ = ["canonical_form"]

_MAX_LEAVES = 64

Colours = dict[int, int]


def _refine(colours: Colours, incident: dict[int, list[tuple[str, int, int]]], deadline: float | None) -> Colours:
    """Split colour classes by each room's doors (kind, number, colour at the other end) until
    stable; colours stay ordered as before (a room's old colour leads its signature).  A long
    chain of rooms needs as many rounds as rooms, so every round looks at the clock."""
    while True:
        signature = {
            room: (colours[room], tuple(sorted((kind, n, colours.get(other, EXIT)) for kind, n, other in doors)))
            for room, doors in incident.items()
        }
        rank = {sig: i for i, sig in enumerate(sorted(set(signature.values())))}
        refined = {room: rank[sig] for room, sig in signature.items()}
        if len(rank) == len(set(colours.values())):
            return refined
        if deadline is not None and time.monotonic() > deadline:  # another round is needed
            raise SolveTimeout(0, stage="preparation")
        colours = refined


def _encode(doors: Sequence[Door], colours: Colours) -> tuple[Door, ...]:
    """The door list under a discrete colouring (colour = new room label), sorted."""
    return tuple(sorted((n, colours[a], EXIT if b == EXIT else colours[b]) for n, a, b in doors))


def _leaves(doors: Sequence[Door], colours: Colours, incident, budget: list[int], deadline: float | None):
    """Every discrete colouring reachable by individualising rooms of the first non-singleton
    class; ``budget`` (a one-item list) counts down the leaves still allowed, and is set to -1
    when there were more."""
    classes: dict[int, list[int]] = {}
    for room, colour in colours.items():
        classes.setdefault(colour, []).append(room)
    tied = [rooms for colour, rooms in sorted(classes.items()) if len(rooms) > 1]
    if not tied:
        if budget[0] == 0:
            budget[0] = -1  # one leaf too many: the search is cut short
            return
        budget[0] -= 1
        yield colours
        return
    for room in sorted(tied[0]):
        if budget[0] < 0:
            return
        split = {r: 2 * c + (0 if r == room else 1) for r, c in colours.items()}
        yield from _leaves(doors, _refine(split, incident, deadline), incident, budget, deadline)


def canonical_form(
    doors: Sequence[Door], max_leaves: int = _MAX_LEAVES, deadline: float | None = None
) -> tuple[tuple, list[int]]:
    """(key, order) for a checked door list ``doors``; raises SolveTimeout (stage "preparation")
    when ``time.monotonic()`` passes ``deadline`` (None: no deadline) before it is done.

    key:   hashable; equal for door lists equal up to door order and room names.  It is
           ``("graph", doors)`` with ``doors`` the canonical door list, or ``("doors", doors)`` (the
           sorted door list, room names kept) for a graph too symmetric to label within
           ``max_leaves`` tries.
    order: ``order[j]`` is the index in ``doors`` of the door at position ``j`` of the key's list,
           so that a plan over the canonical list maps back with ``order``.
    """
    incident: dict[int, list[tuple[str, int, int]]] = {0: []}
    for n, a, b in doors:
        incident.setdefault(a, []).append(("out", n, b))
        if b != EXIT:
            incident.setdefault(b, []).append(("in", n, a))
    colours = _refine({room: 0 if room == 0 else 1 for room in incident}, incident, deadline)
    budget = [max_leaves]
    best = None
    for leaf in _leaves(doors, colours, incident, budget, deadline):
        encoded = _encode(doors, leaf)
        if best is None or encoded < best[0]:
            best = (encoded, leaf)
    if budget[0] < 0 or best is None:
        kind, labels = "doors", {room: room for room in incident}
    else:
        kind, labels = "graph", best[1]
    relabelled = [(n, labels[a], EXIT if b == EXIT else labels[b]) for n, a, b in doors]
    order = sorted(range(len(doors)), key=lambda i: relabelled[i])
    return (kind, tuple(relabelled[i] for i in order)), order
