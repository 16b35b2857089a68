"""The jobs: each puzzle solver wired into the pipeline."""

# Every source file of these packages goes into the code version of every job's shards.
CODE_PACKAGES = ("jobs", "pipeline", "solvers")
