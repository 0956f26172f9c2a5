"""Reading py-spy's raw profiles (`py-spy record -f raw`): one line per distinct stack, its
frames joined by ';' (outermost first), then a space and the number of samples."""

from __future__ import annotations

from pathlib import Path


def stacks(path: Path) -> list[tuple[list[str], int]]:
    """Every stack of a raw profile with its samples."""
    found = []
    # split on newlines only: a frame's name may hold other line-breaking characters
    for line in path.read_text(errors="replace").split("\n"):
        frames, _, count = line.rpartition(" ")
        if frames:
            found.append((frames.split(";"), int(count)))
    return found
