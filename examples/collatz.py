"""A record batch: the Collatz trajectory of every number of a batch (docs/jobs.md).

    batchenum run examples/collatz.py:Collatz --input numbers.jsonl --out results
    python examples/collatz.py           # from Python, on a DataFrame

Each record is {"id": ..., "n": ...}; a record whose n is not a whole number of at least 1 gets a
row of the errors table with the reason, and read = answered + rejected.
"""

from batchenum.pipeline.job import Column, Param
from batchenum.pipeline.skeletons import RecordJob


class Collatz(RecordJob):
    """Steps to reach 1, and the highest value on the way, for every number of a batch."""

    name = "collatz"
    version = "1"
    field = "n"
    answer_columns = (Column("steps", "int64"), Column("peak", "int64"))
    max_steps = Param(int, default=10_000, low=1, help="give up (an error row) after this many steps")

    def answer(self, n):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a whole number of at least 1, not {n!r}")
        steps, peak = 0, n
        while n != 1:
            n = 3 * n + 1 if n % 2 else n // 2
            steps, peak = steps + 1, max(peak, n)
            if steps > self.max_steps:
                raise ValueError(f"more than {self.max_steps} steps (raise --max-steps)")
        return {"steps": steps, "peak": peak}


if __name__ == "__main__":
    import pandas as pd

    import batchenum

    numbers = pd.DataFrame({"id": ["a", "b", "c", "d"], "n": [1, 6, 27, -5]})
    result = batchenum.run(Collatz, input=numbers, out="results-python")
    print(result.summary)
    print(result.tables["answers"].to_pandas()[["id", "steps", "peak"]].to_string(index=False))
