"""Every dashboard panel and recording rule returns data from a real Prometheus scraping the daemon,
and the daemon exports exactly the metrics of the catalog.

The daemon consumes traffic through the real broker with the LLM judge (scripted server, some
errors, a one-slot queue so work is shed), poison messages, multi-turn conversations that end,
and a golden suite against the demo RAG service. A real Prometheus scrapes it every second and
evaluates the recording rules; then each panel query runs against it. A panel that can never
show anything is a bug.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

import monitor.daemon
from monitor.config import Settings
from monitor.daemon import Daemon, SourceSpec
from monitor.demo.run import demo_golden, start_service
from monitor.demo.service import RagService
from monitor.demo.traffic import TrafficGenerator
from tests.support.exposition import OPENMETRICS, catalog_problems
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_io import create_topics, produce
from tests.support.openai_server import OpenAIServer, Reply
from tests.support.traces import RunningDaemon, encode, native_trace, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__range": "5m",
    "$__interval": "15s",
    "$window": "1m",
    "${window}": "1m",
    "$agent": ".*",
    "${agent}": ".*",
    "$evaluator": ".*",
    "${evaluator}": ".*",
    "$suite": ".*",
    "${suite}": ".*",
    "$mode": ".*",
    "${mode}": ".*",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _walk(name: str, panels: list[dict[str, Any]]) -> Iterator[tuple[str, str, str]]:
    for panel in panels:
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield name, panel.get("title", "?"), target["expr"]
        yield from _walk(name, panel.get("panels", []))


def _panel_queries() -> Iterator[tuple[str, str, str]]:
    for path in sorted((REPO / "dashboards").glob("*.json")):
        yield from _walk(path.name, json.loads(path.read_text())["panels"])


def _concrete(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    return expr


def _query(prometheus: str, expr: str) -> list[Any]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    result: list[Any] = body["data"]["result"]
    return result


def _start_prometheus(
    binary: str, tmp_path: Path, target_port: int
) -> tuple[subprocess.Popen[bytes], str]:
    rules = tmp_path / "recording.yaml"
    shutil.copy(REPO / "rules" / "recording.yaml", rules)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "rag-monitor",
                "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    return process, f"http://127.0.0.1:{port}"


def _judge_script(counter: Iterator[int]) -> Any:
    """Every seventh call fails with a 500: judge errors show on the dashboard."""

    def script(received: Any) -> Reply | None:
        return Reply.error(500) if next(counter) % 7 == 6 else None

    return script


async def test_every_panel_and_recording_rule_returns_data(
    kafka_broker: KafkaBroker,
    topic_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prometheus_binary: str,
) -> None:
    monkeypatch.setattr(monitor.daemon, "MAINTENANCE_SECONDS", 0.5)
    import itertools

    topics = [f"{topic_prefix}.{t}" for t in ("in", "dlq", "results")]
    await create_topics(kafka_broker.bootstrap, topics, partitions=2)
    async with AsyncExitStack() as stack:
        judge = OpenAIServer(script=_judge_script(itertools.count()))
        await judge.start()
        stack.push_async_callback(judge.stop)
        service = RagService()
        service_url = await start_service(stack, service)
        golden = demo_golden(service_url, interval_seconds=3)
        settings = Settings.model_validate(
            {
                "kafka": {
                    "bootstrap_servers": kafka_broker.bootstrap,
                    "topics": [topics[0]],
                    "group_id": f"{topic_prefix}.g",
                    "dlq_topic": topics[1],
                    "commit_interval_seconds": 0.5,
                },
                "http": {"host": "127.0.0.1", "port": _free_port()},
                "store": {"url": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"},
                "results": {"topic": topics[2]},
                "sampling": {"rate": 1.0, "queue_size": 3},
                "judge": {
                    "base_url": judge.url,
                    "max_retries": 0,
                    "timeout_seconds": 5,
                    "input_price_per_million": 0.15,
                    "output_price_per_million": 0.6,
                },
                "conversations": {"idle_seconds": 2},
                "golden": golden.model_dump(),
            }
        )
        daemon = Daemon(settings, SourceSpec("kafka"), registry=CollectorRegistry())
        running = RunningDaemon(daemon)
        await running.started()
        prometheus, prometheus_url = _start_prometheus(
            prometheus_binary, tmp_path, settings.http.port
        )
        stack.callback(prometheus.wait, 10)
        stack.callback(prometheus.terminate)

        generator = TrafficGenerator(service, seed=11, malformed_every=15)
        for _ in range(20):  # about 20 seconds of traffic, scraped every second
            # A conversation's turns are judged one after the other: enough conversations at
            # once fill the judge queue (3) so that shedding has data too.
            batch = [m for _ in range(8) for m in generator.conversation()]
            await produce(
                kafka_broker.bootstrap, topics[0], [v for _, v in batch], keys=[k for k, _ in batch]
            )
            await produce(
                kafka_broker.bootstrap,
                topics[0],
                [encode(native_trace(int(time.time() * 1000) % 10**6, contexts=[]))],
            )
            await asyncio.sleep(1)
        await wait_for(lambda: _ready(prometheus_url), 30, "Prometheus to answer")
        await asyncio.sleep(4)  # a few more scrapes and rule evaluations

        missing = []
        for dashboard, title, expr in _panel_queries():
            if not _query(prometheus_url, _concrete(expr)):
                missing.append(f"{dashboard} / {title}: {expr}")
        rules = yaml.safe_load((REPO / "rules" / "recording.yaml").read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                expr = rule["expr"]
                if " offset " in expr:
                    # History older than the test cannot exist; check the same query without it.
                    expr = re.sub(r"\s+offset\s+\w+", "", expr)
                    if not _query(prometheus_url, expr):
                        missing.append(f"recording rule {rule['record']} (without offset)")
                elif not _query(prometheus_url, rule["record"]):
                    missing.append(f"recording rule {rule['record']}")
        exposition = await asyncio.to_thread(_scrape, settings.http.port)  # served on this loop
        assert await running.stop() == 0
    assert not missing, "no data for:\n" + "\n".join(missing)
    # Every catalog metric is declared (a judge and a golden suite run) and nothing else is.
    assert catalog_problems(exposition, complete=True) == []


def _scrape(port: int) -> str:
    """The daemon's /metrics as Prometheus asks for it (OpenMetrics)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Accept": OPENMETRICS}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        return str(response.read().decode())


def _ready(prometheus_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{prometheus_url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
