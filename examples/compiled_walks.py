"""Self-avoiding walks (examples/walks.py) counted with a numba kernel under the nodes of depth
``COMPILED_DEPTH`` (the compiled hook, docs/jobs.md), in a file of its own, so that the pure-Python
job does not import numba (0.3 s in the driver and in every worker before its first shard).

batchenum run examples/compiled_walks.py:CompiledWalks --n 16 --out results
"""

import numpy as np
from numba import njit
from walks import Walks


class CompiledWalks(Walks):
    """Walks, with a numba kernel counting each subtree below ``COMPILED_DEPTH`` steps at once."""

    name = "compiled_walks"
    COMPILED_DEPTH = 4

    def count_subtree(self, walk):
        if len(walk) - 1 < self.COMPILED_DEPTH:
            return None  # the skeleton walks the top of the tree, and splits it
        side = 2 * self.n + 3
        visited = np.zeros((side, side), dtype=np.bool_)
        for x, y in walk:
            visited[x + self.n + 1, y + self.n + 1] = True
        x, y = walk[-1]
        return _count_walks(visited, x + self.n + 1, y + self.n + 1, self.n - (len(walk) - 1))


@njit(cache=True)
def _count_walks(visited, x, y, steps):
    """(leaves, nodes) of the walks continuing from (x, y) for up to ``steps`` more steps.

    visited: (side, side) bool, the points taken (the current one included), restored on return.
    A depth-first search on an explicit stack of (x, y, next direction to try)."""
    dx = np.array([1, -1, 0, 0])
    dy = np.array([0, 0, 1, -1])
    xs = np.empty(steps + 1, np.int64)
    ys = np.empty(steps + 1, np.int64)
    tried = np.zeros(steps + 1, np.int64)
    xs[0], ys[0], depth = x, y, 0
    leaves, nodes = 0, 1
    if steps == 0:
        return 1, 1
    while depth >= 0:
        if tried[depth] == 4:
            if depth > 0:
                visited[xs[depth], ys[depth]] = False
            depth -= 1
            continue
        d = tried[depth]
        tried[depth] += 1
        nx, ny = xs[depth] + dx[d], ys[depth] + dy[d]
        if visited[nx, ny]:
            continue
        nodes += 1
        if depth + 1 == steps:
            leaves += 1
            continue
        depth += 1
        xs[depth], ys[depth], tried[depth] = nx, ny, 0
        visited[nx, ny] = True
    return leaves, nodes
