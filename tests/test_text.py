"""Text primitives of the heuristic evaluator: sentences, tokens, entities (EN + JA)."""

# Japanese punctuation and full-width letters are the point of these inputs.

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.evaluators.casing import lower
from monitor.evaluators.grounding import plain_tokens
from monitor.evaluators.text import (
    content_tokens,
    extract_entities,
    normalize_number,
    number_keys,
    split_sentences,
    stem,
)

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


# Python's str.lower looks at a capital sigma's neighbours (a word's last one becomes ς), which
# mypyc's compiled str.lower does not before Python 3.13; tier 0 lowers through casing.lower so
# that its compiled build reads Greek exactly as its sources do (tests/test_compiled.py runs
# this file against the compiled build).
@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("ΣσςΟΔΥΕΑaZ .-1İ")) | st.text())
def test_lowering_is_pythons_whichever_build_runs(text: str) -> None:
    assert lower(text) == str.lower(text)


def test_a_capital_sigma_ending_a_word_lowers_to_the_final_form() -> None:
    assert lower("ΟΔΥΣΣΕΥΣ ΣΟΦΟΣ") == "οδυσσευς σοφος"
    assert plain_tokens("ΟΔΥΣΣΕΥΣ") == frozenset({"οδυσσευς"})
