"""`rag-monitor score`: score a file of native traces without Kafka (backfill, CI gates)."""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from monitor.models import EvaluationResult, Trace
from monitor.source.native import DecodeError, decode_native

MAX_LINE_BYTES = 16 * 1024 * 1024


@dataclass
class Summary:
    traces: int = 0
    rejected: int = 0
    scores: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    unmeasured: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)
    unsupported_statements: int = 0
    statements: int = 0

    def add(self, result: EvaluationResult) -> None:
        self.traces += 1
        for name, score in result.scores.items():
            if score.value is None:
                self.unmeasured[f"{name}: {score.reason}"] += 1
            else:
                self.scores[name].append(score.value)
        self.flags.update(result.flags)
        self.statements += len(result.statements)
        self.unsupported_statements += len(result.unsupported_claims)

    def render(self) -> str:
        lines = [f"scored {self.traces} traces ({self.rejected} rejected lines)"]
        for name, values in sorted(self.scores.items()):
            lines.append(f"  {name:<22} mean {sum(values) / len(values):.3f}  (n={len(values)})")
        if self.statements:
            lines.append(
                f"  unsupported statements {self.unsupported_statements} of {self.statements}"
            )
        for reason, count in sorted(self.unmeasured.items()):
            lines.append(f"  unmeasured {reason}: {count}")
        for flag, count in sorted(self.flags.items()):
            lines.append(f"  flag {flag}: {count}")
        return "\n".join(lines)


def read_traces(path: str, errors: IO[str]) -> tuple[list[Trace], int]:
    """Native traces of a JSONL file (`-` for stdin); bad lines are reported, not fatal."""
    stream = sys.stdin.buffer if path == "-" else Path(path).open("rb")  # noqa: SIM115
    traces: list[Trace] = []
    rejected = 0
    try:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            try:
                traces.append(decode_native(raw.rstrip(b"\r\n"), MAX_LINE_BYTES))
            except DecodeError as exc:
                rejected += 1
                errors.write(
                    json.dumps({"line": number, "reason": exc.reason, "error": exc.detail}) + "\n"
                )
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    return traces, rejected
