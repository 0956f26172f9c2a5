"""Value types shared by every stage: the RAG trace (the native contract: schema/trace-v1.json,
docs/input.md) and what the stages emit."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

DEFAULT_AGENT = "default"
# Bounds of the store's integer columns: a trace beyond them is rejected at decoding.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

ConstraintKind = Literal[
    "language", "max_chars", "max_sentences", "forbidden_terms", "required_terms", "format"
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class Context(_Strict):
    """One retrieved chunk, in the order it was given to the model."""

    id: str
    text: str
    score: float | None = None
    rank: int | None = Field(default=None, ge=0, le=INT32_MAX)
    source: str | None = None
    metadata: dict[str, Any] | None = None


class Constraint(_Strict):
    """A rule active at a turn; `kind` makes it machine-checkable."""

    id: str
    text: str
    kind: ConstraintKind | None = None
    value: Any = None


class Usage(_Strict):
    input_tokens: int | None = Field(default=None, ge=0, le=INT64_MAX)
    output_tokens: int | None = Field(default=None, ge=0, le=INT64_MAX)


class Feedback(_Strict):
    score: float | None = None
    comment: str | None = None


class AssemblyRecord(_Strict):
    """What the OTLP stage knew of a trace it assembled from spans, carried with the trace on
    the internal traces topic: when its root span started (nanoseconds since the epoch; the
    earliest span's start without a root; None when no span says), whether it was whole when
    released (else its results are flagged `incomplete_trace`), and its revision (2, 3, ...:
    re-assembled after late spans; its results replace the earlier ones, its metrics are not
    counted again). Producers never set it: the native contract does not have it."""

    start_ns: int | None = Field(default=None, ge=1)
    complete: bool = True
    revision: int = Field(default=1, ge=1)


class Trace(_Strict):
    """One RAG turn: native JSON trace contract, version 1."""

    schema_version: Literal[1] = 1
    trace_id: str = Field(min_length=1, max_length=256)
    timestamp: datetime
    agent: str = Field(default=DEFAULT_AGENT, min_length=1, max_length=128)
    conversation_id: str | None = Field(default=None, max_length=256)
    turn: int | None = Field(default=None, ge=1, le=INT32_MAX)
    query: str
    contexts: list[Context]
    # Retrieved documents the trace knows of but whose text it does not carry (an OTLP
    # retrieval span that records ids and scores only, or no documents at all). Faithfulness
    # and the context metrics are then unmeasured (`contexts_without_text`), never guessed.
    contexts_without_text: int | None = Field(default=None, ge=0, le=INT32_MAX)
    answer: str
    reference: str | None = None
    constraints: list[Constraint] | None = None
    memory_tokens: int | None = Field(default=None, ge=0, le=INT64_MAX)
    model: str | None = None
    latency_ms: float | None = Field(default=None, ge=0)
    usage: Usage | None = None
    feedback: Feedback | None = None
    language: str | None = None
    metadata: dict[str, Any] | None = None
    # Set by the OTLP stage only (not in the native contract's schema; a native message that
    # carries it is rejected).
    assembly: SkipJsonSchema[AssemblyRecord | None] = None

    @field_validator("timestamp")
    @classmethod
    def _require_timezone(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("timestamp must carry a UTC offset (RFC 3339)")
        return value

    @property
    def partition_key(self) -> str:
        """The Kafka key this trace should carry: its conversation, else itself."""
        return self.conversation_id or self.trace_id


class Score(_Strict):
    """A metric's value in [0, 1], or None with the reason it is unmeasured (never 0, never NaN)."""

    value: float | None = None
    reason: str | None = None

    @property
    def measured(self) -> bool:
        return self.value is not None

    @classmethod
    def of(cls, value: float) -> Score:
        if value != value or not 0.0 <= value <= 1.0:  # NaN or out of range
            return cls(value=None, reason=f"invalid value {value!r}")
        return cls(value=value)

    @classmethod
    def unmeasured(cls, reason: str) -> Score:
        return cls(value=None, reason=reason)


class StatementVerdict(_Strict):
    """One statement of the answer and whether the contexts support it."""

    statement: str
    supported: bool
    evidence_context_id: str | None = None
    support: float | None = None
    reason: str | None = None


class ConstraintVerdict(_Strict):
    constraint_id: str
    status: Literal["satisfied", "violated", "omitted", "unmeasured"]
    reason: str | None = None


PriorityReason = Literal["no_contexts", "negative_feedback", "cross_language", "low_support"]


class Prediction(_Strict):
    """Tier 0's calibrated prediction of one judge metric for one trace, made before the judge
    answered: the expected judge score (`mean`) and the chance it falls below the metric's
    threshold (`below`)."""

    mean: float
    below: float


class Selection(_Strict):
    """Why the judge saw a trace, or did not (docs/metrics.md, "Population estimates").

    `uniform`: in the uniform draw (a hash of the conversation id under the rate in force),
    decided independently of any priority, so these traces are a sample of all traffic;
    `inclusion_probability`: that rate when the decision was made (load lowers it);
    `priority`: the priority rule the trace matched, if any (judged beyond the rate unless
    `priority_capped`: the cap on the share of traffic priorities may add skipped it);
    `priority_probability`: for a priority, the chance the cap gave it of being judged had the
    draw not chosen it (monitor.evaluators.sampler);
    `predictions`: tier 0's calibrated predictions, per judge metric, recorded when made.
    """

    uniform: bool
    inclusion_probability: float = Field(ge=0.0, le=1.0)
    priority: PriorityReason | None = None
    priority_capped: bool = False
    priority_probability: float | None = Field(default=None, ge=0.0, le=1.0)
    predictions: dict[str, Prediction] = Field(default_factory=dict)

    @property
    def judged(self) -> bool:
        """Whether this selection sends the trace to the judge."""
        return self.uniform or (self.priority is not None and not self.priority_capped)

    @property
    def judged_probability(self) -> float | None:
        """The chance the trace had of being judged, by the draw or as a priority: the weight
        of a judged trace in the estimates is its inverse. None for a priority recorded before
        the cap was a chance (its probability is unknown)."""
        rate = self.inclusion_probability
        if self.priority is None:
            return rate
        if self.priority_probability is None:
            return None
        return rate + (1.0 - rate) * self.priority_probability


class EvaluationResult(_Strict):
    """One result per (trace_id, evaluator); a re-score overwrites, never duplicates."""

    trace_id: str
    conversation_id: str | None = None
    turn: int | None = None
    agent: str = DEFAULT_AGENT
    timestamp: datetime
    evaluator: str
    scores: dict[str, Score]
    statements: list[StatementVerdict] = Field(default_factory=list)
    constraints: list[ConstraintVerdict] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    judge_model: str | None = None
    tokens: Usage | None = None
    latency_ms: float | None = None
    errors: list[str] = Field(default_factory=list)
    selection: Selection | None = None  # why the judge saw the trace (with a judge configured)

    @classmethod
    def of_trace(
        cls, trace: Trace, evaluator: str, scores: dict[str, Score], **details: Any
    ) -> EvaluationResult:
        """`evaluator`'s result for `trace`, keyed and labelled as the trace is; `details` are
        the other fields (statements, flags, tokens, latency_ms, ...)."""
        return cls(
            trace_id=trace.trace_id,
            conversation_id=trace.conversation_id,
            turn=trace.turn,
            agent=trace.agent,
            timestamp=trace.timestamp,
            evaluator=evaluator,
            scores=scores,
            **details,
        )

    @property
    def unsupported_claims(self) -> list[str]:
        return [v.statement for v in self.statements if not v.supported]
