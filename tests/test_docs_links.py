"""The README and the pages under docs/ link to each other by relative paths and #anchors: every such
link must reach an existing file and, when it names one, a heading there; and every docs page must
be one click from the README.  Plain file reads, no Ray."""

from __future__ import annotations

import pathlib
import re

from helpers import markdown_anchors, markdown_prose

REPO = pathlib.Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_relative_links_reach_a_file_and_a_heading():
    broken = []
    for page in PAGES:
        for number, line in markdown_prose(page):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                destination = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(REPO)}:{number}: {target}"
                if not destination.is_file():
                    broken.append(f"{where} (no such file)")
                elif anchor and anchor not in markdown_anchors(destination):
                    broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = {(REPO / target.partition("#")[0]).resolve() for target in LINK.findall(readme)}
    missing = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"
