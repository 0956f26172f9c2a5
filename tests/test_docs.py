"""The README is a front door and the reference lives in docs/: these tests keep both honest.

They check that the README stays short, that every relative link in the README and docs/ leads
to a file (and heading) that exists, and that the reference tables list what the code has.
"""

from __future__ import annotations

import re
from pathlib import Path

from monitor.models import Trace

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to -."""
    anchors = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        match = re.match(r"#+ (.+)", line)
        if match:
            title = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            anchors.add(title.replace(" ", "-"))
    return anchors


def test_the_readme_is_a_front_door_under_300_lines() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300


def test_every_relative_link_leads_to_a_file_and_heading_that_exist() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []


def test_the_trace_format_table_lists_exactly_the_trace_model_fields() -> None:
    page = (REPO / "docs" / "input.md").read_text(encoding="utf-8")
    table = page.split("### Native JSON traces", 1)[1].split("\n### ", 1)[0]
    documented = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            documented |= set(re.findall(r"`(\w+)(?:\{[^`]*\})?`", line.split(" | ", 1)[0]))
    assert documented == set(Trace.model_fields)


def test_the_readme_names_no_setting_that_does_not_exist() -> None:
    """The README's short settings table is a subset of the reference."""
    reference = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    named = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            named |= set(re.findall(r"`([a-z_]+\.[a-z_.]+)`", line.split(" | ", 1)[0]))
    assert named, "the README's settings table is empty"
    missing = {key for key in named if f"`{key}`" not in reference}
    assert missing == set()
