"""Two `rag-monitor run` replicas SIGKILLed mid-stream, then everything they left counted exactly.

The scenario of issue 21 (used by `tests/test_faults_crash_turns.py` and `bench/crash_compare.py`):
native traces of many overlapping conversations, without a `turn` (numbered by their start), are
produced at a steady rate to a topic of several partitions, keyed by conversation, each
conversation's turns a little out of order so that later turns are renumbered when an earlier
one arrives. Two replicas share one consumer group, one store and the scripted judge (sampled
conversations are judged whole: faithfulness, relevance and the turn call). Each of the two
kills SIGKILLs one replica at a random moment of the stream and starts it again a second later.
Once the stream has ended and every offset is committed, both stop with SIGTERM.

Then `Outcome` counts what a user relies on: every trace stored exactly once (one heuristic
result; an LLM result exactly for the sampled traces; one turn row), no trace that was not
produced, every turn right (turn rows, stored results and the last record of each (trace,
evaluator) on the results topic), nothing dead-lettered, results-topic records per (trace,
evaluator), and judge calls per task: how many, how many asked again for the same trace, and
whether a repeat came only after the process that asked first was killed.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.sampler import Sampler
from monitor.models import EvaluationResult, Trace
from tests.support.faults import (
    DaemonProcess,
    SteadyProducer,
    end_total,
    kafka_env,
    topic_records,
    wait_committed,
    wait_until,
)
from tests.support.kafka_io import create_topics
from tests.support.openai_server import OpenAIServer, Received, Reply

TASKS = ("ragmon_faithfulness", "ragmon_relevance", "ragmon_turn")
PROCESS_HEADER = "x-ragmon-test-process"
START = datetime(2026, 11, 1, 9, tzinfo=UTC)


@dataclass(frozen=True)
class Plan:
    traces: int = 600
    conversations: int = 100
    partitions: int = 6
    rate: float = 100.0  # traces produced per second
    kills: int = 2
    sampling_rate: float = 0.3
    seed: int = 0
    judge_delay: tuple[float, float] = (0.02, 0.08)
    judge_concurrency: int = 8
    commit_seconds: float = 5.0  # the daemon's default: a kill re-delivers up to 5 s of traces

    @property
    def judge_repeat_bound(self) -> int:
        """Judge calls that may be asked again: those in flight at each fault (a kill, and the
        two rebalances it brings: the dead member leaving, the restarted one joining)."""
        return 2 * self.kills * self.judge_concurrency


def conversation_traces(plan: Plan) -> list[dict[str, Any]]:
    """The traces in the order they are produced: conversations interleaved, each one's turns
    shuffled a little (a turn can arrive after the next one or two), none with a `turn`."""
    rng = random.Random(plan.seed)
    by_conversation: dict[int, list[dict[str, Any]]] = {}
    for n in range(plan.traces):
        c = n % plan.conversations
        k = len(by_conversation.setdefault(c, []))
        started = START + timedelta(seconds=c * 7 + k * 60, microseconds=rng.randrange(1000))
        by_conversation[c].append(
            {
                "schema_version": 1,
                "trace_id": f"trace-{n:06d}",
                "timestamp": started.isoformat(),
                "agent": "support",
                "conversation_id": f"conv-{c:04d}",
                "query": f"When does branch {n} open?",
                "contexts": [
                    {"id": f"doc-{n}", "text": f"Branch {n} opens at 9:00 and closes at 17:00."}
                ],
                "answer": f"Branch {n} opens at 9:00.",
            }
        )
    queues = []
    for turns in by_conversation.values():
        for i in range(len(turns) - 1):  # local disorder: swaps with the next turn
            if rng.random() < 0.45:
                turns[i], turns[i + 1] = turns[i + 1], turns[i]
        queues.append(turns)
    ordered: list[dict[str, Any]] = []
    while queues:
        queue = queues[rng.randrange(len(queues))]
        ordered.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    return ordered


def expected_turns(traces: list[dict[str, Any]]) -> dict[str, int]:
    """Turn = rank of the trace's start within its conversation (ties by trace id)."""
    by_conversation: dict[str, list[tuple[str, str]]] = {}
    for t in traces:
        by_conversation.setdefault(t["conversation_id"], []).append((t["timestamp"], t["trace_id"]))
    return {
        trace_id: k
        for members in by_conversation.values()
        for k, (_, trace_id) in enumerate(sorted(members), start=1)
    }


@dataclass
class JudgeCall:
    task: str
    question: str
    process: str


@dataclass
class Outcome:
    plan: Plan
    produced: int = 0
    kills: list[str] = field(default_factory=list)
    stored_heuristic: int = 0
    stored_llm: int = 0
    sampled: int = 0
    lost: int = 0  # produced, acknowledged, without a heuristic result
    extra: int = 0  # stored results of traces never produced
    llm_missing: int = 0  # sampled, without an LLM result
    llm_unexpected: int = 0  # an LLM result of a trace not sampled
    turn_rows_wrong: int = 0  # a trace's turn row with the wrong turn
    turn_rows_missing: int = 0
    turn_rows_extra: int = 0  # more than one turn row for a trace
    results_wrong_turn: int = 0  # stored results whose turn (column or document) is wrong
    published_missing: int = 0  # stored results with no record on the results topic
    published_wrong_turn: int = 0  # the last record of a (trace, evaluator) with the wrong turn
    published_records: int = 0
    published_keys: int = 0
    dead_letters: int = 0
    judge_calls: Counter[str] = field(default_factory=Counter)
    judge_expected: Counter[str] = field(default_factory=Counter)
    judge_repeats: Counter[str] = field(default_factory=Counter)
    judge_repeats_same_process: Counter[str] = field(default_factory=Counter)
    renumbered: float = 0.0
    seconds: float = 0.0

    @property
    def records_per_result(self) -> float:
        return self.published_records / self.published_keys if self.published_keys else 0.0

    @property
    def exact(self) -> bool:
        """Nothing lost, nothing extra, every turn right everywhere, no dead letter, and no
        process asked the judge twice for one trace and task."""
        return not any(
            (
                self.lost,
                self.extra,
                self.llm_missing,
                self.llm_unexpected,
                self.turn_rows_wrong,
                self.turn_rows_missing,
                self.turn_rows_extra,
                self.results_wrong_turn,
                self.published_missing,
                self.published_wrong_turn,
                self.dead_letters,
                sum(self.judge_repeats_same_process.values()),
            )
        )

    def summary(self) -> str:
        calls = ", ".join(
            f"{task.removeprefix('ragmon_')} {self.judge_calls[task]}/{self.judge_expected[task]}"
            f" (+{self.judge_repeats[task]} repeated)"
            for task in TASKS
        )
        return (
            f"seed {self.plan.seed}: {self.produced} traces, kills: {'; '.join(self.kills)}\n"
            f"  stored {self.stored_heuristic} heuristic + {self.stored_llm} llm "
            f"(sampled {self.sampled}); lost {self.lost}, extra {self.extra}, "
            f"llm missing {self.llm_missing}, llm unexpected {self.llm_unexpected}\n"
            f"  turn rows: wrong {self.turn_rows_wrong}, missing {self.turn_rows_missing}, "
            f"extra {self.turn_rows_extra}; stored results with a wrong turn "
            f"{self.results_wrong_turn}\n"
            f"  results topic: {self.published_records} records for {self.published_keys} "
            f"(trace, evaluator) = {self.records_per_result:.2f} each; last record with a wrong "
            f"turn {self.published_wrong_turn}; never published {self.published_missing}\n"
            f"  dead letters {self.dead_letters}; turns renumbered {self.renumbered:.0f}; "
            f"judge calls per task (made/expected): {calls}; asked twice by one process: "
            f"{sum(self.judge_repeats_same_process.values())}; {self.seconds:.0f} s"
        )


class Scenario:
    """One run of the scenario against a broker and a store (a URL the replicas share)."""

    def __init__(
        self, bootstrap: str, prefix: str, store_url: str, logdir: Path, plan: Plan
    ) -> None:
        self.bootstrap = bootstrap
        self.store_url = store_url
        self.logdir = logdir
        self.plan = plan
        self.topic, self.dlq = f"{prefix}.in", f"{prefix}.dlq"
        self.results, self.group = f"{prefix}.results", f"{prefix}.group"
        self.traces = conversation_traces(plan)

    def run(self) -> Outcome:
        plan = self.plan
        rng = random.Random(plan.seed + 1)
        began = time.monotonic()
        asyncio.run(create_topics(self.bootstrap, [self.topic, self.results], plan.partitions))
        asyncio.run(create_topics(self.bootstrap, [self.dlq]))
        outcome = Outcome(plan)
        delays = random.Random(plan.seed + 2)  # used on the judge server's thread

        def latency(request: Received) -> Reply:
            return Reply(delay=delays.uniform(*plan.judge_delay))

        with OpenAIServer(script=latency) as judge:
            replicas = [self._replica(name, judge.url) for name in ("a", "b")]
            producer = SteadyProducer(
                self.bootstrap, self.topic, self._message, plan.rate, limit=len(self.traces)
            )
            try:
                for replica in replicas:  # one after the other: the first creates the schema
                    self._start(replica)
                    replica.wait_ready(90)
                producer.start()
                streaming = time.monotonic()
                duration = len(self.traces) / plan.rate
                first = rng.randrange(2)  # then the other one, and so on
                for k in range(plan.kills):
                    span = duration / plan.kills
                    moment = k * span + rng.uniform(0.3, 0.8) * span
                    time.sleep(max(0.0, streaming + moment - time.monotonic()))
                    victim = replicas[(first + k) % 2]
                    outcome.kills.append(f"{victim.name} after {producer.acked_count} traces")
                    victim.kill()
                    time.sleep(1.0)
                    self._start(victim)
                wait_until(
                    lambda: producer.acked_count >= len(self.traces) or producer.error is not None,
                    duration + 120,
                    "every trace produced",
                    interval=0.5,
                )
                producer.stop(timeout=120)
                wait_committed(
                    self.bootstrap, self.group, self.topic, 240, "every offset committed"
                )
                outcome.renumbered = sum(
                    r.value("ragmon_conversation_turns_renumbered_total") for r in replicas
                )
                for replica in replicas:
                    assert replica.terminate() == 0, replica.stderr_tail()
            finally:
                for replica in replicas:
                    replica.ensure_stopped()
            calls = [_judge_call(r) for r in judge.requests if not r.embedding]
        outcome.produced = producer.acked_count
        tally(
            outcome,
            self.traces,
            producer.acked,
            store_url=self.store_url,
            bootstrap=self.bootstrap,
            results_topic=self.results,
            dlq=self.dlq,
            sampling_rate=plan.sampling_rate,
            calls=calls,
        )
        outcome.seconds = time.monotonic() - began
        return outcome

    # ------------------------------------------------------------------------------- running

    def _replica(self, name: str, judge_url: str) -> DaemonProcess:
        return DaemonProcess(
            {
                **kafka_env(
                    self.bootstrap,
                    self.topic,
                    self.group,
                    self.dlq,
                    commit_interval=str(self.plan.commit_seconds),
                ),
                # A killed member holds its partitions until its session expires: keep it short.
                "RAGMON_KAFKA__SESSION_TIMEOUT_MS": "5000",
                "RAGMON_KAFKA__HEARTBEAT_INTERVAL_MS": "1000",
                "RAGMON_RESULTS__TOPIC": self.results,
                "RAGMON_STORE__URL": self.store_url,
                "RAGMON_SAMPLING__RATE": str(self.plan.sampling_rate),
                "RAGMON_SAMPLING__QUEUE_SIZE": "100000",  # nothing shed
                "RAGMON_JUDGE__BASE_URL": judge_url,
                "RAGMON_JUDGE__API_KEY": "sk-crash-scenario",
                "RAGMON_JUDGE__MAX_CONCURRENCY": str(self.plan.judge_concurrency),
                "RAGMON_JUDGE__TIMEOUT_SECONDS": "10",
            },
            self.logdir,
            name=name,
        )

    @staticmethod
    def _start(replica: DaemonProcess) -> None:
        """Start it with a header naming this start, so judge calls say who made them."""
        replica.env["RAGMON_JUDGE__EXTRA_HEADERS"] = json.dumps(
            {PROCESS_HEADER: f"{replica.name}-{replica.starts + 1}"}
        )
        replica.start()

    def _message(self, n: int) -> tuple[bytes | None, bytes, str]:
        trace = self.traces[n]
        return trace["conversation_id"].encode(), json.dumps(trace).encode(), trace["trace_id"]

    # ------------------------------------------------------------------------------ counting


def tally(
    outcome: Outcome,
    traces: list[dict[str, Any]],
    acked: set[str],
    *,
    store_url: str,
    bootstrap: str,
    results_topic: str,
    dlq: str,
    sampling_rate: float | None,
    calls: Sequence[JudgeCall] = (),
) -> None:
    """Fill `outcome` from what the store, the results topic and the dead-letter topic hold
    after `traces` (those `acked` by the broker) went through; `sampling_rate` None: no judge."""
    produced = {t["trace_id"]: t for t in traces if t["trace_id"] in acked}
    expected = expected_turns(list(produced.values()))
    turns, rows = asyncio.run(_read_store(store_url))
    by_evaluator: dict[str, dict[str, EvaluationResult]] = {}
    for trace_id, evaluator, turn, document in rows:
        result = EvaluationResult.model_validate_json(document)
        by_evaluator.setdefault(evaluator, {})[trace_id] = result
        if trace_id not in produced:
            outcome.extra += 1
        elif turn != expected[trace_id] or result.turn != expected[trace_id]:
            outcome.results_wrong_turn += 1
    tier0 = by_evaluator.get("heuristic", {})
    llm = by_evaluator.get("llm", {})
    outcome.stored_heuristic, outcome.stored_llm = len(tier0), len(llm)
    outcome.lost = len(set(produced) - set(tier0))
    sampled: set[str] = set()
    if sampling_rate is not None:
        sampler = Sampler(SamplingConfig(rate=sampling_rate, queue_size=100000))
        sampled = {
            trace_id
            for trace_id, trace in produced.items()
            if trace_id in tier0
            and sampler.decide(Trace.model_validate(trace), tier0[trace_id]) != "skipped"
        }
    outcome.sampled = len(sampled)
    outcome.llm_missing = len(sampled - set(llm))
    outcome.llm_unexpected = len(set(llm) - sampled)

    rows_per_trace: Counter[str] = Counter()
    for trace_id, turn in turns:
        rows_per_trace[trace_id] += 1
        if trace_id in expected and turn != expected[trace_id]:
            outcome.turn_rows_wrong += 1
    outcome.turn_rows_missing = sum(1 for t in produced if t not in rows_per_trace)
    outcome.turn_rows_extra = sum(n - 1 for n in rows_per_trace.values() if n > 1)

    last: dict[tuple[str, str], dict[str, Any]] = {}
    count: Counter[tuple[str, str]] = Counter()
    records = topic_records(bootstrap, results_topic)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        value = json.loads(record.value)
        key = (value["trace_id"], value["evaluator"])
        last[key] = value
        count[key] += 1
    outcome.published_records = sum(count.values())
    outcome.published_keys = len(count)
    stored_keys = {(t, e) for e, by_trace in by_evaluator.items() for t in by_trace}
    outcome.published_missing = len(stored_keys - set(last))
    outcome.published_wrong_turn = sum(
        1 for (trace_id, _), value in last.items() if value["turn"] != expected.get(trace_id)
    )
    outcome.dead_letters = end_total(bootstrap, dlq)

    questions = {t["query"]: trace_id for trace_id, t in produced.items()}
    asked: dict[tuple[str, str], list[str]] = {}
    for call in calls:
        if call.task in TASKS and call.question in questions:
            outcome.judge_calls[call.task] += 1
            asked.setdefault((call.task, call.question), []).append(call.process)
    for task in TASKS if sampling_rate is not None else ():
        outcome.judge_expected[task] = len(sampled)
    for (task, _), processes in asked.items():
        outcome.judge_repeats[task] += len(processes) - 1
        outcome.judge_repeats_same_process[task] += len(processes) - len(set(processes))


def _judge_call(request: Received) -> JudgeCall:
    data = request.data or {}
    question = data.get("question") or data.get("latest_user_message") or ""
    return JudgeCall(request.task or "?", str(question), request.headers.get(PROCESS_HEADER, "?"))


async def _read_store(
    url: str,
) -> tuple[list[tuple[str, int]], list[tuple[str, str, int | None, str]]]:
    """(trace id, turn) of every turn row; (trace id, evaluator, turn, document) of every
    stored result."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            turns = [
                (str(r[0]), int(r[1]))
                for r in await conn.execute(text("SELECT trace_id, turn FROM conversation_turns"))
            ]
            results = [
                (str(r[0]), str(r[1]), r[2], str(r[3]))
                for r in await conn.execute(
                    text("SELECT trace_id, evaluator, turn, result FROM evaluation_results")
                )
            ]
    finally:
        await engine.dispose()
    return turns, results
