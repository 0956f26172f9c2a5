"""What a review listing may ask for: the metrics it ranks by, its window, its size.

Standard library only, so that `rag-monitor review --help` and its usage errors answer before
the store is imported; :mod:`monitor.review.items` re-exports every name.
"""

from __future__ import annotations

from monitor.sinks.store_columns import SCORE_COLUMNS
from monitor.windows import DEFAULT_TIME as DEFAULT_TIME
from monitor.windows import TIMES as TIMES

# Every metric an evaluator writes: the columns of the store first, then those read from the
# stored result document.
METRICS = (
    *SCORE_COLUMNS,
    "context_relevancy",  # LLM judge
    "context_utilization",  # tier 0
    "support",  # tier 0
)
# Ranked by tier 0's headline by default: every trace has it, and it ranks answers better than
# tier 0's faithfulness ratio (docs/scoring.md). `faithfulness` ranks tier 0's and the judge's
# results together.
DEFAULT_METRIC = "support"
MAX_WORST = 200
DEFAULT_SINCE = "1h"
DEFAULT_WORST = 20
