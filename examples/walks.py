"""Self-avoiding walks on the square lattice, counted by a search tree (docs/jobs.md), in pure
Python; examples/compiled_walks.py counts them with a numba kernel below the top of the tree.

batchenum run examples/walks.py:Walks --n 12 --out results
"""

from batchenum.pipeline.job import Param
from batchenum.pipeline.skeletons import TreeJob


class Walks(TreeJob):
    """Count the walks of n steps that never visit a point twice (OEIS A001411)."""

    name = "walks"
    version = "1"
    n = Param(int, default=10, low=1, high=30, help="steps of a walk")

    def root(self):
        return ((0, 0),)  # a node: the points a walk visits, in order

    def children(self, walk):
        if len(walk) > self.n:
            return []
        x, y = walk[-1]
        return [walk + (p,) for p in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)) if p not in walk]

    def is_leaf(self, walk):
        return len(walk) == self.n + 1


if __name__ == "__main__":
    import sys

    import batchenum

    print(batchenum.run(Walks, n=int(sys.argv[1]) if len(sys.argv) > 1 else 10, out="results-python").summary)
