"""Tier-0 evaluator: deterministic lexical scoring of a RAG trace, English and Japanese.

No network, no language model, a few milliseconds per trace. See :class:`HeuristicEvaluator`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final, Literal

from monitor.evaluators import language
from monitor.evaluators.casing import lower
from monitor.evaluators.constraints import check_constraint
from monitor.evaluators.grounding import (
    GroundingModel,
    answer_features,
    load_model,
    token_overlap,
)
from monitor.evaluators.language import (
    ANALYSED,
    UNKNOWN,
    ContextLanguages,
    identify,
    identify_expecting,
    primary,
)
from monitor.evaluators.precision import average_precision
from monitor.evaluators.support import (
    ContextIndex,
    StatementSupport,
    SupportParams,
    chunk_recall,
    score_statement,
)
from monitor.evaluators.text import (
    CaselessPattern,
    content_tokens,
    has_digit,
    has_japanese,
    normalize,
    split_sentences,
)
from monitor.models import EvaluationResult, Score, StatementVerdict, Trace

# ---------------------------------------------------------------------------------------------
# Refusals ("I don't know") in English and Japanese

_SOURCES_EN: Final = (
    r"(?:context|passage|document|text|source|information|article|data|excerpt|material"
    r"|search result|record|knowledge base)s?"
)
_REFUSAL_EN: Final = CaselessPattern(
    r"\b(?:"
    # the assistant itself declines
    r"i (?:do not|don't|dont) (?:know|have (?:enough |sufficient |any |the )?information)"
    r"|i(?: am|'m) (?:not sure|unable to|not able to|sorry)"
    r"|i (?:cannot|can't|can not|could not|couldn't) (?:answer|find|determine|say|tell|help)"
    r"|(?:unable|not able) to (?:answer|determine|find (?:any|the|this|that|information))"
    r"|i apologi[sz]e"
    # ... or says the sources do not cover the question
    rf"|{_SOURCES_EN}\b[^.]{{0,60}}?\b(?:does|do|did)(?: not|n't) (?:provide|contain|mention"
    r"|include|specify|say|state|give|discuss|address|cover|have)"
    rf"|(?:is|are|was|were) not (?:mentioned|specified|stated|discussed|covered|addressed|given"
    rf"|provided|included) (?:in|by) the {_SOURCES_EN}"
    r"|(?:no|not enough|insufficient) (?:relevant |specific |further |additional )?information"
    r"|there is no (?:mention|reference)"
    r"|cannot be (?:determined|answered) (?:from|based on|with|using)"
    r")\b",
    # one of them is in every alternative above, in order: "i do ...", "i am"/"i'm", "i can"/
    # "i could", "unable to"/"not able to", "i apologise", "... do(es) not"/"don't ...",
    # "... is not mentioned", "no ... information", "there is no", "cannot be" (its "not ")
    needs=(
        "i do",
        "i am",
        "i'm",
        "i c",
        "able to",
        "i apologi",
        "not ",
        "n't ",
        "information",
        "there is no",
    ),
)
_REFUSAL_JA: Final = re.compile(
    r"分かりません|わかりません|分からない|わからない|存じません|不明です|不明でした"
    r"|情報(?:が|は|も)?(?:ありません|ない|見当たりません|含まれていません)"
    r"|記載(?:が|は)?(?:ありません|ない|されていません)|記述(?:が|は)?(?:ありません|ない)"
    r"|(?:情報|資料|文書|文脈|コンテキスト|テキスト|文章)(?:に|には|の中に|から)[^。]{0,30}"
    r"(?:含まれていません|見つかりません|見当たりません|書かれていません)"
    r"|お答えできません|回答できません|答えられません|お答えすることができません"
    r"|判断できません|特定できません|言及(?:が|は)?(?:ありません|されていません)"
    r"|申し訳(?:ありません|ございません)が"
)


def is_refusal_statement(statement: str) -> bool:
    """True for a statement that declines to answer or says the contexts lack the information."""
    norm = normalize(statement)
    return _REFUSAL_EN.search(norm) or (has_japanese(norm) and bool(_REFUSAL_JA.search(norm)))


# Meta references to the prompt ("Passage 2", "(Passage 1:4)", "[3]") state no fact.
_RE_META_REF: Final = re.compile(
    r"\(?\b(?:passages?|paragraphs?|documents?|sources?|contexts?|references?)"
    r"\s*#?\d+(?:\s*(?:[,:&-]|and|to)\s*\d+)*\)?|\[\d+(?:\s*[,-]\s*\d+)*\]",
    re.IGNORECASE,
)

# Statements that carry no claim: greetings, offers, list lead-ins ("Here is the summary:"). The
# whole-statement forms are anchored (the regex engine tries them at the start alone); the
# phrases are searched only in statements holding one of their words.
_FILLER_EN_WHOLE: Final = CaselessPattern(
    r"^(?:sure|certainly|of course|absolutely|okay|ok|great question|good question|hello|hi)"
    r"[!.,]*$"
    r"|^here(?:'s| is| are) (?:a |an |the |some )?(?:brief |short )?(?:summary|overview|answer"
    r"|list|breakdown|steps)\b[^.!?]*[.!]?$"
)
_FILLER_EN_PHRASE: Final = CaselessPattern(
    r"\b(?:let me know|i hope (?:this|that) helps|hope (?:this|that) helps|feel free to"
    r"|happy to help|glad to help)\b",
    needs=("let me know", "hope th", "feel free to", "to help"),
)
_FILLER_JA: Final = re.compile(r"お役に立て|参考になれば|以下の通りです|以下のとおりです")


def is_filler_statement(statement: str) -> bool:
    """True for a statement that makes no claim: a greeting, an offer to help, a heading or a
    lead-in that announces a list ('Steps:', 'Here is the summary:') -- a line ending with ':'
    and carrying at most four content words."""
    text = normalize(statement).strip().strip("*").strip()
    if text.endswith(":") and len(content_tokens(text)) <= 4:
        return True
    return (
        _FILLER_EN_WHOLE.search(text)
        or _FILLER_EN_PHRASE.search(text)
        or (has_japanese(text) and bool(_FILLER_JA.search(text)))
    )


_META_WORDS: Final = ("passage", "paragraph", "document", "source", "context", "reference")


def _strip_meta(statement: str) -> str:
    if not has_digit(statement):  # every reference has a number
        return statement
    if (  # and a '[' or one of the words, whose case ASCII text folds as re.IGNORECASE does
        statement.isascii()
        and "[" not in statement
        and not any(map(lower(statement).__contains__, _META_WORDS))
    ):
        return statement
    return _RE_META_REF.sub(" ", statement)


# ---------------------------------------------------------------------------------------------


StatementKind = Literal["claim", "refusal", "filler", "other_language"]


@dataclass(slots=True, init=False, unsafe_hash=True)
class Statement:
    """One sentence of the answer: a claim (scored when there are contexts), a refusal, filler
    that claims nothing ("Sure!", "Here is the summary:"), or a claim in a language none of the
    contexts is written in (``other_language``), which lexical matching cannot check.

    Never changed once made; its ``__init__`` written out for mypyc, as
    :class:`~monitor.evaluators.text.Entity`'s is."""

    text: str
    kind: StatementKind
    support: StatementSupport | None
    scored: str  # a claim as scored: its text without references to passages

    def __init__(
        self,
        text: str,
        kind: StatementKind,
        support: StatementSupport | None = None,
        scored: str = "",
    ) -> None:
        self.text = text
        self.kind = kind
        self.support = support
        self.scored = scored

    @property
    def checkable(self) -> bool:
        return self.support is not None and self.support.n_tokens > 0


def _model_language(answer: str) -> str:
    """Which of the grounding model's languages scores this answer."""
    return "ja" if identify(answer) == "ja" else "en"


def _ordered(trace: Trace) -> list[tuple[str, str]]:
    """Non-empty contexts, in rank order when every one has a rank, else as given."""
    ctx = [c for c in trace.contexts if c.text.strip()]
    if ctx and all(c.rank is not None for c in ctx):
        ctx = sorted(ctx, key=lambda c: c.rank or 0)
    return [(c.id, c.text) for c in ctx]


def _is_refusal(statements: list[Statement]) -> bool:
    """The answer as a whole declines: refusals are at least half of what it says, or it opens
    with one and says little else."""
    said = [s for s in statements if s.kind != "filler"]
    n_ref = sum(1 for s in said if s.kind == "refusal")
    if not n_ref:
        return False
    return 2 * n_ref >= len(said) or (said[0].kind == "refusal" and len(said) <= 2)


CROSS_LANGUAGE: Final = "cross_language"
UNSUPPORTED_LANGUAGE: Final = "unsupported_language"


def _unmeasured_reason(
    answer: str,
    refusal: bool,
    has_contexts: bool,
    has_claims: bool,
    other_language: bool,
    textless: bool = False,
    unanalysed: bool = False,
) -> str | None:
    """Why faithfulness and the context scores cannot be computed, or None when they can.

    `textless`: the trace says documents reached the model whose text it does not carry; an
    answer grounded in them would look invented, so nothing is measured rather than guessed.
    `unanalysed`: the answer is in a language tier 0 has no analyser for; English stemming
    and stopwords would make its words look invented."""
    if not answer:
        return "empty_answer"
    if refusal:
        return "refusal"
    if textless:
        return "contexts_without_text"
    if not has_contexts:
        return "no_contexts"
    if not has_claims and other_language:
        # every claim is in a language no context is written in: words cannot be compared
        # across languages, so a 0 would be a false measurement
        return CROSS_LANGUAGE
    if unanalysed:
        return UNSUPPORTED_LANGUAGE
    if not has_claims:
        return "no_claims"
    return None


def analysed_language(answer: str, contexts: ContextLanguages | None, question: str) -> str:
    """The language tier 0 would analyse the answer as: its own, or, when it is too short to
    tell, that of the contexts when they are all in one; ``unknown`` otherwise. The answer is
    expected in its contexts' languages, or, when none of them can be told, its question's."""
    expected: Collection[str] = contexts.first if contexts else ()
    if not expected and (asked := identify(question)) != UNKNOWN:
        expected = (asked,)
    found = identify_expecting(answer, expected)
    if found == UNKNOWN and contexts is not None:
        return contexts.only() or UNKNOWN
    return found


def unanalysed(language: str) -> bool:
    """A language that is told, but not one tier 0 has an analyser for."""
    return language != UNKNOWN and language not in ANALYSED


class HeuristicEvaluator:
    """Lexical tier-0 evaluator: deterministic, no network, English and Japanese.

    Scores (each in [0, 1], or unmeasured with a reason -- never 0 for "could not tell"):

    - ``faithfulness``: supported claim statements / all checkable claim statements (ragas
      definition). A statement is supported when its lexical support (see
      :mod:`monitor.evaluators.support`) reaches ``params.threshold``. Refusal and filler statements
      ("Sure!", "Here is the summary:") are not claims.
    - ``support``: the estimated probability that the answer is grounded -- none of its claims
      invented -- from a small learned combination of the claims' word overlap (lower quartile
      and minimum), the numbers and names no context states, and the answer's plain token
      overlap with the contexts (see :mod:`monitor.evaluators.grounding`). It ranks answers by
      hallucination risk better than the ratio, which ties a lot on short answers: tier 0's
      headline, for alerts and trends (bench/detect.py cross-validates both).
    - ``answer_relevancy``: share of the question's content terms the answer takes up (lexical
      focus); 0 for a refusal, as in ragas (a non-committal answer is not relevant).
    - ``context_precision``: average precision over the chunks in rank order, a chunk being
      useful when it alone supports at least one claim statement (ragas context precision
      without reference, with a lexical usefulness verdict).
    - ``context_utilization``: useful chunks / all chunks.

    Flags: ``no_contexts``, ``contexts_without_text`` (retrieved documents whose text the trace
    does not carry: faithfulness and the context scores are unmeasured with that reason),
    ``empty_answer``, ``refusal`` (the answer as a whole declines),
    ``partial_refusal`` (some statements decline, others claim), ``language_mismatch`` (answer
    language differs from the question's), ``unsupported_entities`` (a number, date or name in
    the answer appears in no context nor in the question), ``must_not_contain``,
    ``cross_language`` (some claim is in a language no context is written in),
    ``unsupported_language`` (the answer is in a language tier 0 has no analyser for).

    Languages are told by :mod:`monitor.evaluators.language` (fastText's identifier), for every
    language, not only English and Japanese. Across languages: a claim written in German over
    English contexts (or English over Japanese) shares no words with them, so lexical matching
    cannot tell whether it is grounded. Such a claim is left out -- neither supported nor
    unsupported, no verdict -- and when no claim is left, faithfulness, support and the context
    scores are unmeasured with reason ``cross_language``; so is answer relevancy when the
    answer's language differs from the question's. The LLM judge, which reads both languages,
    is what can score such a turn. An answer in a language other than English and Japanese
    over contexts in that language is unmeasured with reason ``unsupported_language``: English
    stemming and stopwords would score it, wrongly.

    Constraints with a `kind` that the trace carries are checked here, on every trace, with or
    without a conversation (:mod:`monitor.evaluators.constraints`); free-text ones are
    ``unmeasured`` (the LLM judge checks them on conversation turns).

    Refusals: an answer that declines ("I don't know", "情報がありません") makes no claim, so
    faithfulness, support and the context scores are unmeasured with reason ``"refusal"``.
    Scoring it 1.0 would let a model that refuses everything look perfectly faithful; scoring it
    0 would raise hallucination alarms for the very behaviour wanted when retrieval fails. The
    ``refusal`` flag -- and answer_relevancy 0 -- is where a monitor counts refusals.
    """

    name = "heuristic"

    def __init__(
        self,
        must_not_contain: Iterable[str] = (),
        params: SupportParams | None = None,
        model: GroundingModel | None = None,
    ) -> None:
        self.must_not_contain = tuple(t for t in must_not_contain if t.strip())
        self._forbidden = tuple(normalize(t).casefold() for t in self.must_not_contain)
        self.params = params or SupportParams()
        self.model = model or load_model()
        language.load()  # the identifier's model, now rather than on the first trace

    def evaluate(self, trace: Trace) -> EvaluationResult:
        started = time.perf_counter()
        flags: list[str] = []
        contexts = _ordered(trace)
        answer = trace.answer.strip()
        textless = bool(trace.contexts_without_text)
        if textless:
            flags.append("contexts_without_text")
        elif not contexts:
            flags.append("no_contexts")
        if not answer:
            flags.append("empty_answer")
        index = self._index(contexts, trace.query) if contexts else None
        languages = ContextLanguages([t for _, t in contexts]) if contexts else None
        statements = self.statements(answer, index, languages)
        refusal = _is_refusal(statements)
        if refusal:
            flags.append("refusal")
        elif any(s.kind == "refusal" for s in statements):
            flags.append("partial_refusal")
        other_language = not refusal and any(s.kind == "other_language" for s in statements)
        if other_language:
            flags.append(CROSS_LANGUAGE)
        foreign = bool(answer) and unanalysed(analysed_language(answer, languages, trace.query))
        if foreign:
            flags.append(UNSUPPORTED_LANGUAGE)
        checkable = [] if refusal else [s for s in statements if s.checkable]

        reason = _unmeasured_reason(
            answer, refusal, bool(contexts), bool(checkable), other_language, textless, foreign
        )
        scores: dict[str, Score] = {}
        verdicts: list[StatementVerdict] = []
        if reason is not None:
            for key in ("faithfulness", "support", "context_precision", "context_utilization"):
                scores[key] = Score.unmeasured(reason)
        else:
            assert index is not None
            verdicts = [self._verdict(s, contexts) for s in checkable]
            supported = sum(1 for v in verdicts if v.supported)
            scores["faithfulness"] = Score.of(supported / len(verdicts))
            features = self._features(checkable, contexts)
            scores["support"] = Score.of(self.model.support(_model_language(answer), features))
            useful = self._useful_chunks(checkable, index)
            scores["context_precision"] = Score.of(average_precision(useful))
            scores["context_utilization"] = Score.of(sum(useful) / len(useful))
            if any(s.support and s.support.unsupported_entities for s in checkable):
                flags.append("unsupported_entities")
        scores["answer_relevancy"] = self._answer_relevancy(trace.query, answer, refusal)

        if answer and self._language_mismatch(trace, answer):
            flags.append("language_mismatch")
        if answer and self._forbidden:
            folded = normalize(answer).casefold()
            if any(term in folded for term in self._forbidden):
                flags.append("must_not_contain")

        return EvaluationResult.of_trace(
            trace,
            self.name,
            scores,
            statements=verdicts,
            constraints=[check_constraint(c, trace.answer) for c in trace.constraints or ()],
            flags=flags,
            latency_ms=(time.perf_counter() - started) * 1000.0,
        )

    # -----------------------------------------------------------------------------------------

    def grounding_features(self, trace: Trace) -> tuple[str, dict[str, float]] | None:
        """The model language and grounding evidence :attr:`model` scores `support` from, or
        None when support is unmeasured (what bench/train_tier0.py fits the model on)."""
        contexts = _ordered(trace)
        answer = trace.answer.strip()
        if not contexts or not answer:
            return None
        index = self._index(contexts, trace.query)
        languages = ContextLanguages([t for _, t in contexts])
        if unanalysed(analysed_language(answer, languages, trace.query)):
            return None
        statements = self.statements(answer, index, languages)
        if _is_refusal(statements):
            return None
        checkable = [s for s in statements if s.checkable]
        if not checkable:
            return None
        return _model_language(answer), self._features(checkable, contexts)

    @staticmethod
    def _features(claims: list[Statement], contexts: list[tuple[str, str]]) -> dict[str, float]:
        supports = [s.support for s in claims if s.support is not None]
        invented = [e for sup in supports for e in sup.unsupported_entities]
        numbers = sum(1 for e in invented if e.kind == "number")
        return answer_features(
            [sup.lexical for sup in supports],
            invented_numbers=numbers,
            invented_names=len(invented) - numbers,
            overlap=token_overlap(" ".join(s.text for s in claims), (t for _, t in contexts)),
        )

    def _index(self, contexts: list[tuple[str, str]], question: str) -> ContextIndex:
        p = self.params
        return ContextIndex.build(
            contexts,
            question,
            window=p.window,
            pair_span=p.pair_span if p.pair_weight else 0,
        )

    def statements(
        self,
        answer: str,
        index: ContextIndex | None,
        languages: ContextLanguages | None = None,
    ) -> list[Statement]:
        """The answer's sentences, each classified (claim/refusal/filler/other_language) and
        claims scored against the contexts (written in `languages`)."""
        out: list[Statement] = []
        told_apart = languages is not None and languages.may_differ(answer)
        for sentence in split_sentences(answer):
            if is_refusal_statement(sentence):
                out.append(Statement(sentence, "refusal"))
            elif is_filler_statement(sentence):
                out.append(Statement(sentence, "filler"))
            elif told_apart and languages is not None and languages.outside(sentence):
                out.append(Statement(sentence, "other_language"))
            else:
                scored = _strip_meta(sentence)
                sup = score_statement(scored, index, self.params) if index else None
                out.append(Statement(sentence, "claim", sup, scored))
        return out

    def _verdict(self, s: Statement, contexts: list[tuple[str, str]]) -> StatementVerdict:
        sup = s.support
        assert sup is not None
        ok = sup.support >= self.params.threshold
        reasons: list[str] = []
        if sup.unsupported_entities:
            names = ", ".join(e.surface for e in sup.unsupported_entities)
            reasons.append(f"not in any context: {names}")
        if sup.conflicts:
            reasons.append(f"contradicts yes/no field: {', '.join(sup.conflicts)}")
        if not ok:
            reasons.append(f"low lexical support ({sup.support:.2f})")
        return StatementVerdict(
            statement=s.text,
            supported=ok,
            evidence_context_id=(
                contexts[sup.best_context][0] if sup.best_context is not None else None
            ),
            support=round(sup.support, 4),
            reason="; ".join(reasons) or None,
        )

    def _useful_chunks(self, claims: list[Statement], index: ContextIndex) -> list[bool]:
        """A chunk is useful when it alone supports at least one claim statement."""
        useful = [False] * len(index.ids)
        for s in claims:
            if all(useful):
                break
            recall = chunk_recall(s.scored, index)
            for pos in range(len(useful)):
                if not useful[pos]:
                    useful[pos] = recall(pos) >= self.params.threshold
        return useful

    @staticmethod
    def _answer_relevancy(question: str, answer: str, refusal: bool) -> Score:
        if not question.strip():
            return Score.unmeasured("no_question")
        if not answer:
            return Score.unmeasured("empty_answer")
        if refusal:
            return Score.of(0.0)
        asked = identify(question)
        answered = identify_expecting(answer, () if asked == UNKNOWN else (asked,))
        if UNKNOWN not in (asked, answered) and asked != answered:
            return Score.unmeasured(CROSS_LANGUAGE)  # no shared words to compare
        if unanalysed(answered if answered != UNKNOWN else asked):
            return Score.unmeasured(UNSUPPORTED_LANGUAGE)
        q = set(content_tokens(question))
        if not q:
            return Score.unmeasured("no_question_terms")
        a = set(content_tokens(answer))
        return Score.of(len(q & a) / len(q))

    @staticmethod
    def _language_mismatch(trace: Trace, answer: str) -> bool:
        expected = identify(trace.query)
        if expected == UNKNOWN and trace.language:
            expected = primary(trace.language)
        got = identify_expecting(answer, () if expected == UNKNOWN else (expected,))
        return UNKNOWN not in (expected, got) and expected != got
