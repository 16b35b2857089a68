"""The package list, found rather than kept by hand: pyproject.toml maps the top-level folders
pipeline/, jobs/ and solvers/ onto batchenum.pipeline, batchenum.jobs and batchenum.solvers, and
every folder below them with an __init__.py is a package of that name."""

from setuptools import find_packages, setup

FOLDERS = {"batchenum": "batchenum", "pipeline": "batchenum.pipeline", "jobs": "batchenum.jobs",
           "solvers": "batchenum.solvers"}


def packages() -> list[str]:
    return [name for folder, top in FOLDERS.items() for name in (top, *(f"{top}.{sub}" for sub in find_packages(folder)))]


if __name__ == "__main__":  # setuptools' build backend runs this file as __main__; tests import it
    setup(packages=packages())
