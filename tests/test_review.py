"""On-call review on a real store: ranking, text/JSON, the CLI, and /review over real HTTP.

The store is real SQLite (and PostgreSQL where available); the HTTP routes run on a real aiohttp
server bound to 127.0.0.1 and are called with a real client. `seed` and `serve_review` are shared
with tests/test_review_browser.py.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import structlog
import structlog.testing
from aiohttp import web

from monitor.config import Settings
from monitor.models import (
    ConstraintVerdict,
    EvaluationResult,
    Prediction,
    Score,
    Selection,
    StatementVerdict,
)
from monitor.review.cli import register, run_cli
from monitor.review.grouping import group_similar
from monitor.review.http import add_review_routes, token_matches
from monitor.review.items import ANSWER_EXCERPT_CHARS, ReviewQuery, excerpt
from monitor.review.queries import worst_answers
from monitor.review.render import anchor, render_json, render_page, render_text
from monitor.sinks.store import Store, turns_table

TOKEN = "s3cret-review-token-0123456789"
XSS = "<script>document.body.setAttribute('data-pwned','1')</script><img src=x onerror=alert(1)>"
EMAIL = "alice.tanaka@example.com"
API_KEY = "sk-proj-abcdefghijklmnop0123456789"
LONG_ANSWER = (
    "The Shibuya store opens at 6 am on Sundays and refunds take 90 days. On weekdays it opens "
    "at 10 am and closes at 9 pm; on public holidays it keeps the Sunday hours. Parking in the "
    "basement is free for customers who spend more than 3,000 yen, and the store accepts all "
    "major credit cards as well as Suica and PayPay. For questions about an order, contact "
    "customer support with the order number at hand."
)
WORST_CLAIMS = ["The Shibuya store opens at 6 am on Sundays.", "Refunds take 90 days."]
SINCE = "1h"


def _result(
    trace_id: str,
    scores: dict[str, Score],
    *,
    agent: str = "support-bot",
    evaluator: str = "heuristic",
    minutes_ago: float = 5,
    claims: tuple[str, ...] = (),
    supported: tuple[str, ...] = (),
    conversation_id: str | None = None,
    turn: int | None = None,
    flags: tuple[str, ...] = (),
    constraints: tuple[ConstraintVerdict, ...] = (),
) -> EvaluationResult:
    statements = [StatementVerdict(statement=c, supported=False) for c in claims]
    statements += [StatementVerdict(statement=s, supported=True) for s in supported]
    return EvaluationResult(
        trace_id=trace_id,
        agent=agent,
        evaluator=evaluator,
        timestamp=datetime.now(UTC) - timedelta(minutes=minutes_ago),
        scores=scores,
        statements=statements,
        conversation_id=conversation_id,
        turn=turn,
        flags=list(flags),
        constraints=list(constraints),
    )


async def _save(
    store: Store, result: EvaluationResult, query: str | None = None, answer: str | None = None
) -> None:
    """Store a result as scored when its trace happened (live traffic)."""
    await store.save(result, query=query, answer=answer, scored_at=result.timestamp)


async def seed(store: Store) -> None:
    """Results of three agents, ranked by faithfulness: t-worst < t-xss < t-secret < t-good.

    t-old is older than an hour and t-unmeasured has no faithfulness: neither is listed. The
    store holds raw text here (as with `redact.store: false`): the review redacts on its own.
    """
    await _save(
        store,
        _result(
            "t-worst",
            {
                "faithfulness": Score.of(0.1),
                "answer_relevancy": Score.of(0.8),
                "context_precision": Score.of(0.5),
            },
            claims=tuple(WORST_CLAIMS),
            supported=("The store is in Shibuya.",),
            conversation_id="conv-1",
            turn=3,
            flags=("unsupported_entities",),
            minutes_ago=2,
        ),
        query="When does the Shibuya store open on Sunday? Please answer in Japanese.",
        answer=LONG_ANSWER,
    )
    # The conversation tracker's turn row: the constraint the user set two turns earlier.
    await store.save_row(
        turns_table,
        {
            "conversation_id": "conv-1",
            "turn": 3,
            "trace_id": "t-worst",
            "agent": "support-bot",
            "timestamp": datetime.now(UTC) - timedelta(minutes=2),
            "evaluator": "heuristic",
            "hallucination": 0.67,
            "drift": 0.5,
            "memory_tokens": 900,
            "detail": json.dumps(
                {
                    "supported": 1,
                    "unsupported": 2,
                    "unsupported_claims": WORST_CLAIMS,
                    "constraints": [
                        {"constraint_id": "lang-ja", "status": "violated", "reason": "not ja"},
                        {"constraint_id": "max-3-sentences", "status": "omitted", "reason": None},
                        {"constraint_id": "polite", "status": "satisfied", "reason": None},
                    ],
                    "outcomes": {},
                }
            ),
        },
    )
    # Another turn of the same conversation: not this trace's constraints.
    await store.save_row(
        turns_table,
        {
            "conversation_id": "conv-1",
            "turn": 2,
            "trace_id": "t-earlier",
            "agent": "support-bot",
            "timestamp": datetime.now(UTC) - timedelta(minutes=3),
            "evaluator": "heuristic",
            "hallucination": 0.0,
            "drift": 0.0,
            "memory_tokens": 500,
            "detail": json.dumps(
                {"constraints": [{"constraint_id": "no-emoji", "status": "violated"}]}
            ),
        },
    )
    await _save(
        store,
        _result(
            "t-xss",
            {"faithfulness": Score.of(0.3), "answer_relevancy": Score.unmeasured("empty_answer")},
            agent="billing-bot",
            claims=("The invoice is <b>void</b>.",),
            minutes_ago=10,
        ),
        query="Show me my invoice",
        answer=XSS,
    )
    await _save(
        store,
        _result(
            "t-secret",
            {"faithfulness": Score.of(0.6), "context_relevancy": Score.of(0.2)},
            evaluator="llm",
            claims=(f"Your key is api_key={API_KEY}",),
            constraints=(
                ConstraintVerdict(constraint_id="no-pii", status="violated", reason=EMAIL),
            ),
            minutes_ago=20,
        ),
        query=f"What is the e-mail on file? It is {EMAIL}",
        answer=f"We wrote to {EMAIL}.\x1b[2J\x1b[31m terminal escape",
    )
    await _save(
        store,
        _result(
            "t-good",
            {"faithfulness": Score.of(0.95), "context_relevancy": Score.of(0.9)},
            agent="faq-bot",
            evaluator="llm",
            minutes_ago=30,
        ),
        query="What are your opening hours?",
        answer="We open at 9 am.",
    )
    await _save(
        store,
        _result("t-old", {"faithfulness": Score.of(0.0)}, minutes_ago=180),
        query="old",
        answer="old",
    )
    await _save(
        store,
        _result("t-unmeasured", {"faithfulness": Score.unmeasured("refusal")}),
        query="q",
        answer="I cannot answer that.",
    )


@pytest_asyncio.fixture(loop_scope="function")
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'review.db'}")
    await seed(opened)
    yield opened
    await opened.close()


def _since() -> datetime:
    return datetime.now(UTC) - timedelta(hours=1)


# ------------------------------------------------------------------------------- the items


async def test_worst_answers_rank_worst_first_with_claims_and_constraints(store: Store) -> None:
    items = await worst_answers(store, _since(), metric="faithfulness")
    assert [i.trace_id for i in items] == ["t-worst", "t-xss", "t-secret", "t-good"]
    worst = items[0]
    assert worst.agent == "support-bot" and worst.evaluator == "heuristic"
    assert worst.score.value == pytest.approx(0.1)
    assert worst.unsupported_claims == WORST_CLAIMS, "supported statements are not claims"
    assert [(c.constraint_id, c.status) for c in worst.violated_constraints] == [
        ("lang-ja", "violated"),
        ("max-3-sentences", "omitted"),
    ], "satisfied constraints and other turns' constraints are left out"
    assert worst.conversation_id == "conv-1" and worst.turn == 3
    assert worst.flags == ["unsupported_entities"]
    assert worst.question is not None and worst.question.startswith("When does")
    assert worst.answer_excerpt is not None and worst.answer_truncated
    assert len(worst.answer_excerpt) <= ANSWER_EXCERPT_CHARS
    assert worst.answer_excerpt.endswith("…")
    # Scores: a missing or unmeasured metric is None with a reason, never 0.
    xss = items[1]
    assert xss.scores["answer_relevancy"].value is None
    assert xss.scores["answer_relevancy"].render() == "unmeasured (empty_answer)"
    assert xss.scores["context_precision"].value is None
    # A constraint verdict on the result itself counts as well.
    assert [c.constraint_id for c in items[2].violated_constraints] == ["no-pii"]


async def test_filters_agent_limit_and_other_metrics(store: Store) -> None:
    billing = await worst_answers(store, _since(), agent="billing-bot", metric="faithfulness")
    assert [i.trace_id for i in billing] == ["t-xss"]
    assert [
        i.trace_id for i in await worst_answers(store, _since(), limit=2, metric="faithfulness")
    ] == [
        "t-worst",
        "t-xss",
    ]
    assert await worst_answers(store, _since(), agent="nobody", metric="faithfulness") == []
    older = await worst_answers(
        store, datetime.now(UTC) - timedelta(hours=4), metric="faithfulness"
    )
    assert older[0].trace_id == "t-old", "a wider window reaches the older answer"
    # context_relevancy has no column of its own: ranked from the stored result document.
    relevancy = await worst_answers(store, _since(), metric="context_relevancy")
    assert [i.trace_id for i in relevancy] == ["t-secret", "t-good"]
    assert relevancy[0].score.value == pytest.approx(0.2)
    with pytest.raises(ValueError, match="unknown metric"):
        await worst_answers(store, _since(), metric="drop table")


async def test_review_redacts_what_it_shows(store: Store) -> None:
    items = await worst_answers(store, _since(), metric="faithfulness")
    shown = json.dumps([i.to_json() for i in items], ensure_ascii=False)
    text = render_text(items)
    for output in (shown, text):
        assert EMAIL not in output and API_KEY not in output
        assert "[REDACTED]" in output
    # Without a redactor the stored text is shown as it is (the store already redacted it).
    raw = await worst_answers(store, _since(), redactor=None, metric="faithfulness")
    assert EMAIL in (raw[2].question or "")


def test_excerpt_cuts_at_a_word_and_marks_it() -> None:
    assert excerpt("short", 300) == ("short", False)
    cut, truncated = excerpt("word " * 100, 300)
    assert truncated and len(cut) <= 300 and cut.endswith("word…")
    cut, truncated = excerpt("x" * 500, 300)
    assert truncated and len(cut) == 300


# --------------------------------------------------------------------------- text and JSON


async def test_text_listing_is_worst_first_and_readable(store: Store) -> None:
    since = _since()
    text = render_text(await worst_answers(store, since, metric="faithfulness"), since=since)
    positions = [text.index(f"trace {t}") for t in ("t-worst", "t-xss", "t-secret", "t-good")]
    assert positions == sorted(positions), text
    assert text.startswith("4 worst answers by faithfulness scored since ")
    assert "#1  faithfulness 0.10  |  agent support-bot  |  heuristic" in text
    for claim in WORST_CLAIMS:
        assert claim in text
    assert "lang-ja [violated]: not ja" in text and "max-3-sentences [omitted]" in text
    assert "answer_relevancy unmeasured (empty_answer)" in text
    assert "answer_relevancy 0.00" not in text, "unmeasured is never printed as 0"
    assert "\x1b" not in text, "terminal escapes in trace text are neutralised"
    assert all(len(line) <= 100 for line in text.splitlines()), "wrapped for a terminal"
    assert render_text([]) == "No scored answers (all agents).\n"


async def test_json_document_shape(store: Store) -> None:
    since = _since()
    items = await worst_answers(store, since, metric="faithfulness")
    document = json.loads(
        render_json(items, ReviewQuery(since, metric="faithfulness", agent=None, worst=20))
    )
    assert document["metric"] == "faithfulness" and document["count"] == 4
    assert datetime.fromisoformat(document["since"]) == since
    first = document["items"][0]
    assert set(first) == {
        "trace_id",
        "agent",
        "evaluator",
        "timestamp",
        "scored_at",
        "count",
        "similar",
        "conversation_id",
        "turn",
        "metric",
        "score",
        "question",
        "answer_excerpt",
        "answer_truncated",
        "scores",
        "unsupported_claims",
        "violated_constraints",
        "flags",
        "selection",
    }
    assert first["selection"] is None  # tier 0 scores every trace: nobody chose it
    assert first["trace_id"] == "t-worst" and first["score"] == pytest.approx(0.1)
    assert first["unsupported_claims"] == WORST_CLAIMS
    assert first["violated_constraints"][0] == {
        "constraint_id": "lang-ja",
        "status": "violated",
        "reason": "not ja",
    }
    assert document["items"][1]["scores"]["answer_relevancy"] == {
        "value": None,
        "reason": "empty_answer",
    }
    assert [i["score"] for i in document["items"]] == sorted(i["score"] for i in document["items"])


# ------------------------------------------------------------------------------------- CLI


def _cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rag-monitor")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["review", *argv])


async def test_cli_prints_the_listing_and_json(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # cli.py configures logging (to stderr) before run_cli; here the logs are captured.
    with structlog.testing.capture_logs():
        await _cli_listing_and_json(tmp_path, capsys)


async def _cli_listing_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(store={"url": f"sqlite+aiosqlite:///{tmp_path / 'review.db'}"})
    args = _cli_args("--since", "1h", "--worst", "2", "--metric", "faithfulness")
    assert (args.metric, args.agent, args.json) == ("faithfulness", None, False)
    assert await run_cli(args, settings) == 0
    out = capsys.readouterr().out
    assert "2 worst answers by faithfulness" in out and "trace t-worst" in out
    assert out.index("t-worst") < out.index("t-xss") and "t-secret" not in out
    assert (
        await run_cli(
            _cli_args("--agent", "billing-bot", "--json", "--metric", "faithfulness"), settings
        )
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert [i["trace_id"] for i in document["items"]] == ["t-xss"]
    assert await run_cli(_cli_args("--since", "yesterday"), settings) == 2
    assert "--since must look like" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli_args("--metric", "bogus")
    with pytest.raises(SystemExit):
        _cli_args("--worst", "0")


async def test_cli_hides_the_store_password(capsys: pytest.CaptureFixture[str]) -> None:
    password = "pw-not-for-eyes-42"
    url = f"postgresql+asyncpg://ragmon:{password}@127.0.0.1:1/none"
    with structlog.testing.capture_logs():
        code = await run_cli(_cli_args(), Settings(store={"url": url}))
    err = capsys.readouterr().err
    assert code == 3 and "cannot open the results store" in err
    assert password not in err


# ------------------------------------------------------------------------------------ HTTP


@asynccontextmanager
async def serve_review(
    store_getter: Callable[[], Store | None], token: str | None, **kwargs: Any
) -> AsyncIterator[str]:
    """A real aiohttp server on 127.0.0.1 with the review routes; yields its base URL."""
    app = web.Application()
    add_review_routes(app, store_getter, token, **kwargs)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture(loop_scope="function")
async def http(store: Store) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    async with (
        serve_review(lambda: store, TOKEN) as base,
        aiohttp.ClientSession() as session,
    ):
        yield base, session


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


async def test_routes_require_the_bearer_token(
    http: tuple[str, aiohttp.ClientSession],
) -> None:
    base, session = http
    for path in ("/review", "/review.json", "/review?since=24h&metric=faithfulness"):
        for headers in (
            {},
            _bearer("wrong-token"),
            _bearer(TOKEN + "x"),
            _bearer(""),
            {"Authorization": TOKEN},
            {"Authorization": f"Token {TOKEN}"},
            _basic("oncall", "wrong"),
        ):
            async with session.get(base + path, headers=headers) as response:
                assert response.status == 401, (path, headers)
                challenges = response.headers.getall("WWW-Authenticate")
                assert 'Bearer realm="rag-monitor review"' in challenges
                body = await response.text()
                assert "t-worst" not in body and TOKEN not in body
        async with session.get(base + path, headers=_bearer(TOKEN)) as response:
            assert response.status == 200, path
    # A browser can't send a bearer header from a link: the page (only) takes the token as the
    # password of HTTP Basic, which the browser prompts for after the Basic challenge.
    async with session.get(base + "/review") as response:
        assert any(c.startswith("Basic ") for c in response.headers.getall("WWW-Authenticate"))
    async with session.get(base + "/review", headers=_basic("oncall", TOKEN)) as response:
        assert response.status == 200
    async with session.get(base + "/review.json", headers=_basic("oncall", TOKEN)) as response:
        assert response.status == 401
        assert response.headers.getall("WWW-Authenticate") == ['Bearer realm="rag-monitor review"']


async def test_the_token_guards_only_the_review_routes(store: Store) -> None:
    """On the daemon's app, as `Daemon.run` builds it: Prometheus and the kubelet's probes
    reach /metrics, /healthz and /readyz without the review token."""
    from prometheus_client import CollectorRegistry

    from monitor.http import Probes, build_app

    app = build_app(CollectorRegistry(), Probes(lambda: (True, "ok"), lambda: (True, "ok")))
    add_review_routes(app, lambda: store, TOKEN)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            for path in ("/metrics", "/healthz", "/readyz"):
                async with session.get(base + path) as response:
                    assert response.status == 200, path
            async with session.get(base + "/nothing-here") as response:
                assert response.status == 404
            for path in ("/review", "/review.json"):
                async with session.get(base + path) as response:
                    assert response.status == 401, path
                async with session.head(base + path) as response:
                    assert response.status == 401, f"HEAD {path}"
                async with session.get(base + path, headers=_bearer(TOKEN)) as response:
                    assert response.status == 200, path
    finally:
        await runner.cleanup()


def test_token_comparison() -> None:
    import hashlib

    expected = hashlib.sha256(TOKEN.encode()).digest()
    assert token_matches(f"Bearer {TOKEN}", expected)
    assert token_matches(f"bearer   {TOKEN} ", expected)
    assert not token_matches(None, expected)
    assert not token_matches("Bearer", expected)
    assert not token_matches("Basic !!!notbase64", expected, allow_basic=True)
    assert not token_matches(_basic("u", TOKEN)["Authorization"], expected)
    assert token_matches(_basic("u", TOKEN)["Authorization"], expected, allow_basic=True)


async def test_page_escapes_trace_text_and_loads_nothing(
    http: tuple[str, aiohttp.ClientSession],
) -> None:
    base, session = http
    async with session.get(
        base + f"/review?since={SINCE}&metric=faithfulness", headers=_bearer(TOKEN)
    ) as response:
        assert response.status == 200
        assert response.content_type == "text/html"
        csp = response.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp
        assert response.headers["Cache-Control"] == "no-store"
        html = await response.text()
    # The answer's markup is text: escaped, never an element.
    assert "&lt;script&gt;document.body.setAttribute(&#x27;data-pwned&#x27;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "The invoice is &lt;b&gt;void&lt;/b&gt;." in html
    # No external assets: no script, link, image, frame or absolute URL at all.
    assert not re.search(r"<(link|iframe|object|embed)\b", html, re.I)
    assert not re.search(r"""(src|href|action)=["']?(https?:)?//""", html, re.I)
    assert "<style>" in html
    # Worst first, each trace an anchor, claims and constraints shown, unmeasured not 0.
    order = re.findall(r'<article class="item [a-z]+" id="([^"]+)" data-rank=', html)
    assert order == [anchor(t) for t in ("t-worst", "t-xss", "t-secret", "t-good")]
    # The unmeasured answer is not ranked, but listed under its reason.
    unmeasured = html[html.index('<section class="unmeasured-section"') :]
    assert 'data-reason="refusal" data-count="1"' in unmeasured
    assert f'id="{anchor("t-unmeasured")}"' in unmeasured
    assert 'href="#trace-t-worst"' in html
    for claim in WORST_CLAIMS:
        assert f"<li>{claim}</li>" in html
    assert "<code>lang-ja</code>" in html and "omitted" in html
    assert "unmeasured (empty_answer)" in html
    assert EMAIL not in html and API_KEY not in html and "[REDACTED]" in html
    # The filters: metric and agent, with the agents seen in the window.
    assert '<select name="metric">' in html and '<option value="context_relevancy">' in html
    for agent in ("support-bot", "billing-bot", "faq-bot"):
        assert f'<option value="{agent}">' in html
    assert TOKEN not in html


async def test_hostile_text_in_every_field_is_escaped(tmp_path: Path) -> None:
    """Markup, quotes, template syntax and terminal escapes in the trace id, question, answer,
    agent, conversation, claims, constraints and flags are text on the page, never markup."""
    hostile = '"><script>alert(1)</script>'
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'hostile.db'}")
    try:
        result = _result(
            f"t{hostile}",
            {"faithfulness": Score.of(0.1), f"x{hostile}": Score.unmeasured(hostile)},
            agent=f"a{hostile}",
            claims=(f"claim{hostile}",),
            conversation_id=f"c{hostile}",
            turn=1,
            flags=(f"flag{hostile}",),
            constraints=(
                ConstraintVerdict(constraint_id=f"k{hostile}", status="violated", reason=hostile),
            ),
        )
        await _save(
            store,
            result,
            query=f"<img src=x onerror=alert(2)>{hostile}",
            answer=("{{ 7*7 }}{% if true %}jinja{% endif %}\x1b[31m<iframe src=//x></iframe>"),
        )
        async with (
            serve_review(lambda: store, None) as base,
            aiohttp.ClientSession() as session,
            session.get(
                base + "/review",
                params={"since": "1h", "agent": f"a{hostile}", "metric": "faithfulness"},
            ) as reply,
        ):
            assert reply.status == 200
            html = await reply.text()
    finally:
        await store.close()
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "<iframe" not in html.lower()
    escaped = "&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
    for field in ("t", "a", "c", "claim", "k", "flag", "x"):
        assert field + escaped in html, field
    assert f'data-trace-id="t{escaped}"' in html and 'id="trace-t%22%3E%3Cscript' in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    # Trace text is data, never a template: shown as written, not evaluated.
    answer = re.findall(r'<dd class="answer">(.*?)</dd>', html, re.S)
    assert answer[0].startswith("{{ 7*7 }}{% if true %}jinja{% endif %}"), answer
    assert "\x1b" not in html and "\N{REPLACEMENT CHARACTER}[31m" in html
    assert f'<option value="a{escaped}" selected>' in html


async def test_page_filters_and_bad_parameters(http: tuple[str, aiohttp.ClientSession]) -> None:
    base, session = http
    auth = _bearer(TOKEN)
    async with session.get(
        base + "/review?agent=billing-bot&metric=faithfulness&worst=5&since=2h", headers=auth
    ) as response:
        html = await response.text()
        assert response.status == 200
        assert re.findall(r'data-trace-id="([^"]+)"', html) == ["t-xss"]
        assert '<option value="billing-bot" selected>' in html
    # Grafana's ${__from:date:iso} (milliseconds, Z) as `since`, from a table panel's data link.
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    async with session.get(
        base + "/review.json",
        params={"since": two_hours_ago, "metric": "faithfulness"},
        headers=auth,
    ) as response:
        assert response.status == 200 and (await response.json())["count"] == 4
    for query in (
        "since=soon",
        "metric=bogus",
        "worst=0",
        "worst=abc",
        "worst=10000",
        "time=never",
        "group=2",
    ):
        async with session.get(f"{base}/review?{query}", headers=auth) as response:
            assert response.status == 400, query
            assert 'class="error"' in await response.text()
        async with session.get(f"{base}/review.json?{query}", headers=auth) as response:
            assert response.status == 400, query
            assert "error" in await response.json()
    # A reflected parameter is escaped as well.
    async with session.get(
        base + "/review", params={"since": "<script>alert(1)</script>"}, headers=auth
    ) as response:
        html = await response.text()
        assert response.status == 400
        assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


async def test_json_route_shape(http: tuple[str, aiohttp.ClientSession]) -> None:
    base, session = http
    async with session.get(
        base + "/review.json?since=1h&metric=context_relevancy&worst=10", headers=_bearer(TOKEN)
    ) as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        document = await response.json()
    assert document["metric"] == "context_relevancy" and document["worst"] == 10
    assert document["agent"] is None and document["count"] == 2
    assert [i["trace_id"] for i in document["items"]] == ["t-secret", "t-good"]
    assert document["items"][0]["score"] == pytest.approx(0.2)
    assert EMAIL not in json.dumps(document, ensure_ascii=False)


async def test_routes_without_token_and_without_store(store: Store) -> None:
    current: list[Store | None] = [None]
    async with serve_review(lambda: current[0], None) as base, aiohttp.ClientSession() as session:
        async with session.get(base + "/review") as response:
            assert response.status == 503, "the store opens after the server starts"
            assert "not open" in await response.text()
        async with session.get(base + "/review.json") as response:
            assert response.status == 503
        current[0] = store
        async with session.get(base + "/review") as response:
            assert response.status == 200, "no token configured: open"
        async with session.get(base + "/review.json?metric=faithfulness") as response:
            assert (await response.json())["count"] == 4
    with pytest.raises(ValueError, match="empty"):
        add_review_routes(web.Application(), lambda: store, "  ")
    with pytest.raises(ValueError, match="http"):
        add_review_routes(web.Application(), lambda: store, TOKEN, trace_url_template="js:{x}")
    with pytest.raises(ValueError, match="trace_id"):
        add_review_routes(
            web.Application(), lambda: store, TOKEN, trace_url_template="https://g/{span_id}"
        )


async def test_store_errors_do_not_leak(tmp_path: Path) -> None:
    broken = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'gone.db'}")
    await broken.close()  # a disposed engine reopens; dropping the table makes it fail
    from sqlalchemy import text

    async with broken._engine.begin() as conn:
        await conn.execute(text("DROP TABLE evaluation_results"))
    async with (
        serve_review(lambda: broken, None) as base,
        aiohttp.ClientSession() as session,
        session.get(base + "/review.json") as response,
    ):
        assert response.status == 503
        body = await response.text()
    assert "could not be read" in body and "evaluation_results" not in body
    await broken._engine.dispose()


async def test_trace_links_to_a_trace_viewer(store: Store) -> None:
    template = "https://grafana.example/explore?traceId={trace_id}"
    async with (
        serve_review(lambda: store, None, trace_url_template=template) as base,
        aiohttp.ClientSession() as session,
        session.get(base + "/review?metric=faithfulness") as response,
    ):
        html = await response.text()
    assert 'href="https://grafana.example/explore?traceId=t-worst"' in html
    assert 'id="trace-t-worst"' in html, "the anchor stays for links into the page"


def test_anchor_matches_grafana_percent_encoding() -> None:
    assert anchor("t-1") == "trace-t-1"
    assert anchor("a/b c#d") == "trace-a%2Fb%20c%23d"
    assert anchor("会話") == "trace-%E4%BC%9A%E8%A9%B1"


# ------------------------------------------------------------------------------ PostgreSQL


async def test_review_on_postgresql_and_the_grafana_panel_query(postgres_url: str) -> None:
    """The same ranking on PostgreSQL, and the table-panel SQL of docs/review.md as Grafana
    would send it (macros expanded) returns the worst answers with their claims."""
    store = await Store.open(postgres_url)
    try:
        await seed(store)
        items = await worst_answers(store, _since(), metric="faithfulness")
        assert [i.trace_id for i in items] == ["t-worst", "t-xss", "t-secret", "t-good"]
        assert items[0].violated_constraints[0].constraint_id == "lang-ja"
        relevancy = await worst_answers(store, _since(), metric="context_relevancy")
        assert [i.trace_id for i in relevancy] == ["t-secret", "t-good"]

        from sqlalchemy import text

        sql = grafana_panel_sql()
        now = datetime.now(UTC)
        expanded = (
            sql.replace(
                "$__timeFilter(r.timestamp)",
                f"r.timestamp BETWEEN '{(now - timedelta(hours=1)).isoformat()}' "
                f"AND '{now.isoformat()}'",
            )
            .replace("${metric:sqlstring}", "'faithfulness'")
            .replace("${agent:sqlstring}", "'support-bot','billing-bot','faq-bot'")
        )
        assert "$" not in expanded, "every Grafana macro and variable is expanded"
        async with store._engine.connect() as conn:
            rows = [dict(r._mapping) for r in (await conn.execute(text(expanded))).all()]
        assert [r["trace_id"] for r in rows] == ["t-worst", "t-xss", "t-secret", "t-good"]
        worst = rows[0]
        assert worst["score"] == pytest.approx(0.1)
        assert worst["unsupported_claims"] == " | ".join(WORST_CLAIMS)
        assert worst["violated_constraints"] == "lang-ja (violated), max-3-sentences (omitted)"
        assert len(worst["answer_excerpt"]) <= ANSWER_EXCERPT_CHARS
        assert rows[1]["answer_relevancy"] is None, "unmeasured stays NULL, not 0"
    finally:
        await store.close()


def grafana_panel_sql() -> str:
    """The SQL block that follows the 'Table panel query' heading of docs/review.md."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "review.md").read_text("utf-8")
    section = doc[doc.index("### Table panel query") :]
    match = re.search(r"```sql\n(.*?)```", section, re.S)
    assert match, "docs/review.md has the panel query in a sql block"
    return match.group(1)


# ------------------------------------------------------- processing time and near-identical


def test_near_identical_answers_group_but_different_facts_do_not() -> None:
    base = (
        "The Aurora kettle holds 1.7 litres and switches itself off when the water boils. "
        "It also comes with a lifetime guarantee on every part."
    )
    answers = [
        base,
        base.replace("  ", " ").upper(),  # case and spacing only
        base.replace("every part", "every parts"),  # one letter in a long answer
        "The warranty is 2 years.",
        "The warranty is 5 years.",  # a different fact in a short answer stays apart
        None,  # not stored: its own entry
        base,  # the same text from another evaluator: kept apart
        "オーロラ電気ケトルの容量は1.7リットルです。沸騰すると自動で電源が切れます。",
        "オーロラ電気ケトルの容量は1.7リットルです。沸騰すると自動で電源が切れます！",
    ]
    evaluators = ["heuristic"] * 6 + ["llm"] + ["heuristic"] * 2
    assert group_similar(answers, evaluators) == [[0, 1, 2], [3], [4], [5], [6], [7, 8]]


async def _many_copies(store: Store) -> None:
    """20 copies of one bad answer (as the demo's canary writes) and three other answers."""
    answer = "It holds 1.7 litres. It also comes with a lifetime guarantee on every part."
    for i in range(20):
        await store.save(
            _result(
                f"copy-{i:02d}",
                {"faithfulness": Score.of(0.5 - i / 100)},
                agent="support-bot-canary" if i % 2 else "support-bot",
                minutes_ago=1,
            ),
            query="How big is the Aurora kettle?",
            answer=answer,
        )
    for i, text in enumerate(("Refunds take 90 days.", "It opens at 6 am.", "Parking is free.")):
        await store.save(
            _result(f"other-{i}", {"faithfulness": Score.of(0.6 + i / 100)}, minutes_ago=1),
            query="q",
            answer=text,
        )


async def test_near_identical_answers_are_listed_once_with_a_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'copies.db'}"
    store = await Store.open(url)
    try:
        await _many_copies(store)
        items = await worst_answers(store, _since(), limit=4, metric="faithfulness")
        assert [(i.trace_id, i.count) for i in items] == [
            ("copy-19", 20),
            ("other-0", 1),
            ("other-1", 1),
            ("other-2", 1),
        ]
        similar = items[0].similar
        assert similar is not None
        assert similar.trace_ids[:2] == ["copy-18", "copy-17"] and len(similar.trace_ids) == 10
        assert similar.agents == ["support-bot", "support-bot-canary"]
        assert (similar.score_min, similar.score_max) == pytest.approx((0.31, 0.5))
        ungrouped = await worst_answers(
            store, _since(), limit=4, group=False, metric="faithfulness"
        )
        assert [i.trace_id for i in ungrouped] == ["copy-19", "copy-18", "copy-17", "copy-16"]

        text = render_text(items, since=_since())
        assert "19 near-identical answers folded into them" in text.splitlines()[0]
        assert "20 near-identical answers (scores 0.31-0.50" in text

        async with serve_review(lambda: store, None) as base, aiohttp.ClientSession() as session:
            async with session.get(base + "/review.json?worst=4&metric=faithfulness") as response:
                document = await response.json()
            async with session.get(base + "/review?worst=4&metric=faithfulness") as response:
                html = await response.text()
            async with session.get(
                base + "/review.json?worst=4&group=0&metric=faithfulness"
            ) as response:
                ungrouped_json = await response.json()
        assert [(i["trace_id"], i["count"]) for i in document["items"]][:2] == [
            ("copy-19", 20),
            ("other-0", 1),
        ]
        assert document["items"][0]["similar"]["count"] == 20 and document["group"] is True
        assert re.findall(r'class="fold" data-count="(\d+)"', html) == ["20"]
        assert "19 near-identical answers folded in" in re.sub(r"<[^>]+>", "", html)
        assert [i["count"] for i in ungrouped_json["items"]] == [1, 1, 1, 1]
    finally:
        await store.close()
    capsys.readouterr()  # the store's own log lines so far
    with structlog.testing.capture_logs():
        settings = Settings(store={"url": url})
        assert (
            await run_cli(_cli_args("--worst", "2", "--json", "--metric", "faithfulness"), settings)
            == 0
        )
        assert [i["count"] for i in json.loads(capsys.readouterr().out)["items"]] == [20, 1]
        assert (
            await run_cli(
                _cli_args("--worst", "2", "--no-group", "--metric", "faithfulness"), settings
            )
            == 0
        )
        assert "near-identical" not in capsys.readouterr().out


async def test_since_counts_from_when_answers_were_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay of traces from days ago is found right after it ran; --time trace filters on
    the traces' own timestamps instead."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'replay.db'}"
    store = await Store.open(url)
    try:
        await store.save(
            _result("replayed", {"faithfulness": Score.of(0.2)}, minutes_ago=3 * 24 * 60),
            query="q",
            answer="a",
        )
        assert [
            i.trace_id for i in await worst_answers(store, _since(), metric="faithfulness")
        ] == ["replayed"]
        assert await worst_answers(store, _since(), time="trace", metric="faithfulness") == []
        with pytest.raises(ValueError, match="time must be one of"):
            await worst_answers(store, _since(), time="wall", metric="faithfulness")
    finally:
        await store.close()
    capsys.readouterr()  # the store's own log lines so far
    with structlog.testing.capture_logs():
        settings = Settings(store={"url": url})
        assert await run_cli(_cli_args("--since", "10m", "--metric", "faithfulness"), settings) == 0
        out = capsys.readouterr().out
        assert out.startswith("1 worst answers by faithfulness scored since ")
        assert (
            await run_cli(
                _cli_args("--since", "10m", "--time", "trace", "--metric", "faithfulness"), settings
            )
            == 0
        )
        out = capsys.readouterr().out
        assert out.startswith("No scored answers with trace time since ")
        assert "--time scored" in out


async def test_tier_zero_support_ranks_by_default_and_faithfulness_stays_available(
    tmp_path: Path,
) -> None:
    """Without a metric, /review.json, the page and the CLI rank by tier 0's headline,
    `support` (it ranks answers better than tier 0's faithfulness ratio, and every trace has
    one): only tier-0 results, lowest support first, whatever their faithfulness ties say.
    `metric=faithfulness` ranks tier 0's and the judge's faithfulness together."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'review.db'}")
    try:
        for trace_id, scores, evaluator in (
            (
                "t-low-support",
                {"support": Score.of(0.2), "faithfulness": Score.of(1.0)},
                "heuristic",
            ),
            (
                "t-high-support",
                {"support": Score.of(0.7), "faithfulness": Score.of(0.0)},
                "heuristic",
            ),
            ("t-judged", {"faithfulness": Score.of(0.1)}, "llm"),
        ):
            await _save(
                store, _result(trace_id, scores, evaluator=evaluator), query="q", answer=trace_id
            )
        assert _cli_args().metric == "support"
        async with serve_review(lambda: store, None) as base, aiohttp.ClientSession() as session:
            async with session.get(base + "/review.json") as response:
                document = await response.json()
            assert document["metric"] == "support"
            assert [i["trace_id"] for i in document["items"]] == ["t-low-support", "t-high-support"]
            async with session.get(base + "/review") as response:
                html = await response.text()
            assert re.findall(r'data-trace-id="([^"]+)"', html) == [
                "t-low-support",
                "t-high-support",
            ]
            assert '<option value="support" selected>' in html
            async with session.get(base + "/review.json?metric=faithfulness") as response:
                document = await response.json()
            assert [(i["trace_id"], i["evaluator"]) for i in document["items"]] == [
                ("t-high-support", "heuristic"),
                ("t-judged", "llm"),
                ("t-low-support", "heuristic"),
            ]
    finally:
        await store.close()


async def test_each_judged_answer_says_why_the_judge_saw_it(store: Store) -> None:
    """The uniform draw (with the inclusion probability it had) or the priority rule (with the
    chance the cap gave it), and what it counts for in the estimates: on the page, in the text
    listing and in the JSON, from what the store holds."""
    drawn = Selection(
        uniform=True,
        inclusion_probability=0.05,
        priority="low_support",
        priority_probability=0.5,
        predictions={"faithfulness": Prediction(mean=0.6, below=0.4)},
    )
    chosen = Selection(
        uniform=False,
        inclusion_probability=0.05,
        priority="negative_feedback",
        priority_probability=0.2,
    )
    unknown = Selection(uniform=False, inclusion_probability=0.05, priority="no_contexts")
    answers = {
        "t-drawn": "Opens at 6 am on Sundays.",
        "t-rule": "Refunds take ninety days.",
        "t-old": "Shipping is free.",
    }
    for trace_id, selection, value in (
        ("t-drawn", drawn, 0.2),
        ("t-rule", chosen, 0.3),
        ("t-old", unknown, 0.1),
    ):
        judged = _result(trace_id, {"faithfulness": Score.of(value)}, evaluator="llm")
        judged = judged.model_copy(update={"selection": selection})
        await _save(store, judged, "When?", answers[trace_id])
    items = await worst_answers(store, _since(), metric="faithfulness", agent="support-bot")
    by_id = {item.trace_id: item for item in items if item.evaluator == "llm"}
    assert by_id["t-drawn"].judged_because == (
        "uniform draw (inclusion probability 0.05); priority rule low_support: "
        "counts as 1.9 traces in the population estimates"  # 1 / (0.05 + 0.95 * 0.5)
    )
    rule = (
        "priority rule negative_feedback (judged with chance 0.2 beyond the draw): "
        "counts as 4.17 traces in the population estimates"  # 1 / (0.05 + 0.95 * 0.2)
    )
    assert by_id["t-rule"].judged_because == rule
    assert by_id["t-old"].judged_because == (
        "priority rule no_contexts: not in the population estimates (its chance of being "
        "judged is not recorded)"
    )
    query = ReviewQuery(_since(), metric="faithfulness", agent="support-bot", worst=20)
    document = json.loads(render_json(items, query))
    stored = {i["trace_id"]: i["selection"] for i in document["items"]}
    assert stored["t-drawn"]["uniform"] is True
    assert stored["t-drawn"]["inclusion_probability"] == 0.05
    assert stored["t-drawn"]["predictions"]["faithfulness"] == {"mean": 0.6, "below": 0.4}
    assert stored["t-rule"]["priority"] == "negative_feedback"
    text = " ".join(render_text(items).split())  # the listing wraps long lines
    assert f"Judged: {rule}" in text
    page = render_page(items, {"metric": "faithfulness"}, ["support-bot"], since=_since())
    assert f'<dt>Judged because</dt><dd class="selection">{rule}</dd>' in page
