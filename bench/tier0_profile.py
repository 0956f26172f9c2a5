"""Where tier 0's CPU goes on the traces in the middle of the distribution, by kind of work.

    py-spy record -r 400 -f raw -o tier0.raw -- python bench/tier0_profile.py [--passes 25]
    python bench/tier0_profile.py --report tier0.raw

The first command scores the English dev traces (``--lang ja``: Japanese) in file order
``--passes`` times, every cache keyed by a text emptied before each pass as
``bench/tier0_cpu.py``'s ``stream`` setting fills them (the word caches stay warm). The traces
between p30 and p70 of a first timed pass are scored through a function of their own,
``band_eval``, so their samples can be told apart; ``--report`` sums py-spy's raw samples under
it into kinds of work (a sample counts once: language identification wherever it is called,
then the claims' support by its parts, the claims' other checks, the rest by step).
Another checkout is profiled with its tree first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections import Counter
from pathlib import Path
from types import ModuleType


def _beside(name: str) -> ModuleType:
    """bench/`name`.py beside this file, whatever tree `monitor` (and `bench`) come from."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tier0_cpu = _beside("tier0_cpu")
pyspy_raw = _beside("pyspy_raw")

BAND = (0.3, 0.7)
LANGUAGE = (
    ("language id: fastText", {"_predict"}),
    ("language id: the rules around it", {"identify", "identify_expecting", "mixes_scripts"}),
)
CLAIM_SUPPORT = (  # within score_statement
    ("tokens", {"content_tokens", "tokenize"}),
    ("best window", {"_best_window"}),
    ("names and numbers", {"extract_entities"}),
    ("yes/no fields", {"YesNoFields.conflicts"}),
    ("acronyms", {"acronym_runs"}),
)
CLAIMS = (  # within HeuristicEvaluator.statements, outside score_statement
    ("refusal and filler checks", {"is_refusal_statement", "is_filler_statement"}),
    ("splitting the answer", {"split_sentences"}),
)
OTHERS = (
    ("reading new contexts", {"read_context"}),
    ("merging contexts, the question", {"ContextIndex.build"}),
    ("grounding features", {"HeuristicEvaluator._features"}),
    ("answer relevancy", {"HeuristicEvaluator._answer_relevancy"}),
    ("useful chunks", {"HeuristicEvaluator._useful_chunks"}),
    ("verdicts and the result", {"HeuristicEvaluator._verdict", "EvaluationResult.of_trace"}),
)


def _first(kinds: tuple[tuple[str, set[str]], ...], names: set[str], prefix: str = "") -> str:
    return next((prefix + kind for kind, functions in kinds if names & functions), "")


def kind_of(frames: list[str]) -> str:
    """The kind of work of one sample's stack (the frames under band_eval)."""
    names = {frame.split(" (")[0] for frame in frames}
    found = _first(LANGUAGE, names)
    if not found and "score_statement" in names:
        found = _first(CLAIM_SUPPORT, names, "claim support: ") or "claim support: the rest"
    if not found and "HeuristicEvaluator.statements" in names:
        found = _first(CLAIMS, names, "claims: ") or "claims: the rest"
    return found or _first(OTHERS, names) or "the rest of evaluate"


def drive(language: str, passes: int) -> None:
    from monitor.evaluators.heuristic import HeuristicEvaluator

    traces = [trace for lang, trace in tier0_cpu.dev_traces() if lang == language]
    evaluator = HeuristicEvaluator()
    clear = tier0_cpu._clear_caches(keep=tier0_cpu.WORD_CACHES)
    clear()
    spent = []
    for trace in traces:
        started = time.thread_time()
        evaluator.evaluate(trace)
        spent.append(time.thread_time() - started)
    order = sorted(range(len(traces)), key=spent.__getitem__)
    band = set(order[int(BAND[0] * len(order)) : int(BAND[1] * len(order))])

    def band_eval(trace: object) -> None:
        evaluator.evaluate(trace)  # type: ignore[arg-type]

    for _ in range(passes):
        clear()
        for i, trace in enumerate(traces):
            if i in band:
                band_eval(trace)
            else:
                evaluator.evaluate(trace)


def report(raw: Path) -> dict[str, float]:
    found: Counter[str] = Counter()
    for frames, count in pyspy_raw.stacks(raw):
        at = next((i for i, f in enumerate(frames) if "band_eval (" in f), None)
        if at is not None:
            found[kind_of(frames[at + 1 :])] += count
    total = sum(found.values())
    return {kind: round(100 * n / total, 1) for kind, n in found.most_common()} | {"samples": total}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=25)
    parser.add_argument("--lang", choices=tuple(tier0_cpu.LANGUAGES), default="en")
    parser.add_argument("--report", type=Path, help="sum a py-spy raw file by kind of work")
    args = parser.parse_args()
    if args.report:
        print(json.dumps(report(args.report), indent=1))
    else:
        drive(args.lang, args.passes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
