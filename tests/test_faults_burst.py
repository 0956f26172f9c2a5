"""A tenfold traffic burst with the LLM judge on and barely keeping up.

Traces arrive at a base rate the judge can follow (RAGMON_FAULT_BURST_RATE per second, default
30, half of them sampled), then at ten times that rate for RAGMON_FAULT_BURST_SECONDS (default
5), then at the base rate again. Expected, from the real daemon process:

- the sampler sheds judge work instead of stalling consumption: it lowers its effective rate
  (ragmon_sampler_effective_rate_ratio), and what the lowered rate or the full queue leaves
  unjudged is counted (ragmon_sampler_shed_total, reasons rate_lowered and queue_full; which
  of the two does the shedding depends on how fast the rate falls against the queue filling);
- consumer lag (ragmon_kafka_consumer_lag_messages) rises during the burst and then comes back
  to its base level;
- resident memory stays under RSS_BOUND_MIB;
- every trace gets its tier-0 result: nothing is lost.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.faults import (
    DaemonProcess,
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
from tests.support.traces import native_trace

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RSS_BOUND_MIB = 400
SAMPLING_RATE = 0.5
QUEUE_SIZE = 30


@dataclass
class Sample:
    at: float
    phase: str
    lag: float
    shed: float
    lowered: float
    rate: float
    in_flight: float
    queue: float
    rss_mib: float


def test_a_tenfold_burst_sheds_judge_work_and_lag_recovers(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    base_rate = env_float("RAGMON_FAULT_BURST_RATE", 30)
    burst_seconds = env_float("RAGMON_FAULT_BURST_SECONDS", 5)
    bootstrap = kafka_broker.bootstrap
    topic, dlq, results = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.results"
    group = f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic, results], partitions=3))
    asyncio.run(create_topics(bootstrap, [dlq]))

    def slow(request: Received) -> Reply:
        return Reply(delay=0.1)

    database = tmp_path / "results.db"
    samples: list[Sample] = []
    with OpenAIServer(script=slow) as judge:
        daemon = DaemonProcess(
            {
                **kafka_env(bootstrap, topic, group, dlq),
                "RAGMON_RESULTS__TOPIC": results,
                "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
                "RAGMON_SAMPLING__RATE": str(SAMPLING_RATE),
                "RAGMON_SAMPLING__QUEUE_SIZE": str(QUEUE_SIZE),
                "RAGMON_JUDGE__BASE_URL": judge.url,
                "RAGMON_JUDGE__API_KEY": "sk-burst",
                "RAGMON_JUDGE__MAX_CONCURRENCY": "4",
                "RAGMON_JUDGE__CACHE_TTL_SECONDS": "0",
            },
            tmp_path,
        )
        producer = SteadyProducer(
            bootstrap,
            topic,
            lambda n: native_message(native_trace(n, conversation_id=f"c-{n}", turn=1)),
            rate=base_rate,
        )

        def observe(phase: str, seconds: float, until_lag_at_most: float | None = None) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                assert daemon.alive, daemon.stderr_tail()
                m = daemon.metrics()
                samples.append(
                    Sample(
                        at=time.monotonic(),
                        phase=phase,
                        lag=metric_value(m, "ragmon_kafka_consumer_lag_messages"),
                        shed=metric_value(m, "ragmon_sampler_shed_total", reason="queue_full"),
                        lowered=metric_value(m, "ragmon_sampler_shed_total", reason="rate_lowered"),
                        rate=metric_value(m, "ragmon_sampler_effective_rate_ratio")
                        if m.get("ragmon_sampler_effective_rate_ratio")
                        else SAMPLING_RATE,
                        in_flight=metric_value(m, "ragmon_in_flight_traces"),
                        queue=metric_value(m, "ragmon_judge_queue_depth"),
                        rss_mib=daemon.rss_kib() / 1024,
                    )
                )
                if until_lag_at_most is not None and samples[-1].lag <= until_lag_at_most:
                    return
                time.sleep(0.4)

        try:
            daemon.start()
            daemon.wait_ready(90)
            producer.start()
            observe("base", 6)
            base = [s for s in samples if s.phase == "base"]
            base_lag = max(s.lag for s in base[len(base) // 3 :])
            producer.set_rate(10 * base_rate)
            observe("burst", burst_seconds)
            producer.set_rate(base_rate)
            recovered_at = max(2 * base_lag, 30.0)
            observe("after", 60, until_lag_at_most=recovered_at)
            observe("settled", 2)
            producer.stop()
            wait_until(
                lambda: committed_total(bootstrap, group) >= end_total(bootstrap, topic),
                120,
                "every offset committed",
                interval=1.0,
            )
            assert daemon.terminate() == 0, daemon.stderr_tail()
        finally:
            daemon.ensure_stopped()
            if producer.error is None:
                producer.stop(timeout=5)

    phases: dict[str, list[Sample]] = {}
    for s in samples:
        phases.setdefault(s.phase, []).append(s)
    peak = max(s.lag for s in samples)
    after = phases["after"]
    recovery_seconds = after[-1].at - phases["burst"][-1].at
    print(
        f"\nbase lag <= {base_lag:.0f}, peak lag {peak:.0f}, back to <= {recovered_at:.0f} "
        f"{recovery_seconds:.1f}s after the burst; shed queue_full "
        f"{samples[-1].shed:.0f}, rate_lowered {samples[-1].lowered:.0f}; "
        f"effective rate min {min(s.rate for s in samples):.3f}, "
        f"{samples[-1].rate:.3f} at the end "
        f"(configured {SAMPLING_RATE}); judge queue max {max(s.queue for s in samples):.0f}; "
        f"in-flight max {max(s.in_flight for s in samples):.0f}; "
        f"rss max {max(s.rss_mib for s in samples):.0f} MiB (bound {RSS_BOUND_MIB})"
    )
    assert min(s.rate for s in samples) < SAMPLING_RATE, "the effective rate was lowered"
    # what the lowered rate left unjudged is counted as shed, not hidden among "skipped"
    assert samples[-1].lowered > base[-1].lowered, "traces dropped by the lowered rate counted"
    assert peak > recovered_at, "lag rose during the burst"
    assert after[-1].lag <= recovered_at, "lag came back after the burst"
    assert max(s.queue for s in samples) <= QUEUE_SIZE
    assert max(s.rss_mib for s in samples) < RSS_BOUND_MIB
    stored = stored_by_evaluator(database)
    missing = producer.acked - stored.get("heuristic", set())
    assert not missing, f"{len(missing)} traces lost"
    print(
        f"{len(producer.acked)} traces, all with a tier-0 result; "
        f"{len(stored.get('llm', set()))} judged"
    )
