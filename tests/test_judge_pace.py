"""The judge's pacing, by itself: the server's pace (fit and deadlines), the adaptive concurrency
limit against simulated servers on a fake clock, and the circuit waited out offline.

The simulated servers are the three shapes a judge endpoint takes: one that computes requests
one after another (llama_cpp.server), one that splits its cores between the requests it holds
(llama-server's slots on a CPU: processor sharing), and one that serves every request as if it
were alone (a hosted API with capacity to spare). Each request's own work is
``prompt / 400 + completion / 40`` seconds, the speeds of Gemma 3 270M on two cores.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from monitor.config.judge import JudgeConfig
from monitor.config.scoring import SamplingConfig
from monitor.evaluators.circuit import PATIENT_PROBES, CircuitBreaker
from monitor.evaluators.concurrency_limit import (
    ALONE_WANTED,
    EARLY_PROBE_EVERY,
    PROBE_EVERY,
    ConcurrencyLimit,
    Slot,
)
from monitor.evaluators.heuristic import HeuristicEvaluator
from monitor.evaluators.judge_metrics import JudgeMetrics
from monitor.evaluators.llm import LLMJudge
from monitor.evaluators.pace import SAFETY, ServerPace
from monitor.evaluators.sampler import Sampler
from monitor.metrics import AgentLabels
from monitor.models import EvaluationResult, Trace
from monitor.sinks.scoring_metrics import ScoringMetrics
from monitor.stages.scoring import ScoringProcessor
from tests.support.openai_server import OpenAIServer, Reply
from tests.support.traces import judge_trace

PROMPT_SPEED = 400.0  # prompt tokens per second
GENERATION_SPEED = 40.0  # generated tokens per second
CHARS_PER_TOKEN = 4


def work(prompt: int, completion: int) -> float:
    return prompt / PROMPT_SPEED + completion / GENERATION_SPEED


# ---------------------------------------------------------------------------------------------
# The server's pace


def test_the_fit_finds_both_speeds_from_replies_of_different_shapes() -> None:
    pace = ServerPace(1.0, 600.0)
    rng = random.Random(3)
    for _ in range(30):
        p, c = rng.randint(300, 1500), rng.randint(10, 500)
        pace.observe(work(p, c), p * CHARS_PER_TOKEN, p, c)
    speeds = pace.tokens_per_second()
    assert speeds is not None
    assert speeds[0] == pytest.approx(PROMPT_SPEED, rel=0.01)
    assert speeds[1] == pytest.approx(GENERATION_SPEED, rel=0.01)
    assert pace.tokens_per_char == pytest.approx(1 / CHARS_PER_TOKEN, rel=0.01)


def test_a_deadline_follows_the_size_of_what_is_asked() -> None:
    pace = ServerPace(5.0, 600.0)
    assert pace.deadline(4000, 512) == 600.0, "nothing known yet: the ceiling"
    rng = random.Random(4)
    for _ in range(20):
        p, c = rng.randint(300, 1500), rng.randint(10, 500)
        pace.observe(work(p, c), p * CHARS_PER_TOKEN, p, c)
    expected = work(1000, 512) * SAFETY
    assert pace.deadline(1000 * CHARS_PER_TOKEN, 512) == pytest.approx(expected, rel=0.02)
    # twice the reply bound: about twice the time (generation dominates)
    longer = pace.deadline(1000 * CHARS_PER_TOKEN, 1024)
    assert longer == pytest.approx(work(1000, 1024) * SAFETY, rel=0.02)
    assert pace.deadline(40, 16) == 5.0, "within the floor"
    assert pace.deadline(1000 * CHARS_PER_TOKEN, 100_000) == 600.0, "within the ceiling"


def test_each_timeout_of_a_call_doubles_its_next_deadline() -> None:
    pace = ServerPace(1.0, 600.0)
    for p, c in ((500, 100), (900, 40), (700, 300)):
        pace.observe(work(p, c), p * CHARS_PER_TOKEN, p, c)
    base = pace.deadline(2000, 256)
    assert pace.deadline(2000, 256, timeouts=2) == pytest.approx(4 * base)
    assert pace.deadline(4, 1) == 1.0 and pace.deadline(4, 1, timeouts=1) == 2.0, "from the floor"
    assert pace.deadline(2000, 256, timeouts=30) == 600.0


def test_a_reply_s_latency_is_read_against_the_work_of_recent_replies() -> None:
    """Queueing shows as time over the usual work: a reply that took twice as long as the
    recent ones reads twice as high, whatever its own size (in a queue it waits for others)."""
    pace = ServerPace(1.0, 600.0)
    steady = [pace.observe(work(800, 150), 3200, 800, 150) for _ in range(20)]
    assert steady[-1] == pytest.approx(steady[-2], rel=0.01)
    slow = pace.observe(2 * work(800, 150), 3200, 800, 150)
    assert slow == pytest.approx(2 * steady[-1], rel=0.05)


def test_without_completion_tokens_one_rate_is_fitted() -> None:
    """Embeddings generate nothing: prompt tokens alone carry the time."""
    pace = ServerPace(0.1, 600.0)
    for p in (100, 400, 250):
        pace.observe(p / 2000, p * 4, p, 0)
    assert pace.expected(300, 0) == pytest.approx(300 / 2000, rel=0.01)


# ---------------------------------------------------------------------------------------------
# The concurrency limit against simulated servers

ServerShape = Literal["serial", "shared", "parallel"]


@dataclass
class _Request:
    slot: Slot
    prompt: int
    completion: int
    sent: float
    remaining: float  # seconds of the server's work left (shared, serial)
    done_at: float = 0.0


@dataclass
class SimulatedJudge:
    """A saturated judge (always work waiting) against a simulated server, on a fake clock."""

    shape: ServerShape
    max_limit: int = 4
    seed: int = 1
    noise: float = 0.0  # spread of a request's time (lognormal sigma): a machine shared with others
    cold_start: float = 1.0  # how much longer the first request takes (model paged in, no cache)
    now: float = 0.0
    active: list[_Request] = field(default_factory=list)
    limits: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.limit = ConcurrencyLimit(self.max_limit)
        self.pace = ServerPace(1.0, 600.0)
        self._rng = random.Random(self.seed)

    def _start(self) -> bool:
        slot = self.limit.acquire_nowait()
        if slot is None:
            return False
        p, c = self._rng.randint(400, 1200), self._rng.randint(20, 300)
        jitter = self._rng.lognormvariate(0.0, self.noise) if self.noise else 1.0
        if not self.limits and not self.active:
            jitter *= self.cold_start
        request = _Request(slot, p, c, self.now, work(p, c) * jitter)
        if self.shape == "serial":
            last = max((r.done_at for r in self.active), default=self.now)
            request.done_at = max(self.now, last) + request.remaining
        elif self.shape == "parallel":
            request.done_at = self.now + request.remaining
        self.active.append(request)
        return True

    def _next_done(self) -> _Request:
        if self.shape != "shared":
            first = min(self.active, key=lambda r: r.done_at)
            self.now = first.done_at
            return first
        # processor sharing: every active request progresses at 1/n of the server
        n = len(self.active)
        first = min(self.active, key=lambda r: r.remaining)
        step = first.remaining
        for r in self.active:
            r.remaining -= step
        self.now += step * n
        return first

    def run(self, replies: int) -> None:
        for _ in range(replies):
            while self._start():
                pass
            done = self._next_done()
            self.active.remove(done)
            latency = self.pace.observe(
                self.now - done.sent, done.prompt * CHARS_PER_TOKEN, done.prompt, done.completion
            )
            self.limit.replied(done.slot, latency)
            self.limit.release(done.slot)
            self.limits.append(self.limit.limit)


def mean(values: list[int]) -> float:
    return sum(values) / len(values)


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_a_server_with_capacity_to_spare_gets_the_full_concurrency(noise: float) -> None:
    judge = SimulatedJudge("parallel", max_limit=8, noise=noise)
    judge.run(400)
    assert judge.limits[0] == 2, "starts at 1, one good reply lets a second request go"
    assert judge.limits.index(8) < 120, judge.limits
    settled = judge.limits[50:]
    # at the limit but for a probe now and then (one request alone after 50 that were not,
    # 8 replies to drain) and a dip to 6 or 7 when noise reads as queueing
    assert mean(settled) > 6.5 and settled.count(8) > 0.6 * len(settled), settled
    assert judge.limit.slowdown == pytest.approx(1.0, abs=0.3)


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_a_server_whose_cores_the_requests_share_keeps_the_limit_low(noise: float) -> None:
    """llama-server's slots on a CPU: two requests at once take twice as long each."""
    judge = SimulatedJudge("shared", max_limit=8, noise=noise)
    judge.run(400)
    settled = judge.limits[50:]
    assert mean(settled) < 2.0, settled
    assert max(settled) <= 4 and sum(1 for n in settled if n > 2) < 0.1 * len(settled)
    assert judge.limit.slowdown_at(2) > 1.5, "two at once take about twice as long"


def test_a_server_that_computes_one_request_at_a_time_keeps_the_limit_low() -> None:
    """llama_cpp.server: a request waits for those ahead of it."""
    judge = SimulatedJudge("serial", max_limit=8)
    judge.run(400)
    settled = judge.limits[50:]
    assert mean(settled) < 2.5, settled
    assert sum(1 for n in settled if n > 3) < 0.1 * len(settled), settled


@pytest.mark.parametrize("noise", [0.0, 0.3])
@pytest.mark.parametrize("shape", ["serial", "shared"])
def test_a_slow_first_reply_does_not_hide_queueing(shape: ServerShape, noise: float) -> None:
    """The first request takes three times as long (the model paged in from disk, an empty
    prompt cache). Were it the baseline alone, requests waiting for others would look normal
    and the limit would climb to the maximum; it is left out, and the first replies alone come
    early, so the limit stays low from the start."""
    for seed in range(1, 4):
        judge = SimulatedJudge(shape, max_limit=4, noise=noise, seed=seed, cold_start=3.0)
        judge.run(60)
        assert mean(judge.limits[10:]) < 2.2, (seed, judge.limits)


def test_a_slow_first_reply_does_not_hold_back_a_server_with_capacity() -> None:
    judge = SimulatedJudge("parallel", max_limit=4, cold_start=3.0)
    judge.run(60)
    assert mean(judge.limits[10:]) > 3.2, judge.limits


def test_drops_halve_the_limit_never_below_one() -> None:
    judge = SimulatedJudge("parallel", max_limit=8)
    judge.run(60)
    assert judge.limit.limit == 8
    judge.limit.dropped()
    assert judge.limit.limit == 4
    for _ in range(5):
        judge.limit.dropped()
    assert judge.limit.limit == 1


def test_a_client_that_never_fills_the_limit_does_not_raise_it() -> None:
    """Replies of requests that ran alone while more were allowed say nothing about more."""
    limit = ConcurrencyLimit(16)
    for _ in range(100):
        slot = limit.acquire_nowait()
        assert slot is not None
        limit.replied(slot, 1.0)
        limit.release(slot)
    assert limit.limit == 2, "one good reply alone at limit 1; none with room to spare after"


def replies_until_a_probe(limit: ConcurrencyLimit, most: int) -> tuple[int, list[Slot | None]]:
    """With the limit set to 4, keep 4 requests in flight (each reply at the same latency)
    until the limit drops to 1 for a probe alone, or `most` replies came: the replies it took
    and the requests still in flight."""
    limit._estimate = 4.0
    slots = [limit.acquire_nowait() for _ in range(4)]
    for replies in range(1, most + 1):
        done = slots.pop(0)
        assert done is not None
        limit.replied(done, 1.0)
        limit.release(done)
        if limit.limit == 1:
            return replies, slots
        slots.append(limit.acquire_nowait())
    return most, slots


def test_after_many_replies_that_shared_the_server_one_runs_alone() -> None:
    limit = ConcurrencyLimit(4)
    for _ in range(1 + ALONE_WANTED):  # a warm-up reply, then enough alone for a baseline
        alone = limit.acquire_nowait()
        assert alone is not None
        limit.replied(alone, 1.0)
        limit.release(alone)
    replies, slots = replies_until_a_probe(limit, 60)
    assert limit.limit == 1 and replies == PROBE_EVERY, "a probe: drain to one request alone"
    while slots:
        done = slots.pop(0)
        assert done is not None
        limit.replied(done, 1.0)
        limit.release(done)
    alone = limit.acquire_nowait()
    assert alone is not None and limit.acquire_nowait() is None
    limit.replied(alone, 1.0)
    limit.release(alone)
    assert limit.limit == 4, "the probe is over: back to the limit"


def test_while_few_replies_ran_alone_the_probe_comes_early() -> None:
    limit = ConcurrencyLimit(4)
    replies, _slots = replies_until_a_probe(limit, 20)
    assert limit.limit == 1 and replies == EARLY_PROBE_EVERY


async def test_waiting_requests_go_as_the_limit_rises_and_slots_free() -> None:
    limit = ConcurrencyLimit(2)
    order: list[str] = []
    gates = {name: asyncio.Event() for name in "abc"}

    async def request(name: str) -> None:
        async with limit.slot() as slot:
            order.append(f"{name}+{slot.peak}")
            await gates[name].wait()
            limit.replied(slot, 1.0)
        order.append(f"{name}-")

    tasks = [asyncio.create_task(request(n)) for n in "abc"]
    await asyncio.sleep(0)
    assert order == ["a+1"], "the limit starts at 1"
    gates["a"].set()
    await asyncio.sleep(0.01)
    assert order == ["a+1", "a-", "b+1", "c+2"], "a's good reply raised the limit to 2"
    gates["b"].set()
    gates["c"].set()
    await asyncio.gather(*tasks)
    assert limit.in_flight == 0


# ---------------------------------------------------------------------------------------------
# The circuit, waited out offline


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


async def test_offline_calls_wait_for_the_next_probe_instead_of_failing() -> None:
    time = FakeTime()
    circuit = CircuitBreaker(1, 30.0, clock=time.clock, sleep=time.sleep)
    circuit.record_failure()
    assert circuit.state == "open"
    assert not await circuit.admit(), "the daemon fails at once"
    assert await circuit.admit(wait=True), "offline: waits until the probe may go"
    assert time.now == 30.0 and circuit.state == "half_open"
    circuit.record_success()
    assert circuit.state == "closed"


async def test_offline_waiting_gives_up_after_probes_in_a_row_failed() -> None:
    time = FakeTime()
    circuit = CircuitBreaker(1, 30.0, clock=time.clock, sleep=time.sleep)
    circuit.record_failure()
    for probe in range(PATIENT_PROBES):
        assert await circuit.admit(wait=True), probe
        circuit.record_failure()  # the probe failed: the server is still down
    assert circuit.failed_probes == PATIENT_PROBES
    assert not await circuit.admit(wait=True), "down, not restarting: stop waiting"
    assert time.now == PATIENT_PROBES * 30.0


# ---------------------------------------------------------------------------------------------
# Through the judge client, against the scripted OpenAI-compatible server


@pytest_asyncio.fixture(loop_scope="function")
async def server() -> AsyncIterator[OpenAIServer]:
    async with OpenAIServer() as srv:
        yield srv


def judge_on(server: OpenAIServer, registry: CollectorRegistry, **settings: Any) -> LLMJudge:
    config = JudgeConfig.model_validate(
        {
            "base_url": server.url,
            "model": "judge-test",
            "max_retries": 0,
            "backoff_base_seconds": 0.01,
            "circuit_reset_seconds": 60,
            **settings,
        }
    )
    return LLMJudge(config, JudgeMetrics(registry))


async def test_timeouts_beside_other_requests_cut_the_limit_and_leave_the_circuit_closed(
    server: OpenAIServer,
) -> None:
    registry = CollectorRegistry()
    judge = judge_on(
        server,
        registry,
        timeout_seconds=0.5,
        max_concurrency=2,
        circuit_failure_threshold=1,
    )

    def exported_limit() -> float | None:
        labels = {"evaluator": "llm", "endpoint": "chat"}
        return registry.get_sample_value("ragmon_judge_concurrency_limit", labels)

    try:
        assert exported_limit() == 1, "exported from the start: one request at first"
        await judge.evaluate(judge_trace(1))  # two quick replies: the limit rises to 2
        assert judge.client.concurrency_limit.limit == 2 == exported_limit()
        server.script = lambda r: Reply(delay=1.5)
        shared = await judge.evaluate(judge_trace(2))
        assert shared.scores["faithfulness"].reason == "judge_timeout"
        assert judge.client.circuit.state == "closed", "both timed out beside each other"
        assert judge.client.concurrency_limit.limit == 1, "congestion halves the limit"
        assert exported_limit() == 1
        alone = await judge.evaluate(judge_trace(3))
        assert alone.scores["faithfulness"].reason == "judge_timeout"
        assert judge.client.circuit.state == "open", "a request alone timed out: a failure"
    finally:
        await judge.aclose()


@pytest.mark.parametrize("status", [429, 503])
async def test_a_busy_server_beside_other_requests_cuts_the_limit_and_leaves_the_circuit_closed(
    server: OpenAIServer, status: int
) -> None:
    """429 and 503 say the server is busy: they halve the limit like a timeout. Beside other
    requests of ours that may be our own doing, so neither opens the circuit; alone, a 503
    counts as a failure and a 429 (the server answered) never does."""
    registry = CollectorRegistry()
    judge = judge_on(server, registry, max_concurrency=2, circuit_failure_threshold=1)
    try:
        await judge.evaluate(judge_trace(1))  # two quick replies: the limit rises to 2
        assert judge.client.concurrency_limit.limit == 2
        server.script = lambda r: Reply.error(status, delay=0.3)
        shared = await judge.evaluate(judge_trace(2))
        assert shared.scores["faithfulness"].reason == "judge_error"
        assert str(status) in " ".join(shared.errors)
        assert judge.client.concurrency_limit.limit == 1, "a busy server halves the limit"
        assert judge.client.circuit.state == "closed", "both were refused beside each other"
        labels = {"evaluator": "llm", "endpoint": "chat"}
        assert registry.get_sample_value("ragmon_judge_concurrency_limit", labels) == 1
        await judge.evaluate(judge_trace(3))  # one request at a time now: alone
        assert judge.client.circuit.state == ("open" if status == 503 else "closed")
    finally:
        await judge.aclose()


async def test_a_slow_reply_is_waited_for_longer_each_time_until_it_comes(
    server: OpenAIServer,
) -> None:
    """Deadlines from size: quick replies teach a short deadline (the floor); a reply slower
    than that times out, the next attempt waits twice as long, and so on until it comes."""
    registry = CollectorRegistry()
    judge = judge_on(
        server,
        registry,
        timeout_floor_seconds=0.25,
        timeout_ceiling_seconds=5,
        max_retries=3,
        max_concurrency=1,
    )
    fresh = judge_on(server, CollectorRegistry(), timeout_floor_seconds=0.25)
    try:
        server.script = lambda r: Reply(delay=0.6)
        first = await fresh.evaluate(judge_trace(1))
        assert first.errors == [], "the first requests get the ceiling: nothing is known yet"
        server.script = None
        await judge.evaluate(judge_trace(1))
        learnt = judge.client.pace.deadline(4000, 512)
        assert 0.25 <= learnt < 0.6, "quick replies: a short deadline, at least the floor"
        server.requests.clear()
        server.script = lambda r: Reply(delay=1.2) if r.task == "ragmon_faithfulness" else None
        second = await judge.evaluate(judge_trace(2))
        assert second.errors == [] and second.scores["faithfulness"].measured
        faith = [r for r in server.requests if r.task == "ragmon_faithfulness"]
        timeouts = registry.get_sample_value(
            "ragmon_judge_requests_total", {"evaluator": "llm", "outcome": "timeout"}
        )
        assert timeouts is not None and 1 <= timeouts == len(faith) - 1, "each wait doubled"
        assert judge.client.circuit.state == "closed", "slow, alone, but never past 3 failures"
        speeds = registry.get_sample_value(
            "ragmon_judge_tokens_per_second", {"evaluator": "llm", "phase": "generation"}
        )
        assert speeds is not None and speeds > 0
    finally:
        await judge.aclose()
        await fresh.aclose()


async def test_offline_judging_waits_out_an_open_circuit(server: OpenAIServer) -> None:
    config = JudgeConfig.model_validate(
        {
            "base_url": server.url,
            "model": "judge-test",
            "max_retries": 0,
            "circuit_failure_threshold": 1,
            "circuit_reset_seconds": 0.5,
        }
    )
    daemon = LLMJudge(config, JudgeMetrics(CollectorRegistry()))
    offline = LLMJudge(config, JudgeMetrics(CollectorRegistry()), wait_for_circuit=True)
    try:
        for judge in (daemon, offline):
            server.push(Reply.error(500))
            server.push(Reply.error(500))
            failed = await judge.evaluate(judge_trace(1))
            assert "judge_error" in {s.reason for s in failed.scores.values()}
            assert judge.client.circuit.state == "open"
        refused = await daemon.evaluate(judge_trace(2))
        assert refused.scores["faithfulness"].reason == "circuit_open"
        waited = await offline.evaluate(judge_trace(2))
        assert waited.errors == [] and waited.scores["faithfulness"].measured
        assert offline.client.circuit.state == "closed"
    finally:
        await daemon.aclose()
        await offline.aclose()


@pytest.mark.parametrize("offline", [False, True])
async def test_an_open_circuit_sheds_in_the_daemon_and_is_waited_out_offline(
    server: OpenAIServer, offline: bool
) -> None:
    """Both calls of the first trace fail and open the circuit. The daemon's scoring sheds the
    next sampled trace (counted circuit_open); offline scoring (``shed_load=False``) hands it to
    the judge, whose calls wait for the probe, and it is judged."""
    registry = CollectorRegistry()
    config = JudgeConfig.model_validate(
        {
            "base_url": server.url,
            "model": "judge-test",
            "max_retries": 0,
            "circuit_failure_threshold": 1,
            "circuit_reset_seconds": 0.3,
        }
    )
    judge = LLMJudge(config, JudgeMetrics(registry), wait_for_circuit=offline)
    processor = ScoringProcessor(
        tier0=HeuristicEvaluator(),
        metrics=ScoringMetrics(registry, AgentLabels(10), 300.0),
        sampler=Sampler(SamplingConfig(rate=1.0)),
        judge=judge,
        shed_load=not offline,
    )
    judged: dict[str, EvaluationResult] = {}

    async def note(trace: Trace, result: EvaluationResult) -> None:
        if result.evaluator == "llm":
            judged[trace.trace_id] = result

    processor.observers.append(note)
    try:
        server.push(Reply.error(500))
        server.push(Reply.error(500))
        await processor.process(judge_trace(1).model_copy(update={"conversation_id": None}))
        assert judge.circuit_open
        await processor.process(judge_trace(2).model_copy(update={"conversation_id": None}))
        shed = registry.get_sample_value(
            "ragmon_sampler_shed_total", {"agent": "support", "reason": "circuit_open"}
        )
        if offline:
            assert not shed
            assert judged["trace-2"].errors == [], "judged once the probe went"
            assert all(score.measured for score in judged["trace-2"].scores.values())
        else:
            assert shed == 1 and "trace-2" not in judged
    finally:
        await judge.aclose()
