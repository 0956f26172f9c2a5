"""Japanese matching units for tier 0: character bigrams against morphological analysers.

    pip install -e '.[bench]'        # SudachiPy + sudachidict_core, fugashi + unidic-lite
    python bench/ja_tokenizers.py [--repeats 3] [--boot 1000]

Tier 0 matches Japanese text by character bigrams of kanji and katakana runs (no dependency).
This bench swaps those units for the content words (nouns, verbs, adjectives, adverbs; their
dictionary forms) of a morphological analyser -- SudachiPy in split modes A and C, fugashi with
unidic-lite -- and cross-validates tier 0's support on the Japanese dev data (JHARS) under the
same grouped folds as bench/detect.py, the grounding model refitted per fold, with the CPU time
per trace. Analysers that are not installed are skipped with a note.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import monitor.evaluators.text as text_module  # noqa: E402
from bench.detect import DEFAULT_DATA, cross_validate, learned_support, load_items  # noqa: E402
from monitor.evaluators.grounding import load_model  # noqa: E402
from monitor.evaluators.heuristic import HeuristicEvaluator  # noqa: E402

CONTENT_POS = frozenset({"名詞", "動詞", "形容詞", "形状詞", "副詞"})
SKIPPED_SUBTYPES = frozenset({"非自立可能", "代名詞", "数詞"})
_JAPANESE_RUN = re.compile(f"[{text_module._HIRA}{text_module._KATA}{text_module._KANJI}\u30fc]+")
_BIGRAMS = text_module._content_tokens_cached

Units = Callable[[str], list[str]]


def sudachi(mode: str) -> Units:
    from sudachipy import Dictionary, SplitMode

    tokenizer = Dictionary(dict="core").tokenizer()
    split = getattr(SplitMode, mode)

    def units(run: str) -> list[str]:
        out = []
        for m in tokenizer.tokenize(run, split):
            pos = m.part_of_speech()
            if pos[0] in CONTENT_POS and pos[1] not in SKIPPED_SUBTYPES:
                out.append(m.normalized_form())
        return out

    return units


def fugashi_units() -> Units:
    import fugashi

    tagger = fugashi.Tagger()

    def units(run: str) -> list[str]:
        return [
            w.feature.lemma or w.surface
            for w in tagger(run)
            if w.feature.pos1 in CONTENT_POS and w.feature.pos2 not in SKIPPED_SUBTYPES
        ]

    return units


def install(units: Units | None) -> None:
    """Make tier 0 match Japanese runs by `units` (None: the shipped character bigrams)."""
    if units is None:
        text_module._content_tokens_cached = _BIGRAMS
        _BIGRAMS.cache_clear()
        return
    plain = _BIGRAMS.__wrapped__

    @lru_cache(maxsize=4096)
    def tokens(text: str) -> tuple[str, ...]:
        norm = text_module._RE_THOUSANDS.sub("", text_module.normalize(text))
        out: list[str] = []
        pos = 0
        for m in _JAPANESE_RUN.finditer(norm):
            out.extend(plain(norm[pos : m.start()]))
            out.extend(units(m.group(0)))
            pos = m.end()
        out.extend(plain(norm[pos:]))
        return tuple(out)

    text_module._content_tokens_cached = tokens  # type: ignore[assignment]


def candidates() -> dict[str, Callable[[], Units | None]]:
    return {
        "character bigrams (shipped)": lambda: None,
        "SudachiPy mode C": lambda: sudachi("C"),
        "SudachiPy mode A": lambda: sudachi("A"),
        "fugashi + unidic-lite": fugashi_units,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--boot", type=int, default=1000)
    args = parser.parse_args(argv)
    print("JHARS (dev_ja.jsonl), tier-0 support, grouped 5-fold CV by question (mean [95% CI]):")
    for name, make in candidates().items():
        try:
            units = make()
        except ImportError as exc:
            print(f"  {name:<28} skipped: {exc.name} not installed (pip install -e '.[bench]')")
            continue
        install(units)
        items = load_items(DEFAULT_DATA)  # English too: the model needs both languages
        rep = cross_validate(
            items,
            {"support": learned_support},
            repeats=args.repeats,
            n_boot=args.boot,
            evaluator=HeuristicEvaluator(model=load_model()),
        )
        row = rep.groups["JHARS / QA"]
        lo, hi = row.ci["support"]
        cpu = statistics.median(it.ms for it in items if it.group == "JHARS / QA")
        print(
            f"  {name:<28} AUROC {row.mean['support']:.3f} [{lo:.3f}-{hi:.3f}]"
            f"   CPU per JHARS trace p50 {cpu:.2f} ms"
        )
    install(None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
