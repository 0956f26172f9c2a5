"""Tier 0's outputs on every item of data/, as a fingerprint to hold changes of its speed to.

    python bench/tier0_fingerprint.py            # check against bench/tier0_fingerprint.json
    python bench/tier0_fingerprint.py --write    # record the current outputs (a scoring change)
    VENV/bin/python bench/tier0_fingerprint.py --installed   # the package VENV has installed

``--installed`` scores with the ``monitor`` the running Python has installed instead of this
checkout's: a wheel built with tier 0 compiled (pyproject.toml's mypyc hook) must score every
item as the sources do (tests/test_dockerfile.py runs it on the image's install steps).

Every labelled item of ``data/hallucination`` is scored by the heuristic evaluator: the dev
items as bench/detect.py reads them, and each WikiEval question's three answers over both of its
contexts. Around them, traces that reach the paths the dev items rarely take: the hand-written
short answers of 14 languages (``tests/fixtures/languages``) over English and Japanese contexts,
Japanese answers with an English sentence mixed in, and dev items without contexts, with
textless contexts, with an empty answer or unranked contexts. Every trace carries one constraint
of each kind, and the evaluator a must-not-contain list, so those checks are covered too.

An item's fingerprint is the SHA-256 of its whole result (every score and reason, flag,
statement verdict and constraint verdict; not the latency) and of the grounding evidence the
model scores support from (the claims' lexical support unrounded) -- floats as ``repr`` writes
them, so a change in the last bit shows. A work on tier 0's speed must leave
every one of them as it was (tests/test_tier0_fingerprint.py checks it); a change meant to move
scores rewrites the file with ``--write`` and says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
INSTALLED = __name__ == "__main__" and "--installed" in sys.argv[1:]
if not INSTALLED and str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import monitor  # noqa: E402
from monitor.compiled import MODULES, compiled_modules  # noqa: E402
from monitor.evaluators.heuristic import HeuristicEvaluator  # noqa: E402
from monitor.models import Constraint, Context, Trace  # noqa: E402

DATA = REPO / "data" / "hallucination"
SHORT_ANSWERS = REPO / "tests" / "fixtures" / "languages" / "short_answers.jsonl"
FINGERPRINT = Path(__file__).with_name("tier0_fingerprint.json")
MUST_NOT_CONTAIN = ("guarantee", "Internal use only", "保証")
EDGE_ITEMS = 20  # dev items per language given each edge-case variant
_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


def _rows(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _constraints(language: str | None) -> list[Constraint]:
    return [
        Constraint(id="lang", text="answer in the user's language", kind="language",
                   value=language or "en"),
        Constraint(id="sentences", text="three sentences at most", kind="max_sentences", value=3),
        Constraint(id="chars", text="short", kind="max_chars", value=300),
        Constraint(id="forbidden", text="no negations", kind="forbidden_terms",
                   value=["not", "ない"]),
        Constraint(id="required", text="say 'the'", kind="required_terms", value=["the"]),
        Constraint(id="bullets", text="a list", kind="format", value="bullets"),
        Constraint(id="json", text="json", kind="format", value="json"),
        Constraint(id="free", text="be polite"),
    ]  # fmt: skip


def _trace(
    trace_id: str,
    question: str,
    contexts: list[str],
    answer: str,
    language: str | None,
    *,
    ranked: bool = True,
    textless: int | None = None,
) -> Trace:
    return Trace(
        trace_id=trace_id,
        timestamp=_EPOCH,
        query=question,
        contexts=[
            Context(id=f"{trace_id}#{i}", text=text, rank=i if ranked else None)
            for i, text in enumerate(contexts)
        ],
        contexts_without_text=textless,
        answer=answer,
        language=language,
        constraints=_constraints(language),
    )


def traces() -> Iterator[Trace]:
    """Every trace the fingerprint covers, in a fixed order."""
    dev: dict[str, list[dict[str, Any]]] = {}
    for name in ("dev_en.jsonl", "dev_ja.jsonl"):
        dev[name] = _rows(DATA / name)
        for row in dev[name]:
            yield _trace(str(row["id"]), row.get("question") or "", row.get("contexts") or [],
                         row.get("answer") or "", row.get("lang"))  # fmt: skip
    for row in _rows(DATA / "wikieval_pairs_dev.jsonl"):
        for answer in ("answer", "ungrounded_answer", "poor_answer"):
            for context in ("context_v1", "context_v2"):
                yield _trace(f"{row['id']}/{answer}/{context}", row["question"], [row[context]],
                             row[answer], "en")  # fmt: skip
    en, ja = dev["dev_en.jsonl"], dev["dev_ja.jsonl"]
    for i, short in enumerate(_rows(SHORT_ANSWERS)):
        for over, rows in (("en", en), ("ja", ja)):
            row = rows[i % len(rows)]
            yield _trace(f"short-{i}/{short['lang']}/over-{over}", row.get("question") or "",
                         row["contexts"], short["text"], over)  # fmt: skip
    for i, row in enumerate(ja[:EDGE_ITEMS]):
        mixed = f"{row['answer']}\n{en[i]['answer'].split('. ')[0]}."
        yield _trace(f"mixed-{row['id']}", row.get("question") or "", row["contexts"], mixed, "ja")
    for row in en[:EDGE_ITEMS] + ja[:EDGE_ITEMS]:
        rid, q, ctx, a = row["id"], row.get("question") or "", row["contexts"], row["answer"]
        lang = row["lang"]
        yield _trace(f"no-contexts-{rid}", q, [], a, lang)
        yield _trace(f"textless-{rid}", q, [], a, lang, textless=2)
        yield _trace(f"empty-answer-{rid}", q, ctx, "", lang)
        yield _trace(f"no-question-{rid}", "", ctx, a, None)
        yield _trace(f"unranked-{rid}", q, list(reversed(ctx)), a, lang, ranked=False)


def outputs(evaluator: HeuristicEvaluator, trace: Trace) -> dict[str, Any]:
    """Everything tier 0 decides about `trace`, in a form that compares exactly."""
    # `selection` says why the judge saw a result: never set on tier 0's, not a decision of it
    result = evaluator.evaluate(trace).model_dump(mode="json", exclude={"latency_ms", "selection"})
    found = evaluator.grounding_features(trace)
    return {"result": result, "grounding": None if found is None else [found[0], found[1]]}


def digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def fingerprint(evaluator: HeuristicEvaluator | None = None) -> dict[str, str]:
    """Trace id -> digest of its outputs, for every trace of :func:`traces`."""
    ev = evaluator or HeuristicEvaluator(must_not_contain=MUST_NOT_CONTAIN)
    out: dict[str, str] = {}
    for trace in traces():
        if trace.trace_id in out:
            raise ValueError(f"two fingerprint traces share the id {trace.trace_id!r}")
        out[trace.trace_id] = digest(outputs(ev, trace))
    return out


def differences(expected: dict[str, str], found: dict[str, str]) -> list[str]:
    """The trace ids whose outputs changed, appeared or disappeared."""
    return sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))


def recorded() -> dict[str, str]:
    data: dict[str, str] = json.loads(FINGERPRINT.read_text(encoding="utf-8"))["items"]
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="record the current outputs")
    parser.add_argument(
        "--installed", action="store_true", help="score with the installed package, not this tree"
    )
    args = parser.parse_args(argv)
    compiled = compiled_modules()
    print(
        f"monitor from {Path(monitor.__file__).parent}; "
        f"{len(compiled)} of {len(MODULES)} compilable modules compiled"
    )
    found = fingerprint()
    if args.write:
        body = {"items": found, "all": digest(found)}
        FINGERPRINT.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", "utf-8")
        print(f"recorded {len(found)} traces in {FINGERPRINT.relative_to(REPO)}")
        return 0
    changed = differences(recorded(), found)
    if changed:
        print(f"{len(changed)} of {len(found)} traces scored differently, e.g.: "
              + ", ".join(changed[:10]))  # fmt: skip
        return 1
    print(f"all {len(found)} traces scored exactly as recorded ({digest(found)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
