"""Code comments keep the why and point to the figures in docs/ (``docs/benchmarks.md#heading``):
every such pointer in the package's source must reach an existing page and heading.  Plain file
reads, no Ray."""

from __future__ import annotations

import pathlib
import re

from helpers import markdown_anchors

REPO = pathlib.Path(__file__).resolve().parents[1]
POINTER = re.compile(r"docs/([\w.-]+\.md)#([\w-]+)")


def _pointers() -> list[tuple[str, str, str]]:
    found = []
    sources = [
        *REPO.glob("batchenum/*.py"),
        *(path for top in ("jobs", "pipeline", "solvers") for path in (REPO / top).rglob("*.py")),
    ]
    for path in sorted(sources):
        text = path.read_text(encoding="utf-8")
        found += [(str(path.relative_to(REPO)), page, anchor) for page, anchor in POINTER.findall(text)]
    return found


def test_comment_pointers_reach_a_page_and_a_heading():
    pointers = _pointers()
    assert len(pointers) >= 20  # the figures moved out of comments (issue 39) point there
    broken = [
        f"{source}: docs/{page}#{anchor}"
        for source, page, anchor in pointers
        if not (REPO / "docs" / page).is_file() or anchor not in markdown_anchors(REPO / "docs" / page)
    ]
    assert not broken, "comments point to missing headings:\n" + "\n".join(broken)
