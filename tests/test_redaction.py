"""Redaction before anything leaves the process: positive and negative examples per detector."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from monitor.config.judge import RedactionConfig
from monitor.evaluators import redaction
from monitor.evaluators.redaction import Redactor, fold, luhn_ok, my_number_ok

R = "[REDACTED]"


@pytest.fixture
def redactor() -> Redactor:
    return Redactor()


def test_my_number_check_digit() -> None:
    assert my_number_ok("123456789018")
    assert not my_number_ok("123456789012")
    assert not my_number_ok("12345678901")  # 11 digits
    assert not my_number_ok("12345678901a")


def test_luhn() -> None:
    assert luhn_ok("4111111111111111")
    assert luhn_ok("5500005555555559")
    assert luhn_ok("378282246310005")  # Amex, 15 digits
    assert not luhn_ok("4111111111111112")


def test_fold_keeps_offsets() -> None:
    text = "電話：０９０－１２３４－５６７８ ｆｏｏ＠ｅｘａｍｐｌｅ．ｊｐ"
    folded = fold(text)
    assert len(folded) == len(text)
    assert "090-1234-5678" in folded
    assert "foo@example.jp" in folded


def test_fold_maps_every_character_as_its_table_says() -> None:
    """The fast fold (substituting foldable runs) equals translating every character."""
    text = "".join(chr(cp) for cp in [*range(0x2000, 0x3100), *range(0xFF00, 0xFFFF)])
    assert fold(text) == text.translate(redaction._FOLD)
    assert fold("ｆｏｏ ﾃｽﾄ ｰ") == "foo ﾃｽﾄ -"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail taro.yamada+rag@example.co.jp now", f"mail {R} now"),
        ("連絡先：hanako_s@mail.example.com です", f"連絡先：{R} です"),
        ("全角 ｔａｒｏ＠ｅｘａｍｐｌｅ．ｊｐ まで", f"全角 {R} まで"),
        ("<ops@example.org>", f"<{R}>"),
    ],
)
def test_email(redactor: Redactor, text: str, expected: str) -> None:
    assert redactor.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "call 090-1234-5678 today",
        "call 03-1234-5678 today",
        "call 0120-123-456 today",
        "call (03)1234-5678 today",
        "call 03(1234)5678 today",
        "call 09012345678 today",
        "call ０９０－１２３４－５６７８ today",
        "call 090ー1234ー5678 today",
        "call +81 90 1234 5678 today",
        "call +81-3-1234-5678 today",
        "call +1 (555) 123-4567 today",
        "call +44 20 7946 0958 today",
        "call (555) 123-4567 today",
    ],
)
def test_phone_numbers(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == f"call {R} today"


@pytest.mark.parametrize(
    "text",
    [
        "released on 2024-01-15 at 10:30",
        "dated 09-10-2024",  # 8 digits: a date, not a phone number
        "version 1.2.3 of 3.14159",
        "1,234,567 users",
        "order 123456789012 shipped",  # 12 digits failing the My Number check
        "order 1234-5678-9012 shipped",
        "timestamp 1700000000123",
        "card 4111 1111 1111 1112",  # fails Luhn
        "ticket 1234-5678-9018-1234 open",  # holds a valid 4-4-4 My Number shape: still kept
        "serial 4111 1111 1111 1111 0000",  # a card-shaped window inside a longer 4-group chain
        "room +5 and +7",
        "count 0312",
        "max_tokens: 1234567890123456",  # 16 digits after a key that is not secret-like
    ],
)
def test_kept(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1111 ok",
        "card 4111-1111-1111-1111 ok",
        "card 4111111111111111 ok",
        "card 378282246310005 ok",
        "card ４１１１１１１１１１１１１１１１ ok",
    ],
)
def test_card_numbers(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == f"card {R} ok"


@pytest.mark.parametrize(
    "text",
    ["番号 123456789018 です", "番号 1234 5678 9018 です", "番号 1234-5678-9018 です"],
)
def test_my_number(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == f"番号 {R} です"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key sk-proj-AbCdEfGhIjKlMnOpQrSt1234 here", f"key {R} here"),
        ("key sk-AbCdEfGhIjKlMnOpQrSt1234 here", f"key {R} here"),
        ("Authorization: Bearer eyAbCdEfGhIjKlMnOpQr.stu", f"Authorization: Bearer {R}"),
        ("aws AKIAIOSFODNN7EXAMPLE here", f"aws {R} here"),
        ("gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 here", f"gh {R} here"),
        ("slack xoxb-1234567890-abcdefghij here", f"slack {R} here"),
        ('api_key="0123456789abcdef0123456789abcdef"', f'api_key="{R}"'),
        ("client_secret: dGhpcyBpcyBhIHNlY3JldCB2YWx1ZQ==", f"client_secret: {R}"),
        ('{"token": "abcDEF123456ghiJKL789"}', f'{{"token": "{R}"}}'),
        ("password=correcthorsebatterystaple", f"password={R}"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            f"jwt {R}",
        ),
    ],
)
def test_secrets(redactor: Redactor, text: str, expected: str) -> None:
    assert redactor.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "the bearer bonds matured",
        "a sketch of sk-learn usage",
        "the token: short",
        "tokens=12 and secrets are kept safe",
        "AKIA is a prefix",
    ],
)
def test_secret_lookalikes_kept(redactor: Redactor, text: str) -> None:
    assert redactor.redact(text) == text


def test_configured_patterns_and_replacement() -> None:
    r = Redactor(RedactionConfig(patterns=[r"EMP-\d{6}", r"社員番号\S+"], replacement="<x>"))
    assert r.redact("id EMP-123456, 社員番号A-99 and mail a@b.io") == "id <x>, <x> and mail <x>"


def test_adjacent_matches_merge_into_one_placeholder(redactor: Redactor) -> None:
    assert redactor.redact("a@example.com,b@example.com") == f"{R},{R}"
    assert redactor.redact("x a@example.com 090-1234-5678 y") == f"x {R} {R} y"


def test_disabled_leaves_text_alone() -> None:
    r = Redactor(RedactionConfig(enabled=False))
    assert r.redact("mail a@example.com") == "mail a@example.com"


def test_deterministic_and_idempotent(redactor: Redactor) -> None:
    text = "a@example.com 090-1234-5678 4111 1111 1111 1111 123456789018 sk-AbCdEfGhIjKlMnOpQr"
    once = redactor.redact(text)
    assert once == redactor.redact(text)
    assert redactor.redact(once) == once
    assert once == " ".join([R] * 5)


def test_numbers_next_to_other_numbers_are_still_found(redactor: Redactor) -> None:
    # a card followed by more digits, a My Number after another number: no leak either way
    assert redactor.redact("4111 1111 1111 1111 12 units") == f"{R} 12 units"
    assert redactor.redact("no. 7 123456789018") == f"no. 7 {R}"
    assert redactor.redact("ids 42-123456789018") == f"ids 42-{R}"
    # a 20-digit number is neither a card nor a My Number
    assert redactor.redact("id 41111111111111111111") == "id 41111111111111111111"


def test_invalid_pattern_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match="pattern 0"):
        RedactionConfig(patterns=["(unclosed"])
    with pytest.raises(ValidationError, match="empty string"):
        RedactionConfig(patterns=["x*"])


def _ungated_spans(text: str) -> list[tuple[int, int]]:
    """Every detector run on every text, as before the gates: what the gates must not change."""
    folded = fold(text)
    found = redaction._number_spans(folded)
    for detector in redaction._DETECTORS:
        for m in detector.pattern.finditer(folded):
            if detector.validator is None or detector.validator(m.group(0)):
                start, end = m.span(detector.group)
                if end > start:
                    found.append((start, end))
    return redaction._merge(found)


_TRICKY = [
    "ſecret=ABCDEFGHIJKLMNOPQRSTU",  # long s: matched by the case-insensitive key pattern
    "\u212aey api_\u212aey: abcdefghijklmnopqrstuv",  # Kelvin sign for K
    "ＡＰＩ＿ＫＥＹ＝ａｂｃｄｅｆｇｈｉｊｋｌｍｎｏｐｑｒ",  # full-width key and value
    "BEARER abcdefghijklmnop",
    "call (٥٥٥) ١٢٣-٤٥٦٧ now",  # Arabic-Indic digits: \d matches them
    "番号 ４１１１ １１１１ １１１１ １１１１ と １２３４５６７８９０１８",
    "tel ０３（１２３４）５６７８ or ＋８１ ９０ １２３４ ５６７８",
    "order 1234567 shipped 2024-01-15, ref 12-34-56",
    "",
]


def _development_texts() -> list[str]:
    texts: list[str] = []
    for path in sorted(Path("data/hallucination").glob("dev_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines()[:300]:
            item = json.loads(line)
            texts += [item["question"] or "", item["answer"] or "", *item["contexts"]]
    return texts


def test_gates_change_no_output(redactor: Redactor) -> None:
    """The cheap gates (a literal or a digit count every match needs) only skip patterns that
    could not match: the spans equal running every pattern on every text, on the development
    data's questions, answers and contexts and on Unicode edge cases."""
    texts = _TRICKY + _development_texts()
    assert len(texts) > 1000
    redacted = 0
    for text in texts:
        spans = redactor.spans(text)
        assert spans == _ungated_spans(text), text[:200]
        redacted += bool(spans)
    assert redacted >= len(_TRICKY) - 3  # the edge cases do exercise the detectors


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ſecret=ABCDEFGHIJKLMNOPQRSTU", f"ſecret={R}"),
        ("call (٥٥٥) ١٢٣-٤٥٦٧ now", f"call {R} now"),
        ("ＡＰＩ＿ＫＥＹ＝ａｂｃｄｅｆｇｈｉｊｋｌｍｎｏｐｑｒ", f"ＡＰＩ＿ＫＥＹ＝{R}"),
    ],
)
def test_gates_keep_unicode_matches(redactor: Redactor, text: str, expected: str) -> None:
    """A case-insensitive key written with a long s, a phone number in non-ASCII digits and a
    full-width key are still found although their literals differ from the ASCII ones."""
    assert redactor.redact(text) == expected
