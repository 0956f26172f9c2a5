"""Wires the stages together and owns the lifecycle: start, consume, graceful shutdown.

This is the only module that connects source, decoding, processing and export.

Where this sits in the data flow: docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import structlog
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from monitor.command import ExitCode
from monitor.compiled import fully_compiled
from monitor.config import Settings
from monitor.estimates.calibration import Calibrations
from monitor.estimates.recorder import EstimateRecorder
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.llm import LLMJudge
from monitor.evaluators.ragas_adapter import RagasEvaluator  # imports ragas only when built
from monitor.evaluators.redaction import Redactor
from monitor.evaluators.sampler import Sampler
from monitor.evaluators.token_budget import TokenBudget
from monitor.golden.schedule import GoldenScheduler
from monitor.golden.service import golden_service
from monitor.http import HttpServer, Probes, build_app
from monitor.messages import RawMessage
from monitor.metrics import Metrics
from monitor.retry import FailingCalls, RetryMetrics
from monitor.review.http import add_review_routes
from monitor.review.items import review_redactor
from monitor.shutdown import PRODUCER_CLOSE_SECONDS, ShutdownClock
from monitor.sinks.conversations import ConversationStore
from monitor.sinks.deadletter import KafkaDeadLetters, StreamDeadLetters
from monitor.sinks.produce import ProduceRejected
from monitor.sinks.results import ResultsPublisher
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.sinks.store import Store, StoreGoldenSink
from monitor.sinks.topic_admin import ensure_internal_topics
from monitor.sinks.verdicts import StoredVerdicts
from monitor.sinks.writer import TopicWriter
from monitor.sources.file import FileSource
from monitor.sources.kafka import KafkaSource, producer_kwargs
from monitor.sources.offsets import OffsetTracker
from monitor.sources.progress import StageWatch
from monitor.stages.assemble import AssembleStage, OtlpMetrics, TracesTopicOutput
from monitor.stages.conversation import ConversationMetrics, ConversationTracker
from monitor.stages.loop import ConsumeLoop
from monitor.stages.reject import Rejecter
from monitor.stages.rekey import InProcess, RekeyStage, SpansTopicOutput
from monitor.stages.router import ASSEMBLE, REKEY, SCORE, Router, StageName
from monitor.stages.score import ScoreStage
from monitor.stages.scoring import ScoringProcessor, scored_whole
from monitor.stages.topology import file_loop, kafka_loops
from monitor.telemetry import Telemetry
from monitor.typing import DeadLetterSink, Stage, TraceProcessor, WholeTraceCheck

log = structlog.get_logger(__name__)
T = TypeVar("T")

MAINTENANCE_SECONDS = 10.0
WATCH_SECONDS = 1.0


@dataclass(frozen=True)
class SourceSpec:
    """Where traces come from: the Kafka topics of the config, or a file (`-` for stdin)."""

    kind: Literal["kafka", "file"]
    path: str | None = None

    @classmethod
    def parse(cls, text: str) -> SourceSpec:
        if text == "kafka":
            return cls("kafka")
        if text.startswith("file:") and len(text) > len("file:"):
            return cls("file", text[len("file:") :])
        raise ValueError(f"--source must be 'kafka' or 'file:PATH' (or 'file:-'), not {text!r}")


class Daemon:
    """One monitor process. `run()` returns the exit code once the source ends or stop is asked."""

    def __init__(
        self,
        settings: Settings,
        source: SourceSpec,
        processor: TraceProcessor | None = None,
        registry: CollectorRegistry | None = None,
        dead_letters: DeadLetterSink | None = None,
        config_dir: Path | None = None,
    ) -> None:
        self.settings = settings
        self.source_spec = source
        self._processor_override = processor
        self.store: Store | None = None
        self.conversations: ConversationTracker | None = None
        self.golden: GoldenScheduler | None = None
        self._config_dir = config_dir
        self.metrics = Metrics(registry, max_agents=settings.metrics.max_agents)
        self.otlp_metrics = OtlpMetrics(self.metrics.registry)
        self.tracker = OffsetTracker()  # the scoring stage's offsets
        self.otlp_tracker = OffsetTracker()  # the OTLP stage's
        self.failing = FailingCalls()  # writes retrying right now
        self.progress = StageWatch(
            {"scoring": self.tracker, "otlp": self.otlp_tracker},
            settings.kafka.stuck_seconds,
            self.failing,
            self.metrics,
        )
        self.shutdown = ShutdownClock(settings.shutdown.deadline_seconds)
        self.failure: ProduceRejected | None = None
        self._dead_letters_override = dead_letters
        self._stop = asyncio.Event()
        self._heartbeats: dict[str, float] = {"scoring": time.monotonic()}
        self._last_maintenance = time.monotonic()
        self._sources: list[KafkaSource] = []
        self._score: ScoreStage | None = None
        # this replica's share of the scored input, for the sampler's floor (None: no sampler)
        self._tell_input_share: Callable[[float], None] | None = None
        self._file_running = False
        self.http: HttpServer | None = None
        self.started = asyncio.Event()

    def request_stop(self) -> None:
        if not self._stop.is_set():
            log.info(
                "stop requested; finishing in-flight work",
                deadline_seconds=self.settings.shutdown.deadline_seconds,
            )
            self.shutdown.start()
        self._stop.set()

    def fail(self, failure: ProduceRejected) -> None:
        """A write the cluster refuses for good: stop (the message stays uncommitted)."""
        if self.failure is None:
            self.failure = failure
            log.error("stopping: a write cannot succeed", error=str(failure))
        self.request_stop()

    def _healthy(self) -> tuple[bool, str]:
        now = time.monotonic()
        loop, beat = min(self._heartbeats.items(), key=lambda item: item[1])
        stalled = now - beat
        if stalled <= self.settings.http.health_stall_seconds:
            return True, "ok"
        # Held up by something outside the process, not wedged: a restart would not help.
        if loop == "scoring" and self._reading_held_back():
            return True, "waiting for in-flight traces to finish (backpressure)"
        write = self.failing.oldest()
        if write is not None:
            return True, f"waiting for a {write.operation} write that keeps failing ({write.error})"
        return False, f"{loop} consume loop stalled for {stalled:.0f}s"

    def _reading_held_back(self) -> bool:
        return self._score is not None and self._score.waiting_for_capacity

    def _ready(self) -> tuple[bool, str]:
        if self._stop.is_set():
            return False, "shutting down"
        if self._file_running:
            return True, "file source running"
        if not self._sources:
            return False, "not started"
        assigned = sum(len(source.assignment) for source in self._sources)
        if not assigned:
            return False, "no partitions assigned"
        limit = self.settings.kafka.ready_fetch_stale_seconds
        for source in self._sources:
            if not source.coordinator_known:
                return False, f"{source.name} group coordinator unreachable (broker outage?)"
            age = source.fetch_response_age()
            held = source.name == "scoring" and self._reading_held_back()
            if age is not None and age > limit and not held:
                return (
                    False,
                    f"no fetch response from the broker for {age:.0f}s (stalled connection?)",
                )
        if self.store is not None and self.store.unavailable_since is not None:
            return False, "results store unavailable"
        problem = self.progress.problem()
        if problem is not None:
            return False, problem
        return True, f"{assigned} partitions assigned"

    async def run(self) -> ExitCode:
        async with AsyncExitStack() as stack:
            telemetry = await stack.enter_async_context(
                self.shutdown.bounding("telemetry", Telemetry(self.settings.telemetry))
            )
            tracer = telemetry.tracer
            app = build_app(self.metrics.registry, Probes(self._healthy, self._ready))
            token = self.settings.http.review_token
            add_review_routes(
                app,
                lambda: self.store,
                token.get_secret_value() if token is not None else None,
                redactor=review_redactor(self.settings),
                trace_url_template=self.settings.http.trace_url_template,
                bound_host=self.settings.http.host,
            )
            server = HttpServer(app, self.settings.http.host, self.settings.http.port)
            self.http = await stack.enter_async_context(
                self.shutdown.bounding("http server", server)
            )
            log.info("http server listening", host=self.settings.http.host, port=self.http.port)
            if self.source_spec.kind == "file":
                return await self._run_file(stack, tracer)
            return await self._run_kafka(stack, tracer)

    async def _run_file(self, stack: AsyncExitStack, tracer: Tracer | None) -> ExitCode:
        """The file source: one loop, the OTLP stages in process (split, assembled, released
        straight to scoring), dead letters as lines on stderr."""
        assert self.source_spec.path is not None
        processor = await self._start_services(stack, producer_kwargs=None)
        kafka = self.settings.kafka
        dead_letters = self._dead_letters_override or StreamDeadLetters()
        rejecter = Rejecter(
            dead_letters, self.metrics, self.tracker, max_bytes=kafka.max_message_bytes, quiet=True
        )
        score = self._score_stage(processor, rejecter, tracer)
        plan = file_loop(kafka, self.source_spec.path)
        stages: dict[StageName, Stage] = {SCORE: score}
        if kafka.otlp_stage_enabled:
            # a replay may carry log exports anywhere in it
            stages |= self._otlp_in_process(score, rejecter, awaits_events=True, replay=True)
        router = Router.of(kafka, natives_to=plan.natives_to, text_lines=True)
        in_order = [stages[stage] for stage in plan.stages]
        loop = self._loop("scoring", self.tracker, router, in_order, rejecter)  # its heartbeat
        self._file_running = True
        self.started.set()
        self.metrics.ready.set(1)
        source = await stack.enter_async_context(
            FileSource(self.source_spec.path, kafka.max_message_bytes, stop=self._stop)
        )
        try:
            await loop.run(source)
        finally:
            self._file_running = False
            self.metrics.ready.set(0)
        return ExitCode.OK

    async def _run_kafka(self, stack: AsyncExitStack, tracer: Tracer | None) -> ExitCode:
        """Two consumer groups, each one loop: the scoring group (native topics and the traces
        topic; OTLP found there is re-keyed) and, when OTLP can arrive, the OTLP group (OTLP
        topics re-keyed, the spans topic assembled). A single replica (`kafka.single_replica`)
        runs one loop, the scoring group reading every input topic, its OTLP re-keyed,
        assembled and scored in process as a file replay does."""
        config = self.settings.kafka
        kafka_kwargs = producer_kwargs(config)
        processor = await self._start_services(stack, producer_kwargs=kafka_kwargs)
        if self._tell_input_share is not None:
            self._tell_input_share(0.0)  # until the scoring group assigns partitions
        dead_letters = self._dead_letters_override
        if dead_letters is None:
            producer = KafkaDeadLetters(
                config.dlq_topic,
                kafka_kwargs,
                config.max_message_bytes,
                RetryMetrics.of(self.metrics.registry),
                self.failing,
            )
            dead_letters = await stack.enter_async_context(
                self.shutdown.bounding("dead letters", producer, PRODUCER_CLOSE_SECONDS)
            )
        max_bytes = config.max_message_bytes
        rejecter = Rejecter(dead_letters, self.metrics, self.tracker, max_bytes=max_bytes)
        score = self._score_stage(processor, rejecter, tracer)
        plans = {plan.name: plan for plan in kafka_loops(config)}
        scoring_stages: dict[StageName, Stage] = {SCORE: score}
        otlp_stages: dict[StageName, Stage] = {}
        otlp_rejecter = rejecter
        by_name: dict[str, KafkaSource] = {}  # the sources, made once their loops are
        if config.otlp_stage_enabled and config.single_replica:
            scoring_stages |= self._otlp_in_process(
                score,
                rejecter,
                awaits_events=bool(config.otlp_logs_topics),
                read_before=lambda msg: by_name["scoring"].read_before(msg),
            )
        elif config.otlp_stage_enabled:
            await ensure_internal_topics(self.settings)
            spans_topic, traces_topic = config.effective_spans_topic, config.effective_traces_topic
            writer = TopicWriter(
                kafka_kwargs,
                max_bytes,
                RetryMetrics.of(self.metrics.registry),
                settings={spans_topic: "kafka.spans_topic", traces_topic: "kafka.traces_topic"},
                failing=self.failing,
            )
            writer = await stack.enter_async_context(
                self.shutdown.bounding("internal topics", writer, PRODUCER_CLOSE_SECONDS)
            )
            # OTLP the scoring group finds on its topics is re-keyed like the OTLP group's.
            to_spans = SpansTopicOutput(writer, spans_topic, traces_topic, rejecter, self.tracker)
            scoring_stages[REKEY] = RekeyStage(to_spans, rejecter, self.tracker, self.metrics)
            otlp_rejecter = Rejecter(
                dead_letters, self.metrics, self.otlp_tracker, max_bytes=max_bytes
            )
            otlp_stages[ASSEMBLE] = AssembleStage(
                kafka=config,
                metrics=self.metrics,
                otlp_metrics=self.otlp_metrics,
                rejecter=otlp_rejecter,
                tracker=self.otlp_tracker,
                output=TracesTopicOutput(
                    writer, traces_topic, otlp_rejecter, self.otlp_tracker, max_bytes
                ),
                awaits_events=bool(config.otlp_logs_topics),
                scored_whole=self._scored_whole(),
            )
            otlp_stages[REKEY] = RekeyStage(
                SpansTopicOutput(
                    writer, spans_topic, traces_topic, otlp_rejecter, self.otlp_tracker
                ),
                otlp_rejecter,
                self.otlp_tracker,
                self.metrics,
            )
        wired = {
            "scoring": (scoring_stages, self.tracker, rejecter),
            "otlp": (otlp_stages, self.otlp_tracker, otlp_rejecter),
        }
        runs: list[tuple[ConsumeLoop, KafkaSource]] = []
        for name, plan in plans.items():
            stages, tracker, loop_rejecter = wired[name]
            loop = self._loop(
                name,
                tracker,
                Router.of(config, natives_to=plan.natives_to),
                [stages[stage] for stage in plan.stages],
                loop_rejecter,
            )
            # A loop reading the spans topic: parts of released traces must not come back as
            # fragments, and a revocation waits for what is being handed on, not for assembly.
            # A single replica assembling OTLP exports finishes them out of order too.
            reads_parts = ASSEMBLE in plan.stages
            assembles_in_process = reads_parts and SCORE in plan.stages
            source = KafkaSource(
                config,
                tracker,
                self.metrics,
                loop,
                group_id=plan.group_id,
                topics=list(plan.topics),
                name=name,
                busy=loop.busy if reads_parts and not assembles_in_process else None,
                skip_finished=reads_parts,
                expects_every_partition=assembles_in_process,
                # the score stage's input: the scoring group's topics (the OTLP group's
                # traces reach it through the traces topic, which the scoring group reads)
                on_share=self._tell_input_share if name == "scoring" else None,
            )
            runs.append((loop, source))
            by_name[name] = source
        stack.callback(self._left_groups)  # once both consumers left (they close first)
        for _, source in runs:
            await stack.enter_async_context(
                self.shutdown.bounding(f"{source.name} consumer", source)
            )
            self._sources.append(source)
        unfreeze = _freeze_startup_heap()
        restore_thresholds = _fewer_young_collections()
        try:
            await self._consume(runs, score)
        finally:
            restore_thresholds()
            unfreeze()
            self._sources = []
        return ExitCode.UNAVAILABLE if self.failure is not None else ExitCode.OK

    def _otlp_in_process(
        self,
        score: ScoreStage,
        rejecter: Rejecter,
        *,
        awaits_events: bool,
        replay: bool = False,
        read_before: Callable[[RawMessage], bool] | None = None,
    ) -> dict[StageName, Stage]:
        """The re-key and assemble stages handing on in process to `score` (a file replay, a
        single replica), on the scoring stage's offsets; `replay`: everything held is released
        at the end."""
        assemble = AssembleStage(
            kafka=self.settings.kafka,
            metrics=self.metrics,
            otlp_metrics=self.otlp_metrics,
            rejecter=rejecter,
            tracker=self.tracker,
            output=score,
            awaits_events=awaits_events,
            scored_whole=self._scored_whole(),
            flush_at_drain=replay,
            read_before=read_before,
        )
        direct = InProcess(assemble.take_parts, score.take_natives)
        rekey = RekeyStage(direct, rejecter, self.tracker, self.metrics)
        return {REKEY: rekey, ASSEMBLE: assemble}

    def _left_groups(self) -> None:
        self.metrics.ready.set(0)
        log.info("left the consumer groups")

    def _score_stage(
        self, processor: TraceProcessor, rejecter: Rejecter, tracer: Tracer | None
    ) -> ScoreStage:
        kafka = self.settings.kafka
        self._score = ScoreStage(
            processor=processor,
            rejecter=rejecter,
            tracker=self.tracker,
            metrics=self.metrics,
            tracer=tracer,
            max_in_flight=kafka.max_in_flight,
            on_fatal=self.fail,
            forget=self.conversations.forget_partitions if self.conversations else None,
        )
        return self._score

    def _loop(
        self,
        name: str,
        tracker: OffsetTracker,
        router: Router,
        stages: list[Stage],
        rejecter: Rejecter,
    ) -> ConsumeLoop:
        async def beat() -> None:
            self._heartbeats[name] = time.monotonic()
            if name == "scoring" and self.source_spec.kind == "kafka":
                self.metrics.ready.set(1 if self._ready()[0] else 0)
                await self._maintain()

        return ConsumeLoop(
            name=name,
            tracker=tracker,
            router=router,
            stages=stages,
            rejecter=rejecter,
            metrics=self.metrics,
            stopping=self._stop.is_set,
            on_fatal=self.fail,
            drain_deadline=self.shutdown.drain_deadline,
            beat=beat,
        )

    async def _start_services(
        self, stack: AsyncExitStack, producer_kwargs: dict[str, Any] | None
    ) -> TraceProcessor:
        """What runs beside the consume loop, stopped by `stack` in reverse: the scoring stage
        (or the given processor, returned either way), then the golden service, which stops
        first at shutdown while the store its runs are saved to is still open."""
        processor, stage = await self._start_scoring(stack, producer_kwargs)
        if self.settings.golden.suites:
            self.golden = await stack.enter_async_context(
                golden_service(
                    self.settings.golden,
                    self.settings.judge,
                    registry=self.metrics.registry,
                    sink=StoreGoldenSink(self.store) if self.store is not None else None,
                    judge_metrics=stage.judge_metrics if stage is not None else None,
                    token_budget=stage.token_budget if stage is not None else None,
                    base_dir=self._config_dir,
                )
            )
        return processor

    async def _start_scoring(
        self, stack: AsyncExitStack, producer_kwargs: dict[str, Any] | None
    ) -> tuple[TraceProcessor, ScoringStage | None]:
        """The given processing stage, or the scoring stage with its sinks (and the stage)."""
        if self._processor_override is not None:
            return self._processor_override, None
        stage = await build_scoring_stage(
            self.settings,
            self.metrics,
            stack,
            producer_kwargs,
            failing=self.failing,
            shutdown=self.shutdown,
        )
        self.store, self.conversations = stage.store, stage.tracker
        self._tell_input_share = stage.processor.set_input_share
        return stage.processor, stage

    def _scored_whole(self) -> WholeTraceCheck | None:
        """Whether the store has a whole trace's result (None without a store)."""
        if self.store is None:
            return None
        return functools.partial(scored_whole, self.store, HeuristicEvaluator.name)

    async def _maintain(self) -> None:
        """Periodic upkeep of the consume loop: end idle conversations."""
        now = time.monotonic()
        if now - self._last_maintenance < MAINTENANCE_SECONDS:
            return
        self._last_maintenance = now
        if self.conversations is not None:
            await self.conversations.expire()

    async def _consume(
        self, runs: list[tuple[ConsumeLoop, KafkaSource]], score: ScoreStage
    ) -> None:
        """Run the consume loops until a stop; what still runs at the drain deadline (a write
        that keeps failing, a trace waiting for the judge) is cancelled."""
        self.started.set()
        (_, scoring), *rest = runs
        otlp_source = rest[0][1] if rest else None
        log.info(
            "consuming",
            topics=scoring.topics,
            group=scoring.group_id,
            otlp_topics=otlp_source.topics if otlp_source is not None else [],
            otlp_group=otlp_source.group_id if otlp_source is not None else None,
            compiled=fully_compiled(),
        )

        async def loops() -> None:
            async with asyncio.TaskGroup() as group:
                for loop, source in runs:
                    group.create_task(loop.run(source))
                group.create_task(self._watch())

        running = asyncio.create_task(loops())
        stopping = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not running.done():
                left = self.shutdown.drain_deadline() - time.monotonic()
                await asyncio.wait({running}, timeout=max(0.0, left))
        finally:
            stopping.cancel()
            if not running.done():
                write = self.failing.oldest()
                log.warning(
                    "shutdown deadline: cancelling what still runs; it is read again",
                    unfinished_traces=score.in_flight,
                    failing_write=f"{write.operation}: {write.error}" if write else None,
                )
                running.cancel()
                await asyncio.wait({running})
        if not running.cancelled():
            running.result()  # the loops' own errors

    async def _watch(self) -> None:
        """Whether the stages make progress: the stuck gauge, readiness, a log line a minute."""
        while not self._stop.is_set():
            self.progress.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), WATCH_SECONDS)


def _freeze_startup_heap() -> Callable[[], None]:
    """Move what start-up left alive out of the garbage collector's sight; returns the undo.

    The imports (pydantic, openai, SQLAlchemy, aiokafka, ...) and the wiring leave hundreds of
    thousands of long-lived objects that every full collection would traverse again, while the
    consume loop allocates fast enough to trigger collections all the time: ``bench/ingest.py``
    measured 18,800 traces/s without this and 30,000 with it. Garbage is collected first, so
    only live objects are frozen; undoing it at shutdown lets them be collected again (tests run
    many daemons in one process).
    """
    gc.collect()
    gc.freeze()
    return gc.unfreeze


YOUNG_COLLECTION_THRESHOLD = 7_000
"""Net allocations between collections of the youngest generation while consuming (CPython's
default is 700). A scored trace allocates thousands of short-lived objects; at 700 the
collector ran about 90 times per 1,000 traces, examining objects about to be freed anyway and
promoting the rest towards full collections: 0.11 ms of CPU per trace scored went to garbage
collection (timed with `gc.callbacks` over `bench/ingest.py`'s native scored run), 0.07 ms
at 7,000. Garbage in reference cycles waits a little longer; nothing else changes."""


_consuming: list[tuple[int, ...]] = []  # while daemons consume: the thresholds before the first


def _fewer_young_collections() -> Callable[[], None]:
    """Raise the youngest generation's threshold while consuming; returns the undo. Daemons
    sharing a process (tests) restore the process's thresholds when the last one stops."""
    token = gc.get_threshold() if not _consuming else _consuming[0]
    _consuming.append(token)
    gc.set_threshold(max(token[0], YOUNG_COLLECTION_THRESHOLD), *token[1:])

    def restore() -> None:
        _consuming.pop()
        if not _consuming:
            gc.set_threshold(*token)

    return restore


@dataclass(frozen=True)
class ScoringStage:
    processor: ScoringProcessor
    store: Store | None
    tracker: ConversationTracker
    judge_metrics: JudgeMetrics | None
    token_budget: TokenBudget
    judge: LLMJudge | RagasEvaluator | None = None


async def build_scoring_stage(
    settings: Settings,
    metrics: Metrics,
    stack: AsyncExitStack,
    producer_kwargs: dict[str, Any] | None,
    *,
    judge_everything: bool = False,
    failing: FailingCalls | None = None,
    shutdown: ShutdownClock | None = None,
) -> ScoringStage:
    """Tier 0, the sampler, the judge when configured, and the store and results sinks.

    Everything opened is closed by `stack` (each close waiting no longer than the `shutdown`
    deadline, when given). `judge_everything` (offline scoring) samples every trace and sheds
    none for load (the judge waits out an open circuit instead); `producer_kwargs` None means
    no results topic (the file source and offline scoring). `failing` registers the results
    topic's writes while they retry.
    """

    async def enter(
        what: str, component: AbstractAsyncContextManager[T], at_most: float | None = None
    ) -> T:
        if shutdown is not None:
            return await stack.enter_async_context(shutdown.bounding(what, component, at_most))
        return await stack.enter_async_context(component)

    store = None
    if settings.store.enabled:
        opened = await Store.open(
            settings.store.url.get_secret_value(),
            retry_metrics=RetryMetrics.of(metrics.registry),
        )
        store = await enter("store", opened)
    publisher = None
    if producer_kwargs is not None and settings.results.topic:
        publisher = ResultsPublisher(
            settings.results.topic,
            producer_kwargs,
            settings.kafka.max_message_bytes,
            RetryMetrics.of(metrics.registry),
            failing,
        )
        publisher = await enter("results", publisher, PRODUCER_CLOSE_SECONDS)
    sampling = settings.sampling
    if judge_everything:
        sampling = sampling.model_copy(update={"rate": 1.0, "agent_rates": {}, "queue_size": 10**9})
    scoring_metrics = ScoringMetrics(
        metrics.registry, metrics.agent_label, settings.scoring.rolling_window_seconds
    )
    redactor = Redactor(settings.judge.redaction)
    sampler = Sampler(sampling)  # its token budget is charged by every judge client
    judge: LLMJudge | RagasEvaluator | None = None
    judge_metrics: JudgeMetrics | None = None
    if settings.judge.active:
        judge_metrics = JudgeMetrics(metrics.registry)
        # offline, every trace was asked for: calls wait out an open circuit
        if settings.judge.backend == "ragas":
            judge = RagasEvaluator(
                settings.judge,
                judge_metrics,
                budget=sampler.budget,
                wait_for_circuit=judge_everything,
            )
        else:
            judge = LLMJudge(
                settings.judge,
                judge_metrics,
                budget=sampler.budget,
                verdicts=StoredVerdicts(store) if store is not None else None,
                wait_for_circuit=judge_everything,
            )
        judge = await enter("judge", judge)
    conversation_metrics = ConversationMetrics(metrics.registry, metrics.agent_label)
    estimates = None
    if judge is not None:
        estimates = _estimate_recorder(settings, metrics, scoring_metrics, judge.name)
    tracker = ConversationTracker(
        settings.conversations,
        conversation_metrics,
        store=ConversationStore(store) if store is not None else None,
        judge=judge if isinstance(judge, LLMJudge) else None,  # turn judgements: own prompts
    )
    processor = ScoringProcessor(
        tier0=HeuristicEvaluator(must_not_contain=settings.scoring.must_not_contain),
        metrics=scoring_metrics,
        sampler=sampler,
        judge=judge,
        judge_concurrency=settings.judge.max_concurrency,
        store=store,
        publisher=publisher,
        store_redactor=redactor if settings.redact.store and redactor.enabled else None,
        results_redactor=redactor if settings.redact.results_topic and redactor.enabled else None,
        conversations=tracker,
        on_skip=lambda reason: metrics.traces_skipped.labels(reason).inc(),
        count_constraints=conversation_metrics.count_constraint_checks,  # traces without one
        estimates=estimates,
        shed_load=not judge_everything,
    )
    return ScoringStage(processor, store, tracker, judge_metrics, sampler.budget, judge)


def _estimate_recorder(
    settings: Settings, metrics: Metrics, scoring_metrics: ScoringMetrics, evaluator: str
) -> EstimateRecorder:
    """The population estimates' sums, with their calibrations exported on the registry."""
    config = settings.estimates
    calibrations = Calibrations.from_config(config)
    metrics.registry.register(calibrations)
    return EstimateRecorder(
        evaluator=evaluator,
        config=config,
        terms=scoring_metrics.estimate_terms,
        weighted_terms=scoring_metrics.estimate_weighted_terms,
        agent_label=metrics.agent_label,
        calibrations=calibrations,
        max_conversations=settings.conversations.max_conversations,
        idle_seconds=settings.conversations.idle_seconds,
    )
