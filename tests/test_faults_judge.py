"""The judge endpoint misbehaving in turn while traces keep flowing through the real daemon.

The daemon (a real process) talks to a scripted OpenAI-compatible server through a TCP proxy.
Phases, each RAGMON_FAULT_PHASE_SECONDS long (default 4): healthy, slow (replies take longer than
the judge can keep up with), erroring (HTTP 500), rate-limiting (429 with Retry-After), hung
(the proxy stalls: calls time out), unreachable (the proxy resets every connection), recovered.

Throughout: consumption and tier 0 never stop (no gap of more than a few seconds in either), the
circuit opens and closes again (ragmon_judge_circuit_open), the judge backlog stays within
sampling.queue_size (ragmon_judge_queue_depth), resident memory stays under a bound, and shed
work is counted (ragmon_sampler_shed_total by reason). Afterwards every trace has its tier-0
result: nothing was lost.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.faults import (
    DaemonProcess,
    Samples,
    SteadyProducer,
    committed_total,
    end_total,
    env_float,
    kafka_env,
    metric_value,
    native_message,
    stored_by_evaluator,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics
from tests.support.openai_server import OpenAIServer, Received, Reply
from tests.support.tcp_proxy import TcpProxy
from tests.support.traces import native_trace

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

QUEUE_SIZE = 40
RSS_BOUND_MIB = 400


@dataclass
class Sample:
    at: float
    phase: str
    consumed: float
    tier0: float
    queue: float
    circuit: float
    rss_mib: float


@dataclass
class Watch:
    samples: list[Sample] = field(default_factory=list)
    rates: list[float] = field(default_factory=lambda: [1.0])  # effective sampling rates seen
    last: Samples = field(default_factory=dict)


def _observe(daemon: DaemonProcess, watch: Watch, phase: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert daemon.alive, f"the daemon exited in phase {phase}:\n{daemon.stderr_tail()}"
        m = daemon.metrics()
        watch.last = m
        if m.get("ragmon_sampler_effective_rate_ratio"):
            watch.rates.append(metric_value(m, "ragmon_sampler_effective_rate_ratio"))
        watch.samples.append(
            Sample(
                at=time.monotonic(),
                phase=phase,
                consumed=metric_value(m, "ragmon_messages_consumed_total"),
                tier0=metric_value(m, "ragmon_evaluations_total", evaluator="heuristic"),
                queue=metric_value(m, "ragmon_judge_queue_depth"),
                circuit=metric_value(
                    m, "ragmon_judge_circuit_open", evaluator="llm", endpoint="chat"
                ),
                rss_mib=daemon.rss_kib() / 1024,
            )
        )
        time.sleep(0.4)


def _longest_stall(samples: list[Sample], attr: str) -> float:
    """Longest time a counter did not move while samples were taken."""
    longest, since = 0.0, samples[0].at
    for before, after in itertools.pairwise(samples):
        if getattr(after, attr) > getattr(before, attr):
            since = after.at
        longest = max(longest, after.at - since)
    return longest


def test_judge_slow_erroring_rate_limited_hung_and_unreachable_never_stops_tier_zero(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    phase_seconds = env_float("RAGMON_FAULT_PHASE_SECONDS", 4)
    bootstrap = kafka_broker.bootstrap
    topic, dlq, results = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.results"
    group = f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic, results], partitions=2))
    asyncio.run(create_topics(bootstrap, [dlq]))

    mode = {"reply": "healthy"}

    def script(request: Received) -> Reply:
        reply = mode["reply"]
        if reply == "slow":
            return Reply(delay=1.0)
        if reply == "error":
            return Reply.error(500)
        if reply == "rate_limited":
            return Reply.error(429, retry_after=0.3)
        return Reply(delay=0.02)

    database = tmp_path / "results.db"
    watch = Watch()
    with OpenAIServer(script=script) as server, TcpProxy(server.port) as proxy:
        daemon = DaemonProcess(
            {
                **kafka_env(bootstrap, topic, group, dlq),
                "RAGMON_RESULTS__TOPIC": results,
                "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
                "RAGMON_SAMPLING__RATE": "1.0",
                "RAGMON_SAMPLING__QUEUE_SIZE": str(QUEUE_SIZE),
                "RAGMON_JUDGE__BASE_URL": f"http://127.0.0.1:{proxy.port}/v1",
                "RAGMON_JUDGE__API_KEY": "sk-judge-faults",
                "RAGMON_JUDGE__MAX_CONCURRENCY": "4",
                "RAGMON_JUDGE__TIMEOUT_SECONDS": "1.5",
                "RAGMON_JUDGE__MAX_RETRIES": "2",
                "RAGMON_JUDGE__BACKOFF_BASE_SECONDS": "0.1",
                "RAGMON_JUDGE__BACKOFF_MAX_SECONDS": "1",
                "RAGMON_JUDGE__CIRCUIT_FAILURE_THRESHOLD": "3",
                "RAGMON_JUDGE__CIRCUIT_RESET_SECONDS": "2",
                "RAGMON_JUDGE__CACHE_TTL_SECONDS": "0",
            },
            tmp_path,
        )
        producer = SteadyProducer(
            bootstrap,
            topic,
            lambda n: native_message(native_trace(n, conversation_id=f"c-{n}", turn=1)),
            rate=40,
        )
        try:
            daemon.start()
            daemon.wait_ready(90)
            producer.start()

            def phase(name: str, reply: str = "healthy", seconds: float = phase_seconds) -> None:
                mode["reply"] = reply
                _observe(daemon, watch, name, seconds)

            phase("healthy")
            phase("slow", "slow")
            phase("erroring", "error")
            phase("rate-limited", "rate_limited")
            proxy.stall()
            phase("hung")
            proxy.cut()
            phase("unreachable")
            proxy.resume()
            # The circuit probes again after circuit_reset_seconds and closes on success.
            phase("recovered", seconds=phase_seconds + 3)
            producer.stop()
            wait_until(
                lambda: committed_total(bootstrap, group) >= end_total(bootstrap, topic),
                120,
                "every offset committed",
                interval=1.0,
            )
            final = daemon.metrics()
            assert daemon.terminate() == 0, daemon.stderr_tail()
        finally:
            daemon.ensure_stopped()
            if producer.error is None:
                producer.stop(timeout=5)

    samples = watch.samples
    by_phase: dict[str, list[Sample]] = {}
    for s in samples:
        by_phase.setdefault(s.phase, []).append(s)
    print()
    for name, group_samples in by_phase.items():
        first, last = group_samples[0], group_samples[-1]
        print(
            f"{name:>12}: consumed +{last.consumed - first.consumed:5.0f} "
            f"tier0 +{last.tier0 - first.tier0:5.0f} "
            f"queue max {max(s.queue for s in group_samples):3.0f} "
            f"circuit open {max(s.circuit for s in group_samples):.0f} "
            f"rss max {max(s.rss_mib for s in group_samples):.0f} MiB"
        )
    shed = {
        reason: metric_value(final, "ragmon_sampler_shed_total", reason=reason)
        for reason in ("queue_full", "circuit_open", "token_budget")
    }
    requests = {
        outcome: metric_value(final, "ragmon_judge_requests_total", outcome=outcome)
        for outcome in ("ok", "error", "timeout", "rate_limited", "malformed")
    }
    print(f"shed {shed}; effective rate min {min(watch.rates):.3f}; judge requests {requests}")

    # Consumption and tier 0 never stopped.
    assert _longest_stall(samples, "consumed") < 4.0, "consumption stalled"
    assert _longest_stall(samples, "tier0") < 4.0, "tier 0 stalled"
    for name, group_samples in by_phase.items():
        assert group_samples[-1].tier0 > group_samples[0].tier0, f"no tier-0 progress in {name}"
    # The circuit opened (erroring, hung or unreachable) and closed again.
    opened = {s.phase for s in samples if s.circuit == 1}
    assert opened & {"erroring", "hung", "unreachable"}, f"circuit never opened: {opened}"
    assert by_phase["recovered"][-1].circuit == 0, "the circuit did not close after recovery"
    assert metric_value(final, "ragmon_judge_circuit_open", evaluator="llm", endpoint="chat") == 0
    # Backlog and memory bounded; shed work counted.
    assert max(s.queue for s in samples) <= QUEUE_SIZE
    assert max(s.rss_mib for s in samples) < RSS_BOUND_MIB
    # A slow judge makes the sampler lower its rate first, and shed what still does not fit.
    lowered = min(watch.rates) < 1.0
    assert shed["queue_full"] > 0 or lowered, "the slow judge should have made the sampler shed"
    assert shed["circuit_open"] > 0, "work should have been shed while the circuit was open"
    assert requests["rate_limited"] > 0 and requests["error"] > 0 and requests["timeout"] > 0
    # The judge works again after recovery.
    recovered_ok = metric_value(final, "ragmon_evaluations_total", evaluator="llm", outcome="ok")
    assert recovered_ok > 0
    # Nothing lost: every acknowledged trace has its tier-0 result.
    stored = stored_by_evaluator(database)
    missing = producer.acked - stored.get("heuristic", set())
    assert not missing, f"{len(missing)} traces lost"
    print(
        f"traces: {len(producer.acked)} acknowledged, all with a tier-0 result; "
        f"{len(stored.get('llm', set()))} with an LLM result"
    )
