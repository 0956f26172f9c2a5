"""SIGKILL at random moments: the real daemon process, the real broker, the LLM judge on.

The daemon consumes a few thousand traces with the judge enabled (a scripted OpenAI-compatible
server with latency, a high sampling rate) and is killed with SIGKILL several times at random
moments (during start-up and mid-work). A last clean run drains the rest. Afterwards:

- the store holds exactly one result per (trace, evaluator): a heuristic result for every trace,
  and an LLM result for exactly the traces the sampler selects (nothing may be shed here: the
  judge queue is larger than the in-flight bound, so every sampled trace must have been judged);
- the results topic holds at least one result for each of them; the extra ones are re-scores,
  counted and printed;
- nothing was dead-lettered.

Sizes: RAGMON_FAULT_KILL_TRACES (default 2000), RAGMON_FAULT_KILL_COUNT (default 4),
RAGMON_FAULT_SEED (default: random, printed).
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from pathlib import Path

import pytest

from monitor.config.scoring import SamplingConfig
from monitor.evaluators.sampler import Sampler
from monitor.models import EvaluationResult, Trace
from tests.support.faults import (
    DaemonProcess,
    committed_total,
    end_total,
    env_int,
    kafka_env,
    results_on_topic,
    wait_until,
)
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.openai_server import OpenAIServer, Received, Reply
from tests.support.traces import native_trace

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SAMPLING_RATE = 0.5


def _trace(n: int) -> dict[str, object]:
    if n % 10 == 9:  # no contexts: always judged (priority)
        return native_trace(n, contexts=[])
    return native_trace(n)


def test_sigkill_at_random_moments_loses_nothing_and_stores_one_result_per_evaluator(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    total = env_int("RAGMON_FAULT_KILL_TRACES", 2000)
    kills = env_int("RAGMON_FAULT_KILL_COUNT", 4)
    seed = env_int("RAGMON_FAULT_SEED", random.randrange(1_000_000))
    rng = random.Random(seed)
    print(f"\nseed={seed} traces={total} kills={kills}")

    bootstrap = kafka_broker.bootstrap
    topic, dlq, results = f"{topic_prefix}.in", f"{topic_prefix}.dlq", f"{topic_prefix}.results"
    group = f"{topic_prefix}.group"
    asyncio.run(create_topics(bootstrap, [topic, results], partitions=3))
    asyncio.run(create_topics(bootstrap, [dlq]))
    traces = [_trace(n) for n in range(total)]
    asyncio.run(
        produce(
            bootstrap,
            topic,
            [json.dumps(t).encode() for t in traces],
            keys=[str(t["conversation_id"]).encode() for t in traces],
        )
    )

    latency_rng = random.Random(seed + 1)  # used on the server's thread

    def latency(request: Received) -> Reply:
        return Reply(delay=latency_rng.uniform(0.02, 0.08))

    database = tmp_path / "results.db"
    with OpenAIServer(script=latency) as judge:
        daemon = DaemonProcess(
            {
                **kafka_env(bootstrap, topic, group, dlq),
                # A killed member holds its partitions until its session expires: keep it short.
                "RAGMON_KAFKA__SESSION_TIMEOUT_MS": "5000",
                "RAGMON_KAFKA__HEARTBEAT_INTERVAL_MS": "1000",
                "RAGMON_RESULTS__TOPIC": results,
                "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{database}",
                "RAGMON_SAMPLING__RATE": str(SAMPLING_RATE),
                # Larger than kafka.max_in_flight (1000): nothing is ever shed.
                "RAGMON_SAMPLING__QUEUE_SIZE": "100000",
                # Every priority judged: which ones a cap skips would depend on arrival order.
                "RAGMON_SAMPLING__PRIORITY_MAX_SHARE": "1.0",
                "RAGMON_JUDGE__BASE_URL": judge.url,
                "RAGMON_JUDGE__API_KEY": "sk-kill-test",
                "RAGMON_JUDGE__MAX_CONCURRENCY": "8",
                "RAGMON_JUDGE__TIMEOUT_SECONDS": "10",
            },
            tmp_path,
        )
        progress = []
        try:
            for k in range(kills):
                daemon.start()
                started = time.monotonic()
                if rng.random() < 0.25:
                    moment = "start-up"
                    time.sleep(rng.uniform(0.3, 2.0))
                else:
                    moment = "mid-work"
                    daemon.wait_ready(90)
                    time.sleep(rng.uniform(0.5, 2.0))
                daemon.kill()
                progress.append(
                    (k + 1, moment, round(time.monotonic() - started, 1), _stored(database))
                )
            daemon.start()
            daemon.wait_ready(90)
            wait_until(
                lambda: committed_total(bootstrap, group) >= total,
                240,
                "the final run to commit every offset",
                interval=1.0,
            )
            samples = daemon.metrics()
            assert daemon.terminate() == 0, daemon.stderr_tail()
        finally:
            daemon.ensure_stopped()
        judge_calls = len(judge.requests)

    for k, moment, seconds, stored in progress:
        print(f"kill {k}: {moment} after {seconds}s, {stored} results stored so far")

    shed = sum(v for _, v in samples.get("ragmon_sampler_shed_total", []))
    assert shed == 0, "nothing may be shed in this test (the checks below assume it)"

    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT trace_id, evaluator, result FROM evaluation_results").fetchall()
    by_evaluator: dict[str, set[str]] = {}
    tier0: dict[str, EvaluationResult] = {}
    for trace_id, evaluator, result in rows:
        by_evaluator.setdefault(evaluator, set()).add(trace_id)
        if evaluator == "heuristic":
            tier0[trace_id] = EvaluationResult.model_validate_json(result)
    everything = {str(t["trace_id"]) for t in traces}
    assert set(by_evaluator) == {"heuristic", "llm"}
    missing = everything - by_evaluator["heuristic"]
    assert not missing, f"{len(missing)} traces have no heuristic result: {sorted(missing)[:5]}"
    assert by_evaluator["heuristic"] == everything

    sampler = Sampler(SamplingConfig(rate=SAMPLING_RATE, queue_size=100000, priority_max_share=1.0))
    sampled = {
        str(t["trace_id"])
        for t in traces
        if sampler.decide(Trace.model_validate(t), tier0[str(t["trace_id"])]) != "skipped"
    }
    assert sampled, "the sampler selected nothing: the LLM checks would be empty"
    missing_llm = sampled - by_evaluator["llm"]
    assert not missing_llm, f"{len(missing_llm)} sampled traces were never judged"
    assert by_evaluator["llm"] == sampled, "LLM results only for sampled traces"

    published = results_on_topic(bootstrap, results)
    stored_keys = {(trace_id, evaluator) for trace_id, evaluator, _ in rows}
    unpublished = stored_keys - set(published)
    assert not unpublished, f"{len(unpublished)} results never reached the results topic"
    assert set(published) == stored_keys
    rescored = sum(count - 1 for count in published.values())
    rescored_traces = len({trace_id for (trace_id, _), c in published.items() if c > 1})
    assert end_total(bootstrap, dlq) == 0, "nothing should have been dead-lettered"
    print(
        f"stored: {len(by_evaluator['heuristic'])} heuristic + {len(by_evaluator['llm'])} llm; "
        f"results topic: {sum(published.values())} records; re-scored (duplicates on the "
        f"results topic): {rescored} results of {rescored_traces} traces; "
        f"judge calls: {judge_calls}; lost: 0"
    )


def _stored(database: Path) -> int:
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(database, timeout=5) as db:
            return int(db.execute("SELECT count(*) FROM evaluation_results").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
