"""Language identification (monitor.evaluators.language): every language told, short text
abstains rather than guesses, and the model ships in the wheel (nothing is downloaded)."""

# Text in many languages is the point of these inputs.

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from monitor.evaluators.language import (
    UNKNOWN,
    ContextLanguages,
    identify,
    mixes_scripts,
    primary,
)
from tests.support.dev_data import dev_data_path

REPO = Path(__file__).resolve().parents[1]
SHORT_ANSWERS = REPO / "tests" / "fixtures" / "languages" / "short_answers.jsonl"


def test_languages_are_told_by_the_model_not_only_english_and_japanese() -> None:
    assert identify("Where is the nearest train station?") == "en"
    assert identify("最寄りの駅はどこですか？") == "ja"
    assert identify("Pythonは1991年に公開されました。") == "ja"
    assert identify("Où se trouve la gare la plus proche de la ville?") == "fr"
    assert identify("Die Garantie gilt zwei Jahre ab dem Kaufdatum.") == "de"
    assert identify("가장 가까운 역은 어디입니까?") == "ko"
    assert identify("Гарантия действует два года с даты покупки.") == "ru"
    assert identify("东京是日本的首都，也是日本最大的城市。") == "zh"


@pytest.mark.parametrize(
    "text",
    [
        "Delhi",  # a name
        "Jonathan Stark",
        "hydrogen peroxide",  # a term
        "1998",
        "東京",  # two kanji: Japanese or Chinese alike
        "",
        "   ",
        "42 %",
    ],
)
def test_one_or_two_words_are_too_little_to_tell(text: str) -> None:
    assert identify(text) == UNKNOWN


def test_kana_settle_japanese_where_the_model_reads_chinese() -> None:
    """A short Japanese question written mostly in kanji: the model's best guess is Chinese."""
    assert identify("炭酸水の正体は何？") == "ja"


@pytest.mark.parametrize(
    "sentence",
    [
        "Standard storage costs 2 cents per gigabyte per month.",
        "Shipping takes 3-5 business days.",
        "Max upload size 25 MB per file.",
        "Response time: 200 ms at p95.",
        "Plans start at $9 monthly, billed annually.",
        "Café prices rose 5% in 2024.",
        "Beyoncé sang at the 2013 Super Bowl halftime show.",
        "Plants die without water.",
        "The warranty period is two years.",
    ],
)
def test_short_english_sentences_are_never_another_language(sentence: str) -> None:
    """Terse English without function words is English or too little to tell, never Italian:
    that would leave an English answer over English contexts unmeasured."""
    assert identify(sentence) in ("en", UNKNOWN)


def test_short_answers_in_fourteen_languages_are_right_or_unknown() -> None:
    """The bench's hand-written short answers: none is told as another language, and at least
    85% are told right (bench/languages.py prints the figures per identifier)."""
    rows = [json.loads(line) for line in SHORT_ANSWERS.read_text("utf-8").splitlines()]
    told: Counter[bool] = Counter()
    for row in rows:
        found = identify(row["text"])
        assert found in (row["lang"], UNKNOWN), (row, found)
        told[found == row["lang"]] += 1
    assert len({row["lang"] for row in rows}) == 14
    assert told[True] / len(rows) >= 0.85, told


def _dev_rows(name: str) -> list[dict[str, Any]]:
    path = dev_data_path("hallucination", name)
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize(("name", "language"), [("dev_en.jsonl", "en"), ("dev_ja.jsonl", "ja")])
def test_the_dev_data_is_told_as_its_language_or_unknown(name: str, language: str) -> None:
    """Every question and answer of the labelled dev data is its language or unknown (names and
    short phrases), and the contexts of every item cover the language of its answer: no dev
    answer is wrongly left unmeasured as cross-language."""
    for row in _dev_rows(name):
        for field in ("question", "answer"):
            text = str(row[field] or "")
            assert identify(text) in (language, UNKNOWN), (field, text)
        contexts = ContextLanguages(row["contexts"])
        assert not contexts.outside(str(row["answer"])), row["id"]
        assert contexts.covers(language), row["id"]


def test_a_context_opening_with_a_native_name_still_covers_its_language() -> None:
    """A Wikipedia-style article whose first lines quote a Russian name reads as Russian there;
    the next lines are read before an English statement is called another language."""
    article = (
        "The 5th Separate Guards Tatsin Red Banner Order of Suvorov Tank Brigade (Russian: "
        "5-я отдельная гвардейская танковая Тацинская Краснознамённая, ордена Суворова "
        "бригада) is a military formation of the Russian Ground Forces. It is subordinate to "
        "the 36th Combined Arms Army of the Eastern Military District and is garrisoned in "
        "Ulan-Ude, Republic of Buryatia. Its military unit number is 46108. Formed in 2009, the "
        "5th Tank Brigade is the successor formation to the 2nd Guards Tank Corps. In 2015 the "
        "brigade was shown to be one of the Russian army units in the War in Donbass."
    )
    contexts = ContextLanguages([article])
    assert contexts.first == {"ru"}
    assert not contexts.outside("The brigade is garrisoned in Ulan-Ude, Republic of Buryatia.")
    assert contexts.outside("Die Brigade ist in Ulan-Ude in der Republik Burjatien stationiert.")


def test_contexts_that_cannot_be_told_make_everything_comparable() -> None:
    table = ContextLanguages(['{"name": "Live Oak Cafe", "city": "Santa Barbara"}', "2024"])
    assert not table
    assert not table.outside("Die Brigade ist in Ulan-Ude in der Republik Burjatien stationiert.")
    assert table.only() is None


def test_helpers() -> None:
    assert primary("de-AT") == "de" and primary("pt_BR") == "pt" and primary(" EN ") == "en"
    assert mixes_scripts("保証期間は2年です。The warranty also covers damage.")
    assert not mixes_scripts("Café prices rose 5% in 2024.")
    assert not mixes_scripts("保証期間は2年です。")


def test_the_model_ships_in_the_wheel_and_nothing_is_downloaded(tmp_path: Path) -> None:
    """In a fresh process with every proxy pointing at a closed port and the library's cache
    in an empty folder: languages are told, and nothing is written (the read-only container)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    closed = "http://127.0.0.1:9"
    env.update(
        FTLANG_CACHE=str(cache),
        TMPDIR=str(cache),
        HOME=str(cache),
        HTTP_PROXY=closed,
        HTTPS_PROXY=closed,
        http_proxy=closed,
        https_proxy=closed,
    )
    code = (
        "from monitor.evaluators.language import identify;"
        "print(identify('Die Garantie gilt zwei Jahre ab dem Kaufdatum.'),"
        " identify('La garantía dura dos años desde la fecha de compra.'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["de", "es"]
    assert list(cache.iterdir()) == []
