"""Evaluators: each turns a :class:`~monitor.models.Trace` into an
:class:`~monitor.models.EvaluationResult`.

- :mod:`monitor.evaluators.heuristic` -- tier 0 (``name = "heuristic"``): deterministic lexical
  scoring, no network, no model, English and Japanese, a few milliseconds per trace.
  Faithfulness with per-statement verdicts, a continuous ``support`` score, answer relevancy,
  context precision/utilization, and flags (no_contexts, contexts_without_text, empty_answer,
  refusal, partial_refusal, language_mismatch, unsupported_entities, must_not_contain).
- :mod:`monitor.evaluators.support` -- how well the contexts support one statement.
- :mod:`monitor.evaluators.text` -- sentence splitting, tokenisation, language detection and
  entity extraction for English and Japanese.
- :mod:`monitor.evaluators.llm` -- the sampled LLM judge; :mod:`~monitor.evaluators.sampler`
  decides which traces it sees.

How well tier 0 detects hallucinated answers is measured by ``bench/detect.py``.
"""
