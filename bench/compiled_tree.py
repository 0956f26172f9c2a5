"""A compiled build of a commit, unpacked where the benches' ``--tree`` can time it.

    python bench/compiled_tree.py DIR [--rev REV]      # REV: default HEAD
    python bench/tier0_cpu.py --tree . --tree DIR       # tier 0 from its sources, then compiled
    python bench/ingest.py --tree DIR                   # the daemon with tier 0 compiled

Builds the wheel the image builds (HATCH_BUILD_HOOK_ENABLE_MYPYC=true: tier 0's modules compiled
by mypyc, pyproject.toml) from ``git archive REV`` in a temporary directory -- a compiled build
leaves its extension modules beside the sources it compiled, so never in this checkout -- and
unpacks it into DIR (emptied first). DIR then holds ``monitor`` as installed, which the benches put
first on the path; their data comes from this checkout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build(rev: str, out: Path) -> Path:
    """Unpack the compiled wheel of `rev` into `out`; returns the wheel's name."""
    with tempfile.TemporaryDirectory() as scratch:
        source, wheels = Path(scratch) / "src", Path(scratch) / "wheels"
        source.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels),
             str(source)],
            env={**os.environ, "HATCH_BUILD_HOOK_ENABLE_MYPYC": "true"},
            check=True,
        )  # fmt: skip
        (wheel,) = wheels.glob("rag_monitor-*.whl")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        with zipfile.ZipFile(wheel) as unpacked:
            unpacked.extractall(out)
        for extension in out.rglob("*.so"):  # zipfile does not keep the mode bits
            extension.chmod(0o755)
        return Path(wheel.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="where to unpack the build (emptied first)")
    parser.add_argument("--rev", default="HEAD", help="the commit to build (default HEAD)")
    args = parser.parse_args(argv)
    wheel = build(args.rev, args.dir.resolve())
    compiled = sorted(p.relative_to(args.dir) for p in args.dir.resolve().rglob("*.so"))
    print(f"{wheel} unpacked in {args.dir}: {len(compiled)} extension modules")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
