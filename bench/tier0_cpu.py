"""Tier 0's CPU time per trace, English and Japanese, on the labelled dev traces.

    python bench/tier0_cpu.py [--rounds 3] [--tree DIR ...]

Scores every trace of ``data/hallucination/dev_en.jsonl`` and ``dev_ja.jsonl`` with the
heuristic evaluator, timing each with ``time.thread_time`` (CPU time of the scoring thread:
other processes on a shared machine do not inflate it), and prints p50 and p95 per language in
two settings:

- ``stream``: a fresh process scores the dev traces in file order, its caches filling as a
  daemon's do. Several answers share each source document there (RAGTruth's models, JHARS's
  questions), as popular documents recur in production.
- ``cold``: every cache of ``monitor.evaluators`` keyed by a text (a context's reading, a
  sentence's tokens, a language) is emptied before each trace: what a trace costs when none of
  its texts was seen before. The caches keyed by a word or a number (:data:`WORD_CACHES`) stay
  warm, as they are in a daemon that has run a while, and so does the fastText model.

For ``stream`` it also prints the p50 of the traces that read no new context (every context's
reading kept from an earlier trace) and of those that read one: the two groups' costs differ
about twofold, and the p50 of all falls between them.

Each ``--tree DIR`` (a source tree, e.g. ``git archive`` of an older commit unpacked) is timed
too, in its own processes; the trees take turns round by round so they share the machine's load,
and the ratios between them are the figures to compare (a tree as old as issue 26's start,
dbcdfd7, is timed too, without the split by contexts read). Every process also prints a digest of
every result it produced (latency aside): trees whose digests match scored every trace alike.
Without ``--tree`` this checkout is timed.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "hallucination"
LANGUAGES = {"en": "dev_en.jsonl", "ja": "dev_ja.jsonl"}
MODES = ("stream", "cold")


# ---------------------------------------------------------------------------------------------
# Worker: one process, one tree, one mode. Imports `monitor` from the tree it is given.


WORD_CACHES = frozenset({"stem", "_word_token", "_name_key"})


def _clear_caches(keep: frozenset[str] = frozenset()) -> Callable[[], None]:
    """A function that empties every cache of monitor.evaluators but those named in `keep` and
    the unbounded one that holds the fastText model."""
    import importlib
    import pkgutil

    import monitor.evaluators as package

    caches: dict[int, Any] = {}  # a cached function imported by other modules counts once
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            params = getattr(value, "cache_parameters", None)
            unbounded = params is not None and params()["maxsize"] is None
            clearable = callable(getattr(value, "cache_clear", None)) and not unbounded
            if clearable and getattr(value, "__name__", "") not in keep:
                caches[id(value)] = value

    def clear() -> None:
        for cache in caches.values():
            cache.cache_clear()

    return clear


def dev_traces() -> list[tuple[str, Any]]:
    """(language, Trace) of every labelled dev item, English first, in file order."""
    from datetime import UTC, datetime

    from monitor.models import Context, Trace

    epoch = datetime(2025, 1, 1, tzinfo=UTC)
    traces: list[tuple[str, Any]] = []
    for language, name in LANGUAGES.items():
        with (DATA / name).open(encoding="utf-8") as fh:
            for row in map(json.loads, filter(str.strip, fh)):
                contexts = [
                    Context(id=f"{row['id']}#{i}", text=text, rank=i)
                    for i, text in enumerate(row.get("contexts") or [])
                ]
                trace = Trace(trace_id=row["id"], timestamp=epoch, query=row.get("question") or "",
                              contexts=contexts, answer=row.get("answer") or "",
                              language=row.get("lang"))  # fmt: skip
                traces.append((language, trace))
    return traces


def _contexts_read_before(evaluator: Any) -> Callable[[Any], bool] | None:
    """Whether every context of a trace has a reading kept from an earlier trace (none to
    read): `stream`'s traces fall in two groups, those that read a new context and the rest.
    None for a tree older than that cache (issue 26's start): its traces are not split."""
    try:
        from monitor.evaluators import context_text
    except ImportError:
        return None

    p = evaluator.params
    span = p.pair_span if p.pair_weight else 0

    def known(trace: Any) -> bool:
        texts = [c.text for c in trace.contexts if c.text.strip()]
        return all((text, p.window, span) in context_text._CACHE for text in texts)

    return known


def worker(mode: str) -> dict[str, Any]:
    from monitor.evaluators.heuristic import HeuristicEvaluator

    traces = dev_traces()
    evaluator = HeuristicEvaluator()
    read_before = _contexts_read_before(evaluator)
    clear = _clear_caches(keep=WORD_CACHES) if mode == "cold" else None
    gc.collect()
    gc.freeze()  # as the daemon does once it consumes
    ms: dict[str, list[float]] = {language: [] for language in LANGUAGES}
    known: dict[str, list[bool]] = {language: [] for language in LANGUAGES}
    outputs = hashlib.sha256()
    for language, trace in traces:
        if clear is not None:
            clear()
        if read_before is not None:
            known[language].append(read_before(trace))
        started = time.thread_time()
        result = evaluator.evaluate(trace)
        ms[language].append((time.thread_time() - started) * 1000.0)
        outputs.update(result.model_dump_json(exclude={"latency_ms"}).encode())
    return {"ms": ms, "known": known, "digest": outputs.hexdigest()[:16]}


# ---------------------------------------------------------------------------------------------
# Driver


def run_worker(tree: Path, mode: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, __file__, "--worker", mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (pos - lo) * (ordered[hi] - ordered[lo])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per tree and mode")
    parser.add_argument("--tree", type=Path, action="append", default=[], help="also time DIR")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return 0
    trees = [tree.resolve() for tree in args.tree] or [REPO]
    if args.tree and REPO not in trees:
        trees.append(REPO)
    ms: dict[tuple[Path, str, str], list[float]] = {}
    # stream's traces by whether they read a new context: (tree, language, read one) -> ms
    split: dict[tuple[Path, str, bool], list[float]] = {}
    digests: dict[tuple[Path, str], set[str]] = {}
    for _ in range(args.rounds):
        for mode in MODES:
            for tree in trees:
                found = run_worker(tree, mode)
                digests.setdefault((tree, mode), set()).add(found["digest"])
                for language, values in found["ms"].items():
                    ms.setdefault((tree, mode, language), []).extend(values)
                    if mode == "stream" and found["known"][language]:
                        for value, known in zip(values, found["known"][language], strict=True):
                            split.setdefault((tree, language, not known), []).append(value)
    print(f"tier 0 CPU per trace (thread time, ms) on the dev traces, {args.rounds} processes "
          "per tree and mode; trees took turns")  # fmt: skip
    print(f"{'tree':<40} {'mode':<7} {'lang':<4} {'n':>5} {'p50':>7} {'p95':>7} {'mean':>7}")
    for tree in trees:
        for mode in MODES:
            for language in LANGUAGES:
                values = ms[(tree, mode, language)]
                print(f"{str(tree)[-40:]:<40} {mode:<7} {language:<4} {len(values):>5} "
                      f"{percentile(values, 0.5):7.3f} {percentile(values, 0.95):7.3f} "
                      f"{sum(values) / len(values):7.3f}")  # fmt: skip
    print("stream, p50 (ms) of the traces that read no new context | of those that read one")
    for tree in trees:
        for language in LANGUAGES:
            cached, new = (
                split.get((tree, language, False), []),
                split.get((tree, language, True), []),
            )
            print(f"{str(tree)[-40:]:<40} {language:<4} "
                  f"{len(cached):>5} {percentile(cached, 0.5) if cached else 0.0:7.3f} | "
                  f"{len(new):>5} {percentile(new, 0.5) if new else 0.0:7.3f}")  # fmt: skip
    if len(trees) > 1:
        base = trees[0]
        for tree in trees[1:]:
            for mode in MODES:
                for language in LANGUAGES:
                    a, b = ms[(base, mode, language)], ms[(tree, mode, language)]
                    print(f"{tree.name} / {base.name}, {mode} {language}: p50 "
                          f"{percentile(b, 0.5) / percentile(a, 0.5):.2f}x, p95 "
                          f"{percentile(b, 0.95) / percentile(a, 0.95):.2f}x")  # fmt: skip
    every = {d for found in digests.values() for d in found}
    print(f"outputs: {'identical in every process' if len(every) == 1 else 'DIFFER'} "
          f"({', '.join(sorted(every))})")  # fmt: skip
    return 0 if len(every) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
