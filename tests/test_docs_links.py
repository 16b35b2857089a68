"""The README and the pages under docs/ link to each other by relative paths and #anchors: every such
link must reach an existing file and, when it names one, a heading there; and every docs page must
be one click from the README.  Plain file reads, no Ray."""

from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(path: pathlib.Path):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    return {_anchor(m.group(1)) for _, line in _prose(path) if (m := re.match(r"#{1,6}\s+(.*)", line))}


def test_relative_links_reach_a_file_and_a_heading():
    broken = []
    for page in PAGES:
        for number, line in _prose(page):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                destination = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(REPO)}:{number}: {target}"
                if not destination.is_file():
                    broken.append(f"{where} (no such file)")
                elif anchor and anchor not in _anchors(destination):
                    broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = {(REPO / target.partition("#")[0]).resolve() for target in LINK.findall(readme)}
    missing = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"
