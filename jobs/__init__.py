"""The jobs: each puzzle solver wired into the pipeline."""

from importlib import metadata

# Every source file of these packages goes into the code version of every job's shards.
CODE_PACKAGES = ("batchenum.jobs", "batchenum.pipeline", "batchenum.solvers")

try:  # the one version source is pyproject.toml's, as installed
    __version__ = metadata.version("batchenum")
except metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "unknown"

from batchenum.pipeline.registry import JobRegistry  # noqa: E402

# Every job of this package (a module's ``JOB``) and of installed packages (the entry-point group
# ``batchenum.jobs``), and the modules' ``COMMANDS``: read by the CLI, batchenum.run and warm.
REGISTRY = JobRegistry(__name__)
