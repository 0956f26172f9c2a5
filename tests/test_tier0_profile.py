"""bench/tier0_profile.py sums a py-spy profile of tier 0 by kind of work, counting each
sample once and only samples of the traces it profiles (the middle band)."""

from __future__ import annotations

from pathlib import Path

from tests.support.bench import load_bench


def test_the_profile_report_puts_each_sample_under_its_kind_of_work(tmp_path: Path) -> None:
    profile = load_bench("tier0_profile")
    under = (
        "main (x.py:1);drive.<locals>.band_eval (tier0_profile.py:67);"
        "HeuristicEvaluator.evaluate (h.py:1)"
    )
    raw = tmp_path / "tier0.raw"
    raw.write_text(
        "\n".join(
            [
                f"{under};HeuristicEvaluator.statements (h.py:2);score_statement (s.py:1);"
                "extract_entities (t.py:1) 3",
                f"{under};HeuristicEvaluator.statements (h.py:2);score_statement (s.py:1) 1",
                f"{under};ContextLanguages.__init__ (l.py:1);identify (l.py:2);_predict (l.py:3) 4",
                f"{under};HeuristicEvaluator._answer_relevancy (h.py:3);content_tokens (t.py:2) 2",
                "main (x.py:1);drive.<locals>.other (tier0_profile.py:70) 90",
            ]
        )
    )
    assert profile.report(raw) == {
        "language id: fastText": 40.0,
        "claim support: names and numbers": 30.0,
        "answer relevancy": 20.0,
        "claim support: the rest": 10.0,
        "samples": 10,
    }


def test_a_frame_name_with_a_line_separator_stays_one_sample_line(tmp_path: Path) -> None:
    """py-spy ends stacks with "\\n" alone; a frame may be named with U+2028 (a Unicode line
    separator `str.splitlines` would break at), and its samples still count."""
    profile = load_bench("tier0_profile")
    raw = tmp_path / "tier0.raw"
    raw.write_text(
        "main (x.py:1);drive.<locals>.band_eval (tier0_profile.py:67);"
        "HeuristicEvaluator.evaluate (h.py:1);<lambda \u2028> (t.py:9) 5\n"
    )
    assert profile.report(raw) == {"the rest of evaluate": 100.0, "samples": 5}
