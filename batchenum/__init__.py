"""batchenum from Python: run a job, get its tables.

>>> import tempfile, batchenum
>>> out = tempfile.mkdtemp()
>>> result = batchenum.run("palago", max_n=8, out=out, serial=True)
>>> result.summary
'palago: n = 1..8, free(8) = 2, fixed(8) = 12, 213 search nodes'
>>> result.tables["creature_counts"].rows
8
>>> result.tables["creature_counts"].to_pandas()[["n", "free"]].tail(2).to_dict("list")  # OEIS A325936
{'n': [7, 8], 'free': [2, 2]}

A batch job takes its records from a file or folder path, a URI, a pandas DataFrame or an Arrow
table (columns ``id`` and the job's payload field):

>>> import pandas as pd
>>> grids = pd.DataFrame({"id": ["a", "b"], "grid": [["@$"], ["@#$"]]})
>>> answers = batchenum.run("dungeons", input=grids, out=out, serial=True).tables["answers"]
>>> answers.to_pandas()[["id", "gold"]].to_dict("list")
{'id': ['a', 'b'], 'gold': [1, 0]}

The CLI (``batchenum run ...``) and this function run the same code; docs/api.md says more.
"""

from __future__ import annotations

__all__ = ["run", "Result", "Table", "job_names", "__version__"]


def __getattr__(name: str):
    """``run``, ``Result``, ``Table`` and ``job_names`` from batchenum.api on first use: a Ray worker
    that unpickles a job imports batchenum for its package, and needs neither the executor nor
    the CLI."""
    if name in ("run", "Result", "Table", "job_names"):
        from batchenum import api

        return getattr(api, name)
    raise AttributeError(f"module 'batchenum' has no attribute {name!r}")


from batchenum.jobs import __version__  # noqa: E402  (one version source: the installed package's metadata)
