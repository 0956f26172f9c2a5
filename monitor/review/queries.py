"""The review's reads, all through the store's own queries: the worst answers (`Store.worst`)
with the violated constraints of their conversation turns, and the agents seen."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from monitor.models import EvaluationResult
from monitor.review.grouping import folded, group_similar
from monitor.review.items import (
    DEFAULT_METRIC,
    DEFAULT_REDACTOR,
    DEFAULT_WORST,
    MAX_REASONS,
    UNMEASURED_EXAMPLES,
    Review,
    ReviewItem,
    ReviewQuery,
    UnmeasuredGroup,
    broken_constraints,
    build_item,
    check_metric,
)
from monitor.sinks.store import Store
from monitor.sinks.turns import turn_details
from monitor.typing import TextRedactor
from monitor.windows import DEFAULT_TIME, TimeBasis, check_time, empty_window_hint, other_time

SCAN_PER_ITEM = 10  # grouping looks at this many of the worst answers per item listed ...
MAX_SCAN = 2000  # ... up to this many
MAX_AGENTS_LISTED = 200


async def worst_answers(
    store: Store,
    since: datetime,
    metric: str = DEFAULT_METRIC,
    agent: str | None = None,
    limit: int = DEFAULT_WORST,
    *,
    redactor: TextRedactor | None = DEFAULT_REDACTOR,
    time: str = DEFAULT_TIME,
    group: bool = True,
) -> list[ReviewItem]:
    """The `limit` lowest-scoring answers by `metric` since `since`, worst first.

    `since` counts from when answers were scored (`time="scored"`) or from the traces' own
    timestamps (`time="trace"`). Results whose metric is unmeasured are left out (unmeasured is
    not bad). A trace scored by two evaluators can appear twice, once per evaluator. With
    `group`, near-identical answers (see group_similar) among the worst SCAN_PER_ITEM x `limit`
    (more while copies leave groups missing, up to MAX_SCAN) are listed once, as their worst
    member with a `similar` count (of the answers scanned). Every text is passed through
    `redactor` (the default patterns when not given; None shows the stored text as it is).
    """
    check_metric(metric)
    counted_from = check_time(time)
    if limit < 1:
        return []
    scan = min(MAX_SCAN, limit * SCAN_PER_ITEM) if group else limit
    while True:
        rows = await store.worst(since, metric, agent, scan, counted_from=counted_from)
        clusters = (
            group_similar([r.answer for r in rows], [r.result.evaluator for r in rows])
            if group
            else [[i] for i in range(len(rows))]
        )
        # Copies of one answer can fill the scan: look further while groups are missing.
        if len(clusters) >= limit or len(rows) < scan or scan >= MAX_SCAN:
            break
        scan = min(MAX_SCAN, scan * 4)
    items = [
        build_item(row.result, row.query, row.answer, metric, None, redactor, row.scored_at)
        for row in rows
    ]
    chosen = [(members[0], folded(items, members)) for members in clusters[:limit]]
    details = await _turn_details(store, [rows[i].result for i, _ in chosen])
    return [
        replace(
            item,
            violated_constraints=broken_constraints(
                rows[i].result, details.get(item.trace_id), redactor
            ),
        )
        for i, item in chosen
    ]


async def answers_for(
    store: Store, query: ReviewQuery, redactor: TextRedactor | None
) -> list[ReviewItem]:
    """`worst_answers` as a listing's query asks for them."""
    return await worst_answers(
        store,
        query.since,
        query.metric,
        query.agent,
        query.worst,
        redactor=redactor,
        time=query.time,
        group=query.group,
    )


async def review_for(store: Store, query: ReviewQuery, redactor: TextRedactor | None) -> Review:
    """The listing a query asks for: the worst answers, how many measured answers the window
    holds, the unmeasured ones grouped by reason (the latest UNMEASURED_EXAMPLES of each), and,
    when the window holds nothing, where answers are (another time basis, a longer window)."""
    worst = await answers_for(store, query, redactor)
    counts = await store.score_counts(
        query.since, query.metric, query.agent, counted_from=query.time
    )
    measured = counts.pop(None, 0)
    reasons = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] or ""))
    groups = []
    for reason, count in reasons[:MAX_REASONS]:
        assert reason is not None
        rows = await store.unmeasured(
            query.since,
            query.metric,
            reason,
            query.agent,
            UNMEASURED_EXAMPLES,
            counted_from=query.time,
        )
        items = [
            build_item(r.result, r.query, r.answer, query.metric, None, redactor, r.scored_at)
            for r in rows
        ]
        groups.append(UnmeasuredGroup(_shown_reason(reason, redactor), count, items))
    rest = sum(count for _, count in reasons[MAX_REASONS:])
    if rest:
        groups.append(UnmeasuredGroup("other reasons", rest, []))
    hint = None
    if not worst and not groups:
        other, _ = await store.result_extent(
            query.since, query.agent, counted_from=other_time(query.time)
        )
        _, latest = await store.result_extent(query.since, query.agent, counted_from=query.time)
        hint = empty_window_hint("answers", query.time, other, latest)
    return Review(worst, query.metric, measured, groups, hint)


def _shown_reason(reason: str, redactor: TextRedactor | None) -> str:
    return redactor.redact(reason)[:200] if redactor is not None else reason[:200]


async def agents_seen(store: Store, since: datetime, time: TimeBasis = DEFAULT_TIME) -> list[str]:
    """Agent names with results since a time (for the page's agent filter)."""
    return await store.agents(since, counted_from=time, limit=MAX_AGENTS_LISTED)


async def _turn_details(
    store: Store, results: Sequence[EvaluationResult]
) -> dict[str, dict[str, Any]]:
    """The parsed `detail` of the conversation turn of each result's trace, by trace id."""
    conversations = {r.conversation_id for r in results if r.conversation_id}
    return await turn_details(store, conversations, {r.trace_id for r in results})
