"""``GET /review`` (the HTML page) and ``GET /review.json`` on the daemon's HTTP server.

With a token, an aiohttp middleware guards both routes (and only them: /metrics and the probes
stay open): ``Authorization: Bearer <token>``, and on the page also HTTP Basic with the token as
password (any user name), the credentials a browser asks for, so that a link from Grafana opens
it. Tokens are compared as SHA-256 digests in constant time (which hides even their length).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import aiohttp
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from monitor.review.items import (
    DEFAULT_METRIC,
    DEFAULT_REDACTOR,
    DEFAULT_SINCE,
    DEFAULT_WORST,
    MAX_WORST,
    Review,
    ReviewQuery,
    check_metric,
)
from monitor.review.queries import agents_seen, review_for
from monitor.review.render import content_security_policy, render_page, review_json
from monitor.sinks.store import Store
from monitor.typing import TextRedactor
from monitor.windows import DEFAULT_TIME, check_time, parse_since

log = structlog.get_logger(__name__)

REALM = "rag-monitor review"
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
QUERY_PARAMETERS = ("since", "metric", "agent", "worst", "time", "group")
# The guarded routes by name, and whether a browser reaches them (and may answer HTTP Basic).
PAGE_ROUTE = "review"
JSON_ROUTE = "review.json"
_BROWSER_ROUTES = {PAGE_ROUTE: True, JSON_ROUTE: False}


# ------------------------------------------------------------------------------ parameters


class QueryError(ValueError):
    pass


def parse_query(params: Mapping[str, str], now: datetime | None = None) -> ReviewQuery:
    """since (24h, 90m, 7d or ISO), metric, agent (empty = all), worst (1..200), time (scored
    or trace), group (1 or 0)."""
    since_text = (params.get("since") or DEFAULT_SINCE).strip()[:64]
    try:
        since = parse_since(since_text, now)
        metric = check_metric((params.get("metric") or DEFAULT_METRIC).strip())
    except ValueError as exc:
        raise QueryError(str(exc)) from None
    agent = (params.get("agent") or "").strip() or None
    if agent is not None and len(agent) > 128:
        raise QueryError("agent names are at most 128 characters")
    worst_text = (params.get("worst") or str(DEFAULT_WORST)).strip()
    if not worst_text.isdigit() or not 1 <= int(worst_text) <= MAX_WORST:
        raise QueryError(f"worst must be a whole number from 1 to {MAX_WORST}")
    try:
        time = check_time((params.get("time") or DEFAULT_TIME).strip())
    except ValueError as exc:
        raise QueryError(str(exc)) from None
    group_text = (params.get("group") or "1").strip()
    if group_text not in ("0", "1"):
        raise QueryError("group must be 1 (fold near-identical answers) or 0")
    return ReviewQuery(since, metric, agent, int(worst_text), time, group_text == "1")


# ----------------------------------------------------------------------------------- auth


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8")).digest()


def _presented_token(header: str, allow_basic: bool) -> str | None:
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if allow_basic and scheme.lower() == "basic":
        try:
            credentials = aiohttp.BasicAuth.decode(f"{scheme} {value.strip()}", "utf-8")
        except ValueError:  # not base64, not UTF-8, or no "user:password"
            return None
        return str(credentials.password)
    return None


def token_matches(header: str | None, expected: bytes, allow_basic: bool = False) -> bool:
    """Whether an Authorization header carries the token (compared in constant time).

    `expected` is the SHA-256 of the token: comparing digests hides even the token's length.
    With `allow_basic`, HTTP Basic with the token as password (any user name) is accepted too.
    """
    if not header:
        return False
    presented = _presented_token(header, allow_basic)
    if presented is None:
        return False
    return hmac.compare_digest(_digest(presented), expected)


def _unauthorized(browser: bool) -> web.Response:
    response = web.Response(status=401, text="401: the review needs a bearer token\n")
    response.headers.add("WWW-Authenticate", f'Bearer realm="{REALM}"')
    if browser:
        response.headers.add("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"')
    response.headers.update(SECURITY_HEADERS)
    return response


def token_middleware(token: str, allow_basic: bool) -> Middleware:
    """Middleware answering 401 on the review routes unless the request carries `token`."""
    expected = _digest(token)

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        browser = _BROWSER_ROUTES.get(request.match_info.route.name or "")
        if browser is None:
            return await handler(request)
        basic = browser and allow_basic
        if not token_matches(request.headers.get("Authorization"), expected, allow_basic=basic):
            return _unauthorized(browser=basic)
        return await handler(request)

    return require_token


# --------------------------------------------------------------------------------- routes


class ReviewHandlers:
    """The two routes' handlers; the store is looked up per request (it opens after the
    server starts: None means not yet, answered 503)."""

    def __init__(
        self,
        store_getter: Callable[[], Store | None],
        redactor: TextRedactor | None,
        trace_url_template: str | None,
    ) -> None:
        self._store_getter = store_getter
        self._redactor = redactor
        self._trace_url = trace_url_template

    async def _load(self, query: ReviewQuery) -> tuple[Review, list[str]] | str:
        """The listing and the agents seen, or why they cannot be read."""
        store = self._store_getter()
        if store is None:
            return "the results store is not open (store.enabled false, or still starting)"
        try:
            review = await review_for(store, query, self._redactor)
            agents = await agents_seen(store, query.since, query.time)
        except Exception as exc:
            # The message of a database error may quote the URL: log the type only.
            log.warning("review query failed", error=type(exc).__name__)
            return "the results store could not be read; see the daemon's log"
        return review, agents

    async def page(self, request: web.Request) -> web.Response:
        params = {k: request.query.get(k, "") for k in QUERY_PARAMETERS}
        try:
            query = parse_query(params)
        except QueryError as exc:
            return self._error_page(params, str(exc), 400)
        loaded = await self._load(query)
        if isinstance(loaded, str):
            return self._error_page(params, loaded, 503)
        review, agents = loaded
        body = render_page(
            review.worst,
            params,
            agents,
            since=query.since,
            trace_url=self._trace_url,
            time=query.time,
            review=review,
        )
        return _html(body, 200)

    def _error_page(self, params: dict[str, str], error: str, status: int) -> web.Response:
        return _html(render_page([], params, [], error=error, trace_url=self._trace_url), status)

    async def as_json(self, request: web.Request) -> web.Response:
        try:
            query = parse_query(request.query)
        except QueryError as exc:
            return _json({"error": str(exc)}, 400)
        loaded = await self._load(query)
        if isinstance(loaded, str):
            return _json({"error": loaded}, 503)
        review, _agents = loaded
        return _json(review_json(review.worst, query, review), 200)


def add_review_routes(
    app: web.Application,
    store_getter: Callable[[], Store | None],
    token: str | None,
    *,
    redactor: TextRedactor | None = DEFAULT_REDACTOR,
    trace_url_template: str | None = None,
    allow_basic: bool = True,
    bound_host: str | None = None,
) -> None:
    """Add ``GET /review`` (HTML) and ``GET /review.json`` to the daemon's app.

    With `token`, both routes require it (see the module's docstring); `allow_basic` lets the
    page take it as the password of HTTP Basic. `bound_host` is the address the server listens
    on: without a token, a warning is logged unless it is a loopback address. `redactor` is
    applied to every text shown (None: the store's text as is). `trace_url_template`, e.g.
    ``https://grafana.example/explore?traceId={trace_id}``, makes each trace id a link to a
    trace viewer; otherwise it links to its own anchor.
    """
    if token is not None and not token.strip():
        raise ValueError("the review token is empty: set a token, or none to disable auth")
    _check_trace_url(trace_url_template)
    if token is None and not _loopback(bound_host):
        log.warning(
            "review pages served without a token; bind the HTTP server to a private address"
        )
    if token is not None:
        app.middlewares.append(token_middleware(token, allow_basic))
    handlers = ReviewHandlers(store_getter, redactor, trace_url_template)
    app.router.add_get("/review", handlers.page, name=PAGE_ROUTE)
    app.router.add_get("/review.json", handlers.as_json, name=JSON_ROUTE)


def _check_trace_url(template: str | None) -> None:
    if template is None:
        return
    if not template.startswith(("http://", "https://")):
        raise ValueError("trace_url_template must start with http:// or https://")
    try:
        template.format(trace_id="x")
    except (KeyError, IndexError, ValueError):
        raise ValueError("trace_url_template may hold only the field {trace_id}") from None


def _loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _html(body: str, status: int) -> web.Response:
    response = web.Response(status=status, text=body, content_type="text/html", charset="utf-8")
    response.headers.update(SECURITY_HEADERS)
    response.headers["Content-Security-Policy"] = content_security_policy()
    return response


def _json(document: dict[str, Any], status: int) -> web.Response:
    response = web.json_response(
        document, status=status, dumps=lambda v: json.dumps(v, ensure_ascii=False)
    )
    response.headers.update(SECURITY_HEADERS)
    return response
