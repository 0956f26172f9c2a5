"""The scores the results store ranks by, without SQLAlchemy: the command line offers them as
choices before anything heavy is imported (:mod:`monitor.sinks.store` uses them for its tables
and queries)."""

from __future__ import annotations

# Scores with a column of their own in evaluation_results (ranked by an indexed column); `worst`
# reads any other score from the stored result document, by a name like these.
SCORE_COLUMNS = ("faithfulness", "answer_relevancy", "context_precision")
