"""N-queens counted by a prefix split: the search-tree skeleton (docs/jobs.md).

batchenum run examples/queens.py:Queens --n 10 --out results
python examples/queens.py 8          # the same from Python
"""

from batchenum.pipeline.job import Param
from batchenum.pipeline.skeletons import TreeJob


class Queens(TreeJob):
    """Count the ways to place n non-attacking queens, and the distinct ones up to symmetry."""

    name = "queens"
    version = "1"
    n = Param(int, default=8, low=1, high=16, help="board size and number of queens")

    def root(self):
        return ()  # no queen placed yet; a node is the column of the queen in each row so far

    def children(self, cols):
        row = len(cols)
        return [
            cols + (col,)
            for col in range(self.n)
            if all(col != c and abs(col - c) != row - r for r, c in enumerate(cols))
        ]

    def is_leaf(self, cols):
        return len(cols) == self.n

    def key(self, cols):
        """The smallest of the 8 symmetric images of the board: one key per distinct solution."""
        n, images = self.n, []
        board = list(cols)
        for _ in range(4):
            board = [board.index(n - 1 - r) for r in range(n)]  # a quarter turn
            images += [tuple(board), tuple(n - 1 - c for c in board)]  # and its mirror image
        return ",".join(map(str, min(images)))


if __name__ == "__main__":
    import sys

    import batchenum

    print(batchenum.run(Queens, n=int(sys.argv[1]) if len(sys.argv) > 1 else 8, out="results-python").summary)
