"""/review in a real browser: headless Debian Chromium against a real server on 127.0.0.1.

`--dump-dom` gives the DOM after the browser parsed and laid out the page: what a person sees
(the worst answer first, its claims, the trace's `<script>` shown as text and never run).
`--screenshot` takes the picture in docs/review.png (set RAGMON_REVIEW_SCREENSHOT=docs/review.png
to write it there). Chromium cannot send a bearer header from its command line: the token is
tested in tests/test_review.py, and here through the browser's own HTTP Basic path.

Needs `chromium` (scripts/test.sh installs it); without it the tests skip, or fail under
RAGMON_TEST_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import struct
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
import pytest_asyncio
import structlog.testing

from monitor.sinks.store import Store
from tests.test_review import TOKEN, WORST_CLAIMS, seed, serve_review

pytestmark = pytest.mark.slow  # a real Chromium

SCREENSHOT_ENV = "RAGMON_REVIEW_SCREENSHOT"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
TIMEOUT = 90.0


async def run_chromium(chromium: str, profile: Path, *args: str) -> str:
    """Run headless Chromium with a fresh profile; its standard output."""
    process = await asyncio.create_subprocess_exec(
        chromium,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: helpers are cleaned up with it
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode("utf-8")


class Seen(HTMLParser):
    """What a person sees of the page: the answers in order with their text, and any script."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.articles: list[dict[str, str]] = []
        self.text: list[str] = []
        self.elements: list[str] = []
        self.body_attrs: dict[str, str | None] = {}
        self._in_article = 0
        self._skip = 0
        self._reason = ""  # the unmeasured reason of the section being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(tag)
        values = dict(attrs)
        if tag == "body":
            self.body_attrs = values
        if tag in ("style", "title"):
            self._skip += 1
        if tag == "section" and values.get("data-reason"):
            self._reason = values.get("data-reason") or ""
        if tag == "article":
            self._in_article += 1
            self.articles.append(
                {
                    "trace_id": values.get("data-trace-id") or "",
                    "id": values.get("id") or "",
                    "rank": values.get("data-rank") or "",
                    "section": self._reason,
                    "text": "",
                }
            )

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "title"):
            self._skip -= 1
        if tag == "article":
            self._in_article -= 1

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.text.append(data)
        if self._in_article:
            self.articles[-1]["text"] += data

    @property
    def visible(self) -> str:
        return " ".join("".join(self.text).split())


def seen(dom: str) -> Seen:
    parser = Seen()
    parser.feed(dom)
    parser.close()
    return parser


@pytest_asyncio.fixture(loop_scope="function")
async def page_url(tmp_path: Path, chromium: str) -> AsyncIterator[str]:
    with structlog.testing.capture_logs():
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'review.db'}")
        try:
            await seed(store)
            async with serve_review(lambda: store, None) as base:
                yield base
        finally:
            await store.close()


async def test_a_person_sees_the_worst_answer_first(
    page_url: str, tmp_path: Path, chromium: str
) -> None:
    dom = await run_chromium(
        chromium,
        tmp_path / "profile",
        "--dump-dom",
        f"{page_url}/review?since=1h&metric=faithfulness",
    )
    page = seen(dom)
    ranked = [a["trace_id"] for a in page.articles if a["rank"]]
    assert ranked == ["t-worst", "t-xss", "t-secret", "t-good"]
    assert page.articles[0]["id"] == "trace-t-worst"
    visible = page.visible
    assert "Worst answers" in visible
    assert "4 answers ranked by faithfulness, worst first" in visible
    # What the list leaves out is said, and the answer it cannot rank is shown by its reason.
    assert "1 could not be measured" in visible
    assert "Could not be measured: 1 answer needs a human" in visible
    (refusal,) = [a for a in page.articles if not a["rank"]]
    assert refusal["trace_id"] == "t-unmeasured"
    assert refusal["section"] == "refusal"
    assert "I cannot answer that." in refusal["text"]
    assert "unmeasured (refusal)" in " ".join(refusal["text"].split())
    worst = " ".join(page.articles[0]["text"].split())
    assert "#1" in worst and "faithfulness 0.10" in worst
    assert "When does the Shibuya store open on Sunday?" in worst
    for claim in WORST_CLAIMS:
        assert claim in worst
    assert "lang-ja" in worst and "violated" in worst and "max-3-sentences" in worst
    # The answer's markup is text a person reads, and it never ran.
    xss = " ".join(page.articles[1]["text"].split())
    assert "<script>document.body.setAttribute('data-pwned','1')</script>" in xss
    assert "<img src=x onerror=alert(1)>" in xss
    assert "script" not in page.elements and "img" not in page.elements
    assert "data-pwned" not in page.body_attrs
    assert "The invoice is <b>void</b>." in xss
    # Missing scores read "unmeasured", not 0; redacted text stays redacted.
    assert "unmeasured (empty_answer)" in xss
    assert "answer_relevancy 0.00" not in xss
    assert "alice.tanaka@example.com" not in visible and "[REDACTED]" in visible


async def test_filters_work_in_the_browser(page_url: str, tmp_path: Path, chromium: str) -> None:
    # The form's GET submits these parameters; the browser shows only that agent's answers.
    url = f"{page_url}/review?metric=faithfulness&agent=billing-bot&since=1h&worst=20"
    page = seen(await run_chromium(chromium, tmp_path / "profile", "--dump-dom", url))
    assert [a["trace_id"] for a in page.articles] == ["t-xss"]
    assert "agent billing-bot" in page.visible
    assert "could not be measured" not in page.visible  # t-unmeasured is another agent's
    bad = seen(
        await run_chromium(
            chromium, tmp_path / "profile2", "--dump-dom", f"{page_url}/review?since=soon"
        )
    )
    assert bad.articles == [] and "--since must look like" in bad.visible


async def test_token_through_the_browser(tmp_path: Path, chromium: str) -> None:
    """With a token, the browser gets nothing without it and the page with it (HTTP Basic)."""
    with structlog.testing.capture_logs():
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'review.db'}")
        try:
            await seed(store)
            async with serve_review(lambda: store, TOKEN) as base:
                denied = seen(
                    await run_chromium(
                        chromium,
                        tmp_path / "p1",
                        "--dump-dom",
                        f"{base}/review?since=1h&metric=faithfulness",
                    )
                )
                host = base.removeprefix("http://")
                allowed = seen(
                    await run_chromium(
                        chromium,
                        tmp_path / "p2",
                        "--dump-dom",
                        f"http://oncall:{TOKEN}@{host}/review?metric=faithfulness",
                    )
                )
        finally:
            await store.close()
    assert denied.articles == [] and "t-worst" not in denied.visible
    assert [a["trace_id"] for a in allowed.articles][:1] == ["t-worst"]


async def test_screenshot(page_url: str, tmp_path: Path, chromium: str) -> None:
    shot = tmp_path / "review.png"
    await run_chromium(
        chromium,
        tmp_path / "profile",
        f"--screenshot={shot}",
        "--window-size=1280,900",
        f"{page_url}/review?since=1h&metric=faithfulness&worst=20",
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 900)
    assert len(data) > 20_000, "a rendered page, not a blank image"
    target = os.environ.get(SCREENSHOT_ENV)
    if target:
        await asyncio.to_thread(Path(target).write_bytes, data)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chromium must reach 127.0.0.1 directly, whatever proxy the environment names."""
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
