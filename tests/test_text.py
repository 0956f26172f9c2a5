"""Text primitives of the heuristic evaluator: sentences, tokens, language, entities (EN + JA)."""

# Japanese punctuation and full-width letters are the point of these inputs.

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.evaluators.text import (
    content_tokens,
    detect_language,
    extract_entities,
    normalize_number,
    number_keys,
    split_sentences,
    stem,
)
from tests.support.dev_data import dev_data_path

# --- sentence splitting ----------------------------------------------------------------------


def test_english_sentences_keep_abbreviations_initials_and_decimals_together() -> None:
    text = (
        "Dr. Ada Marsh joined the U.S. Navy in 1961. The hull cost $4.75 million, e.g. more than "
        "planned. J. R. Pell signed it! Was it late? It was."
    )
    assert split_sentences(text) == [
        "Dr. Ada Marsh joined the U.S. Navy in 1961.",
        "The hull cost $4.75 million, e.g. more than planned.",
        "J. R. Pell signed it!",
        "Was it late?",
        "It was.",
    ]


def test_lines_and_bullets_are_separate_statements_without_their_markers() -> None:
    text = "Steps:\n- Open the lid\n* Pour the water.\n2. Close it. Wait ten minutes\n\n・確認する"
    assert split_sentences(text) == [
        "Steps:",
        "Open the lid",
        "Pour the water.",
        "Close it.",
        "Wait ten minutes",
        "確認する",
    ]


def test_japanese_sentences_split_without_spaces() -> None:
    text = "駅は北口にある。バスは十分ごとに出る！本当？「切符は不要。」と係員が言った。"
    assert split_sentences(text) == [
        "駅は北口にある。",
        "バスは十分ごとに出る！",
        "本当？",
        "「切符は不要。」と係員が言った。",
    ]


def test_sentence_glued_to_the_next_one_is_split() -> None:
    assert split_sentences("It rained all week.The match was moved.") == [
        "It rained all week.",
        "The match was moved.",
    ]


def test_pieces_without_letters_are_dropped() -> None:
    assert split_sentences("---\n**\n  \n...") == []


# --- tokens ----------------------------------------------------------------------------------


def test_english_tokens_are_stemmed_content_words() -> None:
    assert content_tokens("The engineers were designing two bridges") == [
        "engin",
        "design",
        "2",
        "bridg",
    ]
    # both sides of a comparison meet at the same stem
    assert stem("bridges") == stem("bridge")
    assert stem("designed") == stem("designing")


def test_numbers_are_normalised() -> None:
    tokens = content_tokens("It carried 18,000 cars and 4.0 tonnes")
    assert tokens == ["carry", "18000", "car", "4", "tonn"]
    assert normalize_number("23.70") == "23.7"
    assert normalize_number("007") == "7"


def test_japanese_tokens_are_bigrams_of_kanji_and_katakana_runs() -> None:
    tokens = content_tokens("図書館でコーヒーを飲む")
    assert "図書" in tokens and "書館" in tokens
    assert "コー" in tokens and "ヒー" in tokens
    assert "飲" in tokens  # a single kanji stays a unigram
    assert not any(t in tokens for t in ("で", "を", "む"))  # hiragana: particles, okurigana


def test_full_width_text_matches_ascii() -> None:
    assert content_tokens("ＡＢＣ　１２３") == content_tokens("ABC 123")


# --- language --------------------------------------------------------------------------------


def test_detect_language() -> None:
    assert detect_language("Where is the nearest train station?") == "en"
    assert detect_language("最寄りの駅はどこですか？") == "ja"
    assert detect_language("Pythonは1991年に公開されました。") == "ja"
    assert detect_language("Où se trouve la gare la plus proche de la ville?") == "other"
    assert detect_language("가장 가까운 역은 어디입니까?") == "other"
    # too little to tell: a bare name, a number, a two-kanji noun
    assert detect_language("Delhi") == "unknown"
    assert detect_language("1998") == "unknown"
    assert detect_language("東京") == "unknown"
    assert detect_language("") == "unknown"


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
def test_short_english_sentences_with_numbers_and_units_are_english(sentence: str) -> None:
    """No English function word, or a borrowed accented word, does not make a sentence foreign."""
    assert detect_language(sentence) == "en"


@pytest.mark.parametrize(
    "sentence",
    [
        "Der Zug fährt um 8 Uhr ab.",
        "El tren sale a las 8 de la mañana.",
        "Le stockage coûte 2 centimes par gigaoctet et par mois.",
        "Il treno parte alle 8 della mattina e non si ferma.",
    ],
)
def test_other_latin_languages_are_not_english(sentence: str) -> None:
    assert detect_language(sentence) == "other"


def _dev_rows(name: str) -> list[dict[str, str]]:
    with dev_data_path("hallucination", name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.mark.parametrize(("name", "language"), [("dev_en.jsonl", "en"), ("dev_ja.jsonl", "ja")])
def test_language_of_the_dev_data(name: str, language: str) -> None:
    """Every question and answer of the labelled dev data is detected as its language, or as
    'unknown' when it is a bare name or phrase of one to three words -- never the other
    language, never 'other'."""
    for row in _dev_rows(name):
        for field in ("question", "answer"):
            text = row[field]
            if not text:
                continue
            found = detect_language(text)
            if found == "unknown":
                assert len(text.split()) <= 3, text
            else:
                assert found == language, (field, text)


# --- entities --------------------------------------------------------------------------------


def test_entities_numbers_times_and_names() -> None:
    ents = extract_entities("Mara Quell opened the Fennick Museum in 1987. It opens at 9 am.")
    numbers = {e.key for e in ents if e.kind == "number"}
    names = {e.surface for e in ents if e.kind == "name"}
    assert numbers == {"1987", "9:00"}
    assert {"Mara", "Quell", "Fennick", "Museum"} <= names
    assert "It" not in names  # a sentence-initial function word is not a name


def test_sentence_initial_word_is_not_a_name_unless_a_name_follows() -> None:
    names = {e.surface for e in extract_entities("Additionally, prices rose. Lena Ortiz left.")}
    assert "Additionally" not in names
    assert {"Lena", "Ortiz"} <= names


def test_katakana_names_and_numbers_in_japanese() -> None:
    ents = extract_entities("館長はタナカ・ヒロシで、1982年に就任した。")
    assert {e.key for e in ents if e.kind == "number"} == {"1982"}
    assert {e.key for e in ents if e.kind == "name"} == {"タナカ・ヒロシ"}


def test_number_keys_cover_words_times_and_thousands() -> None:
    keys = number_keys("Open 17:0-21:30 and at 2 pm; eight rooms; 49,400 visitors")
    assert {"17:00", "21:30", "14:00", "8", "49400"} <= keys
    assert "17" in keys  # an hour also states the hour alone


# --- robustness ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_primitives_never_fail_and_sentences_come_from_the_text(text: str) -> None:
    for sentence in split_sentences(text):
        assert sentence and sentence in text
    content_tokens(text)
    extract_entities(text)
    number_keys(text)
    assert detect_language(text) in ("ja", "en", "other", "unknown")
