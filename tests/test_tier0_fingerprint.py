"""Tier 0 scores every item of data/ exactly as recorded in bench/tier0_fingerprint.json.

Work on tier 0's speed must not move a score: every score and reason, flag, statement verdict,
constraint verdict and grounding feature of 1,208 traces (the labelled dev items, the WikiEval
answer/context pairs, 14 languages' short answers, mixed-script answers and edge cases) is held
to its recorded digest. A change meant to move scores rewrites the file
(`python bench/tier0_fingerprint.py --write`) and says so in its commit.
"""

from __future__ import annotations

import math

from tests.support.bench import load_bench
from tests.support.dev_data import dev_data_path


def test_every_item_of_the_dev_data_scores_exactly_as_recorded() -> None:
    for name in ("dev_en.jsonl", "dev_ja.jsonl", "wikieval_pairs_dev.jsonl"):
        dev_data_path("hallucination", name)
    bench = load_bench("tier0_fingerprint")
    expected = bench.recorded()
    found = bench.fingerprint()
    assert len(found) == len(expected) > 1_000
    changed = bench.differences(expected, found)
    assert not changed, f"{len(changed)} traces scored differently: {changed[:10]}"


def test_a_score_moved_by_its_last_bit_changes_the_digest() -> None:
    bench = load_bench("tier0_fingerprint")
    evaluator = bench.HeuristicEvaluator(must_not_contain=bench.MUST_NOT_CONTAIN)
    trace = next(t for t in bench.traces() if t.trace_id.startswith("halueval"))
    found = bench.outputs(evaluator, trace)
    support = found["result"]["scores"]["support"]
    assert support["value"] is not None
    before = bench.digest(found)
    support["value"] = math.nextafter(support["value"], 0.0)
    assert bench.digest(found) != before
