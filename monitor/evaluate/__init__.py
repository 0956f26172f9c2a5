"""Evaluators: each turns a :class:`~monitor.models.Trace` into an
:class:`~monitor.models.EvaluationResult`.

- :mod:`monitor.evaluate.heuristic` -- tier 0, :class:`HeuristicEvaluator` (``name = "heuristic"``):
  deterministic lexical scoring, no network, no model, English and Japanese, a few milliseconds
  per trace. Faithfulness with per-statement verdicts, a continuous ``support`` score, answer
  relevancy, context precision/utilization, and flags (no_contexts, contexts_without_text,
  empty_answer, refusal, partial_refusal, language_mismatch, unsupported_entities,
  must_not_contain).
- :mod:`monitor.evaluate.support` -- how well the contexts support one statement.
- :mod:`monitor.evaluate.text` -- sentence splitting, tokenisation, language detection and
  entity extraction for English and Japanese.

How well tier 0 detects hallucinated answers is measured by ``bench/detect.py``.
"""
