"""The redactor's CPU per turn (question and answer) on the development data, several trees.

    python bench/redaction.py [--rounds 5] [--items 150] [--tree DIR ...]

Redacts the question and the answer of the first ``--items`` items of each of
``data/hallucination/dev_en.jsonl`` and ``dev_ja.jsonl`` with the default ``Redactor`` (what the
store and the results topic get by default) and prints the CPU microseconds per turn, the best of
``--rounds`` passes (``time.process_time``). Each ``--tree DIR`` (a source tree, e.g. ``git
archive`` of an older commit unpacked) is timed in its own process, the trees taking turns round
by round so that they share the machine's load; compare the ratios. Every process also prints a
digest of what it redacted: trees whose digests match produced the same text. Without ``--tree``
this checkout is timed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "hallucination"


def turns(items: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in ("dev_en.jsonl", "dev_ja.jsonl"):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines()[:items]:
            item = json.loads(line)
            out.append((item["question"] or "", item["answer"] or ""))
    return out


def worker(tree: Path, items: int, passes: int) -> None:
    """Prints one JSON line: microseconds per turn (best pass) and the digest of the output."""
    sys.path.insert(0, str(tree))
    from monitor.evaluators.redaction import Redactor

    redactor = Redactor()
    texts = [text for turn in turns(items) for text in turn]
    best = float("inf")
    for _ in range(passes):
        started = time.process_time()
        redacted = [redactor.redact(text) for text in texts]
        best = min(best, time.process_time() - started)
    digest = hashlib.sha256("\x00".join(redacted).encode()).hexdigest()[:12]
    print(json.dumps({"us_per_turn": best * 1e6 / (len(texts) / 2), "digest": digest}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--items", type=int, default=150, help="items per language")
    parser.add_argument("--passes", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.items, args.passes)
        return 0
    trees = [t.resolve() for t in args.tree] or [REPO]
    runs: dict[Path, list[float]] = {t: [] for t in trees}
    digests: dict[Path, str] = {}
    for round_ in range(args.rounds):
        order = trees if round_ % 2 == 0 else trees[::-1]
        for tree in order:
            out = subprocess.run(
                [sys.executable, __file__, "--worker", str(tree), "--items", str(args.items)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            result = json.loads(out.strip().splitlines()[-1])
            runs[tree].append(result["us_per_turn"])
            digests[tree] = result["digest"]
    print(f"redaction of {2 * args.items} turns (question + answer), best of 5 passes a round")
    first = min(runs[trees[0]])
    for tree in trees:
        per_round = ", ".join(f"{v:.1f}" for v in runs[tree])
        print(
            f"{tree!s:<40} {min(runs[tree]):7.1f} us/turn (rounds {per_round}) "
            f"x{first / min(runs[tree]):.2f} of the first tree's speed, digest {digests[tree]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
